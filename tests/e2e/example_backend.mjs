// The example chat backend (examples/backend, express + SQLite) as a real
// process for the tests, logging in through it, and a phoenix.js socket
// that sends the session cookie as a browser would.
import {spawn} from "node:child_process"
import {existsSync} from "node:fs"
import {createRequire} from "node:module"
import net from "node:net"
import path from "node:path"
import WebSocket from "ws"
import {REPO_ROOT, withTimeout, phoenixSocket, closePhoenix} from "./helpers.mjs"

export const BACKEND_DIR = path.join(REPO_ROOT, "examples/backend")
export const BACKEND_SECRET = "example-backend-test-secret-of-at-least-32-bytes"

/** The example's own dependencies, installed by `npm ci --prefix examples/backend` (scripts/test.sh). */
export function requireBackendDeps(){
  if(!existsSync(path.join(BACKEND_DIR, "node_modules/better-sqlite3"))){
    throw new Error("examples/backend has no node_modules: run `npm ci --prefix examples/backend` (scripts/test.sh does)")
  }
  return createRequire(path.join(BACKEND_DIR, "package.json"))
}

/** A port free now (for a process that must know another's port before that one starts). */
export function freePort(){
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.once("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const {port} = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

/**
 * Starts `node examples/backend/server.js` (or `args`, from the repo root)
 * with `env` over this process's; resolves once it prints its address.
 * Returns {proc, port, url, stderr(), kill(), stop()}.
 */
export async function startExampleBackend(env = {}, args = [path.join(BACKEND_DIR, "server.js")]){
  requireBackendDeps()
  const proc = spawn(process.execPath, args, {cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"], env: {...process.env, ...env}})
  let err = ""
  proc.stderr.setEncoding("utf8")
  proc.stderr.on("data", c => { err += c })
  const exited = new Promise(resolve => proc.once("exit", resolve))
  const listening = new Promise((resolve, reject) => {
    let out = ""
    proc.stdout.setEncoding("utf8")
    proc.stdout.on("data", chunk => {
      out += chunk
      const m = out.match(/^backend listening on (http:\/\/\S+):(\d+)$/m)
      if(m){ resolve({url: `${m[1]}:${m[2]}`, port: Number(m[2])}) }
    })
    exited.then(code => reject(new Error(`the example backend exited (${code}) before listening: ${err}`)))
  })
  let info
  try {
    info = await withTimeout(listening, 10000, "the example backend to listen")
  } catch(e){
    proc.kill("SIGKILL")
    throw e
  }
  const gone = () => proc.exitCode !== null || proc.signalCode !== null
  return {
    proc,
    ...info,
    stderr: () => err,
    /** SIGKILL: the backend dies mid-run, as in a crash. */
    kill: async () => { if(!gone()){ proc.kill("SIGKILL") } await exited },
    stop: async () => { if(!gone()){ proc.kill("SIGTERM") } await exited },
  }
}

/** Logs `name` in at the backend; resolves with {cookie: "session=...", location}. */
export async function login(backendUrl, name){
  const r = await fetch(`${backendUrl}/login`, {method: "POST", body: new URLSearchParams({name}), redirect: "manual"})
  if(r.status !== 303){ throw new Error(`login of ${name}: ${r.status} ${await r.text()}`) }
  const cookie = r.headers.get("set-cookie").split(";")[0]
  return {cookie, location: r.headers.get("location")}
}

/** A phoenix.js WebSocket transport sending `cookie`, as a browser sends its cookies to the same host. */
export function cookieTransport(cookie){
  return class CookieWebSocket extends WebSocket {
    constructor(url, protocols){ super(url, protocols, {headers: {cookie}}) }
  }
}

/** Opens a phoenix.js socket with `cookie` (or none); rejects when the server refuses it. */
export async function connectWithCookie(wsUrl, cookie, ms = 5000){
  const socket = phoenixSocket(wsUrl, "2.0.0", cookie ? {transport: cookieTransport(cookie)} : {})
  const opened = new Promise((resolve, reject) => {
    socket.onOpen(resolve)
    socket.onError(e => reject(new Error(`phoenix socket error: ${e?.message || e?.type || e}`)))
  })
  socket.connect()
  try {
    await withTimeout(opened, ms, "the phoenix socket to open")
  } catch(e){
    await closePhoenix(socket)
    throw e
  }
  return socket
}
