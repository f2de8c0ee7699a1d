// The Pusher HTTP API on two `throng serve --redis` nodes on one
// redis-server, with the official `pusher` Node SDK and pusher-js clients:
// a trigger made on either node reaches the subscribers of both, leaving
// out the socket its socket_id names on whichever node that socket is;
// channel queries count both nodes; terminate_connections closes the
// user's sockets on both. Then the bounds on requests that wait on the
// cluster: with Redis stopped (SIGSTOP) a presence query waits, a second
// one past --pusher-max-api-requests gets 503 at once, and the first gets
// 504 at --pusher-api-timeout.
import {test} from "node:test"
import assert from "node:assert/strict"
import {startRedis, startThrong, numsub, waitFor, metrics} from "./helpers.mjs"
import {APP_FLAG, sdk, client, closeAll, until} from "../e2e/pusher_api_helpers.mjs"

const T = {timeout: 90000}
const node = (redis, args = []) =>
  startThrong([...APP_FLAG, "--redis", redis.url, "--shards", "2", "--presence-interval", "50", ...args])

test("two nodes: triggers, socket_id exclusion, channel counts and terminate across nodes", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const a = await node(redis)
  t.after(() => a.stop())
  const b = await node(redis)
  t.after(() => b.stop())
  const clients = []
  t.after(() => closeAll(clients))
  const a1 = await client(a.port, {user: "u1"})
  const b1 = await client(b.port, {user: "u1"})
  const b2 = await client(b.port, {user: "u2"})
  clients.push(a1, b1, b2)
  for(const c of clients){
    await c.subscribe("news")
    await c.subscribe("presence-room")
  }
  await waitFor(async () => await numsub(redis.port, "throng:t:pusher/1/news") === 2, 5000, "both nodes subscribed")
  const onA = sdk(a.port)
  const onB = sdk(b.port)
  // A trigger on node A reaches node B's subscribers, and the other way.
  await onA.trigger("news", "from-a", {n: 1})
  for(const c of clients){ assert.deepEqual(await c.next("news", "from-a"), {n: 1}) }
  await onB.trigger("news", "from-b", {n: 2})
  for(const c of clients){ assert.deepEqual(await c.next("news", "from-b"), {n: 2}) }
  // socket_id of a socket on the other node: left out there, and only there;
  // an event left out would have come before the next one.
  await onA.trigger("news", "not-b1", {}, {socket_id: b1.socketId()})
  await onB.trigger("news", "not-a1", {}, {socket_id: a1.socketId()})
  await onA.trigger("news", "not-b2", {}, {socket_id: b2.socketId()})
  await onA.trigger("news", "last", {})
  for(const [c, name] of [[a1, "a1"], [b1, "b1"], [b2, "b2"]]){
    await c.next("news", "last")
    const got = c.events.filter(e => e.event.startsWith("not-")).map(e => e.event).sort()
    const want = ["not-a1", "not-b1", "not-b2"].filter(e => e !== `not-${name}`)
    assert.deepEqual(got, want, `${name} got every event but the one that leaves it out`)
  }
  // Counts of both nodes, asked of either.
  const json = async r => { assert.equal(r.status, 200); return r.json() }
  for(const api of [onA, onB]){
    const info = await until(async () => {
      const body = await json(await api.get({path: "/channels/presence-room", params: {info: "user_count,subscription_count"}}))
      return body.user_count === 2 && body.subscription_count === 3 ? body : null
    }, 15000, "counts of both nodes")
    assert.deepEqual(info, {occupied: true, user_count: 2, subscription_count: 3})
    const users = await json(await api.get({path: "/channels/presence-room/users"}))
    assert.deepEqual(users.users.map(u => u.id).sort(), ["u1", "u2"])
    assert.deepEqual(await json(await api.get({path: "/channels", params: {filter_by_prefix: "presence-", info: "user_count"}})),
      {channels: {"presence-room": {user_count: 2}}})
  }
  // A channel with subscribers on node B only, asked of node A.
  await b2.subscribe("only-b")
  assert.deepEqual(await json(await onA.get({path: "/channels/only-b", params: {info: "subscription_count"}})),
    {occupied: true, subscription_count: 1})
  // terminate on node A closes u1's sockets on both nodes, not u2's.
  const gone = [a1.closed(), b1.closed()]
  assert.equal((await onA.terminateUserConnections("u1")).status, 200)
  assert.deepEqual(await Promise.all(gone), ["disconnected", "disconnected"])
  assert.equal(b2.pusher.connection.state, "connected")
})

test("bounds: a query waiting on Redis holds one of --pusher-max-api-requests (503 past it), then 504", T, async t => {
  const redis = await startRedis()
  t.after(async () => { redis.proc.kill("SIGCONT"); await redis.stop() })
  const a = await node(redis, ["--pusher-max-api-requests", "1", "--pusher-api-timeout", "1"])
  t.after(() => a.stop())
  const api = sdk(a.port)
  // No subscriber here: the user count is read from Redis, which is stopped.
  redis.proc.kill("SIGSTOP")
  const first = api.get({path: "/channels/presence-elsewhere", params: {info: "user_count"}}).then(r => r.status, e => e.status)
  await waitFor(async () => (await metrics(a.apiPort)).throng_pusher_api_waiting === 1, 10000, "the first query waiting")
  const second = await api.get({path: "/channels"}).then(r => r.status, e => e.status)
  assert.equal(second, 503)
  assert.equal(await first, 504)
  redis.proc.kill("SIGCONT")
  const text = await (await fetch(`http://127.0.0.1:${a.apiPort}/metrics`)).text()
  assert.match(text, /throng_pusher_api_requests_total\{route="channels",status="503"\} 1/)
  assert.match(text, /throng_pusher_api_requests_total\{route="channel",status="504"\} 1/)
  assert.equal((await metrics(a.apiPort)).throng_pusher_api_waiting, 0)
  // Redis back: answered again.
  assert.equal((await api.get({path: "/channels"})).status, 200)
})
