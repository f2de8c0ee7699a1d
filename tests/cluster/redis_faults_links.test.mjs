// Faults between throng and Redis (issue 42, item 2), on one Redis, each
// node behind its own fault proxy: dropped connections, a half-open
// connection, a partition of one node from Redis while the other keeps it
// (redis_faults.test.mjs has the design; the rounds are redis_faults.mjs's).
import {test} from "node:test"
import assert from "node:assert/strict"
import {sleep} from "./helpers.mjs"
import {run, scrape, links, when, twoNodes, all, lost, redisTile, LOST, BACK} from "./redis_faults.mjs"

test("dropped connections, three times in 2 s", {timeout: 90000}, async t => {
  const {proxies, world} = await twoNodes(t)
  await run(t, world, {
    name: "drop",
    inject: () => all(proxies)(p => p.drop()),
    during: async () => {
      for(let i = 0; i < 2; i++){ await sleep(1000); all(proxies)(p => p.drop()) }
    },
    heal: () => {},
    visible: {logs: [LOST, BACK], metric: m => Math.min(...links(m, "throng_redis_link_failures_total")) >= 1},
  })
})

test("a half-open connection (the peer gone without a FIN) is noticed within the timeout plus 1 s", {timeout: 90000}, async t => {
  const {proxies, world} = await twoNodes(t)
  const {logs, injected} = await run(t, world, {
    name: "halfopen",
    inject: () => all(proxies)(p => p.halfOpen()),
    during: () => sleep(6000),
    heal: () => all(proxies)(p => p.heal()),
    // Noticed and reconnected at once (new connections work): the time
    // since Redis last answered shows it.
    visible: {logs: [LOST, BACK], metric: m => Math.max(...links(m, "throng_redis_last_answer_seconds")) >= 2},
  })
  // Measured, for the report: the time from the fault to each node's log of it.
  const detected = logs.map(log => when(log, LOST) - injected)
  t.diagnostic(`half-open connection noticed after ${detected.join(" and ")} ms (bound: --redis-timeout-ms 5000 + 1000)`)
})

test("a partition of one node from Redis while the other keeps it: the node is buried, then comes back", {timeout: 90000}, async t => {
  // --presence-timeout 4: the others bury the cut-off node after about 3 s.
  const {proxies, world} = await twoNodes(t, {presenceTimeout: 4})
  const [cut] = world.nodes
  let dashboard
  await run(t, world, {
    name: "partition",
    inject: () => proxies[0].partition(),
    during: async () => {
      // The cut-off node's dashboard says which of its Redis links are down.
      dashboard = await redisTile(t, cut, row => row.down?.split(" ").length === 4)
      return {dashboard_row: dashboard}
    },
    heal: () => proxies[0].heal(),
    // Buried while cut off: its topics vacated by the other node, occupied again when it is back.
    // and its history client that reconnected meanwhile was refused (history
    // unavailable) until Redis answered, never told recovered: false.
    expect: {kept: i => i === 0 ? ["occupied", "vacated", "occupied"] : ["occupied"], refused: [0]},
    visible: {nodes: [0], quiet: [1], logs: [LOST, BACK], metric: lost},
  })
  assert.equal(dashboard.down, "backplane history occupancy presence")
  const m = await scrape(world.nodes[1])
  assert.ok(m.throng_presence_store_nodes_down_total >= 1, "the other node buried the cut-off one")
})
