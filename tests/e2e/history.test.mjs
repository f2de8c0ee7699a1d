// Topic history and recovery on rejoin with the official phoenix client:
// the README's snippet (join params as a function, the message's ref as
// `since`), once per serializer and over long-poll; 50 clients whose
// connections are cut again and again (a proxy dropping the TCP connection,
// POST /api/disconnect) while the server API publishes numbered messages at
// ~200 a second for 30 s, each seeing every number exactly once, in order;
// malformed, forged and future positions; GET /api/history.
import {test, describe, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import net from "node:net"
import {LongPoll} from "phoenix"
import {
  startServer, connectPhoenix, closePhoenix, joinResult, withTimeout, deferred, SERIALIZERS,
} from "./helpers.mjs"
import {phoenixToken} from "./tokens.mjs"
import {startBackend} from "./hook_helpers.mjs"

const T = {timeout: 30000}
const SECRET = "a-phoenix-secret-key-base-of-at-least-sixty-four-bytes-0123456789"
const SALT = "user socket"
const dir = mkdtempSync(path.join(tmpdir(), "throng-history-"))
const configFile = path.join(dir, "history.toml")
writeFileSync(configFile, `
max_outbound_bytes = 65536
[auth]
mode = "phoenix_token"
secret_key_base = "${SECRET}"
salt = "${SALT}"
[[topics]]
pattern = "feed:*"
history_size = 1000
history_ttl = 600
[[topics]]
pattern = "small:*"
history_size = 3
[[topics]]
pattern = "plain:*"
`)

let server
before(async () => { server = await startServer(["--config", configFile]) }, {timeout: 20000})
after(async () => { await server?.stop(); rmSync(dir, {recursive: true, force: true}) }, {timeout: 20000})

const sockets = []
after(() => Promise.all(sockets.map(s => closePhoenix(s))))

let users = 0
/** A phoenix socket of a fresh user that reconnects and rejoins at once. */
async function client(vsn = "2.0.0", opts = {}){
  const user = `u${++users}`
  const socket = await connectPhoenix(server.wsUrl, vsn, {
    params: {token: phoenixToken(SECRET, SALT, user)},
    reconnectAfterMs: () => 20 + Math.floor(Math.random() * 60),
    rejoinAfterMs: () => 50,
    ...opts,
  })
  sockets.push(socket)
  return {socket, user}
}

async function api(method, route, body){
  const res = await fetch(`${server.apiUrl}${route}`, {
    method,
    headers: {"content-type": "application/json"},
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return {status: res.status, body: await res.json()}
}

const publish = async (topic, event, payload) => {
  const res = await api("POST", "/api/broadcast", {topic, event, payload})
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return res.body.ref
}

/**
 * The snippet: a channel whose join params are a function of the
 * last ref seen, with every join's reply and every message recorded.
 * `until(check)` resolves once check() holds, checked on every message
 * and join reply.
 */
function feed(socket, topic, event = "new:msg"){
  let since = null
  const ch = socket.channel(topic, () => (since ? {since} : {}))
  const got = []
  const joins = []
  let waiters = []
  const wake = () => { waiters = waiters.filter(w => !w()) }
  ch.on(event, (msg, ref) => { since = ref; got.push({msg, ref}); wake() })
  ch.join().receive("ok", resp => { joins.push(resp); wake() })
  const until = (check, ms, label) => {
    if(check()){ return Promise.resolve() }
    const done = deferred()
    waiters.push(() => check() && (done.resolve(), true))
    return withTimeout(done.promise, ms, label)
  }
  return {ch, got, joins, since: () => since, until}
}

/** The messages of `event` a channel gets, with `until` as in feed(). */
function collect(ch, event){
  const got = []
  let waiters = []
  ch.on(event, msg => { got.push(msg); waiters = waiters.filter(w => !w()) })
  const until = (check, ms, label) => {
    if(check()){ return Promise.resolve() }
    const done = deferred()
    waiters.push(() => check() && (done.resolve(), true))
    return withTimeout(done.promise, ms, label)
  }
  return {got, until}
}

for(const vsn of SERIALIZERS){
  describe(`phoenix.js, serializer ${vsn}`, () => {
    test("a rejoin with since gets what it missed, in order, then live messages", T, async () => {
      const topic = `feed:snippet-${vsn}`
      const {socket} = await client(vsn)
      const f = feed(socket, topic)
      await f.until(() => f.joins.length === 1, 5000, "the join")
      assert.deepEqual(f.joins[0], {}, "a join without since has no recovered key")
      const refs = []
      for(const n of [1, 2, 3]){ refs.push(await publish(topic, "new:msg", {n})) }
      await f.until(() => f.got.length === 3, 5000, "messages 1-3")
      assert.deepEqual(f.got.map(m => m.ref), refs, "each message's ref is the one the API answered")
      assert.match(refs[0], /^[0-9a-f]{16}\.1$/)
      assert.equal(f.since(), refs[2])

      await new Promise(resolve => socket.disconnect(resolve))
      for(const n of [4, 5, 6]){ refs.push(await publish(topic, "new:msg", {n})) }
      socket.connect()
      await f.until(() => f.got.length === 6, 5000, "the replay of 4-6")
      assert.deepEqual(f.joins[1], {recovered: true})
      await publish(topic, "new:msg", {n: 7})
      await f.until(() => f.got.length === 7, 5000, "live message 7")
      assert.deepEqual(f.got.map(m => m.msg.n), [1, 2, 3, 4, 5, 6, 7])
      assert.deepEqual(f.got.slice(0, 6).map(m => m.ref), refs)
    })
  })
}

test("long-poll: a rejoin with since recovers too", T, async () => {
  const topic = "feed:longpoll"
  const {socket} = await client("2.0.0", {transport: LongPoll, longPollFallbackMs: null})
  const f = feed(socket, topic)
  await f.until(() => f.joins.length === 1, 5000, "the join")
  for(const n of [1, 2]){ await publish(topic, "new:msg", {n}) }
  await f.until(() => f.got.length === 2, 5000, "messages 1-2")
  await new Promise(resolve => socket.disconnect(resolve))
  for(const n of [3, 4, 5]){ await publish(topic, "new:msg", {n}) }
  socket.connect()
  await f.until(() => f.got.length === 5, 8000, "the replay of 3-5")
  assert.deepEqual(f.joins[1], {recovered: true})
  await publish(topic, "new:msg", {n: 6})
  await f.until(() => f.got.length === 6, 8000, "live message 6")
  assert.deepEqual(f.got.map(m => m.msg.n), [1, 2, 3, 4, 5, 6])
})

/**
 * A TCP proxy in front of the server for one client: `cut()` destroys
 * the connections passing through it now (both sides, no close frame: a
 * network drop as phoenix.js sees it), later ones pass again.
 */
async function proxy(port){
  const live = new Set()
  const srv = net.createServer(down => {
    const up = net.connect(port, "127.0.0.1")
    const pair = {down, up}
    live.add(pair)
    const end = () => { live.delete(pair); down.destroy(); up.destroy() }
    down.on("error", end).on("close", end)
    up.on("error", end).on("close", end)
    down.pipe(up)
    up.pipe(down)
  })
  await new Promise(resolve => srv.listen(0, "127.0.0.1", resolve))
  return {
    url: `ws://127.0.0.1:${srv.address().port}`,
    cut(){ for(const p of [...live]){ p.down.destroy(); p.up.destroy(); live.delete(p) } },
    close(){ this.cut(); return new Promise(resolve => srv.close(resolve)) },
  }
}

// The zero-loss test on one node: 50 phoenix.js clients (half v2,
// half v1), the server API publishing numbered messages at ~200 a second
// for 30 s, and each client's connection cut at random moments, four
// times: twice by a proxy dropping the TCP connection, twice by POST
// /api/disconnect. A drain is not among the cuts here: a drained node
// stops accepting and exits, so its clients come back to another node,
// which shares history with it only through Redis (--redis; memory
// history is the process's own): the drain is tested across --workers
// with Redis (tests/cluster/history.test.mjs).
test("50 clients cut again and again while the API publishes 200 a second: every number once, in the history's order", {timeout: 90000}, async t => {
  const topic = "feed:zero-loss"
  const CLIENTS = 50
  const SECONDS = 30
  const RATE = 200
  const CUTS = 4
  const clients = []
  const proxies = []
  const timers = []
  try {
    for(let i = 0; i < CLIENTS; i++){
      const p = await proxy(server.port)
      proxies.push(p)
      const user = `z${i}`
      const socket = await connectPhoenix(p.url, i % 2 ? "1.0.0" : "2.0.0", {
        params: {token: phoenixToken(SECRET, SALT, user)},
        reconnectAfterMs: () => 20 + Math.floor(Math.random() * 60),
        rejoinAfterMs: () => 50,
      })
      sockets.push(socket)
      const f = feed(socket, topic, "n")
      clients.push({socket, user, proxy: p, f, cuts: {proxy: 0, api: 0}})
    }
    await Promise.all(clients.map(c => c.f.until(() => c.f.joins.length === 1, 5000, "the join")))

    // Each client's cuts at random moments of the publishing (the first
    // after its first messages), alternating proxy and API.
    const cuts = []
    for(const c of clients){
      for(let k = 0; k < CUTS; k++){
        const at = 500 + Math.floor(Math.random() * (SECONDS * 1000 - 1500))
        cuts.push(new Promise(resolve => timers.push(setTimeout(async () => {
          if(k % 2){
            const res = await api("POST", "/api/disconnect", {user: c.user})
            assert.equal(res.status, 200)
            c.cuts.api++
          } else {
            c.proxy.cut()
            c.cuts.proxy++
          }
          resolve()
        }, at))))
      }
    }
    // ~200 a second for 30 s, in bursts of 4 at once (so rejoins meet
    // messages still queued on their way): the order is then the refs'
    // (the history's). A machine too busy for the rate sends fewer, never
    // for longer.
    const started = Date.now()
    const offsetOf = {}
    const send = async n => { offsetOf[n] = Number((await publish(topic, "n", {n})).split(".")[1]) }
    let TOTAL = 0
    while(Date.now() - started < SECONDS * 1000){
      const n = TOTAL + 1
      await Promise.all([n, n + 1, n + 2, n + 3].map(send))
      TOTAL += 4
      const ahead = TOTAL * (1000 / RATE) - (Date.now() - started)
      if(ahead > 0){ await new Promise(resolve => setTimeout(resolve, ahead)) }
    }
    assert.ok(TOTAL >= SECONDS * RATE / 4, `published ${TOTAL} in ${SECONDS} s`)
    t.diagnostic(`published ${TOTAL} messages in ${((Date.now() - started) / 1000).toFixed(1)} s`)
    await withTimeout(Promise.all(cuts), 10000, "the cuts")
    // One more after the cuts: once it is in, so is everything before it
    // (a duplicate would show as a longer list).
    await send(TOTAL + 1)
    await Promise.all(clients.map(c => c.f.until(
      () => c.f.got.at(-1)?.msg.n === TOTAL + 1, 20000, `all ${TOTAL + 1} messages (client ${c.user} got ${c.f.got.length})`)))
    const want = Object.keys(offsetOf).map(Number).sort((a, b) => offsetOf[a] - offsetOf[b])
    assert.equal(want.length, TOTAL + 1)
    for(const c of clients){
      assert.deepEqual(c.cuts, {proxy: CUTS / 2, api: CUTS / 2})
      const got = c.f.got.map(m => m.msg.n)
      if(got.length !== want.length || got.some((n, i) => n !== want[i])){
        const i = got.findIndex((n, i) => n !== want[i])
        assert.fail(`client ${c.user}: ${got.length} messages for ${want.length}; first difference at ${i}: got ${got[i]}, want ${want[i]}`)
      }
      assert.ok(c.f.joins.length >= 2, `client ${c.user} rejoined (${c.f.joins.length} joins)`)
      for(const j of c.f.joins.slice(1)){ assert.deepEqual(j, {recovered: true}, `client ${c.user}`) }
    }
    t.diagnostic(`${clients.reduce((a, c) => a + c.f.joins.length - 1, 0)} rejoins, all recovered: true`)
  } finally {
    timers.forEach(clearTimeout)
    await Promise.all(clients.map(c => closePhoenix(c.socket)))
    await Promise.all(proxies.map(p => p.close()))
  }
})

test("a shard that drops a history message for a full inbox closes its subscribers, which recover it", {timeout: 60000}, async () => {
  // Its own server: a shard inbox bound of 1 byte drops most of a burst.
  const tight = await startServer(["--config", configFile, "--max-shard-inbox-bytes", "1", "--shards", "2"])
  const mine = []
  try {
    const topic = "feed:dropped"
    for(let i = 0; i < 4; i++){
      const user = `tight${i}`
      const socket = await connectPhoenix(tight.wsUrl, "2.0.0", {
        params: {token: phoenixToken(SECRET, SALT, user)},
        reconnectAfterMs: () => 20, rejoinAfterMs: () => 50,
      })
      mine.push(socket)
      sockets.push(socket)
    }
    const feeds = mine.map(socket => feed(socket, topic, "n"))
    await Promise.all(feeds.map(f => f.until(() => f.joins.length === 1, 5000, "the join")))
    const post = async n => {
      const res = await fetch(`${tight.apiUrl}/api/broadcast`, {
        method: "POST", headers: {"content-type": "application/json"},
        body: JSON.stringify({topic, event: "n", payload: {n}}),
      })
      return (await res.json()).ref
    }
    // Bursts of 20 at once: the order is the refs' (the history's), not n's.
    const TOTAL = 400
    const offsetOf = {}
    for(let n = 1; n <= TOTAL; n += 20){
      const batch = Array.from({length: 20}, (_, i) => n + i)
      const refs = await Promise.all(batch.map(post))
      batch.forEach((k, i) => { offsetOf[k] = Number(refs[i].split(".")[1]) })
    }
    const last = await post(TOTAL + 1)
    offsetOf[TOTAL + 1] = Number(last.split(".")[1])
    const want = Object.keys(offsetOf).map(Number).sort((a, b) => offsetOf[a] - offsetOf[b])
    await Promise.all(feeds.map(f => f.until(() => f.got.at(-1)?.msg.n === TOTAL + 1, 30000,
      `the last message (got ${f.got.length})`)))
    for(const f of feeds){ assert.deepEqual(f.got.map(m => m.msg.n), want) }
    const metrics = await (await fetch(`${tight.apiUrl}/metrics`)).text()
    const dropped = Number(metrics.match(/^throng_shard_inbox_dropped_total (\d+)$/m)[1])
    assert.ok(dropped > 0, "the bursts overflowed an inbox")
    assert.ok(feeds.some(f => f.joins.length > 1), "a subscriber was closed and rejoined")
  } catch(err){
    throw new Error(`${err.stack}\ncause: ${err.cause?.stack ?? err.cause}\nserver alive: ${tight.alive()}\nstderr: ${tight.stderr().slice(-2000)}`)
  } finally {
    await Promise.all(mine.map(s => closePhoenix(s)))
    await tight.stop()
  }
})

test("a join the app backend decides recovers once it accepts", T, async () => {
  const backend = await startBackend("history-hook-secret-of-at-least-32-bytes")
  const hooked = path.join(dir, "hooked.toml")
  writeFileSync(hooked, `
[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
secret = "history-hook-secret-of-at-least-32-bytes"
timeout_ms = 10000
[[topics]]
pattern = "hooked:*"
hooks = ["join"]
history_size = 10
`)
  const srv = await startServer(["--config", hooked])
  let socket
  try {
    const refs = []
    for(const n of [1, 2, 3]){
      const res = await fetch(`${srv.apiUrl}/api/broadcast`, {
        method: "POST", headers: {"content-type": "application/json"},
        body: JSON.stringify({topic: "hooked:1", event: "new:msg", payload: {n}}),
      })
      refs.push((await res.json()).ref)
    }
    socket = await connectPhoenix(srv.wsUrl, "2.0.0", {}, 10000)
    const ch = socket.channel("hooked:1", {since: refs[0]})
    const c = collect(ch, "new:msg")
    const res = await joinResult(ch, 12000)
    assert.equal(res.status, "ok", JSON.stringify(res))
    assert.equal(res.response.recovered, true)
    assert.equal(res.response.welcome, "hooked:1", "the backend's reply, with recovered added")
    await c.until(() => c.got.length === 2, 5000, "the replay of 2-3")
    assert.deepEqual(c.got.map(m => m.n), [2, 3])
  } finally {
    if(socket){ await closePhoenix(socket) }
    await srv.stop()
    await backend.kill()
  }
})

test("a relay push on a history topic has a position; binary ones are replayed without", T, async () => {
  const topic = "feed:relay"
  const {socket: pusher} = await client()
  const pch = pusher.channel(topic, {})
  assert.equal((await joinResult(pch)).status, "ok")
  const seen = collect(pch, "new:msg")
  const r1 = await publish(topic, "new:msg", {n: 1})
  // A client's push, broadcast to the topic by the relay channel.
  await new Promise(resolve => pch.push("new:msg", {n: 2}).receive("ok", resolve))
  await seen.until(() => seen.got.length === 2, 5000, "the relayed push")
  await new Promise(resolve => pch.push("bin", new Uint8Array([1, 2, 3]).buffer).receive("ok", resolve))
  await publish(topic, "new:msg", {n: 4})
  const {socket} = await client()
  const ch = socket.channel(topic, {since: r1})
  const got = []
  const done = deferred()
  const add = g => { got.push(g); if(got.length === 3){ done.resolve() } }
  ch.on("new:msg", (msg, ref) => add({n: msg.n, ref}))
  ch.on("bin", (msg, ref) => add({bin: [...new Uint8Array(msg)], ref}))
  const res = await joinResult(ch)
  assert.deepEqual(res.response, {recovered: true})
  await withTimeout(done.promise, 5000, "the replay")
  assert.deepEqual(got.map(g => g.n ?? g.bin), [2, [1, 2, 3], 4])
  const [epoch] = r1.split(".")
  assert.equal(got[0].ref, `${epoch}.2`, "the relayed push has the next position")
  assert.equal(got[2].ref, `${epoch}.4`)
})

test("a malformed, forged or future since gets recovered: false and nothing else", T, async () => {
  const topic = "feed:bad-since"
  const good = []
  for(const n of [1, 2]){ good.push(await publish(topic, "new:msg", {n})) }
  const other = await publish("feed:bad-since-other", "new:msg", {secret: true})
  const [epoch] = good[0].split(".")
  const {socket} = await client()
  for(const since of ["garbage", 42, {x: 1}, "1", `${epoch}.99`, `${epoch}.-1`, other, `${"0".repeat(16)}.1`, "ż".repeat(40)]){
    const ch = socket.channel(topic, {since})
    const c = collect(ch, "new:msg")
    const res = await joinResult(ch)
    assert.deepEqual(res, {status: "ok", response: {recovered: false}}, `since ${JSON.stringify(since)}`)
    await publish(topic, "new:msg", {n: "live"})
    await c.until(() => c.got.length >= 1, 5000, "the live message")
    assert.deepEqual(c.got, [{n: "live"}], `since ${JSON.stringify(since)}: nothing replayed`)
    await new Promise(resolve => ch.leave().receive("ok", resolve))
  }
  // A topic without history answers recovered: false too.
  const plain = socket.channel("plain:1", {since: good[0]})
  assert.deepEqual(await joinResult(plain), {status: "ok", response: {recovered: false}})
  // Older than what is kept (history_size = 3).
  const small = []
  for(let n = 1; n <= 5; n++){ small.push(await publish("small:1", "new:msg", {n})) }
  const old = socket.channel("small:1", {since: small[0]})
  assert.deepEqual(await joinResult(old), {status: "ok", response: {recovered: false}})
  const recent = socket.channel("small:2", {since: small[1]})
  assert.deepEqual(await joinResult(recent), {status: "ok", response: {recovered: false}}, "another topic")
  assert.ok(server.alive())
})

test("a replay over half of --max-outbound-bytes is recovered: false, not a slow-reader close", T, async () => {
  const topic = "feed:big"
  const refs = []
  const text = "x".repeat(2000)
  for(let n = 1; n <= 40; n++){ refs.push(await publish(topic, "new:msg", {n, text})) }
  const {socket} = await client()
  const all = socket.channel(topic, {since: refs[0]})
  const c = collect(all, "new:msg")
  assert.deepEqual(await joinResult(all), {status: "ok", response: {recovered: false}}, "39 x 2 KB > 32 KiB")
  await new Promise(resolve => all.leave().receive("ok", resolve))
  const recent = socket.channel(topic, {since: refs[34]})
  const r = collect(recent, "new:msg")
  assert.deepEqual(await joinResult(recent), {status: "ok", response: {recovered: true}})
  await r.until(() => r.got.length === 5, 5000, "the replay of 36-40")
  assert.deepEqual(r.got.map(m => m.n), [36, 37, 38, 39, 40])
  assert.equal(c.got.length, 0)
  assert.ok(socket.isConnected())
})

test("GET /api/history: the messages after a position, and whether none was lost", T, async () => {
  const topic = "small:api"
  const refs = []
  for(let n = 1; n <= 5; n++){ refs.push(await publish(topic, "e", {n})) }
  let res = await api("GET", `/api/history?topic=${topic}&since=${refs[2]}`)
  assert.equal(res.status, 200)
  assert.deepEqual(res.body, {
    recovered: true,
    messages: [{ref: refs[3], event: "e", payload: {n: 4}}, {ref: refs[4], event: "e", payload: {n: 5}}],
  })
  res = await api("GET", `/api/history?topic=${topic}&since=${refs[2]}&limit=1`)
  assert.deepEqual(res.body.messages.map(m => m.payload.n), [4])
  res = await api("GET", `/api/history?topic=${topic}&since=${refs[0]}`)
  assert.deepEqual(res.body, {recovered: false, messages: []}, "1 was trimmed (history_size = 3)")
  res = await api("GET", `/api/history?topic=${topic}&limit=2`)
  assert.deepEqual(res.body.messages.map(m => m.payload.n), [4, 5])
  assert.equal(res.body.recovered, false)
  res = await api("GET", "/api/history?topic=plain:1")
  assert.equal(res.status, 404)
  assert.equal(res.body.error.code, "no_history")
  res = await api("GET", `/api/history?topic=${topic}&limit=0`)
  assert.equal(res.status, 400)
  res = await api("GET", "/api/history")
  assert.equal(res.status, 400)
  const plain = await api("POST", "/api/broadcast", {topic: "plain:1", event: "e", payload: {}})
  assert.deepEqual(plain.body, {ok: true}, "no ref on a topic without history")
  const metrics = await (await fetch(`${server.apiUrl}/metrics`)).text()
  for(const name of ["throng_history_bytes", "throng_history_recoveries_total", "throng_history_evicted_total"]){
    assert.match(metrics, new RegExp(`^${name} \\d+$`, "m"))
  }
})

test("a topic's history is forgotten history_ttl after its last message, with nothing published after it", {timeout: 30000}, async () => {
  // Its own server: one topic of a 1 s ttl, one message, then silence.
  // The in-process history used to forget expired topics only when some
  // topic was published to, so after a busy hour a quiet server kept every
  // history (up to --max-history-bytes) for good (found by bench --soak).
  const briefConfig = path.join(dir, "brief.toml")
  writeFileSync(briefConfig, `
[[topics]]
pattern = "brief:*"
history_size = 10
history_ttl = 1
`)
  const brief = await startServer(["--config", briefConfig])
  try {
    const res = await fetch(`${brief.apiUrl}/api/broadcast`, {
      method: "POST", headers: {"content-type": "application/json"},
      body: JSON.stringify({topic: "brief:1", event: "e", payload: {n: 1}}),
    })
    assert.match((await res.json()).ref, /^[0-9a-f]+\.1$/)
    const gauge = async () => {
      const text = await (await fetch(`${brief.apiUrl}/metrics`)).text()
      return Number(text.match(/^throng_history_topics (\d+)$/m)[1])
    }
    assert.equal(await gauge(), 1, "the topic's history is kept")
    const deadline = Date.now() + 10000
    while(await gauge() !== 0){
      assert.ok(Date.now() < deadline, "the history was still kept 10 s after its 1 s ttl")
      await new Promise(resolve => setTimeout(resolve, 100))
    }
    const text = await (await fetch(`${brief.apiUrl}/metrics`)).text()
    assert.match(text, /^throng_history_bytes 0$/m)
    assert.match(text, /^throng_history_expired_total 1$/m)
  } finally {
    await brief.stop()
  }
})
