// The server API across a Redis cluster: a broadcast made through one node's API
// reaches sockets on both nodes; /api/topics counts both; a disconnect (with revoke)
// closes every socket of the user on both nodes with 1001 and their reconnects are
// refused on both, and on a node started after the revocation (kept in Redis);
// with --workers each worker serves its own API port.
import {test} from "node:test"
import assert from "node:assert/strict"
import {randomBytes} from "node:crypto"
import {startRedis, startThrong, waitFor, redisCommand} from "./helpers.mjs"
import {connectPhoenix, closePhoenix, joinResult, deferred, withTimeout, RawHttp, handshakeRequest} from "../e2e/helpers.mjs"
import {phoenixToken} from "../e2e/tokens.mjs"

const T = {timeout: 45000}
const SECRET = "cluster-secret-key-base-cluster-secret-key-base-cluster-secret-key"
const KEY = "cluster-api-key-0123456789"
const AUTH = ["--auth", "phoenix_token", "--auth-secret-key-base", SECRET, "--api-key", KEY]
const token = (user, signedAtMs = Date.now() - 1000) => phoenixToken(SECRET, "user socket", user, {signedAtMs})

function api(node, method, route, body){
  return fetch(`http://127.0.0.1:${node.apiPort}${route}`, {
    method, headers: {"x-api-key": KEY, "content-type": "application/json"}, body: body && JSON.stringify(body),
  })
}

/** The status of a WebSocket upgrade to `node` with `tok` (403: refused before the upgrade). */
async function upgradeStatus(node, tok){
  const conn = await RawHttp.connect(node.port)
  try {
    const path = `/socket/websocket?vsn=2.0.0&token=${encodeURIComponent(tok)}`
    conn.send(handshakeRequest({port: node.port, path, key: randomBytes(16).toString("base64")}))
    return (await conn.response({head: true})).status
  } finally {
    conn.close()
  }
}

/** A phoenix.js socket of `user` joined to rooms:lobby, recording `announce` events and close codes. */
async function member(t, node, user){
  const socket = await connectPhoenix(node.wsUrl, "2.0.0", {params: {token: token(user)}, reconnectAfterMs: () => 50})
  t.after(() => closePhoenix(socket))
  const m = {socket, announces: [], closeCodes: [], refusedReconnects: 0}
  socket.onClose(e => m.closeCodes.push(e.code))
  socket.onError(() => { if(m.closeCodes.length > 0){ m.refusedReconnects++ } })
  m.channel = socket.channel("rooms:lobby", {user})
  m.channel.on("announce", p => m.announces.push(p.n))
  assert.equal((await joinResult(m.channel)).status, "ok")
  return m
}

