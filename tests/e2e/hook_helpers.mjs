// Starting the hooks tests' backend (hook_backend.mjs) as its own process,
// so a test can kill it and start it again on the same port.
import {spawn} from "node:child_process"
import path from "node:path"
import {fileURLToPath} from "node:url"
import {withTimeout} from "./helpers.mjs"

const BACKEND = path.join(path.dirname(fileURLToPath(import.meta.url)), "hook_backend.mjs")

/**
 * Starts the backend on `port` (0: any) checking signatures with `secret`;
 * `env` HOOK_TLS_CERT and HOOK_TLS_KEY make it HTTPS (`stats()` is for HTTP).
 */
export async function startBackend(secret, port = 0, env = {}){
  const proc = spawn(process.execPath, [BACKEND, String(port), secret], {stdio: ["ignore", "pipe", "inherit"], env: {...process.env, ...env}})
  const exited = new Promise(resolve => proc.once("exit", resolve))
  const listening = new Promise((resolve, reject) => {
    let out = ""
    proc.stdout.setEncoding("utf8")
    proc.stdout.on("data", chunk => {
      out += chunk
      const m = out.match(/backend listening on (\d+)/)
      if(m){ resolve(Number(m[1])) }
    })
    exited.then(code => reject(new Error(`backend exited (${code}) before listening`)))
  })
  let boundPort
  try {
    boundPort = await withTimeout(listening, 5000, "the backend to listen")
  } catch(err){
    proc.kill("SIGKILL")
    throw err
  }
  return {
    proc,
    port: boundPort,
    /** what the backend saw: {verified, forged, joins, joinRequests, pushes, answeredJoins, connects} */
    stats: async () => (await fetch(`http://127.0.0.1:${boundPort}/stats`)).json(),
    kill: async () => {
      if(proc.exitCode === null && proc.signalCode === null){ proc.kill("SIGKILL") }
      await exited
    },
  }
}
