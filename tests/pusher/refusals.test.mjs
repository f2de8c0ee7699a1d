// Every refusal a Pusher client can meet, with its exact frame and close
// code, against the real binary: unknown key (4001 then a close), an app
// over max_connections (4004), bad URLs (4005-4008), failed subscriptions
// (AuthError 401, a channel_data that is not JSON, a 100 KB auth), client
// events refused (off, public channel, too big: 4300; rate: 4301), a
// refused sign-in (4009), bad input (oversized, not JSON, unknown events,
// binary, 10,000 subscribes); the socket (or the server) stays healthy
// and a well-behaved pusher-js client alongside keeps being served. Then
// the activity timeout (pusher:ping, then 4201) and a drain (4200).
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {startServer} from "../e2e/helpers.mjs"
import {waitFor, sleep} from "../cluster/helpers.mjs"
import {
  KEY, SECRET, APP_ID, sdk, startPusher, client, connected, subscribed, once, record, disconnectAll,
  rawSocket, rawConnected, subscribeRaw,
} from "./channels_helpers.mjs"

let server
let signer
const clients = []
// A pusher-js pair that keeps talking while the others misbehave.
let healthy

before(async () => {
  server = await startPusher()
  signer = sdk(server.port)
  const a = client(server.port, {user: {user_id: "ok-a"}})
  const b = client(server.port, {user: {user_id: "ok-b"}})
  clients.push(a, b)
  await Promise.all([connected(a), connected(b)])
  const ca = (await subscribed(a, "private-healthy")).ch
  const cb = (await subscribed(b, "private-healthy")).ch
  healthy = {
    n: 0,
    /** A client event from a to b, received. */
    async check(){
      const n = ++healthy.n
      const got = once(cb, "client-ping", 5000, (d) => d.n === n)
      ca.trigger("client-ping", {n})
      await got
    },
  }
}, {timeout: 20000})

after(async () => {
  disconnectAll(clients)
  await server?.stop()
}, {timeout: 20000})

/** The pusher:error frame a socket gets next, and its close if it closes. */
async function refusedAtConnect(port, opts){
  const sock = await rawSocket(port, opts)
  const err = await sock.event("pusher:error")
  const closed = await sock.closed
  return {err: err.data, closed}
}

test("an unknown app key gets pusher:error 4001, then a close with 4001", {timeout: 10000}, async () => {
  const {err, closed} = await refusedAtConnect(server.port, {key: "nope"})
  assert.equal(err.code, 4001)
  assert.match(err.message, /App key nope not in this cluster/)
  assert.equal(closed.code, 4001)
  await healthy.check()
})

test("bad URLs get 4005 to 4008 and a close", {timeout: 20000}, async () => {
  const cases = [
    [`/app/${KEY}/extra?protocol=7`, 4005],
    [`/app/${KEY}?protocol=seven`, 4006],
    [`/app/${KEY}?protocol=8`, 4007],
    [`/app/${KEY}?client=js`, 4008],
  ]
  for(const [target, code] of cases){
    const {err, closed} = await refusedAtConnect(server.port, {path: target})
    assert.equal(err.code, code, target)
    assert.equal(closed.code, code, target)
  }
  await healthy.check()
})

test("an app over its max_connections gets 4004; pusher-js stops retrying", {timeout: 20000}, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "throng-pusher-"))
  const file = path.join(dir, "throng.toml")
  writeFileSync(file, `[[pusher.apps]]\nid = "${APP_ID}"\nkey = "${KEY}"\nsecret = "${SECRET}"\nmax_connections = 1\n`)
  const s = await startServer(["--config", file])
  try {
    const first = await rawConnected(s.port)
    const {err, closed} = await refusedAtConnect(s.port)
    assert.equal(err.code, 4004)
    assert.match(err.message, /max_connections \(1\)/)
    assert.equal(closed.code, 4004)
    // pusher-js reads 4004 as "do not reconnect".
    const p = client(s.port)
    const failed = new Promise((resolve) => p.connection.bind("state_change", (st) => {
      if(st.current === "disconnected" || st.current === "failed"){ resolve(st.current) }
    }))
    await failed
    await sleep(1500)
    assert.notEqual(p.connection.state, "connected")
    p.disconnect()
    first.close()
  } finally {
    await s.stop()
  }
})

