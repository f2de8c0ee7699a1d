// The connect hook, end to end, over WebSocket and long-poll: the real
// server with [hooks] connect = true and a real backend process
// (hook_backend.mjs) that decides by the `token` param. An accepted socket gets the backend's user (seen by the
// join hook, and by /api/disconnect); a refused one gets 403 before the
// upgrade; a failing or slow backend gives 503, which phoenix.js retries.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {LongPoll} from "phoenix"
import {existsSync} from "node:fs"
import {startServer, connectPhoenix, closePhoenix, joinResult, httpRequest, withTimeout, RawHttp, readMetric, CHROMIUM, launchChromium} from "./helpers.mjs"
import {startBackend} from "./hook_helpers.mjs"

const SECRET = "connect-test-secret-of-at-least-32-bytes"
const dir = mkdtempSync(path.join(tmpdir(), "throng-hooks-connect-"))
let backend, server
const sockets = []

const upgrade = token => httpRequest(server.port, "GET", `/socket/websocket?vsn=2.0.0&token=${token}`, {
  headers: {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
    "Cookie": "session=abc",
    "User-Agent": "hooks-test",
    "X-Evil": "never forwarded",
  },
})

before(async () => {
  backend = await startBackend(SECRET)
  const config = path.join(dir, "connect.toml")
  writeFileSync(config, `
[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
connect = true
secret = "${SECRET}"
timeout_ms = 1000

[[topics]]
pattern = "rooms:*"
join = "users"
hooks = ["join"]
`)
  server = await startServer(["--config", config])
}, {timeout: 20000})

after(async () => {
  for(const s of sockets){ await closePhoenix(s) }
  if(server){ await server.stop() }
  if(backend){ await backend.kill() }
  rmSync(dir, {recursive: true, force: true})
})

test("an accepted socket is the backend's user, with its assigns, for joins and /api/disconnect", async () => {
  const socket = await connectPhoenix(server.wsUrl, "2.0.0", {params: {token: "good"}})
  sockets.push(socket)
  const channel = socket.channel("rooms:vip")
  const joined = await joinResult(channel)
  assert.equal(joined.status, "ok", JSON.stringify(joined))
  assert.equal(joined.response.user, "42", "the join hook sees the connect hook's user")
  const stats = await backend.stats()
  const req = stats.joinRequests.at(-1)
  assert.deepEqual(req.assigns, {plan: "gold"})
  const connect = stats.connects.at(-1)
  assert.equal(connect.transport, "websocket")
  assert.equal(connect.vsn, "2.0.0")
  assert.equal(connect.params.token, "good")
  assert.match(connect.remote_addr, /^127\.0\.0\.1:\d+$/)
  // The user id works with the server API's disconnect.
  const closed = withTimeout(new Promise(resolve => socket.onClose(resolve)), 5000, "the disconnect")
  const r = await fetch(`${server.apiUrl}/api/disconnect`, {
    method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify({user: "42"}),
  })
  assert.equal(r.status, 200)
  await closed
})

test("the backend's headers: only the documented ones", async () => {
  const res = await upgrade("anon")
  assert.equal(res.status, 101)
  const connect = (await backend.stats()).connects.at(-1)
  assert.deepEqual(connect.headers, {cookie: "session=abc", "user-agent": "hooks-test"})
  assert.equal(connect.user, undefined)
})

test("refused sockets get 403 before the upgrade; a failing or slow backend 503", async () => {
  for(const token of ["error", "forbidden", "none"]){
    assert.equal((await upgrade(token)).status, 403, token)
  }
  for(const token of ["down", "slow"]){
    const res = await upgrade(token)
    assert.equal(res.status, 503, token)
    assert.match(res.body.toString(), /try again/)
  }
  // An anonymous socket may not join a `users` topic: rules still apply.
  const socket = await connectPhoenix(server.wsUrl, "2.0.0", {params: {token: "anon"}})
  sockets.push(socket)
  assert.deepEqual(await joinResult(socket.channel("rooms:vip")), {status: "error", response: {reason: "unauthorized"}})
  assert.ok(server.alive())
})

/** Waits (5 s at most) for a line of the server's log with every one of `parts`. */
async function logLine(parts){
  const found = () => server.stderr().split("\n").find(l => parts.every(p => l.includes(p)))
  for(let i = 0; i < 250 && !found(); i++){ await new Promise(resolve => setTimeout(resolve, 20)) }
  assert.ok(found(), `no log line with ${JSON.stringify(parts)} in\n${server.stderr()}`)
  return found()
}

