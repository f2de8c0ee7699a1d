// Faults under `throng serve --workers`: a worker whose shard thread panics
// aborts (issue 12, item 6) and the supervisor restarts it, instead of a
// half-alive process with stale subscriptions. The panic comes from the
// hidden, test-only --test-panic-message, which works only with --echo.
import {test} from "node:test"
import assert from "node:assert/strict"
import {RawWs} from "../e2e/helpers.mjs"
import {startRedis, startThrong, lobbyClient, closeAll, connectionOwners, waitFor, sleep} from "./helpers.mjs"

const T = {timeout: 60000}

test("a worker whose shard panics aborts and is restarted; its clients come back", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const server = await startThrong(["--workers", "2", "--redis", redis.url, "--echo", "--test-panic-message", "boom"])
  t.after(() => server.stop())
  const pids = [...server.workers().values()]

  const clients = []
  t.after(() => closeAll(clients))
  for(let i = 0; i < 20; i++){ clients.push(await lobbyClient(server.wsUrl, `c${i}`)) }

  // an /echo connection lands on one worker; "boom" panics its shard
  const echo = await RawWs.connect(server.port, {path: "/echo"})
  const owner = await waitFor(() => connectionOwners(server.port, pids).get(echo.sock.localPort), 5000, "the echo connection's worker")
  const index = [...server.workers().entries()].find(([, pid]) => pid === owner)[0]
  echo.sendText("boom")

  const restarted = await server.line(new RegExp(`^worker ${index} pid (?!${owner}\\b)(\\d+)(?: api \\S+)?$`), 15000)
  const exited = new RegExp(`worker ${index} \\(pid ${owner}\\) exited \\(killed by signal 6\\)`)
  await waitFor(() => exited.test(server.stderr()), 5000, "the supervisor's log of the abort")
    .catch(e => { throw new Error(`${e.message}\n${server.stderr()}`) })
  assert.match(server.stderr(), /panicked/)
  assert.notEqual(Number(restarted[1]), owner)

  // every client is joined again (those of the dead worker reconnected) and gets a broadcast
  await waitFor(() => clients.every(c => c.channel.isJoined()), 10000, "every client joined again")
  await sleep(200)
  clients[0].send("after the panic")
  await waitFor(() => clients.every(c => c.count("after the panic") === 1), 10000, "the broadcast after the panic at every client")
})
