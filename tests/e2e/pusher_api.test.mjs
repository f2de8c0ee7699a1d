// The Pusher HTTP API on the public port, against the real binary: the
// official `pusher` server SDK for Node (trigger, triggerBatch, channel
// queries, terminateUserConnections, sendToUser) with pusher-js clients
// receiving; signed requests refused as Pusher refuses them (a bad
// signature, key or timestamp, a body_md5 that is not the body's, a body
// over --pusher-max-api-body-bytes answered 413 before it is sent, more than
// 100 channels, a batch over 10) and the metrics; the official `pusher`
// Python SDK (3.3.4, in a venv under target/) for the same calls. The bounds on requests
// that wait on the cluster (503, 504) are tests/cluster/pusher_api.test.mjs's.
import {test, after} from "node:test"
import assert from "node:assert/strict"
import {startServer, readMetric} from "./helpers.mjs"
import {APP, APP_FLAG, sdk, client, closeAll, call, signed, rawHead, until} from "./pusher_api_helpers.mjs"
import {runPythonJson} from "../pusher/python.mjs"

const T = {timeout: 60000}
const servers = []
after(async () => { await Promise.all(servers.map(s => s.stop())) })

async function server(args = []){
  const s = await startServer([...APP_FLAG, "--presence-interval", "50", ...args])
  servers.push(s)
  return s
}

test("trigger and triggerBatch reach pusher-js subscribers; socket_id leaves its socket out", T, async t => {
  const s = await server(["--shards", "4"])
  const clients = []
  t.after(() => closeAll(clients))
  const a = await client(s.port)
  const b = await client(s.port)
  clients.push(a, b)
  await a.subscribe("news")
  await b.subscribe("news")
  await b.subscribe("private-room")
  const api = sdk(s.port)
  const res = await api.trigger("news", "headline", {title: "one", n: 1})
  assert.equal(res.status, 200)
  assert.deepEqual(await res.json(), {})
  assert.deepEqual(await a.next("news", "headline"), {title: "one", n: 1})
  assert.deepEqual(await b.next("news", "headline"), {title: "one", n: 1})
  // Two channels at once, a string as data.
  await api.trigger(["news", "private-room"], "plain", "just text")
  assert.equal(await b.next("private-room", "plain"), "just text")
  assert.equal(await a.next("news", "plain"), "just text")
  // socket_id: a's own event does not come back to it; the next one does,
  // so an event left out would have come before it.
  await api.trigger("news", "mine", {from: "a"}, {socket_id: a.socketId()})
  assert.deepEqual(await b.next("news", "mine"), {from: "a"})
  await api.trigger("news", "after", {n: 2})
  await a.next("news", "after")
  assert.deepEqual(a.events.filter(e => e.event === "mine"), [], "a did not get its own event")
  // A batch: each event to its channel, in order.
  // Every socket left out in turn, wherever it is (four shards: the same
  // shard as the request's connection, or another).
  const spread = []
  for(let i = 0; i < 6; i++){ spread.push(await client(s.port)) }
  clients.push(...spread)
  for(const c of spread){ await c.subscribe("spread") }
  for(const [i, c] of spread.entries()){
    await api.trigger("spread", `own-${i}`, {i}, {socket_id: c.socketId()})
  }
  await api.trigger("spread", "all", {})
  for(const [i, c] of spread.entries()){
    await c.next("spread", "all")
    const got = c.events.filter(e => e.event.startsWith("own-")).map(e => e.event).sort()
    const want = spread.map((_, j) => `own-${j}`).filter(e => e !== `own-${i}`).sort()
    assert.deepEqual(got, want, `client ${i} got every event but its own`)
  }
  const batch = await api.triggerBatch([
    {channel: "news", name: "b1", data: JSON.stringify({i: 1})},
    {channel: "private-room", name: "b2", data: JSON.stringify({i: 2}), socket_id: a.socketId()},
  ])
  assert.equal(batch.status, 200)
  assert.deepEqual(await a.next("news", "b1"), {i: 1})
  assert.deepEqual(await b.next("private-room", "b2"), {i: 2})
})