test("a refused connect says the backend's reason: in the 403, in the log and at /socket/check", async () => {
  const refused = await upgrade("error")
  assert.equal(refused.status, 403)
  assert.equal(refused.body.toString(), "the app backend refused this connection: banned\n")
  let line = await logLine(["connect refused (403)", "connect hook said \"banned\""])
  assert.match(line, / INFO /)
  // A 403 status with a body: its reason.
  const locked = await upgrade("locked")
  assert.equal(locked.body.toString(), "the app backend refused this connection: account locked\n")
  // What a page can read: the same answer without the upgrade, 204 for a
  // connect that would pass.
  const check = token => httpRequest(server.port, "GET", `/socket/check?vsn=2.0.0&token=${token}`)
  const why = await check("none")
  assert.equal(why.status, 403)
  assert.equal(why.body.toString(), "the app backend refused this connection: no token\n")
  assert.equal((await check("good")).status, 204)
  assert.equal((await check("down")).status, 503)
  assert.equal((await httpRequest(server.port, "POST", "/socket/check?vsn=2.0.0")).status, 405)
  // The backend saw the check as a connect, with its params.
  const stats = await backend.stats()
  assert.ok(stats.connects.some(c => c.params.token === "none"))
  line = await logLine(["connect refused (403)"])
  assert.ok(!line.includes("Cookie") && !line.includes("abc"), line)
})

test("the chat page shows why the backend refused it", {timeout: 30000}, async t => {
  if(!existsSync(CHROMIUM)){
    t.skip(`${CHROMIUM} not found: install the Debian package \`chromium\` to run the browser test`)
    return
  }
  const browser = await launchChromium()
  try {
    const page = await browser.newPage()
    // The page connects with no token param: the backend answers "no token".
    await page.goto(`${server.url}/`, {waitUntil: "load", timeout: 10000})
    await page.locator("#status", {hasText: "no token"}).waitFor({timeout: 15000})
    const text = await page.textContent("#status")
    assert.match(text, /refused the connection \(403\): the app backend refused this connection: no token/)
    assert.ok(!text.includes("log says why"), text)
  } finally {
    await browser.close()
  }
})

test("long-poll: an accepted session is the backend's user; refused and failing ones get 403 and 503", async () => {
  const socket = await connectPhoenix(server.wsUrl, "2.0.0", {params: {token: "good"}, transport: LongPoll})
  sockets.push(socket)
  const joined = await joinResult(socket.channel("rooms:lp"))
  assert.equal(joined.status, "ok", JSON.stringify(joined))
  assert.equal(joined.response.user, "42")
  const stats = await backend.stats()
  assert.equal(stats.connects.at(-1).transport, "longpoll")
  assert.deepEqual(stats.joinRequests.at(-1).assigns, {plan: "gold"})
  const poll = async token => JSON.parse((await httpRequest(server.port, "GET", `/socket/longpoll?vsn=2.0.0&token=${token}`, {headers: {"User-Agent": "lp-test"}})).body.toString())
  assert.equal((await poll("error")).status, 403)
  assert.equal((await poll("forbidden")).status, 403)
  assert.equal((await poll("down")).status, 503)
  const anon = await poll("anon")
  assert.equal(anon.status, 410, "a new session's token")
  assert.ok(anon.token)
  assert.deepEqual((await backend.stats()).connects.at(-1).headers, {"user-agent": "lp-test"})
})

test("long-poll: a session held for the hook gives its place back when its connection closes", async () => {
  // One session at most: a leaked place would refuse the next one (503).
  const config = path.join(dir, "one-session.toml")
  writeFileSync(config, `
max_longpoll_sessions = 1

[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
connect = true
secret = "${SECRET}"
timeout_ms = 10000
`)
  const small = await startServer(["--config", config])
  try {
    const seen = (await backend.stats()).connects.length
    const held = await RawHttp.connect(small.port)
    held.send(`GET /socket/longpoll?vsn=2.0.0&token=slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)
    await withTimeout((async () => {
      while((await backend.stats()).connects.length === seen){ await new Promise(r => setTimeout(r, 20)) }
    })(), 5000, "the backend to get the held connect")
    held.close()
    await withTimeout((async () => {
      while(await readMetric(small.apiUrl, "throng_connections") > 0){ await new Promise(r => setTimeout(r, 20)) }
    })(), 5000, "the held connection to close")
    const res = await httpRequest(small.port, "GET", "/socket/longpoll?vsn=2.0.0&token=anon")
    assert.equal(JSON.parse(res.body.toString()).status, 410, "a session opens: the held one's place was given back")
  } finally {
    await small.stop()
  }
})
