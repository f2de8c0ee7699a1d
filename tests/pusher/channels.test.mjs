// Pusher channels against the real binary, with the official clients in
// Node: pusher-js (presence: each user once, member events once per user,
// not per tab, and never twice to a subscriber; client events; cache
// channels), encrypted channels, and Laravel Echo with its pusher
// broadcaster (here/joining/leaving, whispers).
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import Echo from "laravel-echo"
import Pusher from "pusher-js"
import {startServer} from "../e2e/helpers.mjs"
import {waitFor, sleep} from "../cluster/helpers.mjs"
import {
  KEY, SECRET, APP_ID, sdk, startPusher, client, connected, subscribed, once, record, disconnectAll,
  rawConnected, subscribeRaw,
} from "./channels_helpers.mjs"

let server
const clients = []

/** A connected pusher-js client of `server` as `user_id` (kept for `after`). */
async function user(id, opts = {}){
  const c = client(server.port, {user: {user_id: id, user_info: {name: id}}, ...opts})
  clients.push(c)
  await connected(c)
  return c
}

before(async () => {
  server = await startPusher(["--presence-interval", "100", "--pusher-cache-ttl", "2"])
}, {timeout: 20000})

after(async () => {
  disconnectAll(clients)
  await server?.stop()
}, {timeout: 20000})

/** A presence subscription that follows its members as pusher-js does, and notes what it should never get. */
async function member(c, channel){
  const {ch, data} = await subscribed(c, channel)
  const seen = {ch, first: Object.keys(data.members).sort(), added: [], removed: [], doubles: []}
  ch.bind("pusher:member_added", (m) => {
    seen.added.push(m.id)
    // pusher-js counts a member_added for a member it has as no change:
    // a server that sends one twice makes apps see a user join twice.
    if(seen.have.has(m.id)){ seen.doubles.push(`added ${m.id}`) }
    seen.have.add(m.id)
  })
  ch.bind("pusher:member_removed", (m) => {
    seen.removed.push(m.id)
    if(!seen.have.has(m.id)){ seen.doubles.push(`removed ${m.id}`) }
    seen.have.delete(m.id)
  })
  seen.have = new Set(seen.first)
  return seen
}

test("presence: each user once, itself included; member_added and member_removed once per user, not per tab", {timeout: 30000}, async () => {
  const channel = "presence-tabs"
  const o = await member(await user("uo"), channel)
  assert.deepEqual(o.first, ["uo"], "a subscriber is in its own list")
  const tab1 = await member(await user("ua"), channel)
  assert.ok(tab1.first.includes("ua"))
  // uo is in its list, or comes as member_added (as of the last flush).
  await waitFor(() => o.added.includes("ua") && tab1.have.has("uo"), 5000, "uo and ua to hear of each other")
  // A second tab of ua: ua once in its list, and no news for anyone.
  const tab2c = await user("ua")
  const tab2 = await member(tab2c, channel)
  assert.deepEqual(tab2.first, ["ua", "uo"])
  assert.equal(tab2.ch.members.count, 2)
  assert.equal(tab2.ch.members.me.id, "ua")
  const b = await member(await user("ub"), channel)
  for(const s of [o, tab1, tab2]){
    await waitFor(() => s.added.includes("ub"), 5000, "ub's member_added")
  }
  // One tab of ua goes: nothing; a sentinel user's arrival shows the
  // flushes after it went out.
  tab1.ch.unsubscribe()
  await sleep(250)
  await member(await user("uz"), channel)
  await waitFor(() => o.added.includes("uz") && b.added.includes("uz"), 5000, "uz's member_added")
  assert.deepEqual(o.removed, [], "ua still has a tab")
  // Its last tab goes: member_removed once, to everyone else.
  tab2c.disconnect()
  await waitFor(() => o.removed.includes("ua") && b.removed.includes("ua"), 5000, "ua's member_removed")
  await sleep(300)
  assert.deepEqual(o.added, ["ua", "ub", "uz"])
  assert.deepEqual(o.removed, ["ua"])
  assert.deepEqual(b.removed, ["ua"])
  assert.ok(!tab1.added.includes("ua") && !tab2.added.includes("ua"), "a tab never hears of its own user")
  for(const s of [o, tab1, tab2, b]){ assert.deepEqual(s.doubles, []) }
  assert.deepEqual([...o.have].sort(), ["ub", "uo", "uz"])
})

