// The documentation's commands, run verbatim so they cannot drift (issues
// 27 and 38): every command block (a fence tagged `sh`) of README.md and
// docs/*.md runs here, is run by another test that says so, or says why it
// is not run (the last test checks that). The quick start's `throng serve`
// line and what it prints, its `curl` broadcast reaching two joined
// clients with the online list on, the API's route list; your own rooms
// from a config file; the chat app with a backend; `throng token`'s lines
// against the servers they mint for; the server API's curl block;
// gen-config and check-config; the presence flags; `throng tune`; the
// dashboard. Only the ports differ: THRONG_PORT=0 in the environment (the
// commands pass no --port) and the API address the server printed in place
// of localhost:4001. A block run as a script finds `throng` on its PATH.
import {test, after} from "node:test"
import assert from "node:assert/strict"
import {spawn, spawnSync, execFileSync} from "node:child_process"
import {readFileSync, mkdtempSync, rmSync, writeFileSync, symlinkSync, existsSync} from "node:fs"
import path from "node:path"
import {tmpdir} from "node:os"
import {randomBytes} from "node:crypto"
import {REPO_ROOT, THRONG_BIN, withTimeout, connectPhoenix, closePhoenix, joinResult, nextEvent, startServer} from "./helpers.mjs"
import {startExampleBackend, login, connectWithCookie} from "./example_backend.mjs"
import {section, commandBlocks, untaggedBlocks, sections, COMMAND_LANGS} from "./docs.mjs"

/** The fenced blocks' texts of the section titled `title`, wherever the docs keep it. */
function blocks(title){
  return section(title).blocks.map(b => b.text)
}

/** The command blocks the tests below run, as {title, i}: declared when this file loads, so that the last test knows them all even when a name pattern skips some. */
const runs = []

/** Declares that a test below runs the `i`th block of section `title`; returns a function giving its text. */
function runsBlock(title, i){
  runs.push({title, i})
  return () => {
    const s = section(title)
    const b = s.blocks[i]
    assert.ok(b && COMMAND_LANGS.has(b.lang), `${s.file}, ${title}: block ${i} is not a command block`)
    return b.text
  }
}

const QUICK_START = "## Quick start (60 seconds)"
const QUICK_START_SERVE = runsBlock(QUICK_START, 0)
const QUICK_START_CURL = runsBlock(QUICK_START, 2)
const API_CALLS = runsBlock("## The calls", 0)
const TOKENS = runsBlock("## Authentication", 0)
const BACKEND = runsBlock("## The chat app with a backend", 0)
const OWN_ROOMS = "## Your own rooms, without Rust"
const OWN_ROOMS_SERVE = runsBlock(OWN_ROOMS, 1)
const CONFIG_TOOLS = runsBlock("## Where settings come from", 0)
const PRESENCE_FLAGS = runsBlock("## Turning presence on", 0)
const TUNE = runsBlock("## First, the machine", 0)
const DASHBOARD = runsBlock("## Dashboard", 0)

const scratch = mkdtempSync(path.join(tmpdir(), "throng-readme-"))
after(() => rmSync(scratch, {recursive: true, force: true}))

/** A folder for one test's files. */
const folder = name => mkdtempSync(path.join(scratch, `${name}-`))

/** PATH with `throng` (THRONG_BIN) first, for blocks run as shell scripts. */
function pathWithThrong(){
  const bin = path.join(scratch, "bin")
  if(!existsSync(bin)){
    execFileSync("mkdir", ["-p", bin])
    symlinkSync(THRONG_BIN, path.join(bin, "throng"))
  }
  return `${bin}:${process.env.PATH}`
}

