// The README's first-hour commands, run verbatim so they cannot drift
// (issue 27): the quick start's `throng serve` line and what it prints, its
// `curl` broadcast reaching two joined clients with the online list on, the
// API's route list, the Server API section's curl block, and the
// Authentication section's `throng token` lines against a server running
// examples/jwt.toml, and the two commands of The chat app with a backend.
// Only the ports differ: THRONG_PORT=0 in the
// environment (the README's commands pass no --port) and the API address
// the server printed in place of localhost:4001.
import {test} from "node:test"
import assert from "node:assert/strict"
import {spawn, execFileSync} from "node:child_process"
import {readFileSync, mkdtempSync, rmSync} from "node:fs"
import path from "node:path"
import {tmpdir} from "node:os"
import {REPO_ROOT, THRONG_BIN, withTimeout, connectPhoenix, closePhoenix, joinResult, nextEvent, startServer} from "./helpers.mjs"
import {startExampleBackend, login, connectWithCookie} from "./example_backend.mjs"

const README = readFileSync(path.join(REPO_ROOT, "README.md"), "utf8")

/** The fenced blocks of the section titled `title` (up to the next heading of its level). */
function blocks(title){
  const start = README.indexOf(`\n${title}\n`)
  assert.ok(start >= 0, `README has no section ${title}`)
  const level = title.match(/^#+/)[0]
  const rest = README.slice(start + title.length + 2)
  const end = rest.search(new RegExp(`\\n${level} `))
  const body = end >= 0 ? rest.slice(0, end) : rest
  return [...body.matchAll(/```[a-z]*\n([\s\S]*?)```/g)].map(m => m[1])
}

/** Shell words of a command line (single quotes, no expansion), comment dropped. */
function words(line){
  const out = []
  for(const m of line.replace(/\s+#.*$/, "").matchAll(/'([^']*)'|(\S+)/g)){ out.push(m[1] ?? m[2]) }
  return out
}

/** Runs `throng ARGS` (the README's words after `throng`); resolves with its stdout lines once `listening on` and the URL line are out. */
function serveVerbatim(args, env = {}){
  const proc = spawn(THRONG_BIN, args, {cwd: REPO_ROOT, env: {...process.env, THRONG_PORT: "0", ...env}, stdio: ["ignore", "pipe", "pipe"]})
  let out = ""
  let err = ""
  proc.stderr.on("data", c => { err += c })
  const ready = new Promise((resolve, reject) => {
    proc.stdout.on("data", c => {
      out += c
      if(/^open http:\S+ .*$/m.test(out)){ resolve(out.split("\n").filter(Boolean)) }
    })
    proc.once("exit", code => reject(new Error(`throng ${args.join(" ")} exited ${code}: ${err}`)))
  })
  const stop = () => new Promise(resolve => {
    if(proc.exitCode !== null){ return resolve() }
    proc.once("exit", resolve)
    proc.kill("SIGTERM")
  })
  return {proc, ready: withTimeout(ready, 10000, "the server's start-up lines"), stop, stderr: () => err}
}

test("quick start: the serve line, its output, the broadcast and the route list", {timeout: 30000}, async () => {
  const [install, printed] = blocks("## Quick start (60 seconds)")
  const serveLine = install.split("\n").find(l => l.startsWith("throng serve"))
  const server = serveVerbatim(words(serveLine).slice(1))
  const sockets = []
  try {
    const lines = await server.ready
    const port = Number(lines.find(l => l.startsWith("listening on")).split(":").pop())
    const api = lines.find(l => l.startsWith("api at ")).slice("api at ".length)
    // What the README shows it prints, but for the port.
    const shown = printed.trim().split("\n").map(l => l.replaceAll(":4000", `:${port}`))
    for(const l of shown){ assert.ok(lines.includes(l), `README shows ${JSON.stringify(l)}, the server printed ${JSON.stringify(lines)}`) }

    // Two tabs' worth of clients in the room; the online list is on.
    const got = []
    for(const user of ["ann", "ben"]){
      const socket = await connectPhoenix(`ws://127.0.0.1:${port}`, "2.0.0")
      sockets.push(socket)
      const channel = socket.channel("rooms:lobby", {user})
      const state = nextEvent(channel, "presence_state")
      assert.equal((await joinResult(channel)).status, "ok")
      // The join's presence_state (its own presence follows in a diff).
      assert.equal(typeof await state, "object")
      got.push(nextEvent(channel, "new:msg", 5000, p => p.user === "bot"))
    }
    const apiBlock = blocks("## Quick start (60 seconds)")[2]
    const curl = apiBlock.trim().replaceAll("localhost:4001", api)
    const answer = execFileSync("sh", ["-c", curl], {encoding: "utf8", timeout: 5000})
    assert.equal(answer, "{\"ok\":true}\n")
    for(const p of await Promise.all(got)){ assert.deepEqual(p, {user: "bot", body: "hi"}) }

    const routes = execFileSync("curl", ["-s", `${api}/`], {encoding: "utf8", timeout: 5000})
    assert.ok(routes.endsWith("\n"))
    assert.ok(JSON.parse(routes).routes.some(r => r.path === "/api/broadcast" && r.method === "POST"))
    const wrong = execFileSync("curl", ["-s", "-w", " %{http_code}", `${api}/api/broadcast`], {encoding: "utf8", timeout: 5000})
    assert.match(wrong, /^\{"error":\{"code":"method_not_allowed".*\}\n 405$/s)
  } finally {
    await Promise.all(sockets.map(s => closePhoenix(s)))
    await server.stop()
  }
})

test("Server API: the curl block runs as written", {timeout: 30000}, async () => {
  const server = await startServer(["--api-key", "change-me-to-a-long-random-key"])
  try {
    const script = blocks("## Server API")[0].replaceAll("localhost:4001", `127.0.0.1:${server.apiPort}`)
    const out = execFileSync("sh", ["-ec", script], {encoding: "utf8", timeout: 15000})
    assert.match(out, /^\{"ok":true\}$/m)
    assert.match(out, /^\{"ok":true,"revoked":true\}$/m)
    assert.match(out, /^\{"routes":/m)
  } finally {
    await server.stop()
  }
})

test("Authentication: throng token's lines mint tokens examples/jwt.toml accepts; a refusal is logged", {timeout: 30000}, async () => {
  const lines = blocks("## Authentication").flatMap(b => b.split("\n")).filter(l => l.startsWith("throng token --config examples/jwt.toml"))
  assert.ok(lines.length >= 2, "the README's throng token lines")
  const server = await startServer(["--config", "examples/jwt.toml", "--api-bind", "none"])
  const sockets = []
  try {
    for(const line of lines){
      const token = execFileSync(THRONG_BIN, words(line).slice(1), {cwd: REPO_ROOT, encoding: "utf8", timeout: 5000, stdio: ["ignore", "pipe", "ignore"]}).trim()
      const socket = await connectPhoenix(server.wsUrl, "2.0.0", {params: {token}})
      sockets.push(socket)
      assert.equal((await joinResult(socket.channel("rooms:lobby", {}))).status, "ok", line)
    }
    // The demo page sends no token: refused, and said so in the log.
    const refused = await connectPhoenix(server.wsUrl, "2.0.0").then(() => "opened", e => e.message)
    assert.notEqual(refused, "opened")
    await withTimeout((async () => {
      while(!/connect refused \(403\): no token/.test(server.stderr())){ await new Promise(r => setTimeout(r, 20)) }
    })(), 5000, "the refusal's log line")
  } finally {
    await Promise.all(sockets.map(s => closePhoenix(s)))
    await server.stop()
  }
})

test("The chat app with a backend: its two commands run as written, and a logged-in user chats", {timeout: 30000}, async () => {
  const [block] = blocks("## The chat app with a backend")
  const [backendLine, serveLine, ...rest] = block.trim().split("\n")
  assert.deepEqual(rest, [], "two commands")
  // The install half is scripts/test.sh's (it runs before the tests); the
  // rest runs verbatim, with PORT=0 and throng told the backend's port.
  const [install, run] = backendLine.split(" && ")
  assert.equal(install, "npm ci --prefix examples/backend")
  assert.match(readFileSync(path.join(REPO_ROOT, "scripts/test.sh"), "utf8"), /npm ci --prefix examples\/backend /)
  const dir = mkdtempSync(path.join(tmpdir(), "throng-readme-backend-"))
  const backend = await startExampleBackend({PORT: "0", CHAT_DB: path.join(dir, "chat.db")}, words(run).slice(1))
  const server = serveVerbatim(words(serveLine).slice(1), {THRONG_HOOK_URL: `${backend.url}/throng`})
  const sockets = []
  try {
    const lines = await server.ready
    const port = Number(lines.find(l => l.startsWith("listening on")).split(":").pop())
    // Logged in, the browser is sent to throng's page on the same host.
    const alice = await login(backend.url, "alice")
    assert.equal(alice.location, "http://127.0.0.1:4000/")
    const channels = []
    for(const {cookie} of [alice, await login(backend.url, "bob")]){
      const socket = await connectWithCookie(`ws://127.0.0.1:${port}`, cookie)
      sockets.push(socket)
      const channel = socket.channel("rooms:lobby", {})
      const joined = await joinResult(channel)
      assert.equal(joined.status, "ok", JSON.stringify(joined))
      channels.push(channel)
    }
    const seen = nextEvent(channels[1], "new:msg")
    channels[0].push("new:msg", {body: "hello from the README"})
    const msg = await seen
    assert.equal(msg.user, "alice")
    assert.equal(msg.body, "hello from the README")
  } finally {
    await Promise.all(sockets.map(s => closePhoenix(s)))
    await server.stop()
    await backend.stop()
    rmSync(dir, {recursive: true, force: true})
  }
})
