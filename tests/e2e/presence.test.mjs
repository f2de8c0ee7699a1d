// Presence as phoenix.js 1.8's Presence consumes it, against the real binary
// with `--presence rooms:lobby=param:user`: presence_state on join (with the
// join_ref on v2), presence_diff batched per interval, several metas per key,
// updates (phx_ref_prev), leave and disconnect; count mode; presence off by
// default. Clients of both serializers.
import {test, after} from "node:test"
import assert from "node:assert/strict"
import {startServer, connectPhoenix, closePhoenix, joinResult, nextEvent} from "./helpers.mjs"
import {presenceClient, closeAll, until} from "./presence_helpers.mjs"

const T = {timeout: 30000}
const servers = []
after(async () => { await Promise.all(servers.map(s => s.stop())) })

async function server(args){
  const s = await startServer(args)
  servers.push(s)
  return s
}

test("two clients: presence_state, onJoin, onSync, leave and onLeave (v2 and v1)", T, async t => {
  const s = await server(["--presence", "rooms:lobby=param:user", "--presence-interval", "50"])
  const clients = []
  t.after(() => closeAll(clients))
  const alice = await presenceClient(s.wsUrl, "alice", {vsn: "2.0.0"})
  clients.push(alice)
  await alice.await({alice: 1})
  assert.equal(alice.states, 1, "one presence_state per join")
  assert.ok(alice.syncs >= 2, "onSync after the state and after the diff with alice")
  const bob = await presenceClient(s.wsUrl, "bob", {vsn: "1.0.0"})
  clients.push(bob)
  await bob.await({alice: 1, bob: 1})
  await alice.await({alice: 1, bob: 1})
  // bob's state already had alice: he heard of her once, in the state
  assert.deepEqual(bob.joins.map(j => j.key), ["alice", "bob"])
  assert.equal(alice.joinsOf("bob").length, 1)
  const ref = alice.online().bob[0].phx_ref
  assert.equal(typeof ref, "string")
  await bob.leave()
  await alice.await({alice: 1})
  assert.equal(alice.leavesOf("bob").length, 1)
  assert.equal(alice.leavesOf("bob")[0].left.metas[0].phx_ref, ref)
  assert.equal(alice.leavesOf("alice").length, 0)
})

test("a rejoin after a reconnect gets presence_state again and keeps one meta", T, async t => {
  const s = await server(["--presence", "rooms:lobby=param:user", "--presence-interval", "50"])
  const clients = []
  t.after(() => closeAll(clients))
  const fast = {rejoinAfterMs: () => 50, reconnectAfterMs: () => 50}
  const alice = await presenceClient(s.wsUrl, "alice", {socketOpts: fast})
  const bob = await presenceClient(s.wsUrl, "bob", {vsn: "1.0.0"})
  clients.push(alice, bob)
  await alice.await({alice: 1, bob: 1})
  const old = alice.online().alice[0].phx_ref
  alice.socket.conn.close(4000, "dropped") // as a network drop: phoenix.js reconnects and rejoins
  await until(() => alice.states === 2, 5000, () => `a second presence_state, got ${alice.states}`)
  await until(() => alice.online().alice?.[0]?.phx_ref !== old && bob.online().alice?.[0]?.phx_ref !== old, 5000,
    "the new meta everywhere")
  await alice.await({alice: 1, bob: 1})
  await bob.await({alice: 1, bob: 1})
  assert.ok(bob.leavesOf("alice").some(l => l.left.metas[0].phx_ref === old), "the old meta left")
})

test("ten clients: several metas per key, an update, leaves and disconnects", T, async t => {
  const s = await server(["--presence", "rooms:lobby=param:user", "--presence-interval", "50"])
  const clients = []
  t.after(() => closeAll(clients))
  // five users with two tabs each, alternating serializers
  for(let i = 0; i < 10; i++){
    clients.push(await presenceClient(s.wsUrl, `user${i % 5}`, {vsn: i % 2 ? "1.0.0" : "2.0.0"}))
  }
  const all = {user0: 2, user1: 2, user2: 2, user3: 2, user4: 2}
  await Promise.all(clients.map(c => c.await(all)))

  // an update: the new meta joins with phx_ref_prev, the old leaves
  const [u0tab1] = clients
  const before = clients[1].online().user0.map(m => m.phx_ref)
  await new Promise((resolve, reject) => u0tab1.channel.push("presence:update", {status: "away"})
    .receive("ok", resolve).receive("error", reject))
  await Promise.all(clients.map(c => until(() => (c.online().user0 || []).some(m => m.status === "away"), 5000,
    () => `${c.user} to see user0 away: ${JSON.stringify(c.online().user0)}`)))
  for(const c of clients){
    const metas = c.online().user0
    assert.equal(metas.length, 2, "still two tabs")
    const away = metas.find(m => m.status === "away")
    assert.ok(before.includes(away.phx_ref_prev), "phx_ref_prev names the old meta")
    assert.ok(!before.includes(away.phx_ref), "a new phx_ref")
    assert.ok(c.leavesOf("user0").some(l => l.left.metas[0].phx_ref === away.phx_ref_prev))
  }

  // one tab of user1 disconnects, user2 leaves with both tabs
  const [, u1a] = clients.filter(c => c.user === "user1")
  const u2 = clients.filter(c => c.user === "user2")
  const rest = clients.filter(c => c !== u1a && !u2.includes(c))
  await u1a.close()
  await Promise.all(u2.map(c => c.leave()))
  const left = {user0: 2, user1: 1, user3: 2, user4: 2}
  await Promise.all(rest.map(c => c.await(left)))
  for(const c of rest){
    // onLeave for user1 with one meta still there
    assert.ok(c.leavesOf("user1").some(l => l.current.metas.length === 1))
    assert.equal(c.leavesOf("user3").length, 0)
  }
})

