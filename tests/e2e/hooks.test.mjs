// App backend hooks, end to end: the real server with [hooks] and a
// `[[topics]] hooks = ["join", "push"]` rule, a real backend process
// (hook_backend.mjs, node:http) that verifies every signature, and the
// official phoenix client over WebSocket and long-poll. Faults: a refused
// join, bad answers, a slow backend (timeout), the backend killed (circuit
// opens, clients get errors, nothing crashes) and started again (recovery).
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {LongPoll} from "phoenix"
import {startServer, connectPhoenix, closePhoenix, joinResult, nextEvent, withTimeout, RawPhx, readMetric, pushResult} from "./helpers.mjs"
import {startBackend} from "./hook_helpers.mjs"

const SECRET = "hook-test-secret-of-at-least-32-bytes"
const dir = mkdtempSync(path.join(tmpdir(), "throng-hooks-"))
let backend, server
const sockets = []

async function client(opts = {}){
  const socket = await connectPhoenix(server.wsUrl, "2.0.0", opts)
  sockets.push(socket)
  return socket
}

async function joined(topic, payload = {}, opts = {}){
  const socket = await client(opts)
  const channel = socket.channel(topic, payload)
  const result = await joinResult(channel)
  assert.equal(result.status, "ok", `join ${topic}: ${JSON.stringify(result)}`)
  return {socket, channel, reply: result.response}
}

before(async () => {
  backend = await startBackend(SECRET)
  const config = path.join(dir, "hooks.toml")
  writeFileSync(config, `
[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
secret = "${SECRET}"
timeout_ms = 1000

[[topics]]
pattern = "rooms:*"
join = "anyone"
hooks = ["join", "push"]

[[topics]]
pattern = "plain:*"
join = "anyone"
`)
  server = await startServer(["--config", config, "--hook-breaker-failures", "3", "--push-rate", "0"])
}, {timeout: 20000})

after(async () => {
  for(const s of sockets){ await closePhoenix(s) }
  if(server){ await server.stop() }
  if(backend){ await backend.kill() }
  rmSync(dir, {recursive: true, force: true})
})

test("a join the backend accepts joins with its reply; one it refuses gets its error", async () => {
  const {reply} = await joined("rooms:lobby", {hello: 1})
  assert.deepEqual(reply, {welcome: "rooms:lobby", user: null, at_seen: true})
  const socket = await client()
  const refused = await joinResult(socket.channel("rooms:banned"))
  assert.deepEqual(refused, {status: "error", response: {reason: "banned"}})
  // Topics without hooks do not reach the backend.
  const plain = await joinResult(socket.channel("plain:x"))
  assert.equal(plain.status, "ok")
  assert.ok(!(await backend.stats()).joins.includes("plain:x"))
})

test("a push is answered by the backend, its broadcast reaches every subscriber, with the join's assigns", async () => {
  const a = await joined("rooms:chat")
  const b = await joined("rooms:chat")
  const seenByB = nextEvent(b.channel, "new:msg")
  const r = await pushResult(a.channel, "new:msg", {body: "hi"})
  assert.equal(r.status, "ok")
  assert.equal(r.response.saved, true)
  assert.equal(r.response.assigns.room, "rooms:chat", "the join's assigns travel with its pushes")
  assert.deepEqual(await seenByB, {body: "hi"})
  // exclude_sender: B gets both broadcasts, A only the second.
  const firstAtA = nextEvent(a.channel, "new:msg")
  const bGetsExcluded = nextEvent(b.channel, "new:msg")
  assert.equal((await pushResult(a.channel, "new:msg", {body: "not to a", exclude: true})).status, "ok")
  assert.deepEqual(await bGetsExcluded, {body: "not to a"})
  assert.equal((await pushResult(a.channel, "new:msg", {body: "to all"})).status, "ok")
  assert.deepEqual(await firstAtA, {body: "to all"})
  const refused = await pushResult(a.channel, "refuse", {})
  assert.deepEqual(refused, {status: "error", response: {reason: "nope"}})
})

test("pushes of one socket on one topic are handled in order", async () => {
  const {channel} = await joined("rooms:order")
  const n = 6
  // The first push is answered slowest: answers in order only if throng
  // waits for each before sending the next.
  const replies = []
  const all = []
  for(let i = 0; i < n; i++){
    all.push(pushResult(channel, "seq", {n: i, delay_ms: (n - i) * 20}).then(r => replies.push(r.response.n)))
  }
  await Promise.all(all)
  assert.deepEqual(replies, [...Array(n).keys()])
  const seen = (await backend.stats()).pushes.filter(p => p.event === "seq").map(p => p.n)
  assert.deepEqual(seen, [...Array(n).keys()])
})

