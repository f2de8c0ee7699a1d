// Lifecycle events across nodes: two throng nodes on one real redis-server,
// each with [hooks] events = true and the same backend (hook_backend.mjs).
// A topic joined on both nodes at once is `occupied` exactly once, and
// `vacated` exactly once when everyone left; a node killed without a
// goodbye has its topics vacated by a node that lives, once.
import {test} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {startRedis, startThrong, waitFor, sleep, lobbyClient, closeAll, clientsOnEveryWorker} from "./helpers.mjs"
import {connectPhoenix, closePhoenix, joinResult} from "../e2e/helpers.mjs"
import {startBackend} from "../e2e/hook_helpers.mjs"

const SECRET = "cluster-events-secret-of-at-least-32-bytes"

/** A backend, Redis and (with `twoNodes`) two nodes on them. */
async function setup(t, {twoNodes = true} = {}){
  const backend = await startBackend(SECRET)
  t.after(() => backend.kill())
  const redis = await startRedis()
  t.after(() => redis.stop())
  const dir = mkdtempSync(path.join(tmpdir(), "throng-cluster-events-"))
  t.after(() => rmSync(dir, {recursive: true, force: true}))
  const config = path.join(dir, "events.toml")
  writeFileSync(config, `
[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
secret = "${SECRET}"
events = true

[[topics]]
pattern = "*"
join = "anyone"
`)
  // --presence-timeout 2: a dead node's liveness key expires 0.8 s after
  // its last refresh.
  const args = ["--config", config, "--redis", redis.url, "--presence-timeout", "2"]
  const nodes = !twoNodes ? [] : [await startThrong(args), await startThrong(args)]
  for(const n of nodes){ t.after(() => n.stop()) }
  const sockets = []
  t.after(async () => { for(const s of sockets){ await closePhoenix(s) } })
  const connect = async node => {
    const s = await connectPhoenix(node.wsUrl, "2.0.0")
    sockets.push(s)
    return s
  }
  const transitions = async topic => (await backend.stats()).events
    .filter(e => !e.failed && e.topic === topic && ["occupied", "vacated"].includes(e.type))
    .map(e => e.type)
  return {backend, redis, config, nodes, connect, transitions}
}

async function join(socket, topic){
  const channel = socket.channel(topic, {})
  const result = await joinResult(channel)
  assert.equal(result.status, "ok", `join ${topic}: ${JSON.stringify(result)}`)
  return channel
}

const leave = channel => new Promise(resolve => channel.leave().receive("ok", resolve))

test("a topic joined on both nodes is occupied once, and vacated once", {timeout: 30000}, async t => {
  const {nodes, connect, transitions} = await setup(t)
  const clients = []
  for(let i = 0; i < 6; i++){ clients.push(await connect(nodes[i % 2])) }
  for(let round = 0; round < 3; round++){
    const topic = `room:${round}`
    // Everyone joins at once, on both nodes.
    const channels = await Promise.all(clients.map(c => join(c, topic)))
    await waitFor(async () => (await transitions(topic)).length >= 1, 5000, `${topic} occupied`)
    await Promise.all(channels.map(leave))
    await waitFor(async () => (await transitions(topic)).length >= 2, 5000, `${topic} vacated`)
    // Late duplicates would come within a batch's linger and a script.
    await sleep(400)
    assert.deepEqual(await transitions(topic), ["occupied", "vacated"], topic)
  }
})

test("a node killed without a goodbye: its topics are vacated once, by a live node", {timeout: 30000}, async t => {
  const {nodes, connect, transitions} = await setup(t)
  const a = await connect(nodes[0])
  const b = await connect(nodes[1])
  await join(a, "room:shared")
  await join(b, "room:shared")
  await join(b, "room:only-b")
  await waitFor(async () => (await transitions("room:only-b")).length === 1, 5000, "room:only-b occupied")
  nodes[1].proc.kill("SIGKILL")
  await nodes[1].exited
  await waitFor(async () => (await transitions("room:only-b")).length === 2, 15000, "room:only-b vacated by node A")
  await sleep(1000)
  assert.deepEqual(await transitions("room:only-b"), ["occupied", "vacated"])
  // Node A still has a subscriber of room:shared: not vacated.
  assert.deepEqual(await transitions("room:shared"), ["occupied"])
})

test("--workers 2: clients on both workers, one occupied, one vacated", {timeout: 30000}, async t => {
  const {redis, config, transitions} = await setup(t, {twoNodes: false})
  const server = await startThrong(["--config", config, "--workers", "2", "--redis", redis.url])
  t.after(() => server.stop())
  const pids = [...server.workers().values()]
  // At least 4 clients, and more until both workers hold some (the kernel spreads them).
  const clients = await clientsOnEveryWorker(server, pids, 4, i => lobbyClient(server.wsUrl, `c${i}`))
  t.after(() => closeAll(clients))
  await waitFor(async () => (await transitions("rooms:lobby")).length >= 1, 5000, "rooms:lobby occupied")
  await closeAll(clients)
  await waitFor(async () => (await transitions("rooms:lobby")).length >= 2, 5000, "rooms:lobby vacated")
  await sleep(400)
  assert.deepEqual(await transitions("rooms:lobby"), ["occupied", "vacated"])
})

test("Redis restarted without its data: the node re-asserts its topics and reports what changed meanwhile", {timeout: 40000}, async t => {
  const {redis, config, transitions} = await setup(t, {twoNodes: false})
  const node = await startThrong(["--config", config, "--redis", redis.url])
  t.after(() => node.stop())
  const socket = await connectPhoenix(node.wsUrl, "2.0.0", {reconnectAfterMs: () => 100})
  t.after(() => closePhoenix(socket))
  const gone = await join(socket, "room:gone")
  await join(socket, "room:kept")
  await waitFor(async () => (await transitions("room:gone")).length === 1 && (await transitions("room:kept")).length === 1,
    5000, "both occupied")
  await redis.stop()
  // While Redis is away: one topic empties, another fills.
  await leave(gone)
  await join(socket, "room:new")
  const again = await startRedis(redis.port)
  t.after(() => again.stop())
  await waitFor(async () => (await transitions("room:gone")).length === 2 && (await transitions("room:new")).length === 1,
    15000, "room:gone vacated and room:new occupied after the reconnect")
  assert.deepEqual(await transitions("room:gone"), ["occupied", "vacated"])
  assert.deepEqual(await transitions("room:new"), ["occupied"])
  // Redis lost room:kept's membership: re-asserted, it is reported again
  // (at least once), never vacated.
  await waitFor(async () => (await transitions("room:kept")).length === 2, 5000, "room:kept re-asserted")
  assert.deepEqual(await transitions("room:kept"), ["occupied", "occupied"])
})
