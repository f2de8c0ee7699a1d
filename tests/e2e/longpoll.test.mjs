// The long-poll transport at /socket/longpoll, spoken by a raw HTTP client:
// each status of Phoenix's protocol (410 new session, 200 messages, 204 none
// after the window, 403 refused, 410 gone), POSTs of ndjson batches, session
// expiry, the buffer bound, and HTTP details (keep-alive order, CORS, bodies).
// The server runs two shards, so requests of one session are forwarded
// between them.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {
  startServer, httpRequest, RawHttp, withTimeout,
} from "./helpers.mjs"

const T = {timeout: 20000}
const WINDOW_S = 1
const MAX_OUTBOUND = 64 * 1024

let server
before(async () => {
  server = await startServer([
    "--echo", "--shards", "2", "--idle-timeout", "0",
    "--longpoll-window", String(WINDOW_S), "--max-outbound-bytes", String(MAX_OUTBOUND),
    "--max-message-bytes", String(256 * 1024),
    // a POST of 100 pushes is past a socket's default push budget
    "--push-rate", "0",
  ])
}, {timeout: 20000})
after(async () => { await server?.stop() }, {timeout: 20000})

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

/** One long-poll request on a fresh connection: the JSON body (HTTP must be 200). */
async function lp(method, query, {body = null, headers = {}, port = server.port} = {}){
  const res = await httpRequest(port, method, `/socket/longpoll?${query}`, {headers, body})
  assert.equal(res.status, 200, `HTTP ${res.status}: ${res.body}`)
  assert.match(res.headers["content-type"], /^application\/json/)
  assert.equal(res.headers["access-control-allow-origin"], "*")
  return JSON.parse(res.body.toString("utf8"))
}

/** A new session: its token. */
async function session(query = "vsn=2.0.0", headers = {}){
  const res = await lp("GET", query, {headers})
  assert.equal(res.status, 410, JSON.stringify(res))
  assert.match(res.token, /^lp1\.[0-9a-f]{60}$/)
  assert.deepEqual(res.messages, [])
  return res.token
}

const ndjson = {"Content-Type": "application/x-ndjson"}
const post = (token, lines, vsn = "2.0.0") =>
  lp("POST", `vsn=${vsn}&token=${token}`, {body: lines.map(l => typeof l === "string" ? l : JSON.stringify(l)).join("\n"), headers: ndjson})
const poll = (token, vsn = "2.0.0") => lp("GET", `vsn=${vsn}&token=${token}`)

async function metrics(){
  const res = await httpRequest(server.apiPort, "GET", "/metrics")
  const out = {}
  for(const line of res.body.toString("utf8").split("\n")){
    const m = line.match(/^([a-z_]+) ([0-9.]+)$/)
    if(m){ out[m[1]] = Number(m[2]) }
  }
  return out
}

/** Polls `check` every 50 ms until it is truthy; throws after `ms`. */
async function waitFor(check, ms, label){
  const deadline = Date.now() + ms
  for(;;){
    const v = await check()
    if(v){ return v }
    if(Date.now() > deadline){ throw new Error(`timed out after ${ms} ms waiting for ${label}`) }
    await sleep(50)
  }
}

/** POSTs heartbeats (which are not polls) until the session is gone (410). */
const untilGone = (token, ms = 10000) => waitFor(async () => {
  const res = await post(token, [[null, "hb", "phoenix", "heartbeat", {}]])
  return res.status === 410
}, ms, "the session to end")

const joinLine = (topic, payload = {}, ref = "1") => [ref, ref, topic, "phx_join", payload]

test("GET without a token starts a session: 410 with its token", T, async () => {
  const token = await session()
  // the token works, and the session waits the window out: 204, same token
  const res = await poll(token)
  assert.deepEqual(res, {status: 204, token, messages: []})
})

test("refused with 403: an unsupported vsn", T, async () => {
  const before = (await metrics()).throng_longpoll_refused_total
  assert.deepEqual(await lp("GET", "vsn=3.0.0"), {status: 403})
  assert.deepEqual(await lp("GET", "vsn=x&user=a"), {status: 403})
  assert.equal((await metrics()).throng_longpoll_refused_total, before + 2)
})

test("a token that is not a session's is the app's param: GET starts a session, POST is gone", T, async () => {
  // phoenix.js `params: {token}` (the usual way to pass a user token) shares
  // the query with the session token, which phoenix.js appends last
  const token = await session("token=app-secret&vsn=2.0.0&")
  assert.deepEqual(await post(token, [joinLine("echo:app")]), {status: 200})
  const join = JSON.parse((await lp("GET", `token=app-secret&vsn=2.0.0&token=${token}`)).messages[0])
  assert.deepEqual(join[4].response.params, {token: "app-secret"})
  // a POST names no session with it: gone, as Phoenix
  assert.deepEqual(await lp("POST", "vsn=2.0.0&token=app-secret", {body: "[]", headers: ndjson}), {status: 410})
  assert.deepEqual(await lp("POST", "vsn=2.0.0", {body: "[]", headers: ndjson}), {status: 410})
})

