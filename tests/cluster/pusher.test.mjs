// Pusher channels across nodes: two throng processes on one redis-server,
// then on a Redis Cluster. pusher-js clients on different nodes: client
// events reach the other node; presence lists each user once cluster-wide
// (a user with a tab on each node is one member, and no tab hears of its
// own user); webhooks (a real backend) get channel_occupied,
// channel_vacated, member_added and member_removed exactly once however
// many nodes saw the change; a node killed (SIGKILL) has its members
// removed everywhere after --presence-timeout, once; an app's
// max_presence_members counts every node's members; a cache channel's
// last event is kept in Redis and replayed on the other node.
import {test} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {startRedis, startThrong, waitFor, sleep} from "./helpers.mjs"
import {clusterAvailable, startCluster} from "./redis_cluster.mjs"
import {
  APP_ID, KEY, SECRET, appArgs, client, connected, subscribed, once, record, disconnectAll, startWebhookBackend,
} from "../pusher/channels_helpers.mjs"

const ARGS = ["--presence-interval", "50", "--presence-timeout", "2", "--api-bind", "127.0.0.1:0"]

/** A presence subscription that notes what it hears (and what it should never). */
async function member(c, channel){
  const {ch, data} = await subscribed(c, channel)
  const seen = {ch, have: new Set(Object.keys(data.members)), added: [], removed: [], doubles: []}
  ch.bind("pusher:member_added", (m) => {
    seen.added.push(m.id)
    if(seen.have.has(m.id)){ seen.doubles.push(`added ${m.id}`) }
    seen.have.add(m.id)
  })
  ch.bind("pusher:member_removed", (m) => {
    seen.removed.push(m.id)
    if(!seen.have.has(m.id)){ seen.doubles.push(`removed ${m.id}`) }
    seen.have.delete(m.id)
  })
  return seen
}

const sorted = (set) => [...set].sort()

/**
 * Two nodes on `url` (with the webhook backend), clients on each: client
 * events, presence, webhooks once; then node B killed.
 */
async function acrossNodes(url, channelSuffix){
  const file = path.join(mkdtempSync(path.join(tmpdir(), "throng-pusher-cluster-")), "events.jsonl")
  const backend = await startWebhookBackend(file)
  const serve = appArgs(["--redis", url, "--pusher-webhook-url", backend.url, ...ARGS])
  const nodeA = await startThrong(serve)
  const nodeB = await startThrong(serve)
  const clients = []
  const on = async (node, id) => {
    const c = client(node.port, {user: {user_id: id, user_info: {name: id}}})
    clients.push(c)
    await connected(c)
    return c
  }
  const events = async () => (await fetch(`http://127.0.0.1:${backend.port}/events`)).json()
  const about = async (channel) => (await events()).filter((e) => e.channel === channel)
    .map((e) => e.user_id ? `${e.name} ${e.user_id}` : e.name)
  try {
    // Client events across nodes.
    const chat = `private-chat${channelSuffix}`
    const a = await on(nodeA, "a")
    const b = await on(nodeB, "b")
    const ca = (await subscribed(a, chat)).ch
    const cb = (await subscribed(b, chat)).ch
    const mine = record(ca, "client-msg")
    await waitFor(async () => {
      const got = once(cb, "client-msg", 500).catch(() => null)
      ca.trigger("client-msg", {from: "a"})
      return (await got)?.from === "a"
    }, 10000, "a client event from node A on node B")
    assert.deepEqual(mine, [], "not echoed to the sender")
    await waitFor(async () => (await about(chat)).length > 0, 5000, "channel_occupied")
    // Presence: ua on both nodes (two tabs), ub on B.
    const room = `presence-room${channelSuffix}`
    const uaA = await member(await on(nodeA, "ua"), room)
    const ubB = await member(await on(nodeB, "ub"), room)
    await waitFor(() => uaA.have.has("ub") && ubB.have.has("ua"), 10000, "ua and ub to see each other across nodes")
    // ub has ua from its list or from one member_added (which of the two
    // depends on whether ua's flush reached node B before ub subscribed).
    const heardBefore = ubB.added.length
    const uaB = await member(await on(nodeB, "ua"), room)
    await waitFor(() => uaB.have.has("ub") && uaB.have.has("ua"), 10000, "ua's second tab's list")
    await sleep(500)
    assert.ok(ubB.added.filter((u) => u === "ua").length <= 1, `ub heard of ua once at most: ${ubB.added}`)
    assert.deepEqual(ubB.added.slice(heardBefore), [], "ua's second tab, on another node, is no new member")
    assert.ok(!uaA.added.includes("ua") && !uaB.added.includes("ua"), "no tab hears of its own user")
    for(const s of [uaA, uaB, ubB]){ assert.deepEqual(s.doubles, []) }
    // Webhooks: once cluster-wide.
    await waitFor(async () => (await about(room)).includes("member_added ub"), 10000, "member_added ub")
    await sleep(500)
    let got = await about(room)
    assert.deepEqual(got.filter((e) => e === "channel_occupied"), ["channel_occupied"], `${got}`)
    assert.deepEqual(got.filter((e) => e.endsWith(" ua")), ["member_added ua"], `${got}`)
    assert.deepEqual((await about(chat)).filter((e) => e.startsWith("channel_")), ["channel_occupied"], "one channel_occupied for two nodes")
    assert.ok((await about(chat)).includes("client_event"))
    // ua's tab on A leaves: ua is still on B, nothing for anyone.
    uaA.ch.pusher.disconnect()
    await sleep(600)
    assert.deepEqual(ubB.removed, [])
    // Node B dies with ub and ua's other tab: both go, once, after --presence-timeout.
    const watcher = await member(await on(nodeA, "w"), room)
    await waitFor(() => watcher.have.has("ub") && watcher.have.has("ua"), 10000, "the watcher's list")
    nodeB.proc.kill("SIGKILL")
    await waitFor(() => watcher.removed.includes("ub") && watcher.removed.includes("ua"), 20000, "ub and ua to leave with node B")
    await waitFor(async () => {
      const g = await about(room)
      return g.includes("member_removed ub") && g.includes("member_removed ua")
    }, 20000, "member_removed webhooks for node B's members")
    await sleep(500)
    got = await about(room)
    assert.deepEqual(got.filter((e) => e.endsWith(" ub")), ["member_added ub", "member_removed ub"], `${got}`)
    assert.deepEqual(got.filter((e) => e.endsWith(" ua")), ["member_added ua", "member_removed ua"], `${got}`)
    assert.ok(!got.includes("channel_vacated"), "the watcher on A keeps the channel occupied")
    assert.deepEqual(watcher.doubles, [])
    assert.ok((await events()).every((e) => !e.invalid))
  } finally {
    disconnectAll(clients)
    await nodeA.stop()
    await nodeB.stop()
    await backend.kill()
  }
}

