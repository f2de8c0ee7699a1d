// Lifecycle events to the app backend ([hooks] events = true), end to end:
// the real server, a real backend process (hook_backend.mjs) that checks
// every signature and records every event POSTed to /throng/events, and the
// official phoenix client. connect, occupied, presence_join, presence_leave,
// vacated and disconnect (with the client's close code); many joins in few
// POSTs; a backend answering 500 gets the same events (same ids) again; a
// backend that is down fills a bounded queue whose drops are counted while
// the server keeps serving.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import net from "node:net"
import path from "node:path"
import {LongPoll} from "phoenix"
import {startServer, connectPhoenix, closePhoenix, joinResult, withTimeout, readMetric} from "./helpers.mjs"
import {startBackend} from "./hook_helpers.mjs"

const SECRET = "events-test-secret-of-at-least-32-bytes"
const dir = mkdtempSync(path.join(tmpdir(), "throng-hook-events-"))
let backend, server
const sockets = []

/** Polls the backend until `pick(events)` is truthy; returns it. */
async function waitEvents(pick, what, ms = 8000){
  const deadline = Date.now() + ms
  for(;;){
    const stats = await backend.stats()
    const found = pick(stats.events.filter(e => !e.failed), stats)
    if(found){ return found }
    if(Date.now() > deadline){
      throw new Error(`timed out waiting for ${what}; events: ${JSON.stringify(stats.events.slice(-20))}`)
    }
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

async function client(params = {}, opts = {}){
  const socket = await connectPhoenix(server.wsUrl, "2.0.0", {params, ...opts})
  sockets.push(socket)
  return socket
}

async function join(socket, topic, payload = {}){
  const channel = socket.channel(topic, payload)
  const result = await joinResult(channel)
  assert.equal(result.status, "ok", `join ${topic}: ${JSON.stringify(result)}`)
  return channel
}

function leave(channel){
  return withTimeout(new Promise(resolve => channel.leave().receive("ok", resolve)), 5000, "leave")
}

before(async () => {
  backend = await startBackend(SECRET)
  const config = path.join(dir, "events.toml")
  writeFileSync(config, `
[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
secret = "${SECRET}"
events = true
timeout_ms = 2000

[[topics]]
pattern = "*"
join = "anyone"
`)
  server = await startServer(["--config", config, "--presence", "life:*=param:name"])
}, {timeout: 20000})

after(async () => {
  for(const s of sockets){ await closePhoenix(s) }
  if(server){ await server.stop() }
  if(backend){ await backend.kill() }
  rmSync(dir, {recursive: true, force: true})
})

test("a socket's life reaches the backend: connect, occupied, presence, vacated, disconnect with the code", async () => {
  const socket = await client()
  const connect = await waitEvents(es => es.find(e => e.type === "connect"), "connect")
  const sid = connect.socket_id
  assert.ok(sid, "a connect names its socket")
  assert.equal(connect.transport, "websocket")
  assert.equal(typeof connect.at, "number")
  assert.equal(typeof connect.sent_at, "number")

  const channel = await join(socket, "life:1", {name: "ada"})
  const occupied = await waitEvents(es => es.find(e => e.type === "occupied" && e.topic === "life:1"), "occupied")
  assert.equal(occupied.socket_id, null, "a topic's event belongs to no socket")
  const pj = await waitEvents(es => es.find(e => e.type === "presence_join" && e.topic === "life:1"), "presence_join")
  assert.equal(pj.key, "ada")
  assert.equal(pj.socket_id, sid)

  await leave(channel)
  const pl = await waitEvents(es => es.find(e => e.type === "presence_leave" && e.topic === "life:1"), "presence_leave")
  assert.equal(pl.key, "ada")
  assert.equal(pl.socket_id, sid)
  await waitEvents(es => es.find(e => e.type === "vacated" && e.topic === "life:1"), "vacated")

  // A close code the client chooses comes back in the disconnect.
  await withTimeout(new Promise(resolve => socket.disconnect(resolve, 4001, "bye")), 5000, "disconnect")
  const gone = await waitEvents(es => es.find(e => e.type === "disconnect" && e.socket_id === sid), "disconnect")
  assert.equal(gone.code, 4001)

  // Exactly one of each transition, and ids never repeat.
  const {events} = await backend.stats()
  const life = events.filter(e => e.topic === "life:1" && ["occupied", "vacated"].includes(e.type))
  assert.deepEqual(life.map(e => e.type), ["occupied", "vacated"])
  const ids = events.filter(e => !e.failed).map(e => e.id)
  assert.equal(new Set(ids).size, ids.length, "no id twice")

  // The next socket, perhaps on the same slot, gets a new socket_id.
  const earlier = events.filter(e => !e.failed && e.type === "connect").length
  const again = await client()
  const next = await waitEvents(es => es.filter(e => e.type === "connect")[earlier], "second connect")
  assert.notEqual(next.socket_id, sid)
  await closePhoenix(again)
})

test("a long-poll session's life reaches the backend too", async () => {
  const socket = await client({}, {transport: LongPoll})
  const connect = await waitEvents(es => es.find(e => e.type === "connect" && e.transport === "longpoll"), "long-poll connect")
  const channel = await join(socket, "life:lp", {name: "lin"})
  const pj = await waitEvents(es => es.find(e => e.type === "presence_join" && e.topic === "life:lp"), "presence_join")
  assert.equal(pj.socket_id, connect.socket_id)
  await leave(channel)
  await waitEvents(es => es.find(e => e.type === "vacated" && e.topic === "life:lp"), "vacated")
})

test("many joins arrive in few POSTs", async () => {
  const socket = await client()
  const before = (await backend.stats()).eventPosts
  const topics = Array.from({length: 60}, (_, i) => `batch:${i}`)
  await Promise.all(topics.map(t => join(socket, t)))
  const seen = await waitEvents(es => {
    const got = es.filter(e => e.type === "occupied" && e.topic.startsWith("batch:"))
    return got.length === topics.length && got
  }, "60 occupied events")
  const posts = new Set(seen.map(e => e.post))
  assert.ok(posts.size <= 10, `60 events came in ${posts.size} POSTs`)
  const after = (await backend.stats()).eventPosts
  assert.ok(after - before <= 12, `${after - before} POSTs for 60 joins`)
  await closePhoenix(socket)
})

test("a backend answering 500 gets the same events again, with the same ids", async () => {
  const sent = await readMetric(server.apiUrl, "throng_hook_events_sent_total")
  const retries = await readMetric(server.apiUrl, "throng_hook_event_retries_total")
  await fetch(`http://127.0.0.1:${backend.port}/control?events_fail=2`)
  const socket = await client()
  await join(socket, "retry:1")
  const ok = await waitEvents(es => es.find(e => e.type === "occupied" && e.topic === "retry:1"), "occupied after retries")
  const {events, eventFailures} = await backend.stats()
  assert.ok(eventFailures >= 2)
  const tries = events.filter(e => e.id === ok.id)
  assert.equal(tries.length, 3, `refused twice, then taken: ${JSON.stringify(tries)}`)
  assert.deepEqual(tries.map(e => e.failed), [true, true, false])
  assert.ok(tries.every(e => e.type === "occupied" && e.topic === "retry:1" && e.at === ok.at))
  assert.ok(await readMetric(server.apiUrl, "throng_hook_event_retries_total") >= retries + 2)
  assert.ok(await readMetric(server.apiUrl, "throng_hook_events_sent_total") > sent)
  await closePhoenix(socket)
})

test("a backend that is down: the queue is bounded, drops are counted, clients are served", async () => {
  // A port nobody listens on.
  const port = await new Promise(resolve => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port
      s.close(() => resolve(p))
    })
  })
  const config = path.join(dir, "down.toml")
  writeFileSync(config, `
[[topics]]
pattern = "*"
join = "anyone"
`)
  const down = await startServer([
    "--config", config,
    "--hook-url", `http://127.0.0.1:${port}/throng`, "--hook-events",
    "--hook-events-queue", "5", "--hook-events-batch", "2",
  ])
  try {
    const socket = await connectPhoenix(down.wsUrl, "2.0.0")
    for(let i = 0; i < 30; i++){
      const result = await joinResult(socket.channel(`down:${i}`, {}))
      assert.equal(result.status, "ok", "joins are served while the backend is down")
    }
    const deadline = Date.now() + 5000
    while(await readMetric(down.apiUrl, "throng_hook_events_dropped_total") < 20){
      assert.ok(Date.now() < deadline, "drops counted")
      await new Promise(resolve => setTimeout(resolve, 50))
    }
    assert.ok(await readMetric(down.apiUrl, "throng_hook_events_queued") <= 5)
    assert.ok(await readMetric(down.apiUrl, "throng_hook_event_retries_total") >= 1)
    assert.equal(await readMetric(down.apiUrl, "throng_hook_events_sent_total"), 0)
    await closePhoenix(socket)
    const warnings = down.stderr().split("\n").filter(l => l.includes("--hook-events-queue"))
    assert.equal(warnings.length, 1, `one warning per episode: ${warnings.join("\n")}`)
  } finally {
    await down.stop()
  }
})

