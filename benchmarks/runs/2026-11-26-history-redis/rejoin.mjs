// Run from the repository: THRONG_BIN=target/ci/throng node benchmarks/runs/2026-11-26-history-redis/rejoin.mjs MISSED
// Redis commands per rejoin with `since`: 50 phoenix.js clients on a history
// topic miss MISSED messages, reconnect, rejoin; Redis's INFO commandstats
// and throng's /metrics counted around the rejoins.
import {startRedis, startThrong, redisCommand, metrics, waitFor} from "../../../tests/cluster/helpers.mjs"
import {connectPhoenix, closePhoenix} from "../../../tests/e2e/helpers.mjs"
import {writeFileSync} from "node:fs"
const MISSED = Number(process.argv[2] || 30)
const CONFIG = new URL("rejoin.toml", import.meta.url).pathname
writeFileSync(CONFIG, `[[topics]]\npattern = "feed:*"\nhistory_size = 2000\n`)
const redis = await startRedis()
const srv = await startThrong(["--redis", redis.url, "--config", CONFIG, "--api-key", "rejoin-run-api-key"])
const pub = async n => { const r = await fetch(`http://127.0.0.1:${srv.apiPort}/api/broadcast`, {method: "POST", headers: {"x-api-key": "rejoin-run-api-key", "content-type": "application/json"}, body: JSON.stringify({topic: "feed:1", event: "n", payload: {n}})}); if(r.status !== 200) throw new Error(await r.text()) }
const clients = []
for(let i = 0; i < 50; i++){
  const socket = await connectPhoenix(srv.wsUrl, "2.0.0", {reconnectAfterMs: () => 50})
  let since = null
  const c = {socket, got: [], joins: []}
  const ch = socket.channel("feed:1", () => (since ? {since} : {}))
  ch.on("n", (m, ref) => { since = ref; c.got.push(m.n) })
  ch.join().receive("ok", r => c.joins.push(r))
  clients.push(c)
}
await waitFor(() => clients.every(c => c.joins.length === 1), 5000, "joins")
for(let n = 1; n <= 10; n++){ await pub(n) }
await waitFor(() => clients.every(c => c.got.length === 10), 5000, "first 10")
await Promise.all(clients.map(c => new Promise(r => c.socket.disconnect(r))))
for(let n = 11; n <= 10 + MISSED; n++){ await pub(n) }
const stats = async () => {
  const t = await redisCommand(redis.port, ["INFO", "commandstats"], {done: t => t.includes("cmdstat_ping") || t.length > 400 && t.endsWith("\r\n")})
  const get = c => Number((t.match(new RegExp(`cmdstat_${c}:calls=(\\d+)`)) || [0, 0])[1])
  return {evalsha: get("evalsha"), xrange: get("xrange"), all: [...t.matchAll(/calls=(\d+)/g)].reduce((a, m) => a + Number(m[1]), 0)}
}
const m0 = await metrics(srv.apiPort)
const s0 = await stats()
const t0 = Date.now()
clients.forEach(c => c.socket.connect())
await waitFor(() => clients.every(c => c.got.length === 10 + MISSED && c.joins.length === 2), 20000, "all recovered")
const ms = Date.now() - t0
const s1 = await stats()
const m1 = await metrics(srv.apiPort)
const ok = clients.every(c => c.joins[1].recovered === true && c.got.every((n, i) => n === i + 1))
console.log(JSON.stringify({missed: MISSED, rejoins: 50, all_recovered_in_order: ok, ms,
  evalsha: s1.evalsha - s0.evalsha, xrange: s1.xrange - s0.xrange, redis_commands_all: s1.all - s0.all - 1,
  throng_reads: m1.throng_history_reads_total - m0.throng_history_reads_total,
  throng_read_commands: m1.throng_history_read_commands_total - m0.throng_history_read_commands_total}))
await Promise.all(clients.map(c => closePhoenix(c.socket)))
await srv.stop(); await redis.stop()
process.exit(0)