test("two nodes on redis-server: client events, presence once per user, webhooks once, a dead node's members", {timeout: 90000}, async () => {
  const redis = await startRedis()
  try {
    await acrossNodes(redis.url, "")
  } finally {
    await redis.stop()
  }
})

test("cache channels in a cluster: the last event is kept in Redis and replayed on the other node", {timeout: 60000}, async () => {
  const redis = await startRedis()
  const serve = appArgs(["--redis", redis.url, ...ARGS])
  const nodeA = await startThrong(serve)
  const nodeB = await startThrong(serve)
  const clients = []
  try {
    const a = client(nodeA.port)
    const b = client(nodeB.port)
    clients.push(a, b)
    await Promise.all([connected(a), connected(b)])
    const ch = a.subscribe("private-cache-scores")
    await once(ch, "pusher:cache_miss")
    ch.trigger("client-score", {n: 1})
    ch.trigger("client-score", {n: 2})
    // Once Redis kept it, a subscriber on node B gets the last one.
    await waitFor(async () => {
      const c = client(nodeB.port)
      clients.push(c)
      await connected(c)
      const sub = c.subscribe("private-cache-scores")
      const first = await Promise.race([
        once(sub, "client-score", 3000),
        once(sub, "pusher:cache_miss", 3000).then(() => null),
      ])
      c.disconnect()
      return first?.n === 2
    }, 15000, "node B to replay the last event")
  } finally {
    disconnectAll(clients)
    await nodeA.stop()
    await nodeB.stop()
    await redis.stop()
  }
})

test("max_presence_members counts the members of every node: a new user is refused on either node, another tab is not", {timeout: 60000}, async () => {
  const redis = await startRedis()
  const file = path.join(mkdtempSync(path.join(tmpdir(), "throng-pusher-limit-")), "throng.toml")
  writeFileSync(file, `[[pusher.apps]]\nid = "${APP_ID}"\nkey = "${KEY}"\nsecret = "${SECRET}"\nmax_presence_members = 2\n`)
  const serve = ["--config", file, "--redis", redis.url, ...ARGS]
  const nodeA = await startThrong(serve)
  const nodeB = await startThrong(serve)
  const clients = []
  const on = async (node, id) => {
    const c = client(node.port, {user: {user_id: id, user_info: null}})
    clients.push(c)
    await connected(c)
    return c
  }
  const refused = async (node, id) => {
    const err = await once((await on(node, id)).subscribe("presence-full"), "pusher:subscription_error", 5000)
    assert.equal(err.status, 403, `${id} on port ${node.port}`)
    assert.match(err.error, /max_presence_members = 2/)
  }
  try {
    const m1 = await member(await on(nodeA, "m1"), "presence-full")
    const m2 = await member(await on(nodeB, "m2"), "presence-full")
    await waitFor(() => m1.have.has("m2") && m2.have.has("m1"), 10000, "m1 on A and m2 on B to see each other")
    await refused(nodeA, "m3")
    await refused(nodeB, "m4")
    const tab = await subscribed(await on(nodeA, "m2"), "presence-full")
    assert.equal(tab.data.count, 2, "m2's tab on the other node is no new member")
    // m1 leaves: its place is free on both nodes once they know.
    m1.ch.pusher.disconnect()
    await waitFor(() => !m2.have.has("m1"), 10000, "m1 to leave")
    const m5 = await subscribed(await on(nodeB, "m5"), "presence-full")
    assert.equal(m5.data.count, 2)
  } finally {
    disconnectAll(clients)
    await nodeA.stop()
    await nodeB.stop()
    await redis.stop()
  }
})

test("two nodes on a Redis Cluster: client events, presence once per user, webhooks once, a dead node's members", {
  timeout: 120000, skip: clusterAvailable() ? false : "needs redis-server >= 7 and redis-cli",
}, async () => {
  const cluster = await startCluster({replicas: 0})
  try {
    await acrossNodes(cluster.url, "-rc")
  } finally {
    await cluster.stop()
  }
})
