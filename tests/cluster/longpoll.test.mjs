// Long-poll with `throng serve --workers 2 --redis ...`: the kernel spreads
// TCP connections over the workers (SO_REUSEPORT), so consecutive requests
// of one long-poll session reach either worker. The worker that holds the
// session must get them all (forwarded through Redis), and the session
// receives broadcasts made on either worker.
import {test} from "node:test"
import assert from "node:assert/strict"
import {LongPoll} from "phoenix"
import {startRedis, startThrong, lobbyClient, closeAll, connectionOwners, waitFor} from "./helpers.mjs"
import {RawHttp, connectPhoenix, closePhoenix, joinResult, nextEvent} from "../e2e/helpers.mjs"

const T = {timeout: 60000}
const WINDOW_S = 2

async function cluster(t){
  const redis = await startRedis()
  t.after(() => redis.stop())
  // --public-metrics: each worker's /metrics on the connection it holds
  const server = await startThrong(["--workers", "2", "--redis", redis.url, "--longpoll-window", String(WINDOW_S),
    "--public-metrics"])
  t.after(() => server.stop())
  // the supervisor prints its `worker I pid P` lines after `listening on`
  await server.line(/^worker 1 pid \d+/)
  const pids = [...server.workers().values()]
  assert.equal(pids.length, 2, server.lines.join("\n"))
  return {server, pids}
}

/** The worker pid holding the server side of the connection from local port `port`. */
const ownerOf = (server, pids, port) =>
  waitFor(() => connectionOwners(server.port, pids).get(port), 5000, `the worker of local port ${port}`)

/** Raw HTTP connections until each worker holds one: Map pid -> connection. */
async function connPerWorker(t, server, pids){
  const byPid = new Map()
  for(let i = 0; i < 40 && byPid.size < pids.length; i++){
    const conn = await RawHttp.connect(server.port)
    t.after(() => conn.close())
    const pid = await ownerOf(server, pids, conn.sock.localPort)
    if(!byPid.has(pid)){ byPid.set(pid, conn) } else { conn.close() }
  }
  assert.equal(byPid.size, pids.length, "no connection reached one of the workers")
  return byPid
}

/** A WebSocket lobby client on each worker: Map pid -> client. */
async function wsClientPerWorker(t, server, pids){
  const clients = []
  t.after(() => closeAll(clients))
  const byPid = new Map()
  for(let i = 0; i < 40 && byPid.size < pids.length; i++){
    const c = await lobbyClient(server.wsUrl, `ws${i}`)
    clients.push(c)
    const pid = await ownerOf(server, pids, c.localPort())
    if(!byPid.has(pid)){ byPid.set(pid, c) }
  }
  assert.equal(byPid.size, pids.length, "no WebSocket client reached one of the workers")
  return byPid
}

/** One long-poll request on a kept-alive raw connection: the JSON body. */
async function lpOn(conn, method, query, body = null){
  const head = [`${method} /socket/longpoll?${query} HTTP/1.1`, "Host: x"]
  if(body !== null){
    head.push("Content-Type: application/x-ndjson", `Content-Length: ${Buffer.byteLength(body)}`)
  }
  conn.send(head.join("\r\n") + "\r\n\r\n" + (body ?? ""))
  const res = await conn.response({ms: 20000})
  assert.equal(res.status, 200)
  return JSON.parse(res.body.toString("utf8"))
}

/** /metrics of the worker holding `conn` (kept alive, so the same worker). */
async function metricsOn(conn){
  conn.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
  const res = await conn.response()
  const out = {}
  for(const line of res.body.toString("utf8").split("\n")){
    const m = line.match(/^([a-z_]+) ([0-9.]+)$/)
    if(m){ out[m[1]] = Number(m[2]) }
  }
  return out
}

