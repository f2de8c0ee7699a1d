// The world of the Redis fault tests (redis_faults.test.mjs): throng nodes,
// each reaching Redis through the URL it is given (a fault proxy's), with an
// app backend taking lifecycle events, and on every node clients of each
// kind the faults must not hurt:
//
// - two on rooms:lobby (no history): one sends a probe every 100 ms, the
//   other times its arrival (the victim latency of local delivery);
// - two on a history topic (`feed:TAG`), rejoining with `since` (the
//   second's connection dropped during the fault);
// - presences on `room:p-TAG`: one stays, one leaves during the fault, one
//   joins during it, and (with `flicker`) one joins and leaves during it;
// - topics for the occupied/vacated events: one this node alone holds
//   (left during the fault on node 0, kept on the others), one it holds
//   throughout, one it joins during the fault, and (with `flicker`) one
//   joined and left during it.
//
// `run(t, world, fault)` makes a round: the clients of a fresh TAG, the
// fault injected while history messages are published (each retried until
// a node gives it a position), probes sent, /metrics sampled and the
// presences and topics changed; then the fault healed, and the checks:
// every history client has every message of the topic's history exactly
// once and in order, every probe arrived once at its node's receiver,
// presences converged everywhere (no ghost), each occupancy transition
// reached the backend once, and the fault showed in each node's log and
// /metrics as the fault's `visible` says.
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {monitorEventLoopDelay} from "node:perf_hooks"
import {startThrong, startRedis, lobbyClient, feedClient, waitFor, sleep, closeAll} from "./helpers.mjs"
import {startProxy} from "./fault_proxy.mjs"
import {presenceClient, sorted} from "../e2e/presence_helpers.mjs"
import {connectPhoenix, closePhoenix, joinResult} from "../e2e/helpers.mjs"
import {startBackend} from "../e2e/hook_helpers.mjs"
import {launchChromium} from "../e2e/helpers.mjs"

export const KEY = "redis-faults-api-key-0123456789"
const SECRET = "redis-faults-hook-secret-of-at-least-32-bytes"

/** The log lines of a lost and of a rebuilt Redis session, of a slow episode's start and end. */
export const LOST = /lost the connection to Redis/
export const BACK = /reconnected to Redis/
export const SLOW = /Redis at \S+ is slow/
export const QUICK = /answers quickly again/

/** `/metrics` of a node (its API's) as {"name{labels}": value}. */
export async function scrape(node){
  const text = await (await fetch(`http://127.0.0.1:${node.apiPort}/metrics`)).text()
  const out = {}
  for(const line of text.split("\n")){
    const m = line.match(/^([a-z_]+(?:\{[^}]*\})?) ([-0-9.e+]+)$/)
    if(m){ out[m[1]] = Number(m[2]) }
  }
  return out
}

/** The values of `name{link=...}` in a scrape. */
export const links = (m, name) => Object.entries(m).filter(([k]) => k.startsWith(`${name}{`)).map(([, v]) => v)

async function linksUp(node){
  const up = links(await scrape(node), "throng_redis_connected")
  return up.length === 4 && up.every(v => v === 1)
}

/** Percentiles and max of `values` (ms), for the report. */
export function summary(values){
  if(!values.length){ return "no sample" }
  const s = [...values].sort((a, b) => a - b)
  const at = q => s[Math.min(s.length - 1, Math.floor(q * s.length))]
  return `n=${s.length} p50=${at(0.5)} p99=${at(0.99)} max=${s[s.length - 1]} ms`
}

/** The time (ms since the epoch) of the first line of `log` matching `re`, from its timestamp. */
export function when(log, re){
  const line = log.split("\n").find(l => re.test(l))
  const ts = line?.match(/^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z)/)?.[1]
  return ts ? Date.parse(ts) : null
}

/**
 * The backend, the config and one throng node per URL in `urls` (each
 * given as `--redis`), with `args` added. Everything stops after the test.
 */