test("a crowd joining at once costs a watcher a few diffs, not one per join", T, async t => {
  const s = await server(["--presence", "rooms:lobby=param:user", "--presence-interval", "2000"])
  const clients = []
  t.after(() => closeAll(clients))
  const watcher = await presenceClient(s.wsUrl, "watcher")
  clients.push(watcher)
  const crowd = await Promise.all(Array.from({length: 100}, (_, i) => presenceClient(s.wsUrl, `c${i}`)))
  clients.push(...crowd)
  const want = Object.fromEntries([["watcher", 1], ...crowd.map(c => [c.user, 1])])
  await watcher.await(want, 10000)
  // 101 joins in a couple of 2 s intervals: the watcher got a handful of diffs
  assert.ok(watcher.diffs <= 10, `the watcher got ${watcher.diffs} presence_diff messages for 101 joins`)
  assert.equal(watcher.joins.length, 101, "each join heard once")
})

test("count mode: presence_count {count} on join and when it changes", T, async t => {
  const s = await server(["--presence", "rooms:lobby=param:user/count", "--presence-interval", "50"])
  const sockets = []
  t.after(() => Promise.all(sockets.map(s => closePhoenix(s))))
  const counts = []
  const a = await connectPhoenix(s.wsUrl, "2.0.0")
  sockets.push(a)
  const ch = a.channel("rooms:lobby", {user: "a"})
  ch.on("presence_count", p => counts.push(p.count))
  ch.on("presence_state", () => assert.fail("no presence_state in count mode"))
  assert.equal((await joinResult(ch)).status, "ok")
  await until(() => counts.at(-1) === 1, 5000, () => `count 1, got ${counts}`)
  assert.equal(counts[0], 0, "the join's own push: the count before it")
  for(const user of ["b", "b", "c"]){
    const sock = await connectPhoenix(s.wsUrl, "1.0.0")
    sockets.push(sock)
    assert.equal((await joinResult(sock.channel("rooms:lobby", {user}))).status, "ok")
  }
  await until(() => counts.at(-1) === 3, 5000, () => `count 3 (distinct users), got ${counts}`)
})

test("presence is off unless configured: no presence messages", T, async t => {
  const s = await server([])
  const socket = await connectPhoenix(s.wsUrl, "2.0.0")
  t.after(() => closePhoenix(socket))
  const ch = socket.channel("rooms:lobby", {user: "alice"})
  let presence = 0
  ch.on("presence_state", () => presence++)
  ch.on("presence_diff", () => presence++)
  assert.equal((await joinResult(ch)).status, "ok")
  const got = nextEvent(ch, "new:msg")
  ch.push("new:msg", {user: "alice", body: "after"})
  await got
  assert.equal(presence, 0)
  const metrics = await (await fetch(`http://127.0.0.1:${s.apiPort}/metrics`)).text()
  assert.match(metrics, /\nthrong_presence_topics 0\n/)
})

test("a presence key over --max-presence-bytes refuses the join", T, async t => {
  const s = await server(["--presence", "rooms:lobby=param:user", "--max-presence-bytes", "16"])
  const socket = await connectPhoenix(s.wsUrl, "2.0.0")
  t.after(() => closePhoenix(socket))
  const res = await joinResult(socket.channel("rooms:lobby", {user: "x".repeat(17)}))
  assert.deepEqual(res, {status: "error", response: {reason: "presence key too long"}})
  const ok = await joinResult(socket.channel("rooms:lobby", {user: "x".repeat(16)}))
  assert.equal(ok.status, "ok")
})
