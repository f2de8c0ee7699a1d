// Topic history in Redis Streams across a cluster, with the official phoenix
// client: a worker SIGKILLed while the server API publishes numbered
// messages (its clients reconnect to another worker, or the restarted one,
// and rejoin with `since`): every client sees every number exactly once, in
// the history's order. Redis restarted without persistence mid-stream: the
// clients rejoin with `recovered: false`, and a client never skips a
// message without having been told so.
import {test} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {startRedis, startThrong, connectionOwners, waitFor, sleep, feedClient} from "./helpers.mjs"
import {closePhoenix} from "../e2e/helpers.mjs"

const KEY = "history-api-key-0123456789"
const dir = mkdtempSync(path.join(tmpdir(), "throng-cluster-history-"))
const config = path.join(dir, "history.toml")
writeFileSync(config, `
[[topics]]
pattern = "feed:*"
history_size = 2000
history_ttl = 600
`)
process.on("exit", () => rmSync(dir, {recursive: true, force: true}))

function publisher(port){
  return async (topic, n) => {
    const res = await fetch(`http://127.0.0.1:${port}/api/broadcast`, {
      method: "POST",
      headers: {"x-api-key": KEY, "content-type": "application/json"},
      body: JSON.stringify({topic, event: "n", payload: {n}}),
    })
    const body = await res.json()
    return {status: res.status, ref: body.ref, body}
  }
}

test("--workers with Redis: a worker SIGKILLed mid-stream, every client still sees every number once, in order", {timeout: 45000}, async t => {
  const started0 = Date.now()
  const redis = await startRedis()
  t.after(() => redis.stop())
  const group = await startThrong(["--workers", "2", "--redis", redis.url, "--config", config, "--api-key", KEY])
  t.after(() => group.stop())
  const publish = publisher(group.apiPort)
  const topic = "feed:zero-loss"
  const clients = []
  t.after(() => Promise.all(clients.map(c => closePhoenix(c.socket))))
  const pids = [...group.workers().values()]
  const victim = group.workers().get(1) // worker 0 serves the API
  // 16 clients: SO_REUSEPORT spreads them over both workers (all on one
  // has a chance of 2^-15). Reading /proc is slow: once, for all of them.
  for(let i = 0; i < 16; i++){ clients.push(await feedClient(group.wsUrl, topic, `c${i}`)) }
  const owners = await waitFor(() => {
    const o = connectionOwners(group.port, pids)
    return clients.every(c => o.has(c.localPort())) && o
  }, 15000, "every client's worker in /proc", 200)
  const onVictim = clients.filter(c => owners.get(c.localPort()) === victim)
  assert.ok(onVictim.length > 0, "some client on worker 1")
  const t0 = Date.now()

  // ~200 a second in bursts of 4 for ~4 s; worker 1 SIGKILLed after ~1.5 s.
  const TOTAL = 800
  const offsetOf = {}
  const send = async n => {
    const r = await publish(topic, n)
    assert.equal(r.status, 200, JSON.stringify(r.body))
    offsetOf[n] = Number(r.ref.split(".")[1])
  }
  const started = Date.now()
  let killed = false
  for(let n = 1; n <= TOTAL; n += 4){
    await Promise.all([n, n + 1, n + 2, n + 3].map(send))
    if(!killed && Date.now() - started > 1500){
      process.kill(victim, "SIGKILL")
      killed = true
    }
    const ahead = (n + 3) * 5 - (Date.now() - started)
    if(ahead > 0){ await sleep(ahead) }
  }
  assert.ok(killed)
  const t1 = Date.now()
  await waitFor(() => group.workers().get(1) !== victim, 10000, "the supervisor to restart worker 1")
  // Once the last is in, so is everything before it.
  await send(TOTAL + 1)
  await Promise.all(clients.map(c => c.until(() => c.got.at(-1) === TOTAL + 1, 20000,
    `all ${TOTAL + 1} messages (got ${c.got.length})`)))
  const t2 = Date.now()
  const want = Object.keys(offsetOf).map(Number).sort((a, b) => offsetOf[a] - offsetOf[b])
  assert.equal(want.length, TOTAL + 1)
  t.diagnostic(`setup ${t0 - started0} ms, publishing ${t1 - t0} ms, catching up ${t2 - t1} ms`)
  for(const c of clients){
    assert.deepEqual(c.got, want, `client ${c.name}: every number once, in the offsets' order`)
    for(const j of c.joins.slice(1)){ assert.deepEqual(j, {recovered: true}, c.name) }
  }
  for(const c of onVictim){ assert.ok(c.joins.length >= 2, `${c.name} (on the killed worker) rejoined`) }
  t.diagnostic(`${clients.length} clients, ${onVictim.length} on the killed worker, ${TOTAL + 1} messages`)
})

