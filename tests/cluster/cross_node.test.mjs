// Two `throng serve --redis` nodes on one redis-server: a broadcast made on
// either reaches the clients of both exactly once and in order; and a Redis
// that cannot be reached at start is a clear error.
import {test} from "node:test"
import assert from "node:assert/strict"
import {
  startRedis, startThrong, runThrong, lobbyClient, closeAll, numsub, waitFor, sleep,
} from "./helpers.mjs"

const T = {timeout: 30000}
const CHANNEL = "throng:t:rooms:lobby"

test("(a) new:msg on node A reaches clients on A and B exactly once, in order", T, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  // a1 pushes 51 messages back to back: one past the default push burst (50).
  const a = await startThrong(["--redis", redis.url, "--shards", "2", "--push-rate", "0"])
  t.after(() => a.stop())
  const b = await startThrong(["--redis", redis.url, "--shards", "2"])
  t.after(() => b.stop())

  const clients = []
  t.after(() => closeAll(clients))
  // two per node, one per serializer
  for(const [node, label] of [[a, "a"], [b, "b"]]){
    clients.push(await lobbyClient(node.wsUrl, `${label}-v2`, "2.0.0"))
    clients.push(await lobbyClient(node.wsUrl, `${label}-v1`, "1.0.0"))
  }
  // each node SUBSCRIBEs rooms:lobby once, however many local subscribers it has
  await waitFor(async () => await numsub(redis.port, CHANNEL) === 2, 5000, "both nodes subscribed")

  const [a1, , b1] = clients
  a1.send("hello from a")
  await waitFor(() => clients.every(c => c.count("hello from a") === 1), 5000, "hello from a everywhere")
  b1.send("hello from b")
  await waitFor(() => clients.every(c => c.count("hello from b") === 1), 5000, "hello from b everywhere")

  // per-node publish order holds across the backplane
  const seq = Array.from({length: 50}, (_, i) => `a-seq-${i}`)
  seq.forEach(body => a1.send(body))
  await waitFor(() => clients.every(c => c.count(seq.at(-1)) === 1), 10000, "the last of 50 messages everywhere")
  await sleep(300) // any duplicate would have arrived by now
  for(const c of clients){
    assert.equal(c.count("hello from a"), 1, `${c.name}: hello from a`)
    assert.equal(c.count("hello from b"), 1, `${c.name}: hello from b`)
    assert.deepEqual(c.bodies.filter(x => x.startsWith("a-seq-")), seq, `${c.name}: 50 messages in order`)
  }

  // a node without subscribers unsubscribes
  await Promise.all(clients.slice(2).map(c => c.close()))
  await waitFor(async () => await numsub(redis.port, CHANNEL) === 1, 5000, "node B unsubscribed")
})

test("(e) throng serve --redis with Redis unreachable exits non-zero naming the URL", T, async () => {
  const single = await runThrong(["--redis", "redis://127.0.0.1:1"])
  assert.notEqual(single.code, 0, `exit code ${single.code}; stderr: ${single.stderr}`)
  assert.match(single.stderr, /redis:\/\/127\.0\.0\.1:1/)
  assert.doesNotMatch(single.stdout, /listening on/)

  const workers = await runThrong(["--workers", "2", "--redis", "redis://127.0.0.1:1"])
  assert.notEqual(workers.code, 0, `exit code ${workers.code}; stderr: ${workers.stderr}`)
  assert.match(workers.stderr, /redis:\/\/127\.0\.0\.1:1/)

  const noRedis = await runThrong(["--workers", "2"])
  assert.notEqual(noRedis.code, 0)
  assert.match(noRedis.stderr, /--workers 2 needs --redis/)
})