test("a socket's hook requests are bounded: past the bound, a clear error reply", async () => {
  const {channel} = await joined("rooms:bound")
  const before = await readMetric(server.apiUrl, "throng_hook_refused_total", '{hook="push"}')
  // 16 (--hook-max-in-flight-per-socket's default) wait, in flight or
  // queued behind the first; the next 4 are refused at once.
  const results = await Promise.all([...Array(20).keys()].map(n => pushResult(channel, "seq", {n, delay_ms: 50})))
  const refused = results.filter(r => r.status === "error")
  assert.equal(refused.length, 4, JSON.stringify(results))
  for(const r of refused){ assert.deepEqual(r.response, {reason: "too many backend requests"}) }
  assert.deepEqual(results.slice(0, 16).map(r => r.response.n), [...Array(16).keys()])
  assert.equal(await readMetric(server.apiUrl, "throng_hook_refused_total", '{hook="push"}'), before + 4)
})

test("bad answers get a clear error reply and are counted; the socket keeps working", async () => {
  const before = await readMetric(server.apiUrl, "throng_hook_bad_answers_total", '{hook="push"}')
  const {channel} = await joined("rooms:bad")
  assert.deepEqual(await pushResult(channel, "garbage", {}), {status: "error", response: {reason: "bad backend answer"}})
  assert.deepEqual(await pushResult(channel, "shape", {}), {status: "error", response: {reason: "bad backend answer"}})
  assert.equal(await readMetric(server.apiUrl, "throng_hook_bad_answers_total", '{hook="push"}'), before + 2)
  const socket = await client()
  const garbageJoin = await joinResult(socket.channel("rooms:garbage"))
  assert.deepEqual(garbageJoin, {status: "error", response: {reason: "bad backend answer"}})
  assert.equal((await pushResult(channel, "new:msg", {body: "still fine"})).status, "ok")
})

test("a slow backend gives a timeout error reply", async () => {
  const before = await readMetric(server.apiUrl, "throng_hook_timeouts_total", '{hook="push"}')
  const {channel} = await joined("rooms:slow")
  assert.deepEqual(await pushResult(channel, "slow", {}), {status: "error", response: {reason: "backend timeout"}})
  assert.equal(await readMetric(server.apiUrl, "throng_hook_timeouts_total", '{hook="push"}'), before + 1)
  assert.ok((await readMetric(server.apiUrl, "throng_hook_duration_seconds_count", '{hook="push"}')) > 0)
})

test("a join left while the backend decides is dropped", async () => {
  const channelsBefore = await readMetric(server.apiUrl, "throng_channels_joined")
  const socket = await client()
  const answered = (await backend.stats()).answeredJoins
  const channel = socket.channel("rooms:pending", {delay_ms: 300})
  channel.join()
  const left = withTimeout(new Promise(resolve => channel.leave().receive("ok", resolve)), 5000, "leave")
  await left
  // Wait for the backend to have answered that join, then a round trip on
  // the same socket: the late answer has been applied (or dropped) by then.
  await withTimeout((async () => {
    while((await backend.stats()).answeredJoins <= answered){ await new Promise(r => setTimeout(r, 20)) }
  })(), 5000, "the backend's answer to the held join")
  const other = socket.channel("plain:after")
  assert.equal((await joinResult(other)).status, "ok")
  assert.equal(await readMetric(server.apiUrl, "throng_channels_joined"), channelsBefore + 1, "the dropped join holds no channel")
})

test("long-poll clients join and push through the hooks", async () => {
  const {channel} = await joined("rooms:lp", {}, {transport: LongPoll})
  const r = await pushResult(channel, "new:msg", {body: "over long-poll"})
  assert.equal(r.status, "ok")
  assert.equal(r.response.assigns.room, "rooms:lp")
})

test("every request is signed: the backend verifies each and refuses a forged one", async () => {
  const stats = await backend.stats()
  assert.ok(stats.verified > 10, `verified ${stats.verified}`)
  assert.equal(stats.forged, 0)
  const forged = await fetch(`http://127.0.0.1:${backend.port}/throng/join`, {
    method: "POST",
    headers: {"x-throng-signature": "sha256=" + "0".repeat(64)},
    body: JSON.stringify({topic: "rooms:lobby", payload: {}, user: null, socket_id: "x", assigns: {}, at: Date.now()}),
  })
  assert.equal(forged.status, 401)
})

