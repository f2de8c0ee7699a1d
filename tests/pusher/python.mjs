// Python for the Pusher wire tests: a virtual environment under target/
// with the official `pusher` server SDK from PyPI, pinned, made on first use
// and then reused (as tests/e2e/python.mjs does for the Phoenix clients).
import {execFile} from "node:child_process"
import {existsSync} from "node:fs"
import path from "node:path"
import {promisify} from "node:util"
import {REPO_ROOT} from "../e2e/helpers.mjs"

const run = promisify(execFile)
const VENV = path.join(REPO_ROOT, "target", "pusher-python")
const PYTHON = path.join(VENV, "bin", "python")
const PY_DIR = path.join(REPO_ROOT, "tests", "pusher", "python")
/** The SDK the scripts import, pinned. */
export const PUSHER_PY = "pusher==3.3.4"

let ready = null

/** The venv's python, made (python3 -m venv, pip install) when missing or incomplete. */
export function python(){
  ready ??= (async () => {
    const probe = () => run(PYTHON, ["-c", "import pusher, pusher.version as v; assert v.VERSION == '3.3.4', v.VERSION"], {timeout: 20000})
    if(existsSync(PYTHON)){
      try { await probe(); return PYTHON } catch(_e){ /* incomplete: install below */ }
    }
    await run("python3", ["-m", "venv", VENV], {timeout: 60000})
    await run(PYTHON, ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", PUSHER_PY], {timeout: 240000})
    await probe()
    return PYTHON
  })()
  return ready
}

/** Runs tests/pusher/python/<script> with args; its stdout parsed as JSON (throws on exit != 0 or after ms). */
export async function runPythonJson(script, args = [], ms = 30000){
  const py = await python()
  try {
    const {stdout} = await run(py, [path.join(PY_DIR, script), ...args], {timeout: ms, killSignal: "SIGKILL"})
    return JSON.parse(stdout)
  } catch(err){
    const how = err.killed ? `killed after ${ms} ms` : `exit ${err.code}`
    throw new Error(`python ${script} ${how}\nstdout: ${err.stdout}\nstderr: ${err.stderr}`)
  }
}