test("failed subscriptions: AuthError 401, a channel_data that is not JSON, a long auth; the socket stays", {timeout: 20000}, async () => {
  const sock = await rawConnected(server.port)
  sock.send({event: "pusher:subscribe", data: {channel: "private-x", auth: `${KEY}:${"0".repeat(64)}`}})
  let e = await sock.event("pusher:subscription_error")
  assert.equal(e.data.type, "AuthError")
  assert.equal(e.data.status, 401)
  assert.equal(e.channel, "private-x")
  assert.match(e.data.error, /invalid signature/)
  // Within the app's frame bound (max_event_bytes and 2 KB): AuthError.
  sock.send({event: "pusher:subscribe", data: {channel: "private-x", auth: "x".repeat(11 * 1024)}})
  e = await sock.event("pusher:subscription_error")
  assert.equal(e.data.status, 401)
  // Past it: the frame is not read, pusher:error 4300.
  sock.send({event: "pusher:subscribe", data: {channel: "private-x", auth: "x".repeat(50 * 1024)}})
  e = await sock.event("pusher:error")
  assert.equal(e.data.code, 4300)
  // Signed, but not JSON: Pusher's presence needs user_id.
  const data = "not json"
  const sig = signer.authorizeChannel(sock.socketId, "presence-x", {user_id: "1"})
  const auth = `${KEY}:${(await import("node:crypto")).createHmac("sha256", SECRET).update(`${sock.socketId}:presence-x:${data}`).digest("hex")}`
  assert.ok(sig.auth.startsWith(`${KEY}:`))
  sock.send({event: "pusher:subscribe", data: {channel: "presence-x", auth, channel_data: data}})
  e = await sock.event("pusher:subscription_error")
  assert.equal(e.data.status, 400)
  // An invalid name.
  sock.send({event: "pusher:subscribe", data: {channel: "bad name!"}})
  e = await sock.event("pusher:subscription_error")
  assert.equal(e.data.type, "InvalidChannel")
  assert.equal(e.data.status, 400)
  // Still served.
  sock.send({event: "pusher:ping", data: {}})
  await sock.event("pusher:pong")
  subscribeRaw(sock, signer, "private-x")
  await sock.event("pusher_internal:subscription_succeeded")
  sock.close()
  await healthy.check()
})

test("a 100 KB auth, over the WebSocket message bound (--max-message-bytes, 64 KiB), closes that socket with 1009; the server serves on", {timeout: 20000}, async () => {
  const sock = await rawConnected(server.port)
  sock.send({event: "pusher:subscribe", data: {channel: "private-x", auth: "x".repeat(100 * 1024)}})
  const closed = await sock.closed
  assert.equal(closed.code, 1009)
  // pusher-js reconnects after a 1009 (not a 4xxx "stop" code).
  await healthy.check()
  const again = await rawConnected(server.port)
  again.send({event: "pusher:ping", data: {}})
  await again.event("pusher:pong")
  again.close()
})