test("raw: one session's requests alternate between the two workers; broadcasts from both arrive", T, async t => {
  const {server, pids} = await cluster(t)
  const conns = await connPerWorker(t, server, pids)
  const [home, away] = pids
  const onHome = conns.get(home), onAway = conns.get(away)
  const ws = await wsClientPerWorker(t, server, pids)

  // the session starts on `home`; everything after alternates
  const created = await lpOn(onHome, "GET", "vsn=2.0.0")
  assert.equal(created.status, 410)
  const q = `vsn=2.0.0&token=${created.token}`
  assert.deepEqual(await lpOn(onAway, "POST", q, JSON.stringify(["1", "1", "rooms:lobby", "phx_join", {}])), {status: 200})
  const joined = await lpOn(onAway, "GET", q)
  assert.equal(joined.status, 200)
  assert.deepEqual(JSON.parse(joined.messages[0]), ["1", "1", "rooms:lobby", "phx_reply", {status: "ok", response: {}}])

  // a broadcast made on each worker reaches the session, polled through the other worker
  const bodies = []
  let turn = 0
  for(const pid of pids){
    const body = `from-worker-${pid}`
    ws.get(pid).send(body)
    await waitFor(async () => {
      const conn = turn++ % 2 ? onHome : onAway
      const res = await lpOn(conn, "GET", q)
      assert.ok(res.status === 200 || res.status === 204, JSON.stringify(res))
      assert.equal(res.token, created.token)
      for(const m of res.messages){
        const [, , topic, event, payload] = JSON.parse(m)
        if(topic === "rooms:lobby" && event === "new:msg"){ bodies.push(payload.body) }
      }
      return bodies.includes(body)
    }, 20000, `${body} at the long-poll session`)
  }
  assert.deepEqual(bodies, pids.map(pid => `from-worker-${pid}`))

  // and its pushes, POSTed through the worker without the session, reach WebSocket clients on both
  const push = ["1", "2", "rooms:lobby", "new:msg", {user: "lp", body: "from the long-poll"}]
  assert.deepEqual(await lpOn(onAway, "POST", q, JSON.stringify(push)), {status: 200})
  await waitFor(() => [...ws.values()].every(c => c.count("from the long-poll") === 1), 10000,
    "the long-poll push at the WebSocket clients of both workers")

  // the session is on `home`; `away` forwarded to it through Redis
  const mHome = await metricsOn(onHome)
  const mAway = await metricsOn(onAway)
  assert.equal(mHome.throng_longpoll_sessions, 1)
  assert.equal(mAway.throng_longpoll_sessions, 0)
  assert.ok(mAway.throng_longpoll_forwarded_total >= 4, JSON.stringify(mAway))
  assert.ok(mAway.throng_backplane_control_sent_total >= 4)
  assert.ok(mHome.throng_backplane_control_received_total >= 4)
  assert.equal(mAway.throng_longpoll_forward_timeouts_total, 0)
})

/**
 * A `fetch` for phoenix.js that opens a fresh TCP connection per request, so
 * the kernel picks a worker each time, and records which worker it was.
 */
function spreadingFetch(server, pids, seen){
  return async (url, {method = "GET", headers = {}, body = null, signal} = {}) => {
    const aborted = () => Object.assign(new Error("aborted"), {name: "AbortError"})
    if(signal?.aborted){ throw aborted() }
    const conn = await RawHttp.connect(server.port)
    const onAbort = () => conn.close()
    signal?.addEventListener("abort", onAbort)
    try {
      seen.push(await ownerOf(server, pids, conn.sock.localPort))
      const u = new URL(url)
      const head = [`${method} ${u.pathname}${u.search} HTTP/1.1`, `Host: ${u.host}`, "Connection: close"]
      for(const [k, v] of Object.entries(headers)){ head.push(`${k}: ${v}`) }
      if(body !== null){ head.push(`Content-Length: ${Buffer.byteLength(body)}`) }
      conn.send(head.join("\r\n") + "\r\n\r\n" + (body ?? ""))
      const res = await conn.response({ms: 30000})
      return {status: res.status, text: async () => res.body.toString("utf8")}
    } catch(err){
      throw signal?.aborted ? aborted() : err
    } finally {
      signal?.removeEventListener("abort", onAbort)
      conn.close()
    }
  }
}