test("a draining server's last sockets still get their disconnect to the backend", async () => {
  const config = path.join(dir, "drain.toml")
  writeFileSync(config, `
[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
secret = "${SECRET}"
events = true

[[topics]]
pattern = "*"
join = "anyone"
`)
  const draining = await startServer(["--config", config])
  const connects = es => es.filter(e => e.type === "connect")
  const earlier = connects((await backend.stats()).events.filter(e => !e.failed)).length
  const socket = await connectPhoenix(draining.wsUrl, "2.0.0")
  try {
    await join(socket, "drain:1")
    const connect = await waitEvents(es => connects(es)[earlier], "connect")
    await waitEvents(es => es.find(e => e.type === "occupied" && e.topic === "drain:1"), "occupied")
    const exit = await draining.stop()
    assert.equal(exit.code, 0, "drained and exited by itself")
    const stats = await backend.stats()
    const gone = stats.events.find(e => !e.failed && e.type === "disconnect" && e.socket_id === connect.socket_id)
    assert.ok(gone, "the disconnect reached the backend before the exit")
    assert.equal(gone.code, 1012, "the drain's close code")
    assert.ok(stats.events.find(e => !e.failed && e.type === "vacated" && e.topic === "drain:1"))
  } finally {
    await closePhoenix(socket)
  }
})
