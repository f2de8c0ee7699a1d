// `--redis redis+cluster://...`: throng's workers joined through a real
// Redis Cluster (3 masters, 3 replicas, started here): broadcasts on
// sharded pub/sub and presence cross workers; one subscribing connection
// per shard whatever the topics; a master SIGKILLed mid-stream (its
// replica takes over) and a slot migrated during traffic lose no
// subscription. Skipped where redis-server is older than 7 (no sharded
// pub/sub) or redis-cli is missing.
import {test} from "node:test"
import assert from "node:assert/strict"
import {startThrong, lobbyClient, closeAll, clientsOnEveryWorker, waitFor, redisCommand} from "./helpers.mjs"
import {presenceClient} from "../e2e/presence_helpers.mjs"
import {clusterAvailable, startCluster, slotOf, cli} from "./redis_cluster.mjs"

const T = {timeout: 60000, skip: clusterAvailable() ? false : "needs redis-server >= 7 and redis-cli"}
const PRESENCE = ["--presence", "rooms:lobby=param:user", "--presence-interval", "50", "--presence-timeout", "3"]
const LOBBY = "throng:t:{rooms:lobby}"
const SERVE = cluster => ["--workers", "2", "--redis", cluster.url, "--api-bind", "127.0.0.1:0", "--echo", "--push-rate", "0", ...PRESENCE]

/** Clients spread over the workers: each with `.pid`, the worker holding it. */
async function spread(server, n, make){
  const pids = [...server.workers().values()]
  const clients = await clientsOnEveryWorker(server, pids, n, make)
  return {clients, pids}
}

/** Waits until every one of `people` lists exactly the users of `want` among the `u*` keys. */
function listed(people, want, ms = 15000){
  const key = JSON.stringify(Object.entries(want).sort())
  const mine = p => JSON.stringify(Object.entries(p.counts()).filter(([k]) => /^u\d+$/.test(k)).sort())
  return waitFor(() => people.every(p => mine(p) === key), ms, `presence to list ${key}`)
    .catch(e => { throw new Error(`${e.message}; lists ${people.map(mine).join(" | ")}`) })
}

/** `PUBSUB SHARDNUMSUB channel` on `port`. */
async function shardNumsub(port, channel){
  const reply = await redisCommand(port, ["PUBSUB", "SHARDNUMSUB", channel], {done: t => /:\d+\r\n$/.test(t)})
  return Number(reply.match(/:(\d+)\r\n$/)[1])
}

/** Clients of `port` with a sharded subscription (CLIENT LIST's ssub > 0). */
function shardSubscribers(port){
  const out = cli(["-p", String(port), "CLIENT", "LIST"])
  return out.split("\n").filter(l => /ssub=[1-9]/.test(l)).length
}

/** A metric of every worker (their server APIs, from the `worker I pid P api ADDR` lines). */
async function workerMetric(server, name){
  const apis = server.lines.map(l => l.match(/^worker \d+ pid \d+ api (\S+)$/)?.[1]).filter(Boolean)
  assert.ok(apis.length > 0, `no worker API address in ${server.lines.join("\n")}`)
  const values = []
  for(const api of apis){
    const text = await (await fetch(`http://${api}/metrics`)).text()
    values.push(Number(text.match(new RegExp(`^${name} (\\d+)$`, "m"))?.[1] ?? NaN))
  }
  return values
}

/** Lobby clients and presence users on 2 workers, and a stream from worker A to worker B. */
async function streaming(t, server){
  const {clients, pids} = await spread(server, 8, i => lobbyClient(server.wsUrl, `c${i}`))
  t.after(() => closeAll(clients))
  const people = []
  t.after(() => closeAll(people))
  for(let i = 0; i < 4; i++){ people.push(await presenceClient(server.wsUrl, `u${i}`)) }
  const all = Object.fromEntries(people.map(p => [p.user, 1]))
  await listed(people, all)
  // a sender on worker A, receivers on worker B: one broadcast every 20 ms
  const sender = clients.find(c => c.pid === pids[0])
  const receivers = clients.filter(c => c.pid === pids[1])
  assert.ok(sender && receivers.length > 0, "clients on both workers")
  const stream = {seq: 0}
  stream.timer = setInterval(() => sender.send(`m${stream.seq++}`), 20)
  t.after(() => clearInterval(stream.timer))
  await waitFor(() => receivers.every(c => c.bodies.length > 10), 10000, "the stream to flow")
  /** every receiver got a message numbered above `n` */
  stream.past = n => receivers.every(c => c.bodies.some(b => Number(b.slice(1)) > n))
  return {clients, people, all, sender, stream}
}

