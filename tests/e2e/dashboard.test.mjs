// The live dashboard (GET /dashboard on the server API listener) in headless
// Chromium, against the real binary under load: phoenix.js clients joined to
// three topics with presence (WebSockets and a long-poll), a join through an
// app backend hook, and a stream of broadcasts through the server API. The figures the page shows (read from its ids and data-* attributes)
// must be those GET /api/stats, /api/topics and /api/presence give at the
// same time, once the load is steady; a wrong key gets a clear message; the
// stream outlives --api-timeout and is capped by --max-dashboard-streams.
//
// THRONG_DASHBOARD_SCREENSHOT=PATH saves the page under load there (default
// /tmp/throng-dashboard.png); docs/dashboard.png is made so, with some
// history in the charts:
//   THRONG_DASHBOARD_SCREENSHOT=$PWD/docs/dashboard.png THRONG_DASHBOARD_HOLD_S=50 \
//   THRONG_BIN=$PWD/target/ci/throng node --test --test-timeout=120000 tests/e2e/dashboard.test.mjs
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {existsSync, mkdtempSync, writeFileSync} from "node:fs"
import os from "node:os"
import path from "node:path"
import {startServer, connectPhoenix, closePhoenix, joinResult, withTimeout, CHROMIUM, launchChromium, readMetric} from "./helpers.mjs"
import {startBackend} from "./hook_helpers.mjs"
import {LongPoll} from "phoenix"

const SCREENSHOT = process.env.THRONG_DASHBOARD_SCREENSHOT || "/tmp/throng-dashboard.png"
const HOLD_S = Number(process.env.THRONG_DASHBOARD_HOLD_S || 0)
const haveChromium = existsSync(CHROMIUM)
const KEY = "dashboard-test-key"
// Users per topic: every WebSocket joins alpha, the first 5 beta, the first
// 2 gamma; and a long-poll client joins gamma (no broadcasts there, so its
// poll waits out the window on one connection: the counts stay steady).
const SOCKETS = 8
const TOPICS = {"live:alpha": 8, "live:beta": 5, "live:gamma": 2}
const PRESENCE = [8, 5, 3]

let server
let backend
let browser
const sockets = []
let broadcasting = null

/** GET an API route with the key, as JSON. */
async function api(route){
  const res = await fetch(server.apiUrl + route, {headers: {"X-API-Key": KEY}})
  assert.equal(res.status, 200, `${route}: ${res.status}`)
  return res.json()
}

