// Server memory per idle joined WebSocket, plain and over TLS, in one run:
// starts `throng serve` twice (plain, then --tls-cert with a fresh ECDSA
// P-256 certificate), opens N sockets that each join one channel and stay
// idle, and reads the server's RSS (VmRSS) at N/10 and at N: the slope is
// the bytes each socket adds. Usage:
//   THRONG_BIN=target/release/throng node scripts/tls_memory.mjs [N]
// (N up to ~18,000: the open-files limit of one process on this machine.)
import {spawn, execFileSync} from "node:child_process"
import {mkdtempSync, readFileSync} from "node:fs"
import os from "node:os"
import path from "node:path"
import WebSocket from "ws"

const N = Number(process.argv[2] || 10000)
const BIN = process.env.THRONG_BIN || "target/release/throng"
const dir = mkdtempSync(path.join(os.tmpdir(), "throng-tlsmem-"))
execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
  "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
  "-keyout", path.join(dir, "k.pem"), "-out", path.join(dir, "c.pem")], {stdio: "ignore"})
const ca = readFileSync(path.join(dir, "c.pem"))

function start(args){
  const proc = spawn(BIN, ["serve", "--port", "0", "--bind", "127.0.0.1", "--api-bind", "none",
    "--idle-timeout", "0", "--shards", "1", ...args], {stdio: ["ignore", "pipe", "inherit"]})
  return new Promise(resolve => {
    let out = ""
    proc.stdout.on("data", d => {
      out += d
      const m = out.match(/listening on \S+:(\d+)/)
      if(m){ resolve({proc, port: Number(m[1])}) }
    })
  })
}

const rss = pid => Number(readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]) * 1024

function open(url, i, tls){
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, tls ? {ca, perMessageDeflate: false} : {perMessageDeflate: false})
    ws.on("open", () => ws.send(JSON.stringify(["1", "1", "rooms:mem", "phx_join", {user: `u${i}`}])))
    ws.on("message", () => resolve(ws))
    ws.on("error", reject)
  })
}

async function fill(url, from, to, tls, held){
  for(let i = from; i < to; i += 200){
    const batch = []
    for(let j = i; j < Math.min(to, i + 200); j++){ batch.push(open(url, j, tls)) }
    held.push(...await Promise.all(batch))
  }
}

async function measure(tls){
  const {proc, port} = await start(tls ? ["--tls-cert", path.join(dir, "c.pem"), "--tls-key", path.join(dir, "k.pem")] : [])
  const url = `${tls ? "wss" : "ws"}://localhost:${port}/socket/websocket?vsn=2.0.0`
  const held = []
  const base = Math.floor(N / 10)
  await fill(url, 0, base, tls, held)
  await new Promise(r => setTimeout(r, 1000))
  const a = rss(proc.pid)
  const t0 = Date.now()
  await fill(url, base, N, tls, held)
  const secs = (Date.now() - t0) / 1000
  await new Promise(r => setTimeout(r, 1000))
  const b = rss(proc.pid)
  const per = (b - a) / (N - base)
  for(const ws of held){ ws.terminate() }
  proc.kill("SIGKILL")
  return {per, a, b, secs}
}

const plain = await measure(false)
const tlsRun = await measure(true)
console.log(`${N} idle joined sockets (1 shard), server RSS slope from ${Math.floor(N / 10)} to ${N}:`)
console.log(`  plain: ${plain.per.toFixed(0)} B/socket (${(plain.a / 1048576).toFixed(1)} -> ${(plain.b / 1048576).toFixed(1)} MiB; ${((N - N / 10) / plain.secs).toFixed(0)} connect+join/s from node)`)
console.log(`  TLS:   ${tlsRun.per.toFixed(0)} B/socket (${(tlsRun.a / 1048576).toFixed(1)} -> ${(tlsRun.b / 1048576).toFixed(1)} MiB; ${((N - N / 10) / tlsRun.secs).toFixed(0)} connect+join/s from node)`)
console.log(`  TLS adds ${(tlsRun.per - plain.per).toFixed(0)} B per idle socket (goal <= 2048)`)