test("channel queries: occupied, subscription and user counts, users; trigger info", T, async t => {
  const s = await server()
  const clients = []
  t.after(() => closeAll(clients))
  const alice = await client(s.port, {user: "alice"})
  const alice2 = await client(s.port, {user: "alice"})
  const bob = await client(s.port, {user: "bob"})
  clients.push(alice, alice2, bob)
  for(const c of clients){ await c.subscribe("presence-room") }
  await alice.subscribe("news")
  const api = sdk(s.port)
  const json = async r => { assert.equal(r.status, 200); return r.json() }
  // Presence is counted as of the last presence flush: await it.
  const info = await until(async () => {
    const body = await json(await api.get({path: "/channels/presence-room", params: {info: "user_count,subscription_count"}}))
    return body.user_count === 2 ? body : null
  }, 10000, "user_count 2")
  assert.deepEqual(info, {occupied: true, user_count: 2, subscription_count: 3})
  assert.deepEqual(await json(await api.get({path: "/channels/news", params: {info: "subscription_count"}})),
    {occupied: true, subscription_count: 1})
  assert.deepEqual(await json(await api.get({path: "/channels/empty"})), {occupied: false})
  const users = await json(await api.get({path: "/channels/presence-room/users"}))
  assert.deepEqual(users.users.map(u => u.id).sort(), ["alice", "bob"])
  assert.deepEqual(await json(await api.get({path: "/channels"})), {channels: {"news": {}, "presence-room": {}}})
  assert.deepEqual(await json(await api.get({path: "/channels", params: {filter_by_prefix: "presence-", info: "user_count"}})),
    {channels: {"presence-room": {user_count: 2}}})
  // A trigger that asks for info gets the counts after it.
  const r = await api.trigger(["news", "presence-room"], "e", "x", {info: "subscription_count,user_count"})
  assert.deepEqual(await json(r), {channels: {"news": {subscription_count: 1}, "presence-room": {subscription_count: 3, user_count: 2}}})
  const rb = await api.triggerBatch([
    {channel: "news", name: "e", data: "x", info: "subscription_count"},
    {channel: "news", name: "e", data: "x"},
  ])
  assert.deepEqual(await json(rb), {batch: [{subscription_count: 1}, {}]})
  // Pusher's own refusals of a query.
  await assert.rejects(api.get({path: "/channels/news/users"}), e => e.status === 400 && /presence/.test(e.body))
  await assert.rejects(api.get({path: "/channels", params: {info: "user_count"}}), e => e.status === 400)
})

test("terminateUserConnections closes the user's sockets with 4009; sendToUser reaches the user", T, async t => {
  const s = await server()
  const clients = []
  t.after(() => closeAll(clients))
  const u1 = await client(s.port, {user: "u1"})
  const u1b = await client(s.port, {user: "u1"})
  const u2 = await client(s.port, {user: "u2"})
  clients.push(u1, u1b, u2)
  const api = sdk(s.port)
  await api.sendToUser("u1", "note", {hello: "u1"})
  assert.deepEqual(await u1.next(null, "note"), {hello: "u1"})
  assert.deepEqual(await u1b.next(null, "note"), {hello: "u1"})
  // The route the SDKs may call as well.
  const direct = await call(s.port, "POST", `/apps/${APP.id}/users/u2/events`, {body: JSON.stringify({name: "note", data: "{\"n\":2}"})})
  assert.equal(direct.status, 200)
  assert.deepEqual(await u2.next(null, "note"), {n: 2})
  const codes = [u1, u1b].map(c => new Promise(resolve => c.pusher.connection.bind("error", e => resolve(e))))
  const closed = [u1.closed(), u1b.closed()]
  const res = await api.terminateUserConnections("u1")
  assert.equal(res.status, 200)
  // pusher-js stays disconnected after 4009 (it does not reconnect).
  assert.deepEqual(await Promise.all(closed), ["disconnected", "disconnected"])
  for(const e of await Promise.all(codes)){ assert.equal(e.data?.code ?? e.error?.data?.code, 4009, JSON.stringify(e)) }
  assert.equal(u2.pusher.connection.state, "connected", "another user's socket stays")
  assert.ok(await readMetric(s.apiUrl, "throng_user_disconnects_total") >= 2)
})

