// An https:// app backend: throng checks its certificate against
// --hook-ca-file (a private CA), and refuses to talk to it otherwise.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {spawnSync} from "node:child_process"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {startServer, connectPhoenix, closePhoenix, joinResult} from "./helpers.mjs"
import {startBackend} from "./hook_helpers.mjs"
import {until} from "./presence_helpers.mjs"

const SECRET = "tls-hook-secret-of-at-least-32-bytes"
const dir = mkdtempSync(path.join(tmpdir(), "throng-hooks-tls-"))
const cert = path.join(dir, "cert.pem")
const key = path.join(dir, "key.pem")
let backend
const servers = []
const sockets = []

before(async () => {
  const made = spawnSync("openssl", [
    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1",
    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE",
  ], {encoding: "utf8"})
  assert.equal(made.status, 0, made.stderr)
  backend = await startBackend(SECRET, 0, {HOOK_TLS_CERT: cert, HOOK_TLS_KEY: key})
}, {timeout: 20000})

after(async () => {
  for(const s of sockets){ await closePhoenix(s) }
  for(const s of servers){ await s.stop() }
  if(backend){ await backend.kill() }
  rmSync(dir, {recursive: true, force: true})
})

async function serverWith(extra){
  const config = path.join(dir, `hooks-${servers.length}.toml`)
  writeFileSync(config, `
[hooks]
url = "https://127.0.0.1:${backend.port}/throng"
secret = "${SECRET}"
${extra}

[[topics]]
pattern = "rooms:*"
hooks = ["join"]
`)
  const server = await startServer(["--config", config])
  servers.push(server)
  return server
}

test("an https backend with a CA file answers the join hook", async () => {
  const server = await serverWith(`ca_file = "${cert}"`)
  const socket = await connectPhoenix(server.wsUrl, "2.0.0")
  sockets.push(socket)
  const joined = await joinResult(socket.channel("rooms:tls"))
  assert.equal(joined.status, "ok", JSON.stringify(joined))
  assert.equal(joined.response.welcome, "rooms:tls")
})

test("an https backend whose certificate is not trusted is unavailable", async () => {
  const server = await serverWith("")
  const socket = await connectPhoenix(server.wsUrl, "2.0.0")
  sockets.push(socket)
  assert.deepEqual(await joinResult(socket.channel("rooms:tls")), {status: "error", response: {reason: "backend unavailable"}})
  // The join's error reply can reach the client before the server's log
  // line reaches this process's pipe: wait for the line (bounded).
  const unreachable = /app backend .* failed: unreachable/
  await until(() => unreachable.test(server.stderr()), 5000, () => `the log line ${unreachable} in:\n${server.stderr()}`)
})