/** Waits (bounded) until check() is true. */
async function until(check, ms, label){
  const deadline = Date.now() + ms
  while(!(await check())){
    if(Date.now() > deadline){ throw new Error(`timed out after ${ms} ms waiting for ${label}`) }
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

/**
 * One broadcast. A keep-alive connection the server closed for being idle
 * past --api-timeout (this process may stall that long on a busy machine)
 * fails the request that raced its close: it is sent again, `retries` times.
 */
async function post(retries){
  try {
    return await fetch(server.apiUrl + "/api/broadcast", {
      signal: AbortSignal.timeout(5000),
      method: "POST",
      headers: {"X-API-Key": KEY, "Content-Type": "application/json"},
      body: JSON.stringify({topic: "live:alpha", event: "tick", payload: {pad: "x".repeat(200)}}),
    })
  } catch(err){
    if(retries === 0 || err.name !== "TypeError"){ throw err }
    return post(retries - 1)
  }
}

/** Broadcasts to live:alpha through the API, one after another, until stopped. */
function startBroadcasts(){
  let running = true
  let sent = 0
  const done = (async () => {
    while(running){
      const res = await post(2)
      assert.equal(res.status, 200)
      await res.arrayBuffer()
      sent++
      await new Promise(resolve => setTimeout(resolve, 20))
    }
  })()
  // Its failure fails the test that stops it (or the `after` hook).
  done.catch(() => {})
  return {stop: async () => { running = false; await done }, sent: () => sent}
}

before(async () => {
  if(!haveChromium){ return }
  // live:* topics: joined by anyone, served by the relay channel; hooked:*
  // joins are asked of an app backend (the page shows the hook's latency).
  backend = await startBackend("dashboard-hook-secret-of-at-least-32-bytes")
  const config = path.join(mkdtempSync(path.join(os.tmpdir(), "throng-dashboard-")), "throng.toml")
  writeFileSync(config, `[hooks]
url = "http://127.0.0.1:${backend.port}/throng"
secret = "dashboard-hook-secret-of-at-least-32-bytes"

[[topics]]
pattern = "live:*"
join = "anyone"

[[topics]]
pattern = "hooked:*"
join = "anyone"
hooks = ["join"]
`)
  server = await startServer([
    "--config", config, "--api-key", KEY, "--api-timeout", "2", "--max-dashboard-streams", "2",
    "--presence", "live:*=param:user",
  ])
  for(let i = 0; i < SOCKETS; i++){
    const socket = await connectPhoenix(server.wsUrl, "2.0.0")
    sockets.push(socket)
    for(const [topic, users] of Object.entries(TOPICS)){
      if(i >= users){ continue }
      const joined = await joinResult(socket.channel(topic, {user: `u${i}`}))
      assert.equal(joined.status, "ok", `join ${topic}`)
    }
  }
  const longpoll = await connectPhoenix(server.wsUrl, "2.0.0", {transport: LongPoll})
  sockets.push(longpoll)
  assert.equal((await joinResult(longpoll.channel("live:gamma", {user: "lp"}))).status, "ok", "long-poll join")
  const hooked = await joinResult(sockets[0].channel("hooked:room", {}))
  assert.equal(hooked.status, "ok", "join through the hook")
  broadcasting = startBroadcasts()
  browser = await launchChromium()
}, {timeout: 30000})

after(async () => {
  await broadcasting?.stop().catch(() => {})
  await Promise.all(sockets.map(s => closePhoenix(s)))
  await browser?.close().catch(() => {})
  await server?.stop()
  await backend?.kill()
}, {timeout: 20000})

async function openDashboard(){
  const context = await browser.newContext({viewport: {width: 1280, height: 800}})
  const page = await context.newPage()
  const errors = []
  page.on("pageerror", err => errors.push(err.message))
  await page.goto(server.apiUrl + "/dashboard", {waitUntil: "load", timeout: 10000})
  return {context, page, errors}
}

const figure = (page, id) => page.locator("#" + id).getAttribute("data-value").then(Number)
const samples = page => page.evaluate(() => Number(document.body.dataset.samples || 0))

test("the page shows what /api/stats and /api/topics say, live", {timeout: 60000 + HOLD_S * 1000, skip: !haveChromium && "no Chromium"}, async () => {
  const {context, page, errors} = await openDashboard()
  try {
    // No key yet: the page says what to do, and shows no figure.
    await page.locator('#status[data-state="unauthorized"]').waitFor({timeout: 10000})
    assert.match(await page.locator("#message").textContent(), /--api-key/)
    assert.equal(await page.locator("#fig-connections").getAttribute("data-value"), null)

    await page.fill("#key", KEY)
    await page.click("#use-key")
    await page.locator('#status[data-state="live"]').waitFor({timeout: 10000})
    // Steady: every socket counted and a rate known (two samples).
    await page.waitForFunction(n => document.getElementById("fig-websockets").dataset.value === String(n) &&
      document.getElementById("fig-longpoll").dataset.value === "1" &&
      Number(document.body.dataset.samples) >= 3, SOCKETS, {timeout: 15000})

    // The API's figures before and after a sample the page took between
    // the two: when they agree (steady), the page must show them.
    const figures = c => ({
      connections: c.connections, websockets: c.websockets, longpoll: c.longpoll_sessions,
      channels: c.channels_joined, topics: c.topics, users: c.users,
    })
    let shown, stats, topics
    for(let attempt = 0; ; attempt++){
      const asked = Date.now()
      const before = figures((await api("/api/stats")).cluster)
      await page.waitForFunction(t => Number(document.body.dataset.sampleAt) > t, asked, {timeout: 5000})
      shown = {}
      for(const id of ["connections", "websockets", "longpoll", "channels", "topics", "users"]){
        shown[id] = await figure(page, "fig-" + id)
      }
      ;[stats, topics] = await Promise.all([api("/api/stats"), api("/api/topics")])
      if(JSON.stringify(figures(stats.cluster)) === JSON.stringify(before)){ break }
      assert.ok(attempt < 5, `the load never held still: ${JSON.stringify(before)} then ${JSON.stringify(figures(stats.cluster))}`)
    }
    assert.deepEqual(shown, figures(stats.cluster))
    assert.equal(shown.websockets, SOCKETS)
    assert.equal(shown.longpoll, 1)
    assert.equal(shown.channels, Object.values(TOPICS).reduce((a, b) => a + b) + 2)

    // Top topics, the most subscribed first, with their presence counts.
    const rows = await page.locator("#topics tbody tr").evaluateAll(trs => trs.map(tr => ({
      topic: tr.dataset.topic, subscribers: Number(tr.dataset.subscribers), presence: tr.dataset.presence,
    })))
    const expected = []
    for(const [topic, subscribers] of Object.entries(topics.topics).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))){
      // Presence is on for live:* only; the page says "off" for the others.
      const presence = topic.startsWith("live:")
        ? String((await api(`/api/presence?topic=${encodeURIComponent(topic)}`)).count) : ""
      expected.push({topic, subscribers, presence})
    }
    assert.deepEqual(rows, expected)
    assert.deepEqual(rows.filter(r => r.topic.startsWith("live:")).map(r => Number(r.presence)), PRESENCE)

    // This node's row: its connections as /api/stats says, and its RSS.
    const node = await page.locator(`#nodes tbody tr[data-node="${stats.node.node}"]`)
    assert.equal(Number(await node.getAttribute("data-connections")), stats.node.stats.connections)
    const rss = Number(await node.getAttribute("data-rss"))
    assert.ok(rss > 1 << 20 && rss < 4 * stats.node.stats.rss_bytes, `RSS shown ${rss}, /api/stats ${stats.node.stats.rss_bytes}`)

    // Rates: broadcasts are flowing, so messages go out (8 subscribers each).
    await page.waitForFunction(() => Number(document.getElementById("fig-broadcasts-rate").dataset.value) > 0 &&
      Number(document.getElementById("fig-out-rate").dataset.value) > 0, null, {timeout: 10000})
    assert.ok(await figure(page, "fig-bytes-out-rate") > 0)

    // The key the page was first opened without is a refusal that moved.
    const refusals = await readMetric(server.apiUrl, "throng_api_refusals_total")
    const row = page.locator('#limits tbody tr[data-counter="throng_api_refusals_total"]')
    await row.waitFor({timeout: 5000})
    assert.ok(Number(await row.getAttribute("data-total")) >= 1)
    assert.ok(Number(await row.getAttribute("data-total")) <= refusals)
    assert.match(await page.locator("#backplane-off").textContent(), /--redis/)

    // The join hook: its requests and mean latency, as /metrics counts them.
    const hook = page.locator('#hooks tbody tr[data-hook="join"]')
    await hook.waitFor({timeout: 5000})
    const latencyMs = Number(await hook.locator("td").nth(3).getAttribute("data-value"))
    const sum = await readMetric(server.apiUrl, 'throng_hook_duration_seconds_sum{hook="join"}')
    const count = await readMetric(server.apiUrl, 'throng_hook_duration_seconds_count{hook="join"}')
    assert.equal(count, 1)
    assert.ok(Math.abs(latencyMs - sum * 1000) < 0.01, `mean latency shown ${latencyMs} ms, /metrics ${sum * 1000} ms`)

    if(HOLD_S > 0){
      // Some history for the charts: a burst of joins, a pause in broadcasts.
      const extra = []
      for(let i = 0; i < 6; i++){
        extra.push(await connectPhoenix(server.wsUrl, "2.0.0"))
        await joinResult(extra[i].channel("live:delta", {user: `d${i}`}))
      }
      await new Promise(resolve => setTimeout(resolve, HOLD_S * 500))
      await Promise.all(extra.slice(0, 3).map(s => closePhoenix(s)))
      await new Promise(resolve => setTimeout(resolve, HOLD_S * 500))
      await Promise.all(extra.slice(3).map(s => closePhoenix(s)))
    }
    await page.screenshot({path: SCREENSHOT, fullPage: true})

    // The key is kept for the tab: a reload goes live without typing it.
    const before = await page.evaluate(() => sessionStorage.getItem("throng-api-key"))
    assert.equal(before, KEY)
    await page.reload({waitUntil: "load"})
    await page.waitForFunction(() => Number(document.body.dataset.samples) >= 1, null, {timeout: 10000})
    assert.equal(await page.locator("#status").getAttribute("data-state"), "live")

    // When the broadcasts stop, the rate shown falls to 0.
    await broadcasting.stop()
    await page.waitForFunction(() => document.getElementById("fig-broadcasts-rate").dataset.value === "0", null, {timeout: 10000})
    assert.deepEqual(errors, [])
  } finally {
    await context.close()
  }
})