test("client events refused: public channel, not subscribed, too big (4300), over the rate (4301)", {timeout: 20000}, async () => {
  const sock = await rawConnected(server.port)
  sock.send({event: "pusher:subscribe", data: {channel: "open"}})
  await sock.event("pusher_internal:subscription_succeeded")
  sock.send({event: "client-x", channel: "open", data: {}})
  let e = await sock.event("pusher:error")
  assert.equal(e.data.code, 4300)
  assert.match(e.data.message, /private- and presence- channels only/)
  sock.send({event: "client-x", channel: "private-elsewhere", data: {}})
  e = await sock.event("pusher:error")
  assert.match(e.data.message, /not subscribed/)
  subscribeRaw(sock, signer, "private-big")
  await sock.event("pusher_internal:subscription_succeeded")
  sock.send({event: "client-x", channel: "private-big", data: "x".repeat(10 * 1024 + 1)})
  e = await sock.event("pusher:error")
  assert.equal(e.data.code, 4300)
  assert.match(e.data.message, /10241 bytes, over this app's 10240 \(max_event_bytes\)/)
  for(let i = 0; i < 30; i++){
    sock.send({event: "client-x", channel: "private-big", data: {i}})
  }
  e = await sock.event("pusher:error")
  assert.equal(e.data.code, 4301)
  assert.match(e.data.message, /over 10 client events a second/)
  sock.send({event: "pusher:ping", data: {}})
  await sock.event("pusher:pong")
  sock.close()
  await healthy.check()
})

test("client events off for the app (client_events = false): pusher:error 4300 naming the setting", {timeout: 20000}, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "throng-pusher-"))
  const file = path.join(dir, "throng.toml")
  writeFileSync(file, `[[pusher.apps]]\nid = "${APP_ID}"\nkey = "${KEY}"\nsecret = "${SECRET}"\nclient_events = false\n`)
  const s = await startServer(["--config", file])
  try {
    const sock = await rawConnected(s.port)
    subscribeRaw(sock, sdk(s.port), "private-quiet")
    await sock.event("pusher_internal:subscription_succeeded")
    sock.send({event: "client-x", channel: "private-quiet", data: {}})
    const e = await sock.event("pusher:error")
    assert.equal(e.data.code, 4300)
    assert.match(e.data.message, /client_events = false/)
    sock.close()
  } finally {
    await s.stop()
  }
})

test("two apps on one server: each socket keeps its own app's secret and settings", {timeout: 20000}, async () => {
  // The first app has client events off, the second on: a socket of the
  // second (app index 1, kept apart from the first's sockets) signs with
  // its own secret and relays client events; one of the first is refused.
  const other = {appId: "2", key: "other-key", secret: "fedcba9876543210fedc"}
  const dir = mkdtempSync(path.join(tmpdir(), "throng-pusher-"))
  const file = path.join(dir, "throng.toml")
  writeFileSync(file, `[[pusher.apps]]\nid = "${APP_ID}"\nkey = "${KEY}"\nsecret = "${SECRET}"\nclient_events = false\n` +
    `[[pusher.apps]]\nid = "${other.appId}"\nkey = "${other.key}"\nsecret = "${other.secret}"\n`)
  const s = await startServer(["--config", file])
  try {
    const first = await rawConnected(s.port)
    const a = await rawConnected(s.port, {key: other.key})
    const b = await rawConnected(s.port, {key: other.key})
    for(const sock of [a, b]){
      subscribeRaw(sock, sdk(s.port, other), "private-two")
      await sock.event("pusher_internal:subscription_succeeded")
    }
    // Signed with the first app's secret: refused on the second's socket.
    const c = await rawConnected(s.port, {key: other.key})
    subscribeRaw(c, sdk(s.port), "private-two")
    const refused = await c.event("pusher:subscription_error")
    assert.equal(refused.data.status, 401)
    a.send({event: "client-x", channel: "private-two", data: {n: 1}})
    const got = await b.event("client-x")
    assert.deepEqual(JSON.parse(got.data), {n: 1})
    subscribeRaw(first, sdk(s.port), "private-two")
    await first.event("pusher_internal:subscription_succeeded")
    first.send({event: "client-x", channel: "private-two", data: {}})
    const e = await first.event("pusher:error")
    assert.equal(e.data.code, 4300)
    assert.match(e.data.message, /client_events = false/)
    for(const sock of [first, a, b, c]){ sock.close() }
  } finally {
    await s.stop()
  }
})

test("a refused sign-in is pusher:error 4009 on a socket that stays", {timeout: 10000}, async () => {
  const sock = await rawConnected(server.port)
  sock.send({event: "pusher:signin", data: {auth: `${KEY}:${"1".repeat(64)}`, user_data: JSON.stringify({id: "u"})}})
  let e = await sock.event("pusher:error")
  assert.equal(e.data.code, 4009)
  sock.send({event: "pusher:signin", data: {auth: "x", user_data: "not json"}})
  e = await sock.event("pusher:error")
  assert.equal(e.data.code, 4009)
  const good = signer.authenticateUser(sock.socketId, {id: "u"})
  sock.send({event: "pusher:signin", data: good})
  await sock.event("pusher:signin_success")
  sock.close()
  await healthy.check()
})

