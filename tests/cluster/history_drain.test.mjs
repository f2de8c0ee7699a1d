// Topic history across a drain (issue 23's zero-loss test, its drain
// cut): `throng serve --workers 2 --redis`, 50 phoenix.js clients on a
// history topic, the server API publishing numbered messages at ~200 a
// second, and SIGHUP's rolling restart draining each worker in turn (1012,
// its clients reconnect to the other worker and rejoin with `since`).
// Every client must see every number exactly once, in the history's order,
// and every rejoin must be answered `recovered: true`.
//
// A drain needs a second node: the drained one stops accepting and exits,
// so recovery across it needs history every node shares (Redis). Memory
// history is the process's own; the single-node cuts (a proxy dropping the
// connection, POST /api/disconnect) are tests/e2e/history.test.mjs's.
import {test} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import net from "node:net"
import {connectPhoenix, closePhoenix, withTimeout, deferred} from "../e2e/helpers.mjs"
import {startRedis, startThrong, freePort, sleep} from "./helpers.mjs"

/** Whether 127.0.0.1:port can be listened on (a moment ago). */
const isFree = port => new Promise(resolve => {
  const srv = net.createServer()
  srv.once("error", () => resolve(false))
  srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)))
})

const CLIENTS = 50
const RATE = 200
const SECONDS = 15

// The publisher retries a message on the other worker when its request
// fails (the worker it reached is draining): that is safe only because a
// draining worker answers the API requests it has started before it exits
// (tests/e2e/api_drain.test.mjs). Before that, a batch published by the
// exiting worker but never answered went out twice (3,009 messages for
// 3,005), which this test caught.
test("a rolling restart drains every worker while the API publishes: every number once, in order, every rejoin recovered", {timeout: 90000}, async t => {
  const dir = mkdtempSync(path.join(tmpdir(), "throng-history-cluster-"))
  t.after(() => rmSync(dir, {recursive: true, force: true}))
  const config = path.join(dir, "history.toml")
  writeFileSync(config, "[[topics]]\npattern = \"feed:*\"\nhistory_size = 5000\n")
  const redis = await startRedis()
  t.after(() => redis.stop())
  // Worker i's API listens on apiPort + i: both must be free.
  let apiPort = await freePort()
  while(!await isFree(apiPort + 1)){ apiPort = await freePort() }
  const server = await startThrong(["--workers", "2", "--redis", redis.url, "--drain-seconds", "2",
    "--api-bind", `127.0.0.1:${apiPort}`, "--config", config])
  t.after(() => server.stop())

  const clients = []
  t.after(() => Promise.all(clients.map(c => closePhoenix(c.socket).catch(() => {}))))
  for(let i = 0; i < CLIENTS; i++){
    const socket = await connectPhoenix(server.wsUrl, i % 2 ? "1.0.0" : "2.0.0", {
      reconnectAfterMs: () => 20 + Math.floor(Math.random() * 60),
      rejoinAfterMs: () => 50,
    })
    let since = null
    const got = []
    const joins = []
    const closes = []
    const ch = socket.channel("feed:drain", () => (since ? {since} : {}))
    ch.on("n", (msg, ref) => { since = ref; got.push(msg.n) })
    // phoenix.js reports a reconnect attempt that failed before it opened
    // (reset in the handover between the workers' listeners: the race
    // crates/throng-server/src/transport/shard/drain.rs describes; phoenix.js
    // tries again) as a close 1006 too: only open sockets' closes count.
    let open = true
    const failedAttempts = []
    socket.onOpen(() => { open = true })
    socket.onClose(e => { (open ? closes : failedAttempts).push(e.code); open = false })
    const joined = deferred()
    ch.join().receive("ok", resp => { joins.push(resp); joined.resolve() })
    await withTimeout(joined.promise, 5000, `client ${i}'s join`)
    clients.push({socket, got, joins, closes, failedAttempts})
  }

  // Publishing through either worker's API (each is restarted in turn).
  let retries = 0
  const post = async n => {
    for(let attempt = 0; attempt < 100; attempt++){
      const port = apiPort + (attempt % 2)
      try {
        const res = await fetch(`http://127.0.0.1:${port}/api/broadcast`, {
          method: "POST", headers: {"content-type": "application/json"},
          body: JSON.stringify({topic: "feed:drain", event: "n", payload: {n}}),
        })
        if(res.status === 200){ return Number((await res.json()).ref.split(".")[1]) }
      } catch(_e){ /* that worker is restarting: the other one */ }
      retries++
      await sleep(20)
    }
    throw new Error(`message ${n} could not be published`)
  }
  const offsetOf = {}
  const started = Date.now()
  let total = 0
  let restarted = false
  while(Date.now() - started < SECONDS * 1000){
    const batch = [total + 1, total + 2, total + 3, total + 4]
    const offsets = await Promise.all(batch.map(post))
    batch.forEach((n, i) => { offsetOf[n] = offsets[i] })
    total += 4
    if(!restarted && Date.now() - started > 2000){
      server.proc.kill("SIGHUP")
      restarted = true
    }
    const ahead = total * (1000 / RATE) - (Date.now() - started)
    if(ahead > 0){ await sleep(ahead) }
  }
  await server.line(/^rolling restart done$/, 30000)
  offsetOf[total + 1] = await post(total + 1)
  total += 1
  t.diagnostic(`published ${total} messages in ${((Date.now() - started) / 1000).toFixed(1)} s (${retries} requests tried again on the other worker)`)
  const want = Object.keys(offsetOf).map(Number).sort((a, b) => offsetOf[a] - offsetOf[b])
  const deadline = Date.now() + 20000
  while(clients.some(c => c.got.at(-1) !== want.at(-1)) && Date.now() < deadline){ await sleep(50) }
  let moved = 0
  const failed = clients.reduce((sum, c) => sum + c.failedAttempts.length, 0)
  if(failed){ t.diagnostic(`${failed} reconnect attempts failed before opening (phoenix.js tried again)`) }
  for(const [i, c] of clients.entries()){
    assert.ok(c.closes.length >= 1, `client ${i} was never drained`)
    for(const code of c.closes){ assert.equal(code, 1012, `client ${i}: close code ${code}`) }
    moved += c.closes.length
    if(c.got.length !== want.length || c.got.some((n, k) => n !== want[k])){
      const k = c.got.findIndex((n, k) => n !== want[k])
      assert.fail(`client ${i}: ${c.got.length} messages for ${want.length}; first difference at ${k}: got ${c.got[k]}, want ${want[k]}`)
    }
    for(const j of c.joins.slice(1)){ assert.deepEqual(j, {recovered: true}, `client ${i}`) }
  }
  t.diagnostic(`${moved} drains of a client, every rejoin recovered: true`)
})