test("a wrong key gets a clear message in the page", {timeout: 30000, skip: !haveChromium && "no Chromium"}, async () => {
  const {context, page, errors} = await openDashboard()
  try {
    await page.locator('#status[data-state="unauthorized"]').waitFor({timeout: 10000})
    await page.fill("#key", "not-the-key")
    await page.click("#use-key")
    await page.locator("#message", {hasText: "refused this API key"}).waitFor({timeout: 10000})
    assert.match(await page.locator("#message").textContent(), /not the value given to --api-key/)
    assert.equal(await page.locator("#status").getAttribute("data-state"), "unauthorized")
    assert.equal(await samples(page), 0)
    assert.deepEqual(errors, [])
  } finally {
    await context.close()
  }
})

/** Opens a stream with fetch; resolves once its response head arrived. */
async function openStream(){
  const controller = new AbortController()
  const res = await fetch(server.apiUrl + "/api/dashboard", {headers: {"X-API-Key": KEY}, signal: controller.signal})
  return {res, close: () => controller.abort()}
}

/** Reads `n` sample events from a stream; fails if it ends first. */
async function readSamples(res, n){
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let text = ""
  let seen = 0
  while(seen < n){
    const {done, value} = await reader.read()
    assert.ok(!done, `the stream ended after ${seen} samples`)
    text += decoder.decode(value, {stream: true})
    seen = text.split("\n\n").filter(b => b.includes("event: sample")).length
  }
  reader.releaseLock()
}