test("refusals: signature, key, timestamp, body_md5, app id, route and method", T, async () => {
  const s = await server()
  const path = `/apps/${APP.id}/events`
  const body = JSON.stringify({name: "e", channel: "news", data: "x"})
  const ok = await call(s.port, "POST", path, {body})
  assert.deepEqual(ok, {status: 200, body: {}})
  const bad = await call(s.port, "POST", path, {body, secret: "another-secret-of-20-bytes"})
  assert.equal(bad.status, 401)
  assert.match(bad.body.error, /^Invalid signature: you should have sent HmacSHA256Hex\("POST\\n\/apps\/1\/events\\nauth_key=app-key/)
  const key = await call(s.port, "POST", path, {body, key: "nope"})
  assert.deepEqual([key.status, key.body.error.split(":")[0]], [401, "Unknown auth_key"])
  const old = await call(s.port, "POST", path, {body, timestamp: Math.floor(Date.now() / 1000) - 601})
  assert.equal(old.status, 401)
  assert.match(old.body.error, /^Timestamp expired: Given timestamp \(.*\) not within 600s of server time/)
  const md5 = await call(s.port, "POST", path, {body, md5Of: body + " "})
  assert.deepEqual([md5.status, md5.body.error.split(":")[0]], [401, "Invalid body_md5"])
  const app = await call(s.port, "POST", "/apps/2/events", {body})
  assert.equal(app.status, 404)
  assert.match(app.body.error, /^The app 2 could not be found/)
  assert.equal((await call(s.port, "POST", `/apps/${APP.id}/nope`, {body})).status, 404)
  assert.equal((await call(s.port, "GET", path)).status, 405)
  assert.ok(await readMetric(s.apiUrl, "throng_pusher_api_requests_total", '{route="events",status="401"}') >= 4)
  assert.ok(await readMetric(s.apiUrl, "throng_pusher_api_requests_total", '{route="events",status="200"}') >= 1)
})

test("bounds: a body over the limit gets 413 before it is sent; 100 channels, 10 events a batch, data size", T, async () => {
  const s = await server(["--pusher-max-api-body-bytes", "65536"])
  const path = `/apps/${APP.id}/events`
  const body = JSON.stringify({name: "e", channel: "news", data: "x"})
  // A head that says 10 MB, and no body: answered at once.
  const target = signed("POST", path, {body})
  const head = `POST ${target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${10 * 1024 * 1024}\r\n\r\n`
  const answer = await rawHead(s.port, head)
  assert.match(answer, /^HTTP\/1.1 413 /)
  assert.match(answer, /over this server's limit of 65536 \(--pusher-max-api-body-bytes\)/)
  // A bad signature is refused before the body too.
  const unsigned = `POST ${path}?auth_key=${APP.key} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n`
  assert.match(await rawHead(s.port, unsigned), /^HTTP\/1.1 401 /)
  const api = sdk(s.port)
  const many = Array.from({length: 101}, (_, i) => `c${i}`)
  const channels = await call(s.port, "POST", path, {body: JSON.stringify({name: "e", channels: many, data: "x"})})
  assert.equal(channels.status, 400)
  assert.match(channels.body.error, /101 channels, over the limit of 100/)
  const hundred = await call(s.port, "POST", path, {body: JSON.stringify({name: "e", channels: many.slice(0, 100), data: "x"})})
  assert.equal(hundred.status, 200)
  const events = Array.from({length: 11}, () => ({channel: "news", name: "e", data: "x"}))
  await assert.rejects(api.triggerBatch(events), e => e.status === 400 && /11 events in the batch, over the limit of 10/.test(e.body))
  assert.equal((await api.triggerBatch(events.slice(0, 10))).status, 200)
  const big = await call(s.port, "POST", path, {body: JSON.stringify({name: "e", channel: "news", data: "x".repeat(10241)})})
  assert.equal(big.status, 413)
  assert.match(big.body.error, /over the app's limit of 10240/)
  assert.equal(await readMetric(s.apiUrl, "throng_pusher_api_requests_total", '{route="events",status="413"}'), 2)
})

test("the Python SDK: trigger, trigger_batch, channel queries, send_to_user, terminate_user_connections", {timeout: 300000}, async t => {
  const s = await server()
  const clients = []
  t.after(() => closeAll(clients))
  const a = await client(s.port, {user: "p1"})
  const b = await client(s.port, {user: "p2"})
  clients.push(a, b)
  for(const c of clients){ await c.subscribe("presence-py") }
  await a.subscribe("news")
  const py = (...calls) => runPythonJson("sdk_calls.py",
    [String(s.port), APP.id, APP.key, APP.secret, ...calls.map(c => JSON.stringify(c))], 240000)
  // Presence is counted as of the last presence flush: await it.
  await until(async () => (await py(["channel_info", "presence-py", ["user_count"]]))[0].ok?.user_count === 2,
    60000, "user_count 2")
  const [excluded, both, batch, channels, channel, users, toUser] = await py(
    ["trigger", "presence-py", "py-mine", {n: 1}, a.socketId()],
    ["trigger", ["news", "presence-py"], "py-event", {n: 2}],
    ["trigger_batch", [{channel: "news", name: "py-batch", data: {n: 3}}]],
    ["channels_info", "presence-", ["user_count"]],
    ["channel_info", "presence-py", ["user_count", "subscription_count"]],
    ["users_info", "presence-py"],
    ["send_to_user", "p2", "py-note", {n: 4}],
  )
  for(const r of [excluded, both, batch, toUser]){ assert.deepEqual(r, {ok: {}}) }
  assert.deepEqual(channels, {ok: {channels: {"presence-py": {user_count: 2}}}})
  assert.deepEqual(channel, {ok: {occupied: true, user_count: 2, subscription_count: 2}})
  assert.deepEqual(users.ok.users.map(u => u.id).sort(), ["p1", "p2"])
  assert.deepEqual(await b.next("presence-py", "py-mine"), {n: 1})
  assert.deepEqual(await a.next("presence-py", "py-event"), {n: 2})
  assert.deepEqual(a.events.filter(e => e.event === "py-mine"), [], "p1 did not get its own event")
  assert.deepEqual(await a.next("news", "py-batch"), {n: 3})
  assert.deepEqual(await b.next(null, "py-note"), {n: 4})
  // The SDK's own check, and terminate (without /apps/ID, as this SDK sends it).
  const gone = a.closed()
  const [tooMany, terminated] = await py(
    ["trigger", Array.from({length: 101}, (_, i) => `c${i}`), "e", "x"],
    ["terminate_user_connections", "p1"],
  )
  assert.equal(tooMany.error, "ValueError", "the SDK checks 100 channels itself")
  assert.deepEqual(terminated, {ok: {}})
  assert.equal(await gone, "disconnected")
  assert.equal(b.pusher.connection.state, "connected")
  // A refused signature, as the SDK reports it.
  const bad = await runPythonJson("sdk_calls.py", [String(s.port), APP.id, APP.key, "another-secret-of-20-bytes",
    JSON.stringify(["trigger", "news", "e", "x"])])
  assert.equal(bad[0].error, "PusherBadAuth")
  assert.match(bad[0].message, /^\{"error":"Invalid signature/)
})