export async function startWorld(t, urls, {args = [], presenceTimeout = 30} = {}){
  // The clients close first (t.after runs its hooks in order), while their
  // nodes still answer: a phoenix.js socket closed while it reconnects to a
  // node already stopped may go on reconnecting and keep the test process
  // alive after its tests, past the stage's per-file bound.
  const clients = []
  t.after(() => closeAll(clients))
  const backend = await startBackend(SECRET)
  t.after(() => backend.kill())
  const dir = mkdtempSync(path.join(tmpdir(), "throng-redis-faults-"))
  t.after(() => rmSync(dir, {recursive: true, force: true}))
  const config = path.join(dir, "faults.toml")
  writeFileSync(config, `
[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
secret = "${SECRET}"
events = true

[[topics]]
pattern = "feed:*"
join = "anyone"
history_size = 5000
history_ttl = 600

[[topics]]
pattern = "*"
join = "anyone"
`)
  const common = ["--config", config, "--api-key", KEY, "--presence", "room:p-*=param:user",
    "--presence-interval", "50", "--presence-timeout", String(presenceTimeout), ...args]
  const nodes = []
  for(const url of urls){
    const node = await startThrong([...common, "--redis", url])
    t.after(() => node.stop())
    nodes.push(node)
  }
  return {backend, nodes, clients}
}

/** POSTs n on `topic` to `node`'s API; {status, ref}, status 0 when the request failed. */
async function publish(node, topic, n){
  try {
    const res = await fetch(`http://127.0.0.1:${node.apiPort}/api/broadcast`, {
      method: "POST",
      headers: {"x-api-key": KEY, "content-type": "application/json"},
      body: JSON.stringify({topic, event: "n", payload: {n}}),
      signal: AbortSignal.timeout(15000),
    })
    const body = await res.json()
    return {status: res.status, ref: body.ref}
  } catch(_e){
    return {status: 0}
  }
}

/** Every message of `topic`'s history, oldest first, as its numbers. */
async function history(node, topic){
  const res = await fetch(`http://127.0.0.1:${node.apiPort}/api/history?topic=${encodeURIComponent(topic)}&limit=5000`,
    {headers: {"x-api-key": KEY}})
  assert.equal(res.status, 200, `GET /api/history of ${topic}`)
  return (await res.json()).messages.map(m => m.payload.n)
}

/** The occupied/vacated events the backend got for `topic`, in order. */
async function transitions(backend, topic){
  return (await backend.stats()).events
    .filter(e => !e.failed && e.topic === topic && ["occupied", "vacated"].includes(e.type))
    .map(e => e.type)
}

async function join(wsUrl, topic, clients){
  const socket = await connectPhoenix(wsUrl, "2.0.0")
  clients.push({close: () => closePhoenix(socket)})
  const channel = socket.channel(topic, {})
  assert.equal((await joinResult(channel)).status, "ok", `join ${topic}`)
  return {socket, channel, leave: () => new Promise(resolve => channel.leave().receive("ok", resolve))}
}

/** The clients of one round (see the module doc). */
async function roundClients(world, tag){
  const {nodes, clients} = world
  const per = []
  for(const [i, node] of nodes.entries()){
    const lobby = [await lobbyClient(node.wsUrl, `l${i}a`), await lobbyClient(node.wsUrl, `l${i}b`)]
    const arrived = new Map()
    lobby[1].channel.on("new:msg", p => {
      if(p.body.startsWith(`${tag}:${i}:`)){ arrived.set(p.body, [...(arrived.get(p.body) || []), Date.now()]) }
    })
    const feed = [await feedClient(node.wsUrl, `feed:${tag}`, `f${i}a`), await feedClient(node.wsUrl, `feed:${tag}`, `f${i}b`)]
    const presence = {
      stay: await presenceClient(node.wsUrl, `stay${i}`, {topic: `room:p-${tag}`}),
      leaver: await presenceClient(node.wsUrl, `leaver${i}`, {topic: `room:p-${tag}`}),
    }
    const only = await join(node.wsUrl, `room:only${i}-${tag}`, clients)
    await join(node.wsUrl, `room:kept${i}-${tag}`, clients)
    clients.push(...lobby, ...feed.map(f => ({close: () => closePhoenix(f.socket)})), ...Object.values(presence))
    per.push({node, lobby, arrived, sent: new Map(), feed, presence, only})
  }
  return per
}