test("Redis restarted without persistence mid-stream: clients rejoin with recovered: false, never a silent gap", {timeout: 45000}, async t => {
  let redis = await startRedis()
  const port = redis.port
  t.after(() => redis.stop())
  const a = await startThrong(["--redis", redis.url, "--config", config, "--api-key", KEY])
  t.after(() => a.stop())
  const b = await startThrong(["--redis", redis.url, "--config", config, "--api-key", KEY])
  t.after(() => b.stop())
  const publish = publisher(a.apiPort)
  const topic = "feed:restart"
  const clients = []
  t.after(() => Promise.all(clients.map(c => closePhoenix(c.socket))))
  for(let i = 0; i < 8; i++){ clients.push(await feedClient((i % 2 ? b : a).wsUrl, topic, `c${i}`)) }

  // Numbered messages, each retried until Redis gives it a position (503
  // while Redis is away); Redis killed after ~1 s and restarted empty.
  const position = {}
  const epochs = []
  let refused = 0
  const send = async n => {
    for(;;){
      const r = await publish(topic, n)
      if(r.status === 200){
        const [epoch, offset] = r.ref.split(".")
        if(!epochs.includes(epoch)){ epochs.push(epoch) }
        position[n] = {epoch, offset: Number(offset)}
        return
      }
      assert.equal(r.status, 503, JSON.stringify(r.body))
      assert.equal(r.body.error?.code ?? r.body.code ?? "history_unavailable", "history_unavailable")
      refused++
      await sleep(50)
    }
  }
  const TOTAL = 600
  const started = Date.now()
  let restarted = false
  for(let n = 1; n <= TOTAL; n += 2){
    await Promise.all([send(n), send(n + 1)])
    if(!restarted && Date.now() - started > 1000){
      await redis.kill()
      await sleep(300)
      redis = await startRedis(port)
      restarted = true
    }
    const ahead = (n + 1) * 5 - (Date.now() - started)
    if(ahead > 0){ await sleep(ahead) }
  }
  await send(TOTAL + 1)
  assert.equal(epochs.length, 2, `one epoch before the restart, one after: ${epochs}`)
  await Promise.all(clients.map(c => c.until(() => c.got.at(-1) === TOTAL + 1, 20000,
    `the last message (got ${c.got.length})`)))

  // The history's order: the first epoch's offsets, then the second's.
  const want = Object.keys(position).map(Number).sort((x, y) =>
    epochs.indexOf(position[x].epoch) - epochs.indexOf(position[y].epoch) || position[x].offset - position[y].offset)
  const next = new Map(want.map((n, i) => [n, want[i + 1]]))
  for(const c of clients){
    assert.ok(c.joins.some(j => j.recovered === false), `${c.name} was told it lost messages: ${JSON.stringify(c.joins)}`)
    assert.equal(new Set(c.got).size, c.got.length, `${c.name}: no duplicate`)
    // Between two messages a client got, either nothing was skipped, or a
    // join told it `recovered: false`.
    let prev = null
    let told = false
    for(const e of c.log){
      if(e.join){ told = told || e.join.recovered === false; continue }
      // A rejoin while Redis was away is refused (the client joins again).
      if(e.refused){ assert.deepEqual(e.refused, {reason: "history unavailable"}, `${c.name}'s refusal`); continue }
      if(prev !== null && next.get(prev) !== e.n){
        assert.ok(told, `${c.name} skipped from ${prev} to ${e.n} without recovered: false`)
      }
      prev = e.n
      told = false
    }
  }
  t.diagnostic(`${refused} publishes refused while Redis was away; joins per client: ${clients.map(c => c.joins.length)}`)
})