test("presence: subscriptions racing joins and leaves on every shard never hear of a change twice nor miss one", {timeout: 60000}, async () => {
  // Sockets land on both shards (--shards is the core count, 2 here and
  // in CI); the flushes of one shard reach the other through its inbox,
  // where a subscription read meanwhile would otherwise hear them again.
  const channel = "presence-race"
  const watchers = []
  const churn = []
  for(let round = 0; round < 6; round++){
    const joins = []
    for(let i = 0; i < 6; i++){
      joins.push(user(`r${round}-${i}`).then((c) => member(c, channel)))
    }
    watchers.push(...await Promise.all(joins))
    // Some leave as others come.
    for(const w of watchers.splice(0, 2)){ w.ch.pusher.disconnect(); churn.push(w) }
  }
  const final = await member(await user("last"), channel)
  const everyone = [...watchers.map((w) => w.ch.members.me.id), "last"].sort()
  const settled = (w) => [...w.have].sort().join() === everyone.join()
  await waitFor(() => [...watchers, final].every(settled), 10000, "every subscriber to hold the same members")
  await sleep(300)
  for(const w of [...watchers, final]){
    assert.deepEqual(w.doubles, [], `${w.ch.members.me.id} heard a change twice`)
    assert.deepEqual([...w.have].sort(), everyone, `${w.ch.members.me.id}'s members`)
    assert.equal(w.ch.members.count, everyone.length, "pusher-js's count")
  }
  assert.equal(churn.length, 12)
})

test("presence: max_presence_members refuses a new user with 403, not another tab of a member", {timeout: 30000}, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "throng-pusher-"))
  const file = path.join(dir, "throng.toml")
  writeFileSync(file, `[[pusher.apps]]\nid = "${APP_ID}"\nkey = "${KEY}"\nsecret = "${SECRET}"\nmax_presence_members = 2\n`)
  const s = await startServer(["--config", file, "--presence-interval", "50"])
  const mine = []
  const on = async (id) => {
    const c = client(s.port, {user: {user_id: id, user_info: null}})
    mine.push(c)
    await connected(c)
    return c
  }
  try {
    const first = (await subscribed(await on("m1"), "presence-full")).ch
    const m2 = once(first, "pusher:member_added")
    await subscribed(await on("m2"), "presence-full")
    await m2
    const third = (await on("m3")).subscribe("presence-full")
    const err = await once(third, "pusher:subscription_error")
    assert.equal(err.status, 403)
    assert.equal(err.type, "PresenceError")
    assert.match(err.error, /max_presence_members = 2/)
    const again = await subscribed(await on("m1"), "presence-full")
    assert.equal(again.data.count, 2, "a second tab of a member is no new member")
  } finally {
    disconnectAll(mine)
    await s.stop()
  }
})

test("client events reach the channel's other subscribers, not the sender, with the sender's user_id on presence", {timeout: 20000}, async () => {
  const a = await user("ca")
  const b = await user("cb")
  const pa = (await subscribed(a, "private-chat")).ch
  const pb = (await subscribed(b, "private-chat")).ch
  const mine = record(pa, "client-typing")
  const got = once(pb, "client-typing")
  pa.trigger("client-typing", {typing: true})
  assert.deepEqual(await got, {typing: true})
  const qa = (await subscribed(a, "presence-chat")).ch
  const qb = (await subscribed(b, "presence-chat")).ch
  const meta = new Promise((resolve) => qb.bind("client-hi", (data, m) => resolve([data, m])))
  qa.trigger("client-hi", "there")
  const [data, m] = await meta
  assert.equal(data, "there")
  assert.equal(m.user_id, "ca")
  await sleep(200)
  assert.deepEqual(mine, [], "the sender does not get its own event")
})

test("cache channels: pusher:cache_miss, then the last event to each new subscriber, until the TTL", {timeout: 30000}, async () => {
  const a = await user("k1")
  const ch = a.subscribe("private-cache-weather")
  const miss = once(ch, "pusher:cache_miss")
  await once(ch, "pusher:subscription_succeeded")
  await miss
  ch.trigger("client-temp", {c: 20})
  ch.trigger("client-temp", {c: 21})
  const b = await user("k2")
  const chb = b.subscribe("private-cache-weather")
  const got = record(chb, "client-temp")
  const misses = record(chb, "pusher:cache_miss")
  await once(chb, "pusher:subscription_succeeded")
  await waitFor(() => got.length > 0, 5000, "the cached event")
  // A live event after the cached one reaches it once, after it.
  const c = await user("k3")
  const chc = (await subscribed(c, "private-cache-weather")).ch
  await waitFor(() => got.length > 0, 5000, "k3's replay")
  chc.trigger("client-temp", {c: 22})
  await waitFor(() => got.length === 2, 5000, "the live event")
  await sleep(200)
  assert.deepEqual(got, [{c: 21}, {c: 22}], "the last event, then live ones, each once")
  assert.deepEqual(misses, [])
  // Public and presence cache channels too.
  const p = await user("k4")
  const pub = p.subscribe("cache-public")
  await once(pub, "pusher:cache_miss")
  const pres = p.subscribe("presence-cache-room")
  await once(pres, "pusher:cache_miss")
  // Kept --pusher-cache-ttl (2 s) after it was sent.
  await sleep(2500)
  const d = await user("k5")
  const late = d.subscribe("private-cache-weather")
  await once(late, "pusher:cache_miss")
})