test("backend killed: errors, the circuit opens, nothing crashes; it recovers when the backend returns", {timeout: 30000}, async () => {
  const {channel} = await joined("rooms:outage")
  const port = backend.port
  await backend.kill()
  for(let i = 0; i < 3; i++){
    assert.deepEqual(await pushResult(channel, "new:msg", {body: "lost"}), {status: "error", response: {reason: "backend unavailable"}})
  }
  assert.equal(await readMetric(server.apiUrl, "throng_hook_circuit_state"), 1, "open after 3 failures in a row")
  const refusedBefore = await readMetric(server.apiUrl, "throng_hook_refused_total", '{hook="push"}')
  assert.deepEqual(await pushResult(channel, "new:msg", {body: "lost"}), {status: "error", response: {reason: "backend unavailable"}})
  assert.equal(await readMetric(server.apiUrl, "throng_hook_refused_total", '{hook="push"}'), refusedBefore + 1, "answered at once, without a request")
  const socket = await client()
  assert.deepEqual(await joinResult(socket.channel("rooms:down")), {status: "error", response: {reason: "backend unavailable"}})
  assert.ok(server.alive())
  backend = await startBackend(SECRET, port)
  // The circuit probes once a second: push until the backend answers.
  const recovered = await withTimeout((async () => {
    for(;;){
      const r = await pushResult(channel, "new:msg", {body: "back"})
      if(r.status === "ok"){ return r }
      assert.deepEqual(r.response, {reason: "backend unavailable"})
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  })(), 10000, "the backend to answer again")
  assert.equal(recovered.response.saved, true)
  assert.equal(await readMetric(server.apiUrl, "throng_hook_circuit_state"), 0)
  assert.equal((await joinResult(socket.channel("rooms:back"))).status, "ok")
})

test("a push's ref reaches the backend as the JSON value the client sent", async () => {
  const c = await RawPhx.connect(server.port, "2.0.0")
  try {
    const {join_ref, reply} = await c.join("rooms:refs")
    assert.equal(reply.payload.status, "ok")
    const cases = [[7, "number"], ["8", "string"], [null, "null"]]
    for(const [ref] of cases){
      c.send({join_ref, ref, topic: "rooms:refs", event: "refcheck", payload: {n: ref === null ? "null" : ref}})
      await c.nextMatching(m => m.event === "phx_reply" && m.ref === ref, 5000, `the reply to ref ${JSON.stringify(ref)}`)
    }
    const seen = (await backend.stats()).pushes.filter(p => p.event === "refcheck")
    assert.deepEqual(seen.map(p => p.ref), [7, "8", null])
  } finally {
    c.destroy()
  }
})

test("keep-alive connections to the backend are closed once idle for idle_timeout_ms", {timeout: 30000}, async () => {
  // Its own backend and server: joins held by the backend at once open
  // several connections; idle, each must be closed. Without a timer the
  // pool closed an idle connection only when it next took one, so after a
  // burst they stayed open for good (found by bench --soak).
  const own = await startBackend(SECRET)
  const idleConfig = path.join(dir, "idle.toml")
  writeFileSync(idleConfig, `
[hooks]
url = "http://127.0.0.1:${own.port}/throng"
secret = "${SECRET}"
idle_timeout_ms = 300

[[topics]]
pattern = "rooms:*"
join = "anyone"
hooks = ["join"]
`)
  const srv = await startServer(["--config", idleConfig])
  const mine = []
  try {
    const joins = []
    for(let i = 0; i < 4; i++){
      const socket = await connectPhoenix(srv.wsUrl, "2.0.0")
      mine.push(socket)
      joins.push(joinResult(socket.channel(`rooms:idle${i}`, {delay_ms: 300})))
    }
    for(const r of await Promise.all(joins)){ assert.equal(r.status, "ok", JSON.stringify(r)) }
    const opened = (await own.stats()).openHookConnections
    assert.ok(opened >= 2, `joins held at once came on several connections (${opened})`)
    const deadline = Date.now() + 10000
    while((await own.stats()).openHookConnections > 0){
      assert.ok(Date.now() < deadline, "connections to the backend still open 10 s after a 300 ms idle timeout")
      await new Promise(resolve => setTimeout(resolve, 100))
    }
  } finally {
    for(const s of mine){ await closePhoenix(s) }
    await srv.stop()
    await own.kill()
  }
})
