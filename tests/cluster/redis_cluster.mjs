// A real Redis Cluster for the tests: 3 masters and 3 replicas
// (`redis-server --cluster-enabled yes`, then `redis-cli --cluster create
// ... --cluster-replicas 1`) on loopback, in a temporary directory, with a
// small cluster-node-timeout so a failover takes about a second. Every
// process is stopped by its pid (stop()), the directory removed.
import {spawn, spawnSync} from "node:child_process"
import {mkdtempSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {REDIS_BIN, freePort, redisCommand, waitFor} from "./helpers.mjs"

export const REDIS_CLI = process.env.REDIS_CLI || "redis-cli"
export const NODE_TIMEOUT_MS = 1000

/** Whether redis-server can run a cluster here (Redis 7: sharded pub/sub). */
export function clusterAvailable(){
  const v = spawnSync(REDIS_BIN, ["--version"], {encoding: "utf8"})
  const cli = spawnSync(REDIS_CLI, ["--version"], {encoding: "utf8"})
  const major = Number((v.stdout || "").match(/v=(\d+)/)?.[1] ?? 0)
  return v.status === 0 && cli.status === 0 && major >= 7
}

const live = new Set()
process.on("exit", () => {
  for(const p of live){ try { p.kill("SIGKILL") } catch(_e){ /* gone */ } }
})

/** One CLUSTER-capable redis-server on `port`, in `dir`. */
function startNode(dir, port){
  const proc = spawn(REDIS_BIN, [
    "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
    "--dir", dir, "--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`,
    "--cluster-node-timeout", String(NODE_TIMEOUT_MS),
    // a replica whose master died takes over at once, whatever its lag
    "--cluster-replica-validity-factor", "0",
  ], {stdio: ["ignore", "ignore", "ignore"]})
  live.add(proc)
  const exited = new Promise(resolve => proc.once("exit", () => { live.delete(proc); resolve() }))
  return {port, proc, exited, alive: () => proc.exitCode === null && proc.signalCode === null}
}

/** `CLUSTER INFO`'s fields on `port`. */
export async function clusterInfo(port){
  const text = await redisCommand(port, ["CLUSTER", "INFO"], {done: t => t.includes("cluster_stats_messages") || /\r\n$/.test(t) && t.includes("cluster_known_nodes")})
  return Object.fromEntries(text.split("\r\n").map(l => l.split(":")).filter(p => p.length === 2))
}

/** Runs redis-cli with `args`; returns its stdout (throws on failure). */
export function cli(args, ms = 30000){
  const r = spawnSync(REDIS_CLI, args, {encoding: "utf8", timeout: ms})
  if(r.status !== 0){ throw new Error(`redis-cli ${args.join(" ")}: ${r.stdout}\n${r.stderr}`) }
  return r.stdout
}

/**
 * Starts the cluster (3 masters, each with `replicas` replicas); returns {nodes, url, masters(), ownerOf(slot), stop()}.
 * `url` is `redis+cluster://` with every node as a seed.
 */
export async function startCluster({replicas = 1} = {}){
  const dir = mkdtempSync(path.join(tmpdir(), "throng-rcluster-"))
  const ports = []
  while(ports.length < 3 * (1 + replicas)){
    const p = await freePort()
    // the cluster bus listens on port + 10000: keep both free of each other
    if(p < 55000 && !ports.includes(p)){ ports.push(p) }
  }
  const nodes = ports.map(p => startNode(dir, p))
  const stop = async () => {
    for(const n of nodes){ if(n.alive()){ n.proc.kill("SIGKILL") } }
    await Promise.all(nodes.map(n => n.exited))
    rmSync(dir, {recursive: true, force: true})
  }
  try {
    for(const n of nodes){
      await waitFor(async () => {
        try { return (await redisCommand(n.port, ["PING"], {ms: 500})).startsWith("+PONG") } catch(_e){ return false }
      }, 15000, `redis-server on ${n.port}`)
    }
    cli(["--cluster", "create", ...ports.map(p => `127.0.0.1:${p}`), "--cluster-replicas", String(replicas), "--cluster-yes"])
    for(const n of nodes){
      await waitFor(async () => (await clusterInfo(n.port)).cluster_state === "ok", 15000, `cluster_state ok on ${n.port}`, 100)
    }
  } catch(e){
    await stop()
    throw e
  }
  const cluster = {
    nodes,
    dir,
    url: `redis+cluster://${ports.map(p => `127.0.0.1:${p}`).join(",")}`,
    /** [{port, slots: [[start, end]...]}] for the live masters, from CLUSTER NODES */
    masters(){
      const live = nodes.find(n => n.alive())
      const out = cli(["-p", String(live.port), "CLUSTER", "NODES"])
      return out.trim().split("\n").map(l => l.split(" "))
        .filter(f => f[2].includes("master") && !f[2].includes("fail"))
        .map(f => ({id: f[0], port: Number(f[1].split(":")[1].split("@")[0]),
          slots: f.slice(8).filter(s => /^\d+(-\d+)?$/.test(s)).map(s => s.split("-").map(Number))}))
    },
    /** the master node serving `slot` */
    ownerOf(slot){
      const m = cluster.masters().find(m => m.slots.some(([a, b = a]) => slot >= a && slot <= b))
      return nodes.find(n => n.port === m?.port)
    },
    stop,
  }
  return cluster
}

/** CRC16/XMODEM modulo 16384 with hash tags: the slot of a key or channel. */
export function slotOf(key){
  const open = key.indexOf("{")
  if(open >= 0){
    const close = key.indexOf("}", open + 1)
    if(close > open + 1){ key = key.slice(open + 1, close) }
  }
  let crc = 0
  for(const b of Buffer.from(key)){
    crc ^= b << 8
    for(let i = 0; i < 8; i++){ crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff }
  }
  return crc % 16384
}
