// Presence across nodes with a real redis-server: phoenix.js Presence clients
// on two `throng serve --redis` nodes see one another (several metas per key,
// updates, leaves); with `serve --workers 2`, a SIGKILLed worker's users leave
// everywhere within --presence-timeout, and the restarted worker causes no
// leave or join for the users of the surviving worker.
import {test} from "node:test"
import assert from "node:assert/strict"
import {startRedis, startThrong, connectionOwners, waitFor} from "./helpers.mjs"
import {presenceClient, closeAll} from "../e2e/presence_helpers.mjs"

const T = {timeout: 60000}
const TIMEOUT_S = 2
const PRESENCE = ["--presence", "rooms:lobby=param:user", "--presence-interval", "50",
  "--presence-timeout", String(TIMEOUT_S)]

test("two nodes: metas, updates and leaves cross nodes", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const a = await startThrong(["--redis", redis.url, "--shards", "2", ...PRESENCE])
  t.after(() => a.stop())
  const b = await startThrong(["--redis", redis.url, "--shards", "2", ...PRESENCE])
  t.after(() => b.stop())
  const clients = []
  t.after(() => closeAll(clients))

  const alice = await presenceClient(a.wsUrl, "alice")
  const bob = await presenceClient(b.wsUrl, "bob", {vsn: "1.0.0"})
  const alice2 = await presenceClient(b.wsUrl, "alice") // a second tab, on the other node
  clients.push(alice, bob, alice2)
  for(const c of clients){ await c.await({alice: 2, bob: 1}) }

  // ten more: five users, one tab on each node
  for(let i = 0; i < 10; i++){
    clients.push(await presenceClient(i % 2 ? a.wsUrl : b.wsUrl, `u${i % 5}`, {vsn: i % 3 ? "2.0.0" : "1.0.0"}))
  }
  const all = {alice: 2, bob: 1, u0: 2, u1: 2, u2: 2, u3: 2, u4: 2}
  await Promise.all(clients.map(c => c.await(all)))

  // an update on node B reaches node A: new phx_ref, phx_ref_prev the old
  const old = alice.online().bob[0].phx_ref
  await new Promise((resolve, reject) => bob.channel.push("presence:update", {status: "away"})
    .receive("ok", resolve).receive("error", reject))
  await waitFor(() => clients.every(c => c.online().bob?.[0]?.status === "away"), 5000, "bob away everywhere")
  for(const c of clients){
    const meta = c.online().bob[0]
    assert.equal(meta.phx_ref_prev, old)
    assert.notEqual(meta.phx_ref, old)
  }
  // leave on B and a disconnect on A reach the other node
  await bob.leave()
  const u0onA = clients.find(c => c.user === "u0" && c.socket.endPointURL().includes(`:${a.port}/`))
  await u0onA.close()
  const rest = clients.filter(c => c !== bob && c !== u0onA)
  await Promise.all(rest.map(c => c.await({alice: 2, u0: 1, u1: 2, u2: 2, u3: 2, u4: 2})))
  for(const c of rest){ assert.equal(c.leavesOf("alice").length, 0) }
})

test("SIGKILL a worker: its users leave within --presence-timeout, the others never flicker", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const server = await startThrong(["--workers", "2", "--redis", redis.url, ...PRESENCE])
  t.after(() => server.stop())
  const clients = []
  t.after(() => closeAll(clients))

  // clients until both workers hold some (the kernel spreads connections)
  const pids = [...server.workers().values()]
  for(let i = 0; i < 40; i++){
    const c = await presenceClient(server.wsUrl, `user${i}`)
    clients.push(c)
    c.pid = await waitFor(() => connectionOwners(server.port, pids).get(c.socket.conn._socket.localPort), 5000,
      "the client's worker")
    if(i >= 7 && pids.every(p => clients.some(c => c.pid === p))){ break }
  }
  const everyone = Object.fromEntries(clients.map(c => [c.user, 1]))
  await Promise.all(clients.map(c => c.await(everyone)))
  const [victimIndex, victimPid] = [...server.workers().entries()][0]
  const victims = clients.filter(c => c.pid === victimPid)
  const survivors = clients.filter(c => c.pid !== victimPid)
  assert.ok(victims.length > 0 && survivors.length > 0, `victims ${victims.length}, survivors ${survivors.length}`)

  // (the clients do not reconnect: phoenix.js's reconnect is 60 s in these
  // tests, so the victims' users are gone for good)
  const killedAt = Date.now()
  process.kill(victimPid, "SIGKILL")
  const remaining = Object.fromEntries(survivors.map(c => [c.user, 1]))
  await Promise.all(survivors.map(c => c.await(remaining, TIMEOUT_S * 1000 + 3000)))
  const took = Date.now() - killedAt
  t.diagnostic(`${victims.length} users of the killed worker left everywhere ${took} ms after the SIGKILL ` +
    `(--presence-timeout ${TIMEOUT_S} s)`)

  // the supervisor restarts the worker; a newcomer sees the survivors at once
  await server.line(new RegExp(`^worker ${victimIndex} pid (?!${victimPid}\\b)(\\d+)(?: api \\S+)?$`), 10000)
  const late = await presenceClient(server.wsUrl, "late")
  clients.push(late)
  const withLate = {...remaining, late: 1}
  await Promise.all([late, ...survivors].map(c => c.await(withLate)))
  // no survivor's user ever left or joined again, as anyone saw it
  for(const c of [late, ...survivors]){
    for(const s of survivors){
      assert.equal(c.leavesOf(s.user).length, 0, `${c.user} saw ${s.user} leave`)
      assert.equal(c.joinsOf(s.user).length, 1, `${c.user} saw ${s.user} join ${c.joinsOf(s.user).length} times`)
    }
  }
})
