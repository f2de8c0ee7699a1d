// deploy/grafana-dashboard.json and deploy/prometheus-alerts.yml name only
// metrics a running server exports: a node with the Redis backplane and
// presence on (so the backplane and presence-store metrics are there too) is
// scraped, and every `throng_*` name either file references must be in its
// /metrics.
import {test} from "node:test"
import assert from "node:assert/strict"
import {readFileSync} from "node:fs"
import path from "node:path"
import {startRedis, startThrong} from "./helpers.mjs"
import {httpRequest, REPO_ROOT} from "../e2e/helpers.mjs"

const read = name => readFileSync(path.join(REPO_ROOT, "deploy", name), "utf8")
const referenced = text => new Set(text.match(/\bthrong_[a-z0-9_]+/g) ?? [])

test("every metric the Grafana dashboard and the alert rules name is in /metrics", {timeout: 30000}, async () => {
  const dashboard = read("grafana-dashboard.json")
  const alerts = read("prometheus-alerts.yml")
  const parsed = JSON.parse(dashboard)
  const exprs = parsed.panels.flatMap(p => (p.targets ?? []).map(t => t.expr))
  assert.ok(exprs.length > 30, `dashboard queries: ${exprs.length}`)
  const alertExprs = [...alerts.matchAll(/^\s+expr: (.+)$/gm)].map(m => m[1])
  assert.ok(alertExprs.length >= 10, `alert rules: ${alertExprs.length}`)

  const redis = await startRedis()
  const node = await startThrong(["--redis", redis.url, "--api-bind", "127.0.0.1:0", "--presence", "rooms:*=user_id"])
  try {
    const res = await httpRequest(node.apiPort, "GET", "/metrics")
    assert.equal(res.status, 200)
    const exported = new Set(res.body.toString().split("\n")
      .filter(l => l && !l.startsWith("#"))
      .map(l => l.split(/[{ ]/)[0]))
    const names = new Set([...referenced(exprs.join("\n")), ...referenced(alertExprs.join("\n")), ...referenced(dashboard), ...referenced(alerts)])
    assert.ok(names.size > 40, `names referenced: ${[...names].join(" ")}`)
    const missing = [...names].filter(n => !exported.has(n))
    assert.deepEqual(missing, [], `named in deploy/ but not in /metrics: ${missing.join(", ")}`)
  } finally {
    await node.stop()
    await redis.stop()
  }
})