test("a session token whose session never existed or is gone gets 410, without a new session", T, async () => {
  const token = await session()
  const forged = token.slice(0, -4) + (token.endsWith("0000") ? "1111" : "0000")
  assert.deepEqual(await poll(forged), {status: 410})
  assert.deepEqual(await post(forged, [joinLine("rooms:lobby")]), {status: 410})
  // a node that does not exist (a single node has no other)
  const elsewhere = "lp1.00000000deadbeef" + token.slice(20)
  assert.deepEqual(await poll(elsewhere), {status: 410})
})

test("POST ndjson of 100 messages: 200, and one poll takes the 100 replies in order", T, async () => {
  const token = await session("vsn=2.0.0&user=ann&room=7", {"X-Phoenix-AuthToken": "tok-1"})
  const lines = [joinLine("echo:raw", {hello: "there"})]
  for(let i = 2; i <= 100; i++){ lines.push(["1", String(i), "echo:raw", "ping", {i}]) }
  assert.deepEqual(await post(token, lines), {status: 200})
  const res = await poll(token)
  assert.equal(res.status, 200)
  assert.equal(res.token, token)
  assert.equal(res.messages.length, 100)
  const msgs = res.messages.map(m => JSON.parse(m))
  // the app saw the socket params (not vsn, not token) and the X-Phoenix-AuthToken header
  assert.deepEqual(msgs[0], ["1", "1", "echo:raw", "phx_reply", {status: "ok", response: {
    params: {user: "ann", room: "7"}, auth_token: "tok-1", user_id: null, topic: "echo:raw", join: {hello: "there"},
  }}])
  msgs.slice(1).forEach((m, k) => {
    assert.deepEqual(m, ["1", String(k + 2), "echo:raw", "phx_reply", {status: "ok", response: {i: k + 2}}])
  })
})

test("a POST of 101 messages is refused with 413 and none of them is dispatched", T, async () => {
  const token = await session()
  assert.deepEqual(await post(token, [joinLine("echo:big")]), {status: 200})
  const lines = Array.from({length: 101}, (_, i) => ["1", `n${i}`, "echo:big", "ping", {i}])
  assert.deepEqual(await post(token, lines), {status: 413})
  assert.deepEqual(await post(token, [["1", "after", "echo:big", "ping", {}]]), {status: 200})
  const refs = (await poll(token)).messages.map(m => JSON.parse(m)[1])
  assert.deepEqual(refs, ["1", "after"])
})

