// The dashboard's stream (GET /api/dashboard) across a Redis cluster: one
// node's samples list both nodes, each with its own connections, RSS and
// backplane figures and the time its report took; the top topics count the
// subscribers of both, with the presence count of a topic the asking node
// has no subscriber of read from the presence store.
import {test} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, writeFileSync} from "node:fs"
import os from "node:os"
import path from "node:path"
import {startRedis, startThrong} from "./helpers.mjs"
import {connectPhoenix, closePhoenix, joinResult, withTimeout} from "../e2e/helpers.mjs"

const KEY = "cluster-dashboard-key"

/** Reads samples from node's stream until `done(sample)`; returns that sample. */
async function sampleUntil(node, done, ms){
  const controller = new AbortController()
  const res = await fetch(`http://127.0.0.1:${node.apiPort}/api/dashboard`, {headers: {"X-API-Key": KEY}, signal: controller.signal})
  assert.equal(res.status, 200)
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let text = ""
  let last = null
  const read = async () => {
    for(;;){
      const {done: ended, value} = await reader.read()
      assert.ok(!ended, "the stream ended")
      text += decoder.decode(value, {stream: true})
      let end
      while((end = text.indexOf("\n\n")) >= 0){
        const block = text.slice(0, end)
        text = text.slice(end + 2)
        const data = block.split("\n").find(l => l.startsWith("data:"))
        if(data){
          last = JSON.parse(data.slice(5))
          if(done(last)){ return last }
        }
      }
    }
  }
  try {
    return await withTimeout(read(), ms, "a sample as expected; the last: " + JSON.stringify(last)?.slice(0, 2000))
  } finally {
    controller.abort()
  }
}

test("a node's dashboard shows every node of the cluster and the topics of both", {timeout: 45000}, async t => {
  const redis = await startRedis()
  t.after(() => redis.stop())
  const config = path.join(mkdtempSync(path.join(os.tmpdir(), "throng-dashboard-")), "throng.toml")
  writeFileSync(config, '[[topics]]\npattern = "live:*"\njoin = "anyone"\n')
  const args = ["--redis", redis.url, "--config", config, "--api-key", KEY, "--presence", "live:*=param:user"]
  const a = await startThrong(args)
  t.after(() => a.stop())
  const b = await startThrong(args)
  t.after(() => b.stop())

  // live:both: 1 socket on A, 2 on B; live:b: 2 on B only.
  const sockets = []
  t.after(() => Promise.all(sockets.map(s => closePhoenix(s))))
  const join = async (node, user, topics) => {
    const socket = await connectPhoenix(node.wsUrl, "2.0.0")
    sockets.push(socket)
    for(const topic of topics){
      assert.equal((await joinResult(socket.channel(topic, {user}))).status, "ok")
    }
  }
  await join(a, "u1", ["live:both"])
  await join(b, "u2", ["live:both", "live:b"])
  await join(b, "u3", ["live:both", "live:b"])

  const topics = s => Object.fromEntries(s.topics.map(x => [x.topic, [x.subscribers, x.presence]]))
  const sample = await sampleUntil(a, s => s.nodes.length === 2 &&
    JSON.stringify(topics(s)) === JSON.stringify({"live:both": [3, 3], "live:b": [2, 2]}), 20000)

  assert.equal(sample.cluster.nodes, 2)
  assert.equal(sample.cluster.connections, 3)
  const self = sample.nodes.find(n => n.node === sample.node)
  const other = sample.nodes.find(n => n.node !== sample.node)
  assert.equal(self.stats.connections, 1)
  assert.equal(other.stats.connections, 2)
  for(const n of sample.nodes){
    assert.ok(n.stats.rss_bytes > 1 << 20, `RSS of ${n.node}: ${n.stats.rss_bytes}`)
    assert.equal(n.counters.throng_backplane_connected, 1)
    assert.ok(n.report_ms >= 0)
  }
  // B's report came over Redis and back.
  assert.ok(other.report_ms > 0)
  assert.equal(sample.topic_count, 2)
})
