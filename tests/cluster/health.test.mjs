// GET /readyz with --redis: 200 while the backplane is connected; 503
// {"reason":"redis"} once Redis has been gone longer than --ready-redis-grace;
// 200 again after Redis is back. /healthz stays 200 throughout.
import {test} from "node:test"
import assert from "node:assert/strict"
import {startRedis, startThrong, waitFor} from "./helpers.mjs"
import {httpRequest} from "../e2e/helpers.mjs"

test("readyz follows the Redis backplane past --ready-redis-grace", {timeout: 60000}, async () => {
  let redis = await startRedis()
  const port = redis.port
  const node = await startThrong(["--redis", redis.url, "--api-bind", "127.0.0.1:0", "--ready-redis-grace", "1"])
  try {
    const ready = async p => (await httpRequest(p, "GET", "/readyz"))
    assert.equal((await ready(node.port)).status, 200)
    assert.equal((await ready(node.apiPort)).status, 200)
    await redis.kill()
    const down = await waitFor(async () => {
      const r = await ready(node.apiPort)
      return r.status === 503 ? r : null
    }, 20000, "readyz 503 after Redis stopped", 100)
    const body = JSON.parse(down.body.toString())
    assert.equal(body.reason, "redis")
    assert.match(body.message, /--ready-redis-grace/)
    assert.equal((await ready(node.port)).status, 503, "the public port says so too")
    assert.equal((await httpRequest(node.port, "GET", "/healthz")).status, 200)
    redis = await startRedis(port)
    await waitFor(async () => (await ready(node.apiPort)).status === 200, 20000, "readyz 200 after Redis is back", 100)
  } finally {
    await node.stop()
    await redis.stop()
  }
})