test("API broadcast and topics span both nodes; disconnect closes the user's sockets on both, and revoke refuses their reconnects", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const a = await startThrong(["--redis", redis.url, "--shards", "2", ...AUTH])
  t.after(() => a.stop())
  const b = await startThrong(["--redis", redis.url, "--shards", "2", ...AUTH])
  t.after(() => b.stop())
  assert.ok(a.apiPort && b.apiPort && a.apiPort !== b.apiPort)

  const aliceA = await member(t, a, "alice")
  const aliceB = await member(t, b, "alice")
  const bobB = await member(t, b, "bob")
  const all = [aliceA, aliceB, bobB]

  // B subscribes rooms:lobby in Redis on its first join; wait until A's broadcast can reach it.
  let n = 0
  await waitFor(async () => {
    n++
    const res = await api(a, "POST", "/api/broadcast", {topic: "rooms:lobby", event: "announce", payload: {n}})
    assert.equal(res.status, 200)
    // Any broadcast sent so far, not the one just sent: the API answers
    // once the broadcast is queued for Redis, so this one may still be on
    // its way to B (checking for it alone failed whenever B's copy lost the
    // race with the API's answer, every round: a CI run timed out here).
    return all.every(m => m.announces.length > 0)
  }, 10000, "an API broadcast through A on every socket of A and B", 200).catch(e => {
    // Which socket missed it, and in what state (a CI run once timed out here).
    const seen = ["alice on A", "alice on B", "bob on B"].map((who, i) => ({
      who, last: all[i].announces.slice(-3), count: all[i].announces.length,
      closes: all[i].closeCodes, socket: all[i].socket.connectionState(), channel: all[i].channel.state,
    }))
    throw new Error(`${e.message} (${n} sent): ${JSON.stringify(seen)}`)
  })

  const topics = await (await api(b, "GET", "/api/topics")).json()
  assert.equal(topics.nodes, 2, JSON.stringify(topics))
  assert.equal(topics.topics["rooms:lobby"], 3)
  const stats = await (await api(a, "GET", "/api/stats")).json()
  assert.equal(stats.cluster.nodes, 2)
  assert.equal(stats.cluster.websockets, 3)
  assert.equal(stats.cluster.users, 3, "alice on A, alice and bob on B")

  const before = Date.now()
  const res = await api(a, "POST", "/api/disconnect", {user: "alice", revoke: true})
  assert.equal(res.status, 200)
  const revokedAt = Date.now()
  await waitFor(() => aliceA.closeCodes.length > 0 && aliceB.closeCodes.length > 0, 5000, "alice's sockets closed on A and B")
  assert.deepEqual([aliceA.closeCodes[0], aliceB.closeCodes[0]], [1001, 1001])
  // Both reconnect within 50 ms with the old token, and both nodes refuse it.
  await waitFor(() => aliceA.refusedReconnects >= 2 && aliceB.refusedReconnects >= 2, 5000, "alice's reconnects refused on both nodes")
  assert.deepEqual(bobB.closeCodes, [], "bob keeps his socket")
  // Every node applies the revoke skew (2 s by default) to the revocation
  // it heard over Redis: a token signed at the revocation is refused on B
  // too, and one signed 3 s after it (a user who logged in again) connects.
  assert.equal(await upgradeStatus(b, token("alice", before)), 403, "signed at the revocation, on B")
  const fresh = await connectPhoenix(b.wsUrl, "2.0.0", {params: {token: token("alice", revokedAt + 3000)}})
  await closePhoenix(fresh)

  // The revocation is kept in Redis with its expiry (a day by default) ...
  const ttl = await redisCommand(redis.port, ["PTTL", "throng:k:revoke:alice"])
  const ms = Number(ttl.match(/^:(-?\d+)/)?.[1])
  assert.ok(ms > 86_000_000 && ms <= 86_400_000, `PTTL of the kept revocation: ${JSON.stringify(ttl)}`)
  // ... so a node started after it refuses the old token from its first connect, and
  // takes a token signed after it.
  const c = await startThrong(["--redis", redis.url, "--shards", "1", ...AUTH])
  t.after(() => c.stop())
  assert.equal(await upgradeStatus(c, token("alice", before - 1000)), 403, "the revoked token on a node started later")
  assert.equal(await upgradeStatus(c, token("alice", before)), 403, "a token signed at the revocation, on a node started later")
  assert.equal(await upgradeStatus(c, token("bob")), 101, "another user's token on that node")
  assert.equal(await upgradeStatus(c, token("alice", revokedAt + 3000)), 101, "a token signed 3 s after the revocation")
})

test("--workers: each worker has its own API port, and any of them answers for the cluster", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const group = await startThrong(["--workers", "2", "--redis", redis.url, "--shards", "1", "--api-key", KEY])
  t.after(() => group.stop())
  const apis = group.lines.map(l => l.match(/^worker (\d+) pid \d+ api 127\.0\.0\.1:(\d+)$/)).filter(Boolean)
  assert.equal(apis.length, 2, group.lines.join("\n"))
  assert.notEqual(apis[0][2], apis[1][2])
  assert.equal(group.apiPort, Number(apis.find(m => m[1] === "0")[2]), "`api at` is worker 0's")
  // Sockets land on either worker; the topic count from one worker's API covers both.
  const sockets = []
  t.after(() => Promise.all(sockets.map(s => closePhoenix(s))))
  for(let i = 0; i < 6; i++){
    const s = await connectPhoenix(group.wsUrl, "2.0.0", {})
    sockets.push(s)
    assert.equal((await joinResult(s.channel("rooms:lobby", {user: `w${i}`}))).status, "ok")
  }
  const topics = await (await fetch(`http://127.0.0.1:${apis[1][2]}/api/topics`, {headers: {"x-api-key": KEY}})).json()
  assert.equal(topics.nodes, 2)
  assert.equal(topics.topics["rooms:lobby"], 6)
})
