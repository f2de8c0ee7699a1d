// Faults between throng and Redis (issue 42, item 2) on a Redis Cluster:
// the proxy in front of one master, which announces the proxy's port as
// its own (cluster-announce-port) so that clients, told the masters'
// addresses by the cluster, go through it (redis_faults.test.mjs has the
// design; the rounds are redis_faults.mjs's).
import {test} from "node:test"
import {sleep, waitFor, redisCommand} from "./helpers.mjs"
import {startCluster, clusterAvailable, cli, slotOf} from "./redis_cluster.mjs"
import {startProxy} from "./fault_proxy.mjs"
import {startWorld, run, links, when, lost, LOST, BACK, SLOW, QUICK} from "./redis_faults.mjs"

/** A round's name whose `feed:NAME` topic (and so its history's keys and channel) lands on `master`. */
function onMaster(master, base){
  for(let i = 0; ; i++){
    const name = `${base}${i}`
    const slot = slotOf(`feed:${name}`)
    if(master.slots.some(([a, b = a]) => slot >= a && slot <= b)){ return name }
  }
}

test("Redis Cluster, a proxy in front of one master: latency, a 10 s stall, a half-open connection", {timeout: 120000,
  skip: !clusterAvailable() && "redis-server 7 and redis-cli are needed for a cluster"}, async t => {
  const cluster = await startCluster({replicas: 1})
  t.after(() => cluster.stop())
  // The cluster tells clients its masters' addresses (CLUSTER SLOTS,
  // MOVED): this master announces the proxy's port as its own, so every
  // client reaches it through the proxy; the cluster bus stays direct.
  const master = cluster.masters()[0]
  const proxy = await startProxy(master.port)
  t.after(() => proxy.stop())
  await redisCommand(master.port, ["CONFIG", "SET", "cluster-announce-bus-port", String(master.port + 10000)])
  await redisCommand(master.port, ["CONFIG", "SET", "cluster-announce-port", String(proxy.port)])
  await waitFor(() => cluster.nodes.every(n => cli(["-p", String(n.port), "CLUSTER", "SLOTS"]).includes(`\n${proxy.port}\n`)),
    10000, "every node to announce the proxy's port for the master", 200)
  const world = await startWorld(t, [cluster.url, cluster.url])
  // Each node's links connect to every master once started (in the background).
  await waitFor(() => proxy.accepted() >= 2, 15000, "the nodes to reach the master through the proxy")
  await run(t, world, {
    name: onMaster(master, "c-latency"),
    inject: () => proxy.latency(500),
    during: () => sleep(2000),
    heal: () => proxy.latency(0),
    visible: {logs: [SLOW, QUICK], metric: m => Math.max(...links(m, "throng_redis_ping_seconds")) >= 1},
  })
  await run(t, world, {
    name: onMaster(master, "c-stall"),
    inject: () => proxy.stall(),
    lasts: 10000,
    heal: () => proxy.resume({lateMs: 2000}),
    late: 2500,
    visible: {logs: [LOST, BACK], metric: lost},
  })
  const {logs, injected} = await run(t, world, {
    name: onMaster(master, "c-halfopen"),
    inject: () => proxy.halfOpen(),
    during: () => sleep(6000),
    heal: () => proxy.heal(),
    visible: {logs: [LOST, BACK], metric: m => Math.max(...links(m, "throng_redis_last_answer_seconds")) >= 2},
  })
  t.diagnostic(`Redis Cluster: half-open connection noticed after ${logs.map(log => when(log, LOST) - injected).join(" and ")} ms`)
})