/** Shell words of a command line (single quotes, no expansion), comment dropped. */
function words(line){
  const out = []
  for(const m of line.replace(/\s+#.*$/, "").matchAll(/'([^']*)'|(\S+)/g)){ out.push(m[1] ?? m[2]) }
  return out
}

/** Runs `throng ARGS` (the README's words after `throng`); resolves with its stdout lines once `listening on` and the URL line are out. */
function serveVerbatim(args, env = {}, cwd = REPO_ROOT){
  const proc = spawn(THRONG_BIN, args, {cwd, env: {...process.env, THRONG_PORT: "0", ...env}, stdio: ["ignore", "pipe", "pipe"]})
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
  // The install line is not run: the tests run the binary built from the same source.
  const install = QUICK_START_SERVE()
  const printed = blocks(QUICK_START)[1]
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
    const apiBlock = QUICK_START_CURL()
    const curl = apiBlock.trim().replaceAll("localhost:4001", api)
    const answer = execFileSync("sh", ["-c", curl], {encoding: "utf8", timeout: 5000})
    // With --history the answer carries the message's position in the room's history.
    assert.match(answer, /^\{"ok":true,"ref":"[0-9a-f]+\.1"\}\n$/)
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
  const key = randomBytes(24).toString("hex")
  const server = await startServer(["--api-key", key])
  try {
    const script = API_CALLS().replaceAll("localhost:4001", `127.0.0.1:${server.apiPort}`)
    const out = execFileSync("sh", ["-ec", script], {encoding: "utf8", timeout: 15000, env: {...process.env, THRONG_API_KEY: key}})
    assert.match(out, /^\{"ok":true\}$/m)
    assert.match(out, /^\{"ok":true,"revoked":true\}$/m)
    assert.match(out, /^\{"routes":/m)
  } finally {
    await server.stop()
  }
})

test("Authentication: throng token's lines mint tokens examples/jwt.toml accepts; a refusal is logged", {timeout: 30000}, async () => {
  const lines = TOKENS().split("\n").filter(l => l.startsWith("throng token --config examples/jwt.toml"))
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
  const [backendLine, serveLine, ...rest] = BACKEND().trim().split("\n")
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

test("Authentication: the Phoenix.Token line mints a token a server checking Phoenix.Tokens accepts", {timeout: 30000}, async () => {
  const line = TOKENS().split("\n").find(l => l.startsWith("throng token --mode phoenix_token"))
  assert.ok(line, "the README's Phoenix.Token line")
  // As `mix phx.gen.secret` makes one: 64 characters.
  const secretKeyBase = randomBytes(48).toString("base64")
  const token = execFileSync("sh", ["-ec", line.replace(/\s+#.*$/, "")], {cwd: REPO_ROOT, encoding: "utf8", timeout: 5000,
    env: {...process.env, PATH: pathWithThrong(), SECRET_KEY_BASE: secretKeyBase}}).trim()
  const server = await startServer(["--auth", "phoenix_token", "--auth-secret-key-base", secretKeyBase, "--api-bind", "none"])
  let socket
  try {
    socket = await connectPhoenix(server.wsUrl, "2.0.0", {params: {token}})
    assert.equal((await joinResult(socket.channel("rooms:lobby", {}))).status, "ok")
  } finally {
    if(socket){ await closePhoenix(socket) }
    await server.stop()
  }
})

test("your own rooms: the rules file and its serve line; members push what the rules allow, the rest is refused", {timeout: 30000}, async () => {
  const [rules] = blocks(OWN_ROOMS)
  const cwd = folder("rooms")
  writeFileSync(path.join(cwd, "rooms.toml"), rules)
  const server = serveVerbatim(words(OWN_ROOMS_SERVE().trim()).slice(1), {}, cwd)
  const sockets = []
  try {
    const lines = await server.ready
    const port = Number(lines.find(l => l.startsWith("listening on")).split(":").pop())
    const api = lines.find(l => l.startsWith("api at ")).slice("api at ".length)
    const member = async topic => {
      const socket = await connectPhoenix(`ws://127.0.0.1:${port}`, "2.0.0")
      sockets.push(socket)
      const channel = socket.channel(topic, {})
      return {channel, joined: await joinResult(channel)}
    }
    const [red1, red2] = [await member("team:red"), await member("team:red")]
    assert.equal(red1.joined.status, "ok")
    const seen = nextEvent(red2.channel, "new:msg")
    red1.channel.push("new:msg", {body: "hello red"})
    assert.deepEqual(await seen, {body: "hello red"})
    const refusal = (channel, event) => new Promise(resolve => channel.push(event, {}).receive("error", resolve).receive("ok", () => resolve("ok")))
    assert.deepEqual(await refusal(red1.channel, "typing"), {reason: "unauthorized"}, "an event the rule does not list")
    const news = await member("news")
    assert.equal(news.joined.status, "ok")
    assert.deepEqual(await refusal(news.channel, "new:msg"), {reason: "unauthorized"}, "news is read-only")
    assert.deepEqual((await member("elsewhere:1")).joined, {status: "error", response: {reason: "unmatched topic"}}, "no rule matches")
    // news keeps a history: the server API's broadcast there gets its position.
    const published = nextEvent(news.channel, "new:msg")
    const answer = execFileSync("curl", ["-s", "-X", "POST", `${api}/api/broadcast`, "-d", JSON.stringify({topic: "news", event: "new:msg", payload: {body: "extra"}})], {encoding: "utf8", timeout: 5000})
    assert.match(answer, /^\{"ok":true,"ref":"[0-9a-f]+\.1"\}\n$/)
    assert.deepEqual(await published, {body: "extra"})
  } finally {
    await Promise.all(sockets.map(s => closePhoenix(s)))
    await server.stop()
  }
})

test("configuration: gen-config, check-config and serve --config run as written", {timeout: 30000}, async () => {
  const [gen, check, serve, ...rest] = CONFIG_TOOLS().trim().split("\n").map(l => l.replace(/\s+#.*$/, ""))
  assert.deepEqual(rest, [])
  const cwd = folder("config")
  const env = {...process.env, PATH: pathWithThrong()}
  execFileSync("sh", ["-ec", gen], {cwd, env, timeout: 5000})
  const report = execFileSync("sh", ["-ec", check], {cwd, env, encoding: "utf8", timeout: 5000})
  assert.match(report, /^port = 4000 +# file$/m)
  const server = serveVerbatim(words(serve).slice(1), {}, cwd)
  try {
    const lines = await server.ready
    assert.ok(lines.some(l => l.startsWith("listening on")), lines.join("\n"))
  } finally {
    await server.stop()
  }
})

test("presence: both --presence lines serve the online list and the count", {timeout: 30000}, async () => {
  const [list, count] = PRESENCE_FLAGS().trim().split("\n")
  // The count's key is the authenticated user: that server checks JWTs, set in its environment.
  const auth = {THRONG_AUTH: "jwt", THRONG_AUTH_JWT_SECRET: randomBytes(48).toString("base64")}
  const cases = [[list, "rooms:lobby", "presence_state", {}], [count, "rooms:lobby", "presence_count", auth]]
  for(const [line, topic, event, env] of cases){
    const server = serveVerbatim(words(line).slice(1), env)
    let socket
    try {
      const lines = await server.ready
      const port = Number(lines.find(l => l.startsWith("listening on")).split(":").pop())
      const params = env.THRONG_AUTH ? {token: execFileSync(THRONG_BIN, ["token", "--user", "ann"], {encoding: "utf8", env: {...process.env, ...env}, stdio: ["ignore", "pipe", "ignore"]}).trim()} : {}
      socket = await connectPhoenix(`ws://127.0.0.1:${port}`, "2.0.0", {params})
      const channel = socket.channel(topic, {user: "ann"})
      const got = nextEvent(channel, event)
      assert.equal((await joinResult(channel)).status, "ok", line)
      assert.equal(typeof await got, "object", `${line}: ${event}`)
    } finally {
      if(socket){ await closePhoenix(socket) }
      await server.stop()
    }
  }
})

test("benchmarking: throng tune's dry run says what a run needs and changes nothing", {timeout: 15000}, () => {
  const line = TUNE().trim()
  const out = execFileSync(THRONG_BIN, words(line).slice(1), {encoding: "utf8", timeout: 10000})
  assert.match(out, /^OS settings for a run of 100000 connections/m)
  assert.match(out, /dry run/)
})

test("dashboard: the block starts a server with a fresh key; the page loads, its figures need the key", {timeout: 30000}, async () => {
  const script = DASHBOARD()
  const proc = spawn("sh", ["-ec", script], {detached: true, stdio: ["ignore", "pipe", "pipe"],
    env: {...process.env, PATH: pathWithThrong(), THRONG_PORT: "0"}})
  let out = ""
  proc.stdout.on("data", c => { out += c })
  const exited = new Promise(resolve => proc.once("exit", resolve))
  try {
    await withTimeout((async () => {
      while(!/^api at \S+$/m.test(out)){
        if(proc.exitCode !== null){ throw new Error(`the block exited ${proc.exitCode}: ${out}`) }
        await new Promise(r => setTimeout(r, 20))
      }
    })(), 10000, "the key and the server's lines")
    const key = out.split("\n")[0]
    assert.match(key, /^[0-9a-f]{48}$/, "the key the block printed")
    const api = out.match(/^api at (\S+)$/m)[1]
    const status = (...args) => execFileSync("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", ...args], {encoding: "utf8", timeout: 5000})
    assert.equal(status(`${api}/dashboard`), "200")
    assert.equal(status(`${api}/api/stats`), "401", "without the key")
    // The stream never ends: curl stops it after 3 s (exit 28), by then holding samples.
    const sample = spawnSync("curl", ["-s", "-N", "--max-time", "3", `${api}/api/dashboard`, "-H", `X-API-Key: ${key}`],
      {encoding: "utf8", timeout: 10000}).stdout
    assert.match(sample, /^data: \{/m, "one sample of the stream")
  } finally {
    try { process.kill(-proc.pid, "SIGTERM") } catch(_e){ /* gone */ }
    await exited
  }
})

test("every command block of README.md and docs/ is run by a test above, run by another test that names its section, or says why not", () => {
  const problems = []
  const ran = new Set()
  for(const {title, i} of runs){
    try {
      const s = section(title)
      ran.add(`${s.file}:${s.blocks[i]?.line}`)
    } catch(e){ problems.push(e.message) }
  }
  const titles = sections().map(s => s.title)
  const repeated = titles.filter((t, i) => titles.indexOf(t) !== i)
  if(repeated.length){ problems.push(`headings used twice (a test finds a section by its heading): ${[...new Set(repeated)].join(", ")}`) }
  for(const {file, line} of untaggedBlocks()){ problems.push(`${file}:${line}: a fence without a language (sh for commands, text for output)`) }
  for(const b of commandBlocks()){
    const where = `${file(b)} (${b.heading})`
    if(ran.has(`${b.file}:${b.line}`)){ continue }
    if(b.note?.startsWith("not run by the tests:")){
      if(b.note.length < "not run by the tests: ".length + 20){ problems.push(`${where}: say why it is not run`) }
      continue
    }
    const by = b.note?.match(/^run by (.*)$/)?.[1]
    if(by){
      const heading = b.heading.replace(/^#+ /, "")
      for(const test of by.match(/tests\/\S+\.mjs/g) ?? []){
        const text = existsSync(path.join(REPO_ROOT, test)) ? readFileSync(path.join(REPO_ROOT, test), "utf8") : null
        if(text === null){ problems.push(`${where}: ${test} does not exist`) }
        else if(!text.includes(heading)){ problems.push(`${where}: ${test} does not name the section ${JSON.stringify(heading)}`) }
      }
      continue
    }
    problems.push(`${where}: no test runs it: run it in tests/e2e/readme.test.mjs, or say why not before its fence (<!-- not run by the tests: ... -->)`)
  }
  assert.deepEqual(problems, [], problems.join("\n"))
})

/** "FILE:LINE" of a block. */
const file = b => `${b.file}:${b.line}`
