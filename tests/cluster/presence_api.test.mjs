// GET /api/presence?topic=T across two nodes with a real redis-server: node A
// holds every subscriber of rooms:lobby, node B none (so B does not keep the
// topic's presence): B reads it from the presence store, A from its copy, and
// both answer what phoenix.js Presence lists (same keys, metas and phx_refs),
// with its count; a leave shows on both; bad queries get the API's errors;
// with Redis gone, B says the store cannot answer (503).
import {test} from "node:test"
import assert from "node:assert/strict"
import {startRedis, startThrong, waitFor, metrics} from "./helpers.mjs"
import {presenceClient, closeAll} from "../e2e/presence_helpers.mjs"

const T = {timeout: 45000}
const PRESENCE = ["--presence", "rooms:lobby=param:user", "--presence-interval", "50",
  "--presence-timeout", "2"]

async function get(node, route){
  const res = await fetch(`http://127.0.0.1:${node.apiPort}${route}`)
  return {status: res.status, body: await res.json()}
}

/** {key: sorted phx_refs} of a presence_state (or of phoenix.js's list). */
function refs(state){
  return Object.fromEntries(Object.entries(state).sort(([a], [b]) => a < b ? -1 : 1)
    .map(([k, {metas}]) => [k, metas.map(m => m.phx_ref).sort()]))
}

test("GET /api/presence answers cluster-wide, from the store on a node without subscribers", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const a = await startThrong(["--redis", redis.url, "--shards", "2", ...PRESENCE])
  t.after(() => a.stop())
  const b = await startThrong(["--redis", redis.url, "--shards", "2", ...PRESENCE])
  t.after(() => b.stop())
  const clients = []
  t.after(() => closeAll(clients))

  const alice = await presenceClient(a.wsUrl, "alice")
  const alice2 = await presenceClient(a.wsUrl, "alice", {vsn: "1.0.0"}) // a second tab
  const bob = await presenceClient(a.wsUrl, "bob")
  clients.push(alice, alice2, bob)
  for(const c of clients){ await c.await({alice: 2, bob: 1}) }
  const listed = refs(Object.fromEntries(alice.presence.list((k, p) => [k, p])))

  // B has no subscriber of rooms:lobby: it reads the store, once A has written there.
  const fromB = await waitFor(async () => {
    const r = await get(b, "/api/presence?topic=rooms:lobby")
    assert.equal(r.status, 200, JSON.stringify(r.body))
    return r.body.count === 2 && JSON.stringify(refs(r.body.state)) === JSON.stringify(listed) && r.body
  }, 10000, "B's answer to list alice (2 metas) and bob as phoenix.js does")
  assert.equal(fromB.source, "store")
  assert.equal(fromB.topic, "rooms:lobby")
  assert.equal((await metrics(b.apiPort)).throng_presence_topics, 0, "B did not start keeping the topic")
  // A answers from its copy: the same presences.
  const fromA = await get(a, "/api/presence?topic=rooms:lobby")
  assert.equal(fromA.status, 200)
  assert.equal(fromA.body.source, "node")
  assert.equal(fromA.body.count, 2)
  assert.deepEqual(refs(fromA.body.state), listed)

  // bob leaves: gone from both answers
  await bob.leave()
  for(const node of [a, b]){
    await waitFor(async () => {
      const r = await get(node, "/api/presence?topic=rooms:lobby")
      return r.status === 200 && r.body.count === 1 && !("bob" in r.body.state) && r.body.state.alice.metas.length === 2
    }, 10000, `bob gone from ${node === a ? "A" : "B"}'s answer`)
  }
  // a topic nobody is on: empty, not an error
  const empty = await get(b, "/api/presence?topic=rooms:empty")
  assert.deepEqual([empty.status, empty.body.count, empty.body.state], [200, 0, {}])

  // the API's errors
  for(const route of ["/api/presence", "/api/presence?topic=", "/api/presence?topic=throng:control"]){
    const r = await get(b, route)
    assert.equal(r.status, 400, route)
    assert.equal(r.body.error.code, "bad_topic", `${route}: ${JSON.stringify(r.body)}`)
    assert.ok(r.body.error.message.length > 0)
  }

  // Redis gone: B cannot read the store and says so; A still has its copy.
  await redis.stop()
  await waitFor(async () => {
    const r = await get(b, "/api/presence?topic=rooms:lobby")
    return r.status === 503 && r.body.error.code === "presence_unavailable"
  }, 10000, "B's 503 with Redis gone")
  const still = await get(a, "/api/presence?topic=rooms:lobby")
  assert.deepEqual([still.status, still.body.count, still.body.source], [200, 1, "node"])
})