test("a Redis Cluster joins 2 workers: broadcasts, presence, one subscriber connection per shard", T, async t => {
  const cluster = await startCluster()
  t.after(() => cluster.stop())
  const server = await startThrong(SERVE(cluster))
  t.after(() => server.stop())

  const {clients, pids} = await spread(server, 16, i => lobbyClient(server.wsUrl, `c${i}`))
  t.after(() => closeAll(clients))
  for(const pid of pids){ assert.ok(clients.some(c => c.pid === pid), `worker ${pid} has no client`) }
  for(const pid of pids){ clients.find(c => c.pid === pid).send(`from ${pid}`) }
  await waitFor(() => clients.every(c => pids.every(pid => c.count(`from ${pid}`) === 1)), 10000,
    "both broadcasts at all 16 clients")

  // the lobby's channel is subscribed once per worker, at the shard owning its slot
  const owner = cluster.ownerOf(slotOf(LOBBY))
  assert.equal(await shardNumsub(owner.port, LOBBY), 2)

  // 30 more topics, spread over the 3 shards: still one subscribing
  // connection per shard per Redis user of each worker (backplane, presence)
  const extra = []
  t.after(() => closeAll(extra))
  for(let i = 0; i < 30; i++){
    const c = await lobbyClient(server.wsUrl, `x${i}`)
    extra.push(c)
    await new Promise((resolve, reject) => c.socket.channel(`echo:t${i}`, {}).join().receive("ok", resolve).receive("error", reject))
  }
  for(const m of cluster.masters()){
    const subs = shardSubscribers(m.port)
    assert.ok(subs <= 2 * 2, `master ${m.port}: ${subs} connections with sharded subscriptions`)
  }

  // presence across the workers
  const people = []
  t.after(() => closeAll(people))
  for(let i = 0; i < 6; i++){ people.push(await presenceClient(server.wsUrl, `u${i}`)) }
  const all = Object.fromEntries(people.map(p => [p.user, 1]))
  await listed(people, all)
  await people[0].close()
  delete all.u0
  await listed(people.slice(1), all)
})

test("a master SIGKILLed mid-stream: its replica takes over, broadcasts resume, presence converges", T, async t => {
  const cluster = await startCluster()
  t.after(() => cluster.stop())
  const server = await startThrong(SERVE(cluster))
  t.after(() => server.stop())
  const {clients, people, all, sender, stream} = await streaming(t, server)

  const victim = cluster.ownerOf(slotOf(LOBBY))
  const killedAt = Date.now()
  const sentBefore = stream.seq + 1
  victim.proc.kill("SIGKILL")
  await victim.exited
  // resumed: a message sent after the kill reaches every receiver
  const resumed = await waitFor(() => stream.past(sentBefore) && Date.now(), 45000,
    "broadcasts sent after the kill to reach the other worker", 10)
  console.log(`# failover: broadcasts across workers resumed ${resumed - killedAt} ms after SIGKILL of the master (cluster-node-timeout 1000 ms)`)
  clearInterval(stream.timer)
  // presence converges: everyone still listed, once
  await listed(people, all)
  // each worker lost its connections to that master, and counted it
  const lost = await workerMetric(server, "throng_redis_cluster_shard_lost_total")
  assert.ok(lost.every(n => n >= 1), `throng_redis_cluster_shard_lost_total ${lost}`)
  // and a new broadcast reaches everyone exactly once
  sender.send("after")
  await waitFor(() => clients.every(c => c.count("after") === 1), 10000, "a broadcast after the failover")
})

test("a slot migrated during traffic: subscriptions move with it, none is lost", T, async t => {
  const cluster = await startCluster()
  t.after(() => cluster.stop())
  const server = await startThrong(SERVE(cluster))
  t.after(() => server.stop())
  const {clients, people, all, sender, stream} = await streaming(t, server)

  // move the lobby's slot (its channel and presence keys) to another master
  const slot = slotOf(LOBBY)
  const masters = cluster.masters()
  const from = masters.find(m => m.slots.some(([a, b = a]) => slot >= a && slot <= b))
  const to = masters.find(m => m !== from)
  cli(["-p", String(to.port), "CLUSTER", "SETSLOT", String(slot), "IMPORTING", from.id])
  cli(["-p", String(from.port), "CLUSTER", "SETSLOT", String(slot), "MIGRATING", to.id])
  for(;;){
    const keys = cli(["-p", String(from.port), "CLUSTER", "GETKEYSINSLOT", String(slot), "100"]).trim().split("\n").filter(Boolean)
    if(keys.length === 0){ break }
    cli(["-p", String(from.port), "MIGRATE", "127.0.0.1", String(to.port), "", "0", "5000", "KEYS", ...keys])
  }
  for(const m of masters){ cli(["-p", String(m.port), "CLUSTER", "SETSLOT", String(slot), "NODE", to.id]) }
  const movedAt = stream.seq

  // both workers' subscriptions are at the new owner, and the stream goes on
  await waitFor(async () => await shardNumsub(to.port, LOBBY) === 2, 10000, "the lobby subscribed twice at the new owner")
  await waitFor(() => stream.past(movedAt + 5), 10000, "broadcasts after the migration at the other worker")
  clearInterval(stream.timer)
  assert.equal(await shardNumsub(from.port, LOBBY), 0)
  // each worker was told by the old owner (sunsubscribe) and counted it
  const resub = await workerMetric(server, "throng_redis_cluster_resubscribed_total")
  assert.ok(resub.every(n => n >= 1), `throng_redis_cluster_resubscribed_total ${resub}`)
  // presence still right, and changes still cross (its keys moved too)
  await people[0].close()
  delete all.u0
  await listed(people.slice(1), all)
  sender.send("after")
  await waitFor(() => clients.every(c => c.count("after") === 1), 10000, "a broadcast after the migration")
  // the publishing worker followed the move: its SPUBLISH went to the old
  // owner first (MOVED, followed), or the topology it shares with its
  // subscribing side was read again at the sunsubscribe before its next
  // SPUBLISH (a race either way; both are the move being followed)
  const moved = await workerMetric(server, "throng_redis_cluster_moved_total")
  const reads = await workerMetric(server, "throng_redis_cluster_topology_reads_total")
  assert.ok(moved.some(n => n >= 1) || reads.every(n => n >= 2),
    `throng_redis_cluster_moved_total ${moved}, throng_redis_cluster_topology_reads_total ${reads}`)
})
