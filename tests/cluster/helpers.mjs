// Helpers for the cluster tests: a real redis-server on a free port, throng
// processes whose stdout is kept (worker pid lines), phoenix.js clients that
// record every new:msg they get, and which worker process holds a client's
// connection (from /proc).
import {spawn} from "node:child_process"
import {existsSync, readFileSync, readdirSync, readlinkSync} from "node:fs"
import net from "node:net"
import {THRONG_BIN, REPO_ROOT, connectPhoenix, closePhoenix, joinResult, withTimeout, deferred} from "../e2e/helpers.mjs"

export {THRONG_BIN, withTimeout}

export const REDIS_BIN = process.env.REDIS_SERVER || "redis-server"

// everything spawned here dies with the test process
const live = new Set()
process.on("exit", () => {
  for(const proc of live){ try { proc.kill("SIGKILL") } catch(_e){ /* gone */ } }
})

export const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

/** Polls `check` (sync or async) every `every` ms until it returns truthy; throws after `ms`. */
export async function waitFor(check, ms, label, every = 25){
  const deadline = Date.now() + ms
  for(;;){
    const value = await check()
    if(value){ return value }
    if(Date.now() > deadline){ throw new Error(`timed out after ${ms} ms waiting for ${label}`) }
    await sleep(every)
  }
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort(){
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.once("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const {port} = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

function track(proc){
  live.add(proc)
  const exited = new Promise(resolve => proc.once("exit", (code, signal) => { live.delete(proc); resolve({code, signal}) }))
  return exited
}

async function stopProc(proc, exited, ms = 5000){
  if(proc.exitCode !== null || proc.signalCode !== null){ return exited }
  proc.kill("SIGTERM")
  const timer = setTimeout(() => { try { proc.kill("SIGKILL") } catch(_e){ /* gone */ } }, ms)
  try { return await exited } finally { clearTimeout(timer) }
}

// ---------------------------------------------------------------------------
// redis

/**
 * Sends one command to Redis over RESP; resolves with the reply text once
 * `done(text)` holds (default: one whole line, enough for +PONG).
 */
export function redisCommand(port, args, {ms = 2000, done = t => t.endsWith("\r\n")} = {}){
  return withTimeout(new Promise((resolve, reject) => {
    const sock = net.connect({port, host: "127.0.0.1"})
    let buf = ""
    sock.setEncoding("utf8")
    sock.on("connect", () => {
      sock.write(`*${args.length}\r\n` + args.map(a => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join(""))
    })
    sock.on("data", d => {
      buf += d
      if(done(buf)){ sock.destroy(); resolve(buf) }
    })
    sock.on("error", err => { sock.destroy(); reject(err) })
    sock.on("close", () => reject(new Error(`redis closed the connection (got ${JSON.stringify(buf)})`)))
  }), ms, `redis ${args.join(" ")}`)
}

/** Subscribers Redis counts on a channel (PUBSUB NUMSUB: *2 $len channel :count). */
export async function numsub(port, channel){
  const reply = await redisCommand(port, ["PUBSUB", "NUMSUB", channel], {done: t => /:\d+\r\n$/.test(t)})
  return Number(reply.match(/:(\d+)\r\n$/)[1])
}

/**
 * Starts `redis-server --port P --save '' --appendonly no` on 127.0.0.1 (a free
 * port unless given) and waits for PONG. Returns {port, url, stop(), kill()}.
 */
export async function startRedis(port){
  port = port ?? await freePort()
  const proc = spawn(REDIS_BIN, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
    {stdio: ["ignore", "pipe", "pipe"]})
  let log = ""
  proc.stdout.setEncoding("utf8")
  proc.stdout.on("data", d => { log += d })
  proc.stderr.resume()
  const exited = track(proc)
  await waitFor(async () => {
    if(proc.exitCode !== null){ throw new Error(`redis-server exited: ${log}`) }
    try { return (await redisCommand(port, ["PING"], {ms: 500})).startsWith("+PONG") } catch(_e){ return false }
  }, 5000, `redis-server on port ${port}`)
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    proc,
    stop: () => stopProc(proc, exited),
    kill: async () => { proc.kill("SIGKILL"); return exited },
  }
}

// ---------------------------------------------------------------------------
// throng

/**
 * Spawns `throng serve --port 0 --bind 127.0.0.1 ...args` and waits for its
 * `listening on` line. Keeps stdout lines: `workers()` gives the latest pid
 * of each worker from the supervisor's `worker I pid P` lines.
 */
export async function startThrong(args = [], {ms = 15000} = {}){
  if(!existsSync(THRONG_BIN)){
    throw new Error(`server binary not found at ${THRONG_BIN}: run \`cargo build --release -p throng\` or set THRONG_BIN`)
  }
  const proc = spawn(THRONG_BIN, ["serve", "--port", "0", "--bind", "127.0.0.1", ...args],
    {cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"], env: {...process.env, RUST_BACKTRACE: "0"}})
  const exited = track(proc)
  const lines = []
  let stderr = ""
  let partial = ""
  const waiters = new Set()
  proc.stdout.setEncoding("utf8")
  proc.stdout.on("data", chunk => {
    partial += chunk
    const parts = partial.split("\n")
    partial = parts.pop()
    lines.push(...parts)
    waiters.forEach(w => w())
  })
  proc.stderr.setEncoding("utf8")
  proc.stderr.on("data", chunk => { stderr += chunk })
  const line = (re, wait = ms) => waitFor(() => {
    if(proc.exitCode !== null || proc.signalCode !== null){
      throw new Error(`throng exited (${proc.exitCode ?? proc.signalCode}) waiting for ${re}\nstdout: ${lines.join("\n")}\nstderr: ${stderr}`)
    }
    return lines.map(l => l.match(re)).find(Boolean)
  }, wait, `a stdout line ${re}`, 10)
  const m = await line(/^listening on (\S+):(\d+)$/)
  const port = Number(m[2])
  // The supervisor prints its `worker I pid P` lines right after `listening
  // on`: wait for all of them, so `workers()` is complete when this returns.
  const wi = args.indexOf("--workers")
  const expected = wi >= 0 ? Number(args[wi + 1]) : 0
  for(let i = 0; i < expected; i++){
    await line(new RegExp(`^worker ${i} pid \\d+`))
  }
  const api = lines.map(l => l.match(/^api at (\S+):(\d+)$/)).find(Boolean)
  return {
    port,
    /** the server API's port (worker 0's with --workers), null without one */
    apiPort: api ? Number(api[2]) : null,
    wsUrl: `ws://127.0.0.1:${port}`,
    proc,
    lines,
    line,
    stderr: () => stderr,
    exited,
    /** index -> latest pid, from `worker I pid P` lines */
    workers(){
      const out = new Map()
      for(const l of lines){
        const w = l.match(/^worker (\d+) pid (\d+)(?: api \S+)?$/)
        if(w){ out.set(Number(w[1]), Number(w[2])) }
      }
      return out
    },
    stop: () => stopProc(proc, exited),
  }
}

/** Runs `throng serve ...args` expecting it to exit by itself; returns {code, signal, stderr}. */
export async function runThrong(args, ms = 15000){
  const proc = spawn(THRONG_BIN, ["serve", "--port", "0", "--bind", "127.0.0.1", ...args],
    {cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"], env: {...process.env, RUST_BACKTRACE: "0"}})
  const exited = track(proc)
  let stderr = ""
  let stdout = ""
  proc.stderr.setEncoding("utf8")
  proc.stderr.on("data", d => { stderr += d })
  proc.stdout.setEncoding("utf8")
  proc.stdout.on("data", d => { stdout += d })
  try {
    const {code, signal} = await withTimeout(exited, ms, `throng ${args.join(" ")} to exit`)
    return {code, signal, stderr, stdout}
  } finally {
    if(proc.exitCode === null && proc.signalCode === null){ proc.kill("SIGKILL") }
  }
}

// ---------------------------------------------------------------------------
// clients

/**
 * A phoenix.js client joined to rooms:lobby that records the body of every
 * new:msg it receives (in order) and counts its socket opens and closes.
 * Reconnects and rejoins after 100 ms.
 */
export async function lobbyClient(wsUrl, name, vsn = "2.0.0"){
  const socket = await connectPhoenix(wsUrl, vsn, {reconnectAfterMs: () => 100, rejoinAfterMs: () => 100})
  const client = {name, socket, bodies: [], opens: 1, closes: 0, joins: 0}
  socket.onOpen(() => { client.opens++ })
  socket.onClose(() => { client.closes++ })
  const channel = socket.channel("rooms:lobby", {user: name})
  channel.on("new:msg", payload => { client.bodies.push(payload.body) })
  channel.on("phx_reply", () => {})
  const joined = channel.join()
  joined.receive("ok", () => { client.joins++ })
  client.channel = channel
  const res = await new Promise(resolve => {
    joined.receive("ok", () => resolve("ok")).receive("error", r => resolve(r)).receive("timeout", () => resolve("timeout"))
  })
  if(res !== "ok"){ throw new Error(`${name}: join rooms:lobby: ${JSON.stringify(res)}`) }
  /** how many times `body` arrived */
  client.count = body => client.bodies.filter(b => b === body).length
  /** the client's local TCP port (to find the worker holding it) */
  client.localPort = () => socket.conn?._socket?.localPort
  client.send = body => channel.push("new:msg", {user: name, body})
  client.close = () => closePhoenix(socket)
  return client
}

export {joinResult}

/**
 * A phoenix.js socket joined to `topic` with the README's snippet (join
 * params a function of the last ref seen). `log` holds, in arrival order,
 * every message ({n, ref}), every join reply ({join: resp}) and every
 * join refused ({refused: resp}; phoenix.js joins again after 100 ms).
 */
export async function feedClient(wsUrl, topic, name){
  const socket = await connectPhoenix(wsUrl, "2.0.0", {
    reconnectAfterMs: () => 50 + Math.floor(Math.random() * 100),
    rejoinAfterMs: () => 100,
  })
  let since = null
  const ch = socket.channel(topic, () => (since ? {since} : {}))
  const c = {name, socket, log: [], got: [], joins: [], refused: [], waiters: []}
  const wake = () => { c.waiters = c.waiters.filter(w => !w()) }
  ch.on("n", (msg, ref) => { since = ref; c.log.push({n: msg.n, ref}); c.got.push(msg.n); wake() })
  ch.join()
    .receive("ok", resp => { c.log.push({join: resp}); c.joins.push(resp); wake() })
    .receive("error", resp => { c.log.push({refused: resp}); c.refused.push(resp); wake() })
  c.until = (check, ms, label) => {
    if(check()){ return Promise.resolve() }
    const done = deferred()
    c.waiters.push(() => check() && (done.resolve(), true))
    return withTimeout(done.promise, ms, `${name}: ${label}`)
  }
  c.localPort = () => socket.conn?._socket?.localPort
  await c.until(() => c.joins.length === 1, 5000, "the first join")
  return c
}

/** Closes clients, never throwing. */
export async function closeAll(clients){
  await Promise.all(clients.map(c => c.close().catch(() => {})))
}

/**
 * Which of `pids` holds the server side of each connection to `serverPort`:
 * a Map from the client's local port to the pid. Reads /proc/net/tcp{,6}
 * for (local port = serverPort, remote port) -> inode, then /proc/PID/fd.
 */
export function connectionOwners(serverPort, pids){
  const inodeToRemote = new Map()
  for(const file of ["/proc/net/tcp", "/proc/net/tcp6"]){
    let text
    try { text = readFileSync(file, "utf8") } catch(_e){ continue }
    for(const row of text.split("\n").slice(1)){
      const f = row.trim().split(/\s+/)
      if(f.length < 10){ continue }
      const localPort = parseInt(f[1].split(":").pop(), 16)
      const remotePort = parseInt(f[2].split(":").pop(), 16)
      if(localPort === serverPort && f[3] === "01"){ inodeToRemote.set(f[9], remotePort) }
    }
  }
  const owners = new Map()
  for(const pid of pids){
    let fds = []
    try { fds = readdirSync(`/proc/${pid}/fd`) } catch(_e){ continue }
    for(const fd of fds){
      let target
      try { target = readlinkSync(`/proc/${pid}/fd/${fd}`) } catch(_e){ continue }
      const m = target.match(/^socket:\[(\d+)\]$/)
      if(m && inodeToRemote.has(m[1])){ owners.set(inodeToRemote.get(m[1]), pid) }
    }
  }
  return owners
}

/**
 * `n` clients made by `make(i)`, then more (at most 32) until each of the
 * server's workers `pids` holds one; each client gets `.pid`, its worker.
 * SO_REUSEPORT spreads connections by a hash of their addresses, so `n`
 * of them all land on one of 2 workers with a chance of 2^(1-n): 1 in 128
 * for 8, enough to fail a CI run now and then.
 */
export async function clientsOnEveryWorker(server, pids, n, make){
  const clients = []
  const everyWorkerHoldsOne = async () => {
    const owners = await waitFor(() => {
      const o = connectionOwners(server.port, pids)
      return clients.every(c => o.has(c.localPort())) && o
    }, 5000, "every client's worker in /proc")
    for(const c of clients){ c.pid = owners.get(c.localPort()) }
    return pids.every(pid => clients.some(c => c.pid === pid))
  }
  for(let i = 0; i < n; i++){ clients.push(await make(i)) }
  while(!(await everyWorkerHoldsOne())){
    if(clients.length >= n + 32){
      await closeAll(clients)
      throw new Error(`${clients.length} clients, and a worker holds none: ${clients.map(c => c.pid)}`)
    }
    clients.push(await make(clients.length))
  }
  return clients
}

/** Fetches /metrics over a fresh connection and returns {name: value}. */
export async function metrics(port){
  const res = await fetch(`http://127.0.0.1:${port}/metrics`)
  const text = await res.text()
  const out = {}
  for(const line of text.split("\n")){
    const m = line.match(/^([a-z_]+) ([0-9.]+)$/)
    if(m){ out[m[1]] = Number(m[2]) }
  }
  return out
}