/** Sends a probe every 100 ms on every node until `stop.done`. */
async function probe(per, tag, stop){
  for(let k = 0; !stop.done; k++){
    for(const [i, p] of per.entries()){
      const body = `${tag}:${i}:${k}`
      p.sent.set(body, Date.now())
      p.lobby[0].send(body)
    }
    await sleep(100)
  }
}

/**
 * Publishes 1, 2, ... on `topic` until `stop.done`, each retried (on the
 * next node) until one gives it a position, or `stop.abandoned` (the test
 * ended).
 */
async function publisher(nodes, topic, stop, log){
  let n = 0
  let attempt = 0
  while(!stop.done){
    n++
    for(;;){
      if(stop.abandoned){ return n }
      const r = await publish(nodes[attempt++ % nodes.length], topic, n)
      log.push(r.status)
      if(r.status === 200){ break }
      await sleep(100)
    }
    await sleep(40)
  }
  return n
}

/** Scrapes every node every 250 ms until `stop.done`: [{at, node, m}]. */
async function sampler(nodes, stop, out){
  while(!stop.done){
    for(const [i, node] of nodes.entries()){
      try { out.push({at: Date.now(), node: i, m: await scrape(node)}) } catch(_e){ /* a sample missed */ }
    }
    await sleep(250)
  }
}

/**
 * While the fault lasts, on every node: (with `flicker`, first, so that
 * the node sends its changes for it into the fault: a presence and a
 * topic joined, left a second later) a history client reconnects and
 * rejoins, a presence leaves and one joins, a topic empties (node 0) and
 * one fills.
 */
async function churn(world, per, tag, flicker){
  if(flicker){
    await Promise.all(per.map(async (p, i) => {
      const ghost = await presenceClient(p.node.wsUrl, `flicker${i}`, {topic: `room:p-${tag}`})
      const topic = await join(p.node.wsUrl, `room:flicker${i}-${tag}`, world.clients)
      await sleep(1000)
      await ghost.close()
      await topic.leave()
    }))
  }
  // A history client's connection drops: it reconnects and rejoins with
  // `since` while Redis does not answer.
  for(const p of per){ p.feed[1].socket.conn.close() }
  for(const [i, p] of per.entries()){
    await p.presence.leaver.leave()
    if(i === 0){ await p.only.leave() }
    p.presence.joiner = await presenceClient(p.node.wsUrl, `joiner${i}`, {topic: `room:p-${tag}`})
    world.clients.push(p.presence.joiner)
    await join(p.node.wsUrl, `room:new${i}-${tag}`, world.clients)
  }
}

/**
 * Every history client has the topic's whole history, each message once, in
 * order; a rejoin refused meanwhile was refused only for the history being
 * unavailable (Redis away: the client joined again). Returns the number of
 * messages and the refusals per node.
 */
async function checkHistory(per, nodes, tag, last){
  for(const p of per){
    await Promise.all(p.feed.map(c => c.until(() => c.got.includes(last), 20000, `message ${last} (got ${c.got.length})`)))
  }
  const want = await history(nodes[0], `feed:${tag}`)
  for(const p of per){
    for(const c of p.feed){
      assert.deepEqual(c.got, want, `${tag}: ${c.name} has every message of the history once, in order (log: ${JSON.stringify(c.log.slice(-20))})`)
      for(const j of c.joins.slice(1)){ assert.deepEqual(j, {recovered: true}, `${tag}: ${c.name}'s rejoins recovered`) }
      for(const r of c.refused){ assert.deepEqual(r, {reason: "history unavailable"}, `${tag}: ${c.name}'s refused rejoins`) }
    }
  }
  return {messages: want.length, refused: per.map(p => p.feed.reduce((n, c) => n + c.refused.length, 0))}
}

/** Every probe reached its node's receiver once; the latencies per node. */
async function checkProbes(per, tag){
  const latencies = per.map(() => [])
  for(const [i, p] of per.entries()){
    await waitFor(() => [...p.sent.keys()].every(b => p.arrived.has(b)), 5000,
      `${tag}: every probe of node ${i} delivered locally (${[...p.sent.keys()].filter(b => !p.arrived.has(b)).length} missing)`)
    for(const [body, at] of p.sent){
      assert.equal(p.arrived.get(body).length, 1, `${tag}: probe ${body} once`)
      latencies[i].push(p.arrived.get(body)[0] - at)
    }
  }
  return latencies
}

