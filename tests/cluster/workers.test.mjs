// `throng serve --workers 2 --redis ...`: worker processes on one port
// (SO_REUSEPORT) joined through Redis; a killed worker is restarted and its
// clients come back by themselves.
import {test} from "node:test"
import assert from "node:assert/strict"
import {spawnSync} from "node:child_process"
import {
  startRedis, startThrong, lobbyClient, closeAll, connectionOwners, waitFor, sleep, THRONG_BIN,
} from "./helpers.mjs"

const T = {timeout: 30000}

function alive(pid){
  try { process.kill(pid, 0); return true } catch(_e){ return false }
}
const N = 40

/** Connects n lobby clients; returns them with the pid of the worker holding each. */
async function connectClients(server, n, clients){
  for(let i = 0; i < n; i++){ clients.push(await lobbyClient(server.wsUrl, `c${i}`)) }
  const pids = [...server.workers().values()]
  const owners = await waitFor(() => {
    const o = connectionOwners(server.port, pids)
    return clients.every(c => o.has(c.localPort())) && o
  }, 5000, "every client's worker in /proc")
  for(const c of clients){ c.pid = owners.get(c.localPort()) }
  return pids
}

test("(b) one broadcast reaches 40 clients spread over 2 workers exactly once", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const server = await startThrong(["--workers", "2", "--redis", redis.url])
  t.after(() => server.stop())
  assert.equal(server.workers().size, 2, server.lines.join("\n"))
  assert.match(server.stderr(), /2 workers listening on .*together they allow about \d+ connections/)

  const clients = []
  t.after(() => closeAll(clients))
  const pids = await connectClients(server, N, clients)
  for(const pid of pids){
    assert.ok(clients.some(c => c.pid === pid), `worker pid ${pid} has no client: ${clients.map(c => c.pid)}`)
  }

  // a client of each worker broadcasts once
  for(const pid of pids){
    const sender = clients.find(c => c.pid === pid)
    sender.send(`from ${pid}`)
  }
  await waitFor(() => clients.every(c => pids.every(pid => c.count(`from ${pid}`) === 1)),
    10000, "both broadcasts at all 40 clients")
  await sleep(300)
  for(const c of clients){
    for(const pid of pids){ assert.equal(c.count(`from ${pid}`), 1, `${c.name} (worker ${c.pid}): from ${pid}`) }
  }
  // SIGTERM to the supervisor stops the workers and exits 0
  await closeAll(clients)
  const {code} = await server.stop()
  assert.equal(code, 0, server.stderr())
  for(const pid of pids){ assert.ok(!alive(pid), `worker ${pid} outlived the supervisor`) }
})

test("workers end with a SIGKILLed supervisor (PR_SET_PDEATHSIG)", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const server = await startThrong(["--workers", "2", "--redis", redis.url])
  t.after(() => server.stop())
  const pids = [...server.workers().values()]
  server.proc.kill("SIGKILL")
  await server.exited
  await waitFor(() => pids.every(pid => !alive(pid)), 5000, "the workers to exit")
})

test("(c) SIGKILL a worker: its clients reconnect, survivors lose nothing, broadcasts reach all", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  // One socket pushes 150 broadcasts at 200/s: past the default push budget (20/s).
  const server = await startThrong(["--workers", "2", "--redis", redis.url, "--push-rate", "0"])
  t.after(() => server.stop())

  const clients = []
  t.after(() => closeAll(clients))
  const pids = await connectClients(server, N, clients)
  const [victimIndex, victimPid] = [...server.workers().entries()][0]
  const victims = clients.filter(c => c.pid === victimPid)
  const survivors = clients.filter(c => c.pid !== victimPid)
  assert.ok(victims.length > 0 && survivors.length > 0, `victims ${victims.length}, survivors ${survivors.length}`)
  const sender = survivors[0]

  // numbered broadcasts every 5 ms; the worker dies a third of the way through
  const seq = Array.from({length: 150}, (_, i) => `seq-${i}`)
  for(let i = 0; i < seq.length; i++){
    if(i === 50){ process.kill(victimPid, "SIGKILL") }
    sender.send(seq[i])
    await sleep(5)
  }
  await waitFor(() => survivors.every(c => c.count(seq.at(-1)) === 1), 10000, "the last numbered broadcast at every survivor")
  for(const c of survivors){
    assert.deepEqual(c.bodies.filter(b => b.startsWith("seq-")), seq, `${c.name}: every numbered broadcast, in order`)
  }

  // the supervisor restarts the worker and says so
  const restarted = await server.line(new RegExp(`^worker ${victimIndex} pid (?!${victimPid}\\b)(\\d+)(?: api \\S+)?$`), 10000)
  assert.match(server.stderr(), new RegExp(`worker ${victimIndex} \\(pid ${victimPid}\\) exited \\(killed by signal 9\\)`))

  // the victims reconnected and rejoined by themselves
  await waitFor(() => victims.every(c => c.opens >= 2 && c.joins >= 2 && c.channel.isJoined()), 10000,
    "the killed worker's clients to reconnect and rejoin")

  // and everyone, wherever they are now, gets the next broadcast exactly once
  const livePids = [Number(restarted[1]), ...pids.filter(p => p !== victimPid)]
  const owners = connectionOwners(server.port, livePids)
  const victimsNow = new Set(victims.map(c => owners.get(c.localPort())))
  t.diagnostic(`killed worker ${victimIndex} (pid ${victimPid}) with ${victims.length} clients; ` +
    `they came back on pids ${[...victimsNow].join(", ")}`)
  victims[0].send("after the kill")
  await waitFor(() => clients.every(c => c.count("after the kill") === 1), 10000, "the broadcast after the kill at all 40")
  await sleep(300)
  for(const c of clients){ assert.equal(c.count("after the kill"), 1, `${c.name}: after the kill`) }

  // the restarted worker is a full member: a client that lands on it reaches everyone
  const newPid = Number(restarted[1])
  let onNew
  for(let i = 0; i < 30 && !onNew; i++){
    const c = await lobbyClient(server.wsUrl, `late${i}`)
    clients.push(c)
    const pid = await waitFor(() => connectionOwners(server.port, livePids).get(c.localPort()), 5000, "the late client's worker")
    if(pid === newPid){ onNew = c }
  }
  assert.ok(onNew, "no new connection reached the restarted worker")
  onNew.send("from the restarted worker")
  await waitFor(() => clients.every(c => c.count("from the restarted worker") === 1), 10000,
    "the restarted worker's broadcast at every client")
})

test("a second throng serve on the workers' port is refused, not let in (issue 27)", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const server = await startThrong(["--workers", "2", "--redis", redis.url])
  t.after(() => server.stop())
  const second = spawnSync(THRONG_BIN, ["serve", "--bind", "127.0.0.1", "--port", String(server.port), "--api-bind", "none"],
    {encoding: "utf8", timeout: 10000, env: {...process.env, RUST_BACKTRACE: "0"}})
  assert.notEqual(second.status, 0, second.stdout)
  assert.match(second.stderr, /another process holds the port.*--reuse-port/)
  assert.doesNotMatch(second.stdout, /listening on/)
  // The workers' API port is held too, while they run.
  const api = spawnSync(THRONG_BIN, ["serve", "--port", "0", "--api-bind", `127.0.0.1:${server.apiPort}`],
    {encoding: "utf8", timeout: 10000, env: {...process.env, RUST_BACKTRACE: "0"}})
  assert.notEqual(api.status, 0, api.stdout)
  assert.match(api.stderr, /\(the server API\)/)
})