test("phoenix.js over long-poll, each request on a new connection: both workers serve it, the session stays", T, async t => {
  const {server, pids} = await cluster(t)
  const ws = await wsClientPerWorker(t, server, pids)
  const seen = []
  const realFetch = globalThis.fetch
  globalThis.fetch = spreadingFetch(server, pids, seen)
  t.after(() => { globalThis.fetch = realFetch })

  const socket = await connectPhoenix(server.wsUrl, "2.0.0", {transport: LongPoll})
  t.after(() => closePhoenix(socket))
  let closes = 0
  socket.onClose(() => { closes++ })
  const channel = socket.channel("rooms:lobby", {user: "lp"})
  assert.deepEqual(await joinResult(channel, 10000), {status: "ok", response: {}})
  const token = socket.conn.token

  // a broadcast made on each worker arrives
  for(const pid of pids){
    const body = `phx-from-${pid}`
    const got = nextEvent(channel, "new:msg", 15000, p => p.body === body)
    ws.get(pid).send(body)
    assert.deepEqual(await got, {user: ws.get(pid).name, body})
  }
  // its push reaches the WebSocket clients of both workers
  channel.push("new:msg", {user: "lp", body: "phx-from-lp"})
  await waitFor(() => [...ws.values()].every(c => c.count("phx-from-lp") === 1), 10000,
    "the long-poll push at both workers' WebSocket clients")

  // its requests went to both workers, and it kept one session throughout
  await waitFor(() => new Set(seen).size === pids.length, 20000, "requests on both workers")
  assert.equal(closes, 0, "the long-poll socket closed (its session was lost)")
  assert.equal(socket.conn.token, token)
  t.diagnostic(`${seen.length} requests: ${pids.map(p => `${seen.filter(s => s === p).length} on ${p}`).join(", ")}`)
})

/** Metrics of `pid`'s worker until `pred` holds (the connection is kept alive: same worker). */
const metricsUntil = (conn, pred, label) => waitFor(async () => {
  const m = await metricsOn(conn)
  return pred(m) ? m : null
}, 10000, label)

test("a poll whose connection closes on the other worker: the messages that come next wait for the next poll", T, async t => {
  const {server, pids} = await cluster(t)
  const conns = await connPerWorker(t, server, pids)
  const [home, away] = pids
  const onHome = conns.get(home), onAway = conns.get(away)
  const ws = await wsClientPerWorker(t, server, pids)

  const created = await lpOn(onHome, "GET", "vsn=2.0.0")
  const q = `vsn=2.0.0&token=${created.token}`
  assert.deepEqual(await lpOn(onHome, "POST", q, JSON.stringify(["1", "1", "rooms:lobby", "phx_join", {}])), {status: 200})
  assert.equal((await lpOn(onHome, "GET", q)).status, 200)

  // A poll through `away` parks at the session on `home`; then its connection closes.
  onAway.send(`GET /socket/longpoll?${q} HTTP/1.1\r\nHost: x\r\n\r\n`)
  await metricsUntil(onHome, m => m.throng_longpoll_polls_waiting === 1, "the forwarded poll parked on home")
  onAway.close()
  // `away` tells `home`, which takes the poll back.
  await metricsUntil(onHome, m => m.throng_longpoll_polls_waiting === 0, "the closed poll taken back")

  ws.get(home).send("after the close")
  const bodies = []
  await waitFor(async () => {
    const res = await lpOn(onHome, "GET", q)
    assert.ok(res.status === 200 || res.status === 204, JSON.stringify(res))
    for(const m of res.messages){
      const [, , topic, event, payload] = JSON.parse(m)
      if(topic === "rooms:lobby" && event === "new:msg"){ bodies.push(payload.body) }
    }
    return bodies.length > 0
  }, 20000, "the broadcast at the session's next poll")
  assert.deepEqual(bodies, ["after the close"])
})