/** Everyone lists the stayers and the joiners, and still does a second later: no one else (no ghost). */
async function checkPresence(per){
  const online = sorted(Object.fromEntries(per.flatMap((_, i) => [[`stay${i}`, 1], [`joiner${i}`, 1]])))
  const listing = per.flatMap(p => [p.presence.stay, p.presence.joiner])
  for(const c of listing){ await c.await(online, 20000) }
  await sleep(1000)
  for(const c of listing){ assert.deepEqual(c.counts(), online, `${c.user} lists no ghost`) }
}

/** Each transition reached the backend once. */
async function checkTransitions(world, per, fault){
  const tag = fault.name
  const kept = fault.expect?.kept ?? (() => ["occupied"])
  const topics = per.flatMap((_, i) => [
    [`room:only${i}-${tag}`, i === 0 ? ["occupied", "vacated"] : ["occupied"]],
    [`room:kept${i}-${tag}`, kept(i)],
    [`room:new${i}-${tag}`, ["occupied"]],
    [`room:p-${tag}`, ["occupied"]],
    [`room:after${i}-${tag}`, ["occupied"]],
    ...(fault.flicker ? [[`room:flicker${i}-${tag}`, []]] : []),
  ])
  await waitFor(async () => {
    for(const [name, events] of topics){
      if((await transitions(world.backend, name)).length < events.length){ return false }
    }
    return true
  }, 20000, `${tag}: every transition reported`)
  await sleep(500)
  for(const [name, events] of topics){
    assert.deepEqual(await transitions(world.backend, name), events, `${tag}: the transitions of ${name}`)
  }
}

/**
 * The fault showed: on each node of `visible.nodes` (all by default) the
 * log lines of `visible.logs` after the injection, and a sample of
 * /metrics taken while it lasted for which `visible.metric(m)` holds; the
 * nodes of `visible.quiet` never lost Redis.
 */
function checkVisible(fault, nodes, logs, samples){
  const v = fault.visible
  if(!v){ return }
  for(const i of v.quiet ?? []){ assert.doesNotMatch(logs[i], LOST, `${fault.name}: node ${i} kept Redis`) }
  for(const i of v.nodes ?? nodes.map((_, i) => i)){
    for(const re of v.logs){ assert.match(logs[i], re, `${fault.name}: node ${i} logs ${re}`) }
    if(v.metric){
      assert.ok(samples.some(s => s.node === i && v.metric(s.m)), `${fault.name}: node ${i}'s /metrics showed the fault`)
    }
  }
}

/**
 * One round of `fault`: {name, inject(), heal(), during(): what is done
 * while it lasts (returns figures for the report), lasts (ms from the
 * injection to the heal, at least), late (ms after the heal for what
 * the fault held back to reach Redis), flicker, settle (ms
 * between the injection and the changes), expect.kept(i): the
 * transitions of node i's kept topic, expect.refused: the nodes that
 * must have refused a rejoin with since (its history unavailable),
 * visible: see checkVisible}.
 * Returns the report, the nodes' logs since the injection and when it was.
 */