test("bad input gets pusher:error and the socket stays: oversized, not JSON, unknown events, binary", {timeout: 20000}, async () => {
  const sock = await rawConnected(server.port)
  const cases = [
    "x".repeat(20 * 1024),
    "not json",
    JSON.stringify({event: "pusher:nope", data: {}}),
    JSON.stringify({event: "something", data: {}}),
    JSON.stringify({data: {}}),
    JSON.stringify([1, 2]),
  ]
  for(const text of cases){
    sock.send(text)
    const e = await sock.event("pusher:error")
    assert.equal(e.data.code, 4300, text.slice(0, 40))
  }
  sock.ws.send(Buffer.from([1, 2, 3]), {binary: true})
  const e = await sock.event("pusher:error")
  assert.match(e.data.message, /binary messages/)
  sock.send({event: "pusher:ping", data: {}})
  await sock.event("pusher:pong")
  assert.equal(sock.ws.readyState, 1, "still open")
  sock.close()
  await healthy.check()
})

test("10,000 subscribes on one socket: 100 succeed, the rest get 429, the socket and the server stay healthy", {timeout: 60000}, async () => {
  const sock = await rawConnected(server.port)
  let ok = 0
  let refused = 0
  for(let i = 0; i < 10000; i++){
    sock.send({event: "pusher:subscribe", data: {channel: `many-${i}`}})
    if(i % 500 === 499){
      // Each 500, their answers (the last one's is many-9999's).
      await sock.next((f) => f.channel === `many-${i}`, 20000, `the answer to subscribe ${i}`)
    }
  }
  for(const f of sock.frames){
    if(f.event === "pusher_internal:subscription_succeeded"){ ok++ }
    if(f.event === "pusher:subscription_error"){
      refused++
      assert.equal(f.data.status, 429)
    }
  }
  assert.equal(ok, 100, "--max-channels-per-socket")
  assert.equal(refused, 9900)
  sock.send({event: "pusher:ping", data: {}})
  await sock.event("pusher:pong")
  sock.close()
  await healthy.check()
})

test("the activity timeout: a silent socket gets pusher:ping, then is closed with 4201; pusher-js stays", {timeout: 30000}, async () => {
  const s = await startPusher(["--pusher-activity-timeout", "1"])
  try {
    const p = client(s.port)
    await connected(p)
    const silent = await rawConnected(s.port)
    const est = JSON.parse(silent.frames[0].data)
    assert.equal(est.activity_timeout, 1)
    await silent.event("pusher:ping", 5000)
    const closed = await silent.closed
    assert.equal(closed.code, 4201)
    assert.match(closed.reason, /Pong reply not received/)
    // pusher-js answers the server's pings (and pings itself): still on.
    await sleep(1500)
    assert.equal(p.connection.state, "connected")
    const answering = await rawConnected(s.port)
    await answering.event("pusher:ping", 5000)
    answering.send({event: "pusher:pong", data: {}})
    await answering.event("pusher:ping", 5000)
    assert.equal(answering.ws.readyState, 1, "a socket that answers stays")
    answering.close()
    p.disconnect()
  } finally {
    await s.stop()
  }
})

test("a drain closes Pusher sockets with 4200 (reconnect at once)", {timeout: 30000}, async () => {
  const s = await startPusher()
  const sock = await rawConnected(s.port)
  const p = client(s.port)
  await connected(p)
  const gone = new Promise((resolve) => p.connection.bind("state_change", (st) => { if(st.current !== "connected"){ resolve(st.current) } }))
  s.proc.kill("SIGTERM")
  const closed = await sock.closed
  assert.equal(closed.code, 4200)
  // pusher-js saw it go and tries again (4200: at once), not "failed".
  assert.notEqual(await gone, "failed")
  p.disconnect()
  await s.stop()
})
