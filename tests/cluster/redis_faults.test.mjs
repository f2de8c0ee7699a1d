// Faults between throng and Redis (issue 42, item 2), on one Redis: latency
// and a stall. The fault tests are in three files, so that each fits the
// cluster stage's per-file bound (scripts/test.sh: 90 s): this one; the
// links' failures (redis_faults_links.test.mjs: dropped connections, a
// half-open connection, a partition of one node); and a Redis Cluster
// (redis_faults_cluster.test.mjs).
//
// Two throng nodes, each reaching one redis-server through its own fault
// proxy (fault_proxy.mjs), with clients of every kind on both
// (redis_faults.mjs). Under each fault: nothing crashes, local delivery
// goes on, history clients end with every message once and in order,
// presences converge (no ghost), each occupancy transition is reported
// once, and each fault shows in the logs, /metrics and (partition) the
// dashboard. The victim latency of local delivery is measured and
// reported (t.diagnostic), not asserted.
import {test} from "node:test"
import {sleep} from "./helpers.mjs"
import {run, links, twoNodes, all, lost, LOST, BACK, SLOW, QUICK} from "./redis_faults.mjs"

test("latency of 50 ms, then 500 ms, each way (and a round without, for comparison)", {timeout: 90000}, async t => {
  const {proxies, world} = await twoNodes(t)
  await run(t, world, {name: "baseline", inject: () => {}, during: () => sleep(3000), heal: () => {}})
  for(const ms of [50, 500]){
    await run(t, world, {
      name: `latency${ms}`,
      inject: () => all(proxies)(p => p.latency(ms)),
      during: () => sleep(3000),
      heal: () => all(proxies)(p => p.latency(0)),
      visible: {
        logs: [SLOW, QUICK],
        metric: m => Math.max(...links(m, "throng_redis_ping_seconds")) >= 2 * ms / 1000,
      },
    })
  }
})

test("a stall: no byte for 10 s; what was held back reaches Redis after the nodes reconnected", {timeout: 90000}, async t => {
  const {proxies, world} = await twoNodes(t)
  await run(t, world, {
    name: "stall",
    inject: () => all(proxies)(p => p.stall()),
    // Changes sent into the stall, and undone before it ends.
    flicker: true,
    lasts: 10000,
    heal: () => all(proxies)(p => p.resume({lateMs: 2000})),
    late: 2500,
    visible: {
      logs: [LOST, BACK],
      metric: m => lost(m) && Math.max(...links(m, "throng_redis_last_answer_seconds")) >= 3,
    },
  })
})