export async function run(t, world, fault){
  const {nodes} = world
  const tag = fault.name
  const per = await roundClients(world, tag)
  await waitFor(async () => (await transitions(world.backend, `room:kept${nodes.length - 1}-${tag}`)).length === 1, 5000,
    "the round's topics occupied")
  // The test process's own delays (its event loop held by the machine's
  // load or a browser's start) count in every probe's latency: measured
  // too, so the report tells them from a node's.
  const loop = monitorEventLoopDelay({resolution: 10})
  loop.enable()
  const stop = {done: false}
  const sampling = {done: false}
  const statuses = []
  const samples = []
  // A round that fails midway stops its loops too (the sampler's would
  // keep the test process alive after the test).
  t.after(() => { stop.done = stop.abandoned = true; sampling.done = true })
  const probing = probe(per, tag, stop)
  const publishing = publisher(nodes, `feed:${tag}`, stop, statuses)
  await sleep(500)
  const marks = nodes.map(n => n.stderr().length)
  const injected = Date.now()
  await fault.inject()
  const watching = sampler(nodes, sampling, samples)
  await sleep(fault.settle ?? 500)
  await churn(world, per, tag, fault.flicker)
  const during = fault.during ? await fault.during() : {}
  if(fault.lasts){ await sleep(Math.max(0, injected + fault.lasts - Date.now())) }
  const healed = Date.now()
  await fault.heal()
  await waitFor(async () => (await Promise.all(nodes.map(linksUp))).every(Boolean), 30000,
    "every node's Redis links up again")
  const up = Date.now()
  // What reaches Redis late has arrived; a topic joined on every node after
  // (a node reads its occupancy outbox with each change).
  await sleep(fault.late ?? 300)
  for(const p of per){ await join(p.node.wsUrl, `room:after${per.indexOf(p)}-${tag}`, world.clients) }
  stop.done = true
  await probing
  const last = await publishing
  const {messages, refused} = await checkHistory(per, nodes, tag, last)
  for(const i of fault.expect?.refused ?? []){
    assert.ok(refused[i] >= 1, `${tag}: node ${i} refused a rejoin with since while Redis was away`)
  }
  loop.disable()
  const latencies = await checkProbes(per, tag)
  await checkPresence(per)
  await checkTransitions(world, per, fault)
  sampling.done = true
  await watching
  const logs = nodes.map((n, i) => n.stderr().slice(marks[i]))
  checkVisible(fault, nodes, logs, samples)
  const report = {
    victim_latency: latencies.map(summary),
    test_loop_delay_max_ms: Math.round(loop.max / 1e6),
    messages,
    refused_rejoins: refused,
    refused_publishes: statuses.filter(s => s !== 200).length,
    fault_ms: healed - injected,
    links_up_after_heal_ms: up - healed,
    ...during,
  }
  t.diagnostic(`${tag}: ${JSON.stringify(report)}`)
  return {report, logs, injected}
}

/** One redis-server, a fault proxy to it per node, and two nodes behind them. */
export async function twoNodes(t, opts = {}){
  const redis = await startRedis()
  t.after(() => redis.stop())
  const proxies = [await startProxy(redis.port), await startProxy(redis.port)]
  t.after(() => Promise.all(proxies.map(p => p.stop())))
  const world = await startWorld(t, proxies.map(p => p.url), opts)
  return {redis, proxies, world}
}

/** Applies `f` to every proxy. */
export const all = proxies => f => proxies.forEach(f)
/** Whether a scrape shows a Redis link down. */
export const lost = m => links(m, "throng_redis_connected").some(v => v === 0)

/** The Redis tile's row of `node` in its dashboard (Chromium), once `done(row)`; a sample without Chromium. */
export async function redisTile(t, node, done){
  const url = `http://127.0.0.1:${node.apiPort}`
  let browser
  try {
    browser = await launchChromium()
  } catch(_e){
    // No Chromium here: the stream the tile is drawn from.
    const res = await fetch(`${url}/api/dashboard`, {headers: {"X-API-Key": KEY}})
    const reader = res.body.getReader()
    let text = ""
    for(;;){
      text += new TextDecoder().decode((await reader.read()).value)
      const data = text.split("\n").filter(l => l.startsWith("data:")).map(l => JSON.parse(l.slice(5)))
      const self = data.at(-1)?.nodes.find(n => n.node === data.at(-1).node)
      const down = self && Object.entries(self.counters).filter(([k, v]) => k.startsWith("throng_redis_connected{") && v === 0)
        .map(([k]) => k.match(/link="(\w+)"/)[1]).sort().join(" ")
      if(down && done({down})){ await reader.cancel(); return {down} }
    }
  }
  try {
    const page = await (await browser.newContext()).newPage()
    await page.goto(`${url}/dashboard`)
    await page.fill("#key", KEY)
    await page.click("#use-key")
    let row
    await waitFor(async () => {
      row = await page.locator("#backplane tbody tr").first().evaluate(tr => ({
        down: tr.dataset.down, text: tr.textContent,
      })).catch(() => null)
      return row && done(row)
    }, 10000, "the Redis tile to show the links down")
    return row
  } finally {
    await browser.close()
  }
}