// pusher-js's Node build has encrypted channels built in (its web build is
// pusher-js/with-encryption: browser.test.mjs loads that one).
test("pusher-js subscribes to private-encrypted channels; their client events are refused", {timeout: 20000}, async () => {
  const masterKey = Buffer.alloc(32, 7).toString("base64")
  const server2 = new (await import("pusher")).default({appId: APP_ID, key: KEY, secret: SECRET, host: "127.0.0.1", port: String(server.port), useTLS: false, encryptionMasterKeyBase64: masterKey})
  const enc = new Pusher(KEY, {
    cluster: "mt1", wsHost: "127.0.0.1", wsPort: server.port, forceTLS: false, enabledTransports: ["ws"], disableStats: true,
    channelAuthorization: {customHandler: ({socketId, channelName}, cb) => cb(null, server2.authorizeChannel(socketId, channelName))},
  })
  clients.push(enc)
  await connected(enc)
  const ch = enc.subscribe("private-encrypted-vault")
  await once(ch, "pusher:subscription_succeeded")
  // An event from the HTTP API is relayed as the SDK encrypted it, and
  // pusher-js decrypts it (when this server has the HTTP API).
  const got = once(ch, "secret", 5000)
  const sent = await server2.trigger("private-encrypted-vault", "secret", {a: 1}).catch((e) => e)
  if(sent.status === 200){
    assert.deepEqual(await got, {a: 1})
  } else {
    got.catch(() => {})
  }
  // pusher-js refuses client events on them itself; a raw client that
  // sends one is answered pusher:error.
  const raw = await rawConnected(server.port)
  subscribeRaw(raw, server2, "private-encrypted-vault")
  await raw.event("pusher_internal:subscription_succeeded")
  raw.send({event: "client-x", channel: "private-encrypted-vault", data: {nonce: "n", ciphertext: "c"}})
  const err = await raw.event("pusher:error")
  assert.equal(err.data.code, 4300)
  assert.match(err.data.message, /private- and presence- channels only/)
  raw.close()
})

test("Laravel Echo (pusher broadcaster): here, joining and leaving once per user, whispers to the others", {timeout: 30000}, async () => {
  const echoOf = (c) => new Echo({broadcaster: "pusher", client: c})
  const annC = await user("ann")
  const ann = echoOf(annC)
  const room = ann.join("room")
  const here = await new Promise((resolve) => room.here(resolve))
  assert.deepEqual(here.map((u) => u.name), ["ann"])
  const joining = []
  const leaving = []
  room.joining((u) => joining.push(u.name))
  room.leaving((u) => leaving.push(u.name))
  const bobC = await user("bob")
  const bob = echoOf(bobC)
  const bobRoom = bob.join("room")
  const bobHere = await new Promise((resolve) => bobRoom.here(resolve))
  await waitFor(() => joining.includes("bob"), 5000, "ann to see bob joining")
  // bob's list has ann once it was flushed, or ann arrives as joining.
  const whisper = new Promise((resolve) => bob.private("chat").listenForWhisper("typing", resolve))
  await once(bobC.channel("private-chat"), "pusher:subscription_succeeded")
  const annChat = ann.private("chat")
  await once(annC.channel("private-chat"), "pusher:subscription_succeeded")
  annChat.whisper("typing", {who: "ann"})
  assert.deepEqual(await whisper, {who: "ann"})
  // A second Echo of bob (another tab) and its leaving: no news.
  const bob2C = await user("bob")
  const bob2 = echoOf(bob2C)
  await new Promise((resolve) => bob2.join("room").here(resolve))
  bob2.leave("room")
  await sleep(300)
  assert.deepEqual(joining, ["bob"])
  assert.deepEqual(leaving, [])
  bob.leave("room")
  await waitFor(() => leaving.includes("bob"), 5000, "ann to see bob leaving")
  assert.ok(bobHere.some((u) => u.name === "bob"))
})
