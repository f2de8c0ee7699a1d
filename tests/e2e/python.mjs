// Python for the end-to-end tests: a virtual environment under target/ with
// pinned packages from PyPI (the Python Phoenix clients `phxsocket` and
// `chunnel`, and PyJWT to mint tokens as apps do), made on first use, then
// reused. Each script
// runs with a time bound and its stdout is returned.
import {execFile} from "node:child_process"
import {existsSync} from "node:fs"
import path from "node:path"
import {promisify} from "node:util"
import {REPO_ROOT} from "./helpers.mjs"

const run = promisify(execFile)
const VENV = path.join(REPO_ROOT, "target", "e2e-python")
const PYTHON = path.join(VENV, "bin", "python")
export const PY_DIR = path.join(REPO_ROOT, "tests", "e2e", "python")
/** What the scripts import, pinned. */
const PACKAGES = ["phxsocket==0.1.5", "chunnel==0.1.0", "websockets==17.4", "PyJWT==2.10.1"]

let ready = null

/** The venv's python, made (python3 -m venv, pip install) when missing or incomplete. */
export function python(){
  ready ??= (async () => {
    const probe = () => run(PYTHON, ["-c", "import phxsocket, chunnel, jwt"], {timeout: 20000})
    if(existsSync(PYTHON)){
      try { await probe(); return PYTHON } catch(_e){ /* incomplete: install below */ }
    }
    await run("python3", ["-m", "venv", VENV], {timeout: 60000})
    await run(PYTHON, ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", ...PACKAGES], {timeout: 180000})
    await probe()
    return PYTHON
  })()
  return ready
}

/** Runs tests/e2e/python/<script> with args; its stdout (throws on exit != 0 or after ms). */
export async function runPython(script, args = [], ms = 20000){
  const py = await python()
  try {
    const {stdout} = await run(py, [path.join(PY_DIR, script), ...args], {timeout: ms, killSignal: "SIGKILL"})
    return stdout
  } catch(err){
    const how = err.killed ? `killed after ${ms} ms` : `exit ${err.code}`
    throw new Error(`python ${script} ${how}\nstdout: ${err.stdout}\nstderr: ${err.stderr}`)
  }
}

/** An HS256 JWT of `claims`, minted by PyJWT (`jwt.encode`). */
export async function pyjwt(secret, claims){
  return (await runPython("mint_jwt.py", [secret, JSON.stringify(claims)])).trim()
}