test("streams outlive --api-timeout and are capped by --max-dashboard-streams", {timeout: 30000, skip: !haveChromium && "no Chromium"}, async () => {
  // The pages of the tests before have gone (their streams end at the next write).
  await until(async () => await readMetric(server.apiUrl, "throng_dashboard_streams") === 0, 5000, "no dashboard stream open")
  const first = await openStream()
  const second = await openStream()
  try {
    assert.equal(first.res.status, 200)
    assert.match(first.res.headers.get("content-type"), /^text\/event-stream/)
    assert.equal(second.res.status, 200)
    const refusedBefore = await readMetric(server.apiUrl, "throng_dashboard_streams_refused_total")
    const third = await fetch(server.apiUrl + "/api/dashboard", {headers: {"X-API-Key": KEY}})
    assert.equal(third.status, 503)
    const body = await third.json()
    assert.equal(body.error.code, "too_many_dashboards")
    assert.match(body.error.message, /--max-dashboard-streams/)
    assert.equal(await readMetric(server.apiUrl, "throng_dashboard_streams"), 2)
    assert.equal(await readMetric(server.apiUrl, "throng_dashboard_streams_refused_total"), refusedBefore + 1)
    // A sample a second: five of them span more than --api-timeout (2 s).
    await withTimeout(readSamples(first.res, 5), 15000, "five samples")
  } finally {
    first.close()
    second.close()
  }
  await until(async () => await readMetric(server.apiUrl, "throng_dashboard_streams") === 0, 5000, "the closed streams to be let go")
  const again = await openStream()
  assert.equal(again.res.status, 200)
  again.close()
})
