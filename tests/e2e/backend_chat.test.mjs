// The chat app with a real backend, end to end: the real throng binary with
// examples/backend/throng.toml, pointed at the real example backend process
// (examples/backend: express, SQLite), and real Chromium. People log in on
// the backend (a session cookie), the chat page at throng's / connects (the
// connect hook reads the cookie), joins (the join hook answers with the last
// messages, or refuses a banned user) and chats over WebSocket and long-poll
// (the push hook saves each message in SQLite and broadcasts it). Faults: a
// forged or replayed request refused by the backend, the backend killed
// mid-run and started again. (A slow backend, malformed answers and the
// in-flight bounds are hooks.test.mjs's, against its scripted backend.)
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {existsSync, mkdtempSync, readFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {THRONG_BIN, startServer, closePhoenix, joinResult, nextEvent, withTimeout, httpRequest, launchChromium, readMetric, pushResult, blockWebSockets} from "./helpers.mjs"
import {
  BACKEND_DIR, BACKEND_SECRET, freePort, requireBackendDeps, startExampleBackend, login, connectWithCookie,
} from "./example_backend.mjs"
import {sign} from "../../examples/backend/signature.js"
import {until} from "./presence_helpers.mjs"

const dir = mkdtempSync(path.join(tmpdir(), "throng-backend-chat-"))
const DB = path.join(dir, "chat.db")

let backend, server, browser, backendPort, Database
const sockets = []
const contexts = []

const backendEnv = () => ({PORT: String(backendPort), CHAT_DB: DB, THRONG_HOOK_SECRET: BACKEND_SECRET, THRONG_URL: `${server.url}/`})

/** The messages SQLite holds for `room`, oldest first. */
function saved(room){
  const db = new Database(DB, {readonly: true})
  try { return db.prepare("SELECT user, body FROM messages WHERE room = ? ORDER BY id").all(room) } finally { db.close() }
}

/** A logged-in phoenix.js client (WebSocket, in node) joined to `topic`. */
async function member(name, topic){
  const {cookie} = await login(backend.url, name)
  const socket = await connectWithCookie(server.wsUrl, cookie)
  sockets.push(socket)
  const channel = socket.channel(topic, {})
  const joined = await joinResult(channel)
  return {socket, channel, joined}
}

before(async () => {
  Database = requireBackendDeps()("better-sqlite3")
  // throng must know the backend's address before it starts, and the
  // backend where to send a logged-in browser (throng's page).
  backendPort = await freePort()
  server = await startServer([
    "--config", "examples/backend/throng.toml",
    "--hook-url", `http://127.0.0.1:${backendPort}/throng`,
    "--hook-secret", BACKEND_SECRET,
    "--hook-breaker-failures", "3",
    "--presence-interval", "100",
  ])
  backend = await startExampleBackend(backendEnv())
  browser = await launchChromium()
}, {timeout: 30000})

after(async () => {
  for(const s of sockets){ await closePhoenix(s) }
  for(const c of contexts){ await c.close().catch(() => {}) }
  await browser?.close().catch(() => {})
  await server?.stop()
  await backend?.stop()
  rmSync(dir, {recursive: true, force: true})
}, {timeout: 20000})

/** A browser that logs `name` in on the backend's page and lands on throng's chat page. */
async function loggedInPage(name, {blockWs = false, status = "joined"} = {}){
  const context = await browser.newContext({viewport: {width: 720, height: 520}})
  contexts.push(context)
  if(blockWs){ await context.addInitScript(blockWebSockets) }
  const page = await context.newPage()
  const errors = []
  page.on("pageerror", err => errors.push(err.message))
  await page.goto(`${backend.url}/`, {waitUntil: "load", timeout: 10000})
  await page.fill("#name", name)
  await Promise.all([
    page.waitForURL(`${server.url}/`, {timeout: 10000}),
    page.click("#login"),
  ])
  await page.locator("#status").filter({hasText: status}).waitFor({timeout: 10000})
  return {page, errors}
}

const line = (page, text) => page.locator("#messages li", {hasText: text})
async function send(page, text){
  await page.fill("#message", text)
  await page.click("#send")
}

test("Chromium: log in, chat over WebSocket and long-poll, messages saved in SQLite, the last ones shown again on reload", {timeout: 60000}, async () => {
  const alice = await loggedInPage("alice")
  const bob = await loggedInPage("bob", {blockWs: true})
  const transport = page => page.evaluate(() => document.getElementById("status").dataset.transport)
  assert.equal(await transport(alice.page), "websocket")
  assert.equal(await transport(bob.page), "longpoll")
  // The name is the backend's (the connect hook's user), not typed.
  assert.equal(await alice.page.inputValue("#user"), "alice")
  assert.equal(await alice.page.locator("#user").evaluate(el => el.readOnly), true)
  // The online list: presence keyed by the backend's user id.
  for(const {page} of [alice, bob]){
    for(const who of ["alice", "bob"]){ await page.locator(`#online li[data-user="${who}"]`).waitFor({timeout: 5000}) }
  }

  await send(alice.page, "hello from alice")
  for(const {page} of [alice, bob]){ await line(page, "alice: hello from alice").waitFor({timeout: 5000}) }
  await send(bob.page, "hi alice, bob over long-poll")
  for(const {page} of [alice, bob]){ await line(page, "bob: hi alice, bob over long-poll").waitFor({timeout: 5000}) }
  // The sender is who the backend says, whatever the payload claims.
  await alice.page.evaluate(() => window.throng.channel.push("new:msg", {user: "bob", body: "not really bob"}))
  await line(bob.page, "alice: not really bob").waitFor({timeout: 5000})

  assert.deepEqual(saved("rooms:lobby"), [
    {user: "alice", body: "hello from alice"},
    {user: "bob", body: "hi alice, bob over long-poll"},
    {user: "alice", body: "not really bob"},
  ])

  // A reload joins again: the join reply's last messages fill the list.
  await alice.page.reload({waitUntil: "load", timeout: 10000})
  await alice.page.locator("#status").filter({hasText: "joined"}).waitFor({timeout: 10000})
  assert.deepEqual(await alice.page.locator("#messages li").allTextContents(),
    ["alice: hello from alice", "bob: hi alice, bob over long-poll", "alice: not really bob"])
  // A message the backend refuses: its reason in the status, until the next one goes.
  await send(alice.page, "x".repeat(2001))
  await alice.page.locator("#status").filter({hasText: "message not sent: message too long (2000 characters at most)"}).waitFor({timeout: 5000})
  await send(alice.page, "short again")
  await line(bob.page, "alice: short again").waitFor({timeout: 5000})
  await alice.page.locator("#status").filter({hasText: /^joined$/}).waitFor({timeout: 5000})
  assert.equal(saved("rooms:lobby").length, 4)
  assert.deepEqual(alice.errors, [], alice.errors.join("\n"))
  assert.deepEqual(bob.errors, [], bob.errors.join("\n"))
})

test("Chromium: a banned user's join is refused with the backend's reason", {timeout: 30000}, async () => {
  const mallory = await loggedInPage("mallory", {status: "join failed"})
  assert.equal((await mallory.page.textContent("#status")).trim(), "join failed: you are banned from this room")
})

test("Chromium: the login form's name pattern is a valid regular expression (browsers compile it with the v flag) and is enforced", {timeout: 30000}, async () => {
  const context = await browser.newContext()
  contexts.push(context)
  const page = await context.newPage()
  const logged = []
  page.on("console", m => logged.push(`${m.type()}: ${m.text()}`))
  page.on("pageerror", err => logged.push(`pageerror: ${err.message}`))
  await page.goto(`${backend.url}/`, {waitUntil: "load", timeout: 10000})
  const valid = name => page.evaluate(n => { const el = document.getElementById("name"); el.value = n; return el.checkValidity() }, name)
  // An invalid pattern is ignored by the browser (and logged): "not a name!" would pass.
  assert.equal(await valid("not a name!"), false)
  assert.equal(await valid("a-b_C9"), true)
  assert.equal(await valid("-"), true)
  assert.deepEqual(logged, [], logged.join("\n"))
})

test("the example backend's ports and secret are throng.toml's, the variables throng reads override them, and its SQLite file is outside the checkout", {timeout: 20000}, async () => {
  const data = mkdtempSync(path.join(tmpdir(), "throng-backend-data-"))
  const hookPort = await freePort()
  const env = {XDG_DATA_HOME: data, THRONG_PORT: "4321", THRONG_HOOK_URL: `http://127.0.0.1:${hookPort}/throng`, PORT: undefined, CHAT_DB: undefined, THRONG_URL: undefined, THRONG_HOOK_SECRET: undefined}
  const other = await startExampleBackend(env)
  try {
    assert.equal(other.port, hookPort, "the backend listens on the port of throng's hook URL")
    assert.equal((await login(other.url, "zoe")).location, "http://127.0.0.1:4321/", "a logged-in browser goes to throng's port")
    assert.ok(existsSync(path.join(data, "throng-example-backend/chat.db")), "the SQLite file in the data directory")
    assert.ok(!existsSync(path.join(BACKEND_DIR, "chat.db")), "nothing written into the checkout")
    // Unset, the secret is throng.toml's: a request signed with it is taken.
    const secret = readFileSync(path.join(BACKEND_DIR, "throng.toml"), "utf8").match(/^secret = "(.*)"$/m)[1]
    const body = JSON.stringify([])
    const r = await fetch(`${other.url}/throng/events`, {method: "POST", body, headers: {"content-type": "application/json", "x-throng-signature": sign(secret, body)}})
    assert.equal(r.status, 200, await r.text())
  } finally {
    await other.stop()
    rmSync(data, {recursive: true, force: true})
  }
})

test("the join reply carries the room's last 50 messages, oldest first; a phoenix.js client sees a browser-less message", async () => {
  const db = new Database(DB)
  const insert = db.prepare("INSERT INTO messages (room, user, body, at) VALUES ('rooms:history', 'carol', ?, ?)")
  db.transaction(() => { for(let i = 0; i < 60; i++){ insert.run(`m${i}`, Date.now()) } })()
  db.close()
  const carol = await member("carol", "rooms:history")
  assert.equal(carol.joined.status, "ok", JSON.stringify(carol.joined))
  assert.equal(carol.joined.response.user, "carol")
  assert.deepEqual(carol.joined.response.messages.map(m => m.body), [...Array(50).keys()].map(i => `m${i + 10}`))
  const dave = await member("dave", "rooms:history")
  const seen = nextEvent(dave.channel, "new:msg")
  const r = await pushResult(carol.channel, "new:msg", {body: "from node"})
  assert.equal(r.status, "ok")
  assert.equal(typeof r.response.id, "number")
  assert.deepEqual(await seen, {id: r.response.id, user: "carol", body: "from node", at: (await seen).at})
  // The backend's own refusals come back as error replies.
  assert.deepEqual(await pushResult(carol.channel, "new:msg", {body: " "}), {status: "error", response: {reason: "empty message"}})
  assert.deepEqual(await pushResult(carol.channel, "typing", {}), {status: "error", response: {reason: "unauthorized"}}, "the topic rule allows new:msg only")
  const banned = await member("mallory", "rooms:history")
  assert.deepEqual(banned.joined, {status: "error", response: {reason: "you are banned from this room"}})
})

test("a socket without a logged-in session cookie is refused before the upgrade", async () => {
  const upgrade = cookie => httpRequest(server.port, "GET", "/socket/websocket?vsn=2.0.0", {
    headers: {
      "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13",
      ...(cookie ? {"Cookie": cookie} : {}),
    },
  })
  assert.equal((await upgrade(null)).status, 403)
  assert.equal((await upgrade("session=made-up")).status, 403)
  assert.equal((await upgrade((await login(backend.url, "erin")).cookie)).status, 101)
})

test("the example backend refuses forged, unsigned and replayed requests with 401", async () => {
  const call = (body, signature) => fetch(`${backend.url}/throng/join`, {
    method: "POST",
    headers: signature ? {"x-throng-signature": signature} : {},
    body,
  })
  const fresh = JSON.stringify({topic: "rooms:lobby", payload: {}, user: "alice", socket_id: "x", assigns: {}, at: Date.now()})
  assert.equal((await call(fresh, "sha256=" + "0".repeat(64))).status, 401, "a wrong signature")
  assert.equal((await call(fresh, sign("another-secret", Buffer.from(fresh)))).status, 401, "signed with another secret")
  assert.equal((await call(fresh, null)).status, 401, "no signature")
  const old = JSON.stringify({topic: "rooms:lobby", payload: {}, user: "alice", socket_id: "x", assigns: {}, at: Date.now() - 10 * 60 * 1000})
  const replay = await call(old, sign(BACKEND_SECRET, Buffer.from(old)))
  assert.equal(replay.status, 401, "a stale timestamp")
  assert.deepEqual(await replay.json(), {error: {reason: "stale timestamp"}})
  // The same request, signed with the right secret and fresh, is answered.
  const ok = await call(fresh, sign(BACKEND_SECRET, Buffer.from(fresh)))
  assert.equal(ok.status, 200)
  assert.ok(Array.isArray((await ok.json()).reply.messages))
  // The backend answers before its log line reaches this process's pipe: wait for it (bounded).
  const refused = /refused POST \/throng\/join from \S+: bad signature/
  await until(() => refused.test(backend.stderr()), 5000, () => `the backend's log line ${refused} in:\n${backend.stderr()}`)
})

test("the events handler keeps who is online per room and applies each event id once", async () => {
  const topic = "rooms:direct-events"
  const batch = [
    {id: "e1", type: "occupied", topic, user: null, socket_id: "s1", at: Date.now()},
    {id: "e2", type: "presence_join", topic, user: "zed", key: "zed", socket_id: "s1", at: Date.now()},
    {id: "e3", type: "presence_join", topic, user: "yan", key: "yan", socket_id: "s2", at: Date.now()},
  ]
  // As throng sends them: `sent_at` written at each attempt, under the signature.
  const send = (events, sentAt) => {
    const body = JSON.stringify(events.map(e => ({...e, sent_at: sentAt})))
    return fetch(`${backend.url}/throng/events`, {method: "POST", headers: {"x-throng-signature": sign(BACKEND_SECRET, Buffer.from(body))}, body})
  }
  const post = async events => {
    const r = await send(events, Date.now())
    assert.equal(r.status, 200)
    return (await r.json()).applied
  }
  const online = async () => (await (await fetch(`${backend.url}/rooms/${topic}/online`)).json()).users.map(u => u.user)
  assert.equal(await post(batch), 3)
  assert.equal(await post(batch), 0, "a retried batch changes nothing")
  assert.deepEqual(await online(), ["yan", "zed"])
  assert.equal(await post([{id: "e4", type: "presence_leave", topic, user: "zed", key: "zed", socket_id: "s1", at: Date.now()}, batch[1]]), 1)
  assert.deepEqual(await online(), ["yan"])
  assert.equal(await post([{id: "e5", type: "vacated", topic, user: null, socket_id: "s2", at: Date.now()}]), 1)
  assert.deepEqual(await online(), [])
  const replayed = await send([{id: "e6", type: "presence_join", topic, user: "xi", key: "xi", socket_id: "s3", at: Date.now()}], Date.now() - 10 * 60 * 1000)
  assert.equal(replayed.status, 401, "a batch sent long ago, replayed")
  assert.deepEqual(await online(), [])
  const forged = await fetch(`${backend.url}/throng/events`, {method: "POST", headers: {"x-throng-signature": "sha256=00"}, body: JSON.stringify(batch)})
  assert.equal(forged.status, 401)
})

test("throng's lifecycle events reach the backend: who is online per room follows joins and leaves", {timeout: 20000}, async () => {
  const topic = "rooms:online"
  const online = async () => (await (await fetch(`${backend.url}/rooms/${topic}/online`)).json()).users.map(u => u.user)
  const until = async (want, label) => withTimeout((async () => {
    while(JSON.stringify(await online()) !== JSON.stringify(want)){ await new Promise(r => setTimeout(r, 50)) }
  })(), 10000, label)
  const frank = await member("frank", topic)
  const gina = await member("gina", topic)
  assert.equal(frank.joined.status, "ok")
  assert.equal(gina.joined.status, "ok")
  await until(["frank", "gina"], "both online at the backend")
  await closePhoenix(gina.socket)
  await until(["frank"], "gina gone at the backend")
  await closePhoenix(frank.socket)
  await until([], "the room empty at the backend")
})

test("backend killed mid-run: clients get errors, the circuit opens, nothing crashes; all recovers when it is back", {timeout: 40000}, async () => {
  const hank = await member("hank", "rooms:outage")
  assert.equal(hank.joined.status, "ok")
  const {cookie} = await login(backend.url, "ivy")
  await backend.kill()
  for(let i = 0; i < 3; i++){
    assert.deepEqual(await pushResult(hank.channel, "new:msg", {body: "lost"}), {status: "error", response: {reason: "backend unavailable"}})
  }
  assert.equal(await readMetric(server.apiUrl, "throng_hook_circuit_state"), 1, "open after 3 failures in a row")
  // While it is open: joins answered at once, new sockets 503 (phoenix.js retries).
  assert.deepEqual(await joinResult(hank.socket.channel("rooms:other")), {status: "error", response: {reason: "backend unavailable"}})
  await assert.rejects(connectWithCookie(server.wsUrl, cookie, 3000))
  assert.ok(server.alive())

  backend = await startExampleBackend(backendEnv())
  const recovered = await withTimeout((async () => {
    for(;;){
      const r = await pushResult(hank.channel, "new:msg", {body: "back again"})
      if(r.status === "ok"){ return r }
      assert.deepEqual(r.response, {reason: "backend unavailable"})
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  })(), 15000, "the backend to answer again")
  assert.equal(typeof recovered.response.id, "number")
  assert.equal(await readMetric(server.apiUrl, "throng_hook_circuit_state"), 0)
  assert.deepEqual(saved("rooms:outage"), [{user: "hank", body: "back again"}], "nothing lost was saved, the message after is")
  const ivy = await connectWithCookie(server.wsUrl, cookie)
  sockets.push(ivy)
  assert.equal((await joinResult(ivy.channel("rooms:outage"))).status, "ok")
})
