#!/usr/bin/env node
// Backplane throughput and cross-node fan-out latency: one redis-server
// against a 3-master Redis Cluster (sharded pub/sub), in the same run.
//
// For each backend: two `throng serve` nodes A and B (`--redis URL`, a
// relay topic rule `bench:*`), TOPICS topics; on B one subscriber socket per
// topic; on A publisher sockets joined to every topic push `new:msg` round
// robin at a fixed offered rate, each carrying its send time. Measured over
// each step's window: broadcasts/s delivered on B (B's own
// throng_backplane_received_total), the latency from the push on A to the
// frame at B's subscriber (p50, p99), and the Redis processes' CPU time
// (INFO cpu) per published broadcast. The rate steps up until
// B gets less than 90% of what A published.
//
// Usage: node scripts/backplane-bench.mjs [--topics 64] [--seconds 5] [--rates 2000,5000,10000,20000,40000]
// Needs target/ci/throng (or THRONG_BIN), redis-server and redis-cli >= 7.
import {spawn} from "node:child_process"
import {writeFileSync, mkdtempSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import WebSocket from "ws"
import {startRedis, freePort, redisCommand} from "../tests/cluster/helpers.mjs"
import {startCluster} from "../tests/cluster/redis_cluster.mjs"

const arg = (name, dflt) => { const i = process.argv.indexOf(`--${name}`); return i > 0 ? process.argv[i + 1] : dflt }
const TOPICS = Number(arg("topics", 64))
const SECONDS = Number(arg("seconds", 5))
const RATES = arg("rates", "2000,5000,10000,20000,40000").split(",").map(Number)
const PUBLISHERS = 4
const BIN = process.env.THRONG_BIN || path.resolve("target/ci/throng")
const sleep = ms => new Promise(r => setTimeout(r, ms))

const dir = mkdtempSync(path.join(tmpdir(), "throng-bpbench-"))
const config = path.join(dir, "bench.toml")
writeFileSync(config, `[[topics]]\npattern = "bench:*"\njoin = "anyone"\npush = ["*"]\n`)

/** CPU seconds a Redis process used so far (INFO cpu: used_cpu_sys + used_cpu_user, microsecond resolution). */
async function cpuSeconds(port){
  const text = await redisCommand(port, ["INFO", "cpu"], {done: t => /used_cpu_user_main_thread:[\d.]+\r\n/.test(t)})
  const f = name => Number(text.match(new RegExp(`^${name}:([\\d.]+)`, "m"))[1])
  return f("used_cpu_sys") + f("used_cpu_user")
}
const cpuOf = async ports => (await Promise.all(ports.map(cpuSeconds))).reduce((x, y) => x + y, 0)

async function node(url){
  const api = await freePort()
  const proc = spawn(BIN, ["serve", "--port", "0", "--bind", "127.0.0.1", "--redis", url, "--config", config,
    "--push-rate", "0", "--api-bind", `127.0.0.1:${api}`, "--shards", "1"], {stdio: ["ignore", "pipe", "inherit"]})
  const port = await new Promise((resolve, reject) => {
    let buf = ""
    proc.stdout.on("data", d => { buf += d; const m = buf.match(/listening on \S+:(\d+)/); if(m){ resolve(Number(m[1])) } })
    proc.once("exit", c => reject(new Error(`throng exited ${c}`)))
  })
  return {proc, port, api}
}

async function metric(api, name){
  const text = await (await fetch(`http://127.0.0.1:${api}/metrics`)).text()
  return Number(text.match(new RegExp(`^${name} (\\d+)$`, "m"))?.[1] ?? NaN)
}

function socket(port){
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/socket/websocket?vsn=2.0.0`)
    ws.once("open", () => resolve(ws))
    ws.once("error", reject)
  })
}

async function join(ws, topics){
  let ref = 0
  const pending = new Set(topics)
  await new Promise(resolve => {
    const on = data => {
      const [, , topic, event] = JSON.parse(data)
      if(event === "phx_reply"){ pending.delete(topic); if(pending.size === 0){ ws.off("message", on); resolve() } }
    }
    ws.on("message", on)
    for(const t of topics){ ws.send(JSON.stringify([String(++ref), String(ref), t, "phx_join", {}])) }
  })
}

async function run(label, url, redisPorts){
  const a = await node(url)
  const b = await node(url)
  const topics = Array.from({length: TOPICS}, (_, i) => `bench:${i}`)
  const subs = []
  let lat = []
  let got = 0
  for(const t of topics){
    const ws = await socket(b.port)
    await join(ws, [t])
    ws.on("message", data => {
      const s = data.toString()
      const at = s.indexOf('"at":')
      if(at < 0){ return }
      got++
      lat.push(performance.now() + performance.timeOrigin - Number(s.slice(at + 5, s.indexOf("}", at))))
    })
    subs.push(ws)
  }
  const pubs = []
  // publisher i pushes (and, as a member, gets back) the topics j with j % PUBLISHERS == i
  for(let i = 0; i < PUBLISHERS; i++){
    const ws = await socket(a.port)
    await join(ws, topics.filter((_, j) => j % PUBLISHERS === i))
    pubs.push(ws)
  }
  await sleep(500)
  const rows = []
  for(const rate of RATES){
    lat = []
    got = 0
    const cpu0 = await cpuOf(redisPorts)
    const pub0 = await metric(a.api, "throng_backplane_published_total")
    const rec0 = await metric(b.api, "throng_backplane_received_total")
    const t0 = Date.now()
    let sent = 0
    let ref = 0
    while(Date.now() - t0 < SECONDS * 1000){
      const due = Math.floor((Date.now() - t0) / 1000 * rate)
      while(sent < due){
        const t = topics[sent % TOPICS]
        const ws = pubs[(sent % TOPICS) % PUBLISHERS]
        ws.send(`[null,"${++ref}","${t}","new:msg",{"at":${performance.now() + performance.timeOrigin}}]`)
        sent++
      }
      await sleep(2)
    }
    await sleep(1000)
    const secs = (Date.now() - t0 - 1000) / 1000
    const cpu1 = await cpuOf(redisPorts)
    const published = await metric(a.api, "throng_backplane_published_total") - pub0
    const received = await metric(b.api, "throng_backplane_received_total") - rec0
    lat.sort((x, y) => x - y)
    const q = p => lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(1) : "-"
    const row = {label, offered: rate, published_per_s: Math.round(published / secs), received_per_s: Math.round(received / secs),
      delivered_to_clients: got, p50_ms: q(0.5), p99_ms: q(0.99),
      redis_cpu_us_per_msg: published ? ((cpu1 - cpu0) * 1e6 / published).toFixed(1) : null,
      redis_cpu_pct: Math.round((cpu1 - cpu0) / secs * 100)}
    console.log(JSON.stringify(row))
    rows.push(row)
    if(received < 0.9 * published || published < 0.9 * rate * SECONDS){ break }
  }
  for(const ws of [...subs, ...pubs]){ ws.terminate() }
  a.proc.kill("SIGTERM"); b.proc.kill("SIGTERM")
  await sleep(500)
  return rows
}

const started = new Date().toISOString()
const one = await startRedis()
const rows1 = await run("one redis-server", one.url, [one.port])
await one.stop()
const cluster = await startCluster({replicas: 0})
const rows3 = await run("3-master Redis Cluster", cluster.url, cluster.masters().map(m => m.port))
await cluster.stop()
console.log(`# ${started}, ${TOPICS} topics, ${SECONDS} s per step`)
console.log("| backend | offered/s | published/s (A) | cross-node received/s (B) | p50 ms | p99 ms | Redis CPU per message | Redis CPU |")
console.log("|---|---|---|---|---|---|---|---|")
for(const r of [...rows1, ...rows3]){
  console.log(`| ${r.label} | ${r.offered} | ${r.published_per_s} | ${r.received_per_s} | ${r.p50_ms} | ${r.p99_ms} | ${r.redis_cpu_us_per_msg} us | ${r.redis_cpu_pct}% |`)
}
process.exit(0)