test("a waiting poll is answered as soon as a message arrives; one whose connection closes loses nothing", T, async t => {
  // a window far longer than the test: a 204 cannot come in time, only a message
  const slow = await startServer(["--longpoll-window", "60", "--shards", "1"])
  t.after(() => slow.stop())
  const q = "vsn=2.0.0"
  const created = await lp("GET", q, {port: slow.port})
  const path = `/socket/longpoll?${q}&token=${created.token}`
  const send = lines => lp("POST", `${q}&token=${created.token}`, {port: slow.port, body: lines.map(l => JSON.stringify(l)).join("\n"), headers: ndjson})
  const waiting = n => waitFor(async () => {
    const res = await httpRequest(slow.apiPort, "GET", "/metrics")
    return new RegExp(`\nthrong_longpoll_polls_waiting ${n}\n`).test(res.body.toString("utf8"))
  }, 5000, `${n} waiting polls`)

  const parked = lp("GET", `${q}&token=${created.token}`, {port: slow.port})
  await waiting(1)
  assert.deepEqual(await send([joinLine("rooms:lobby")]), {status: 200})
  const res = await withTimeout(parked, 10000, "the parked poll's answer")
  assert.equal(res.status, 200)
  assert.deepEqual(res.messages.map(m => JSON.parse(m)), [["1", "1", "rooms:lobby", "phx_reply", {status: "ok", response: {}}]])

  // a poll whose client goes away is taken back: the next message waits for the next poll
  const gone = await RawHttp.connect(slow.port)
  gone.send(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`)
  await waiting(1)
  gone.close()
  await waiting(0)
  assert.deepEqual(await send([["1", "2", "rooms:lobby", "new:msg", {user: "u", body: "kept"}]]), {status: 200})
  const next = await withTimeout(lp("GET", `${q}&token=${created.token}`, {port: slow.port}), 10000, "the next poll")
  assert.deepEqual(next.messages.map(m => JSON.parse(m)[3]), ["new:msg", "phx_reply"])
})

test("a session ends after 1.5x the window without a poll; its token then gets 410", T, async () => {
  const token = await session()
  assert.deepEqual(await post(token, [joinLine("rooms:lobby")]), {status: 200})
  const before = (await metrics()).throng_longpoll_expired_total
  await untilGone(token)
  assert.ok((await metrics()).throng_longpoll_expired_total > before)
  // gone: no new session is started for a stale token
  assert.deepEqual(await poll(token), {status: 410})
})

test("a session whose waiting messages pass --max-outbound-bytes ends (counted), then 410", T, async () => {
  const token = await session()
  assert.deepEqual(await post(token, [joinLine("rooms:lobby")]), {status: 200})
  const before = (await metrics()).throng_longpoll_overflows_total
  // The broadcasts come from the server API: a socket pushing them would get
  // each back twice (broadcast and the reply's echo), past its own outbound
  // bound when its kernel buffers are small (`throng tune --apply`).
  const body = "x".repeat(20 * 1024)
  for(let i = 0; i < 5; i++){
    const res = await httpRequest(server.apiPort, "POST", "/api/broadcast", {
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({topic: "rooms:lobby", event: "new:msg", payload: {user: "loud", body}}),
    })
    assert.equal(res.status, 200)
  }
  await untilGone(token)
  assert.ok((await metrics()).throng_longpoll_overflows_total > before)
  assert.deepEqual(await poll(token), {status: 410})
})

test("a POSTed line that is not a Phoenix message ends the session: 400, then 410", T, async () => {
  const token = await session()
  assert.deepEqual(await post(token, ["[\"unterminated"]), {status: 400})
  assert.deepEqual(await poll(token), {status: 410})
})

test("v1 session: JSON objects in and out", T, async () => {
  const token = await session("vsn=1.0.0")
  const join = {topic: "rooms:lobby", event: "phx_join", payload: {}, ref: "1"}
  assert.deepEqual(await post(token, [join], "1.0.0"), {status: 200})
  const res = await poll(token, "1.0.0")
  assert.deepEqual(res.messages.map(m => JSON.parse(m)),
    [{event: "phx_reply", payload: {status: "ok", response: {}}, ref: "1", topic: "rooms:lobby"}])
  // a plain JSON body (not ndjson) is one message, as Phoenix reads it
  const push = {topic: "rooms:lobby", event: "new:msg", payload: {user: "v", body: "one"}, ref: "2"}
  assert.deepEqual(await lp("POST", `vsn=1.0.0&token=${token}`, {body: JSON.stringify(push), headers: {"Content-Type": "application/json"}}), {status: 200})
  const events = (await poll(token, "1.0.0")).messages.map(m => JSON.parse(m).event)
  // the broadcast the push made, then its reply (Phoenix's order)
  assert.deepEqual(events, ["new:msg", "phx_reply"])
})

test("a binary push is base64 in a POST, and a binary broadcast base64 in a poll", T, async () => {
  const token = await session()
  assert.deepEqual(await post(token, [joinLine("rooms:lobby")]), {status: 200})
  await poll(token)
  const parts = ["1", "2", "rooms:lobby", "new:msg"].map(s => Buffer.from(s))
  const payload = Buffer.from([1, 2, 3, 0, 255])
  const push = Buffer.concat([Buffer.from([0, ...parts.map(p => p.length)]), ...parts, payload])
  assert.deepEqual(await post(token, [push.toString("base64")]), {status: 200})
  const res = await poll(token)
  const topic = Buffer.from("rooms:lobby"), event = Buffer.from("new:msg")
  const want = Buffer.concat([Buffer.from([2, topic.length, event.length]), topic, event, payload])
  assert.deepEqual(res.messages, [want.toString("base64")])
})

test("requests on one keep-alive connection are answered in order", T, async t => {
  const token = await session()
  const conn = await RawHttp.connect(server.port)
  t.after(() => conn.close())
  const body = JSON.stringify(joinLine("rooms:lobby"))
  const path = `/socket/longpoll?vsn=2.0.0&token=${token}`
  conn.send(
    `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}` +
    `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n` +
    "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
  const first = await conn.response()
  assert.deepEqual(JSON.parse(first.body), {status: 200})
  const second = JSON.parse((await conn.response()).body)
  assert.equal(second.status, 200)
  assert.equal(JSON.parse(second.messages[0])[3], "phx_reply")
  const third = await conn.response()
  assert.equal(third.status, 200)
  assert.match(third.body.toString(), /<html/i)
})

test("HTTP: CORS preflight as Phoenix, a chunked body is refused (411), an oversized one 413", T, async () => {
  const pre = await httpRequest(server.port, "OPTIONS", "/socket/longpoll?vsn=2.0.0",
    {headers: {"Access-Control-Request-Headers": "x-phoenix-authtoken, content-type"}})
  assert.equal(pre.status, 200)
  assert.equal(pre.headers["access-control-allow-origin"], "*")
  assert.equal(pre.headers["access-control-allow-headers"], "x-phoenix-authtoken, content-type")
  assert.equal(pre.headers["access-control-allow-methods"], "get, post, options")
  const chunked = await httpRequest(server.port, "POST", "/socket/longpoll?vsn=2.0.0",
    {headers: {"Transfer-Encoding": "chunked"}})
  assert.equal(chunked.status, 411)
  const big = await httpRequest(server.port, "POST", "/socket/longpoll?vsn=2.0.0",
    {body: "x".repeat(256 * 1024 + 1)})
  assert.equal(big.status, 413)
})

test("sessions counted in /metrics, and requests forwarded between the shards", T, async () => {
  const m = await metrics()
  assert.ok(m.throng_longpoll_sessions >= 1, JSON.stringify(m))
  assert.ok(m.throng_longpoll_forwarded_total > 0, "no request reached another shard than its session's")
  assert.ok(m.throng_messages_in_total >= 100)
})
