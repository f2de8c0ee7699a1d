// App backend hooks with `--workers 2 --redis`: every worker gets the
// [hooks] settings (the secret through its environment) and the topic
// rules, joins and pushes go through the backend (hook_backend.mjs, which
// verifies each signature), and a broadcast the backend asks for reaches
// the topic's subscribers on both workers, exactly once.
import {test} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync, rmSync} from "node:fs"
import {tmpdir} from "node:os"
import path from "node:path"
import {startRedis, startThrong, lobbyClient, closeAll, clientsOnEveryWorker, waitFor, sleep} from "./helpers.mjs"
import {startBackend} from "../e2e/hook_helpers.mjs"

const SECRET = "cluster-hook-secret-of-at-least-32-bytes"
const N = 12

test("pushes through the push hook broadcast to both workers, exactly once", {timeout: 30000}, async t => {
  const backend = await startBackend(SECRET)
  t.after(() => backend.kill())
  const redis = await startRedis()
  t.after(() => redis.stop())
  const dir = mkdtempSync(path.join(tmpdir(), "throng-cluster-hooks-"))
  t.after(() => rmSync(dir, {recursive: true, force: true}))
  const config = path.join(dir, "hooks.toml")
  writeFileSync(config, `
[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
secret = "${SECRET}"

[[topics]]
pattern = "rooms:*"
join = "anyone"
hooks = ["join", "push"]
`)
  const server = await startThrong(["--config", config, "--workers", "2", "--redis", redis.url])
  t.after(() => server.stop())

  const pids = [...server.workers().values()]
  const clients = await clientsOnEveryWorker(server, pids, N, i => lobbyClient(server.wsUrl, `c${i}`))
  t.after(() => closeAll(clients))
  const senders = pids.map(pid => clients.find(c => c.pid === pid)).filter(Boolean)
  assert.equal(senders.length, 2, `clients on both workers: ${clients.map(c => c.pid)}`)

  for(const sender of senders){ sender.send(`via backend from ${sender.pid}`) }
  await waitFor(() => clients.every(c => senders.every(s => c.count(`via backend from ${s.pid}`) === 1)),
    10000, "both broadcasts at every client")
  await sleep(300)
  for(const c of clients){
    for(const s of senders){ assert.equal(c.count(`via backend from ${s.pid}`), 1, `${c.name}: from ${s.pid}`) }
  }
  const stats = await backend.stats()
  assert.equal(stats.joins.filter(t => t === "rooms:lobby").length, clients.length, "every join went through the join hook")
  assert.equal(stats.pushes.filter(p => p.event === "new:msg").length, 2)
  assert.equal(stats.forged, 0, "both workers sign with the secret")
})
