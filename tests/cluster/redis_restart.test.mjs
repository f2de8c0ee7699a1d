// Redis goes away and comes back: each node keeps delivering locally while it
// is down, logs one error, and cross-node broadcasts flow again after the
// restart without restarting throng.
import {test} from "node:test"
import assert from "node:assert/strict"
import {
  startRedis, startThrong, lobbyClient, closeAll, numsub, waitFor, sleep,
} from "./helpers.mjs"

const T = {timeout: 30000}
const LOST = /lost the connection to Redis/g

test("(d) Redis restart: local delivery continues, cross-node broadcasts resume", T, async t => {
  let redis = await startRedis()
  const port = redis.port
  t.after(() => redis.stop())
  const a = await startThrong(["--redis", redis.url])
  t.after(() => a.stop())
  const b = await startThrong(["--redis", redis.url])
  t.after(() => b.stop())

  const clients = []
  t.after(() => closeAll(clients))
  const a1 = await lobbyClient(a.wsUrl, "a1")
  const a2 = await lobbyClient(a.wsUrl, "a2")
  const b1 = await lobbyClient(b.wsUrl, "b1")
  const b2 = await lobbyClient(b.wsUrl, "b2")
  clients.push(a1, a2, b1, b2)
  await waitFor(async () => await numsub(port, "throng:t:rooms:lobby") === 2, 5000, "both nodes subscribed")
  a1.send("before")
  await waitFor(() => clients.every(c => c.count("before") === 1), 5000, "the first broadcast everywhere")

  await redis.kill()

  // while Redis is down, each node still delivers its own broadcasts
  a1.send("a while down")
  b1.send("b while down")
  await waitFor(() => a2.count("a while down") === 1 && b2.count("b while down") === 1, 5000,
    "local delivery on both nodes while Redis is down")
  await sleep(200)
  assert.equal(b1.count("a while down"), 0, "nothing crosses while Redis is down")
  await waitFor(() => (a.stderr().match(LOST) || []).length === 1 && (b.stderr().match(LOST) || []).length === 1,
    5000, "each node to log the lost connection")

  // keep Redis down a few backoff steps, then bring it back on the same port
  await sleep(1000)
  redis = await startRedis(port)
  const restartedAt = Date.now()

  // publish from A until one crosses to B (deadline well inside the backoff cap of 5 s + slack)
  let crossed = null
  for(let i = 0; !crossed; i++){
    if(Date.now() - restartedAt > 15000){ assert.fail("no broadcast crossed within 15 s of the Redis restart") }
    a1.send(`probe-${i}`)
    await sleep(50)
    crossed = b1.bodies.find(x => x.startsWith("probe-"))
  }
  const ms = Date.now() - restartedAt
  t.diagnostic(`cross-node broadcasts flowed again ${ms} ms after redis-server restarted`)

  // both directions, exactly once, and still one error line per node
  b2.send("after restart from b")
  a2.send("after restart from a")
  await waitFor(() => clients.every(c => c.count("after restart from b") === 1 && c.count("after restart from a") === 1),
    5000, "both directions after the restart")
  await sleep(300)
  for(const c of clients){
    assert.equal(c.count("after restart from a"), 1, c.name)
    assert.equal(c.count("after restart from b"), 1, c.name)
  }
  assert.equal((a.stderr().match(LOST) || []).length, 1, a.stderr())
  assert.equal((b.stderr().match(LOST) || []).length, 1, b.stderr())
  assert.match(a.stderr(), /reconnected to Redis/)
})
