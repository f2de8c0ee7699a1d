// The live dashboard page (GET /dashboard on the server API listener).
//
// It reads GET /api/dashboard, a Server-Sent Events stream of one sample a
// second, with fetch() and a stream reader: unlike EventSource, fetch can
// send the X-API-Key header, so the key never goes into a URL. The key is
// typed once and kept in sessionStorage (this tab only, gone when it
// closes). Every figure shown also sits in a data-* attribute or an id, so
// a test (tests/e2e/dashboard.test.mjs) reads what a person sees.
//
// Bundled by `npm run build:web` (esbuild) into
// crates/throng-server/assets/dashboard.js; no library, the charts are SVG
// drawn here, so the page works offline.

const KEY_STORE = "throng-api-key"
const HISTORY = 300 // samples kept for the charts: five minutes
const MINUTE = 60 // samples back for "last minute"
const STALE_MS = 3500

const $ = id => document.getElementById(id)

const state = {
  samples: [], // {at, figures, counters} of the last HISTORY samples
  last: null, // the last sample as received
  controller: null,
  retry: 1000,
  retryTimer: null,
  staleTimer: null,
}

// --- formatting -----------------------------------------------------------

function whole(n){
  return Math.round(n).toLocaleString("en-US")
}

function rate(n){
  if(n >= 100){ return whole(n) }
  if(n >= 10){ return n.toFixed(1) }
  return n.toFixed(n === 0 ? 0 : 2)
}

function bytes(n){
  const units = ["B", "KiB", "MiB", "GiB", "TiB"]
  let i = 0
  while(n >= 1024 && i < units.length - 1){ n /= 1024; i++ }
  return (i === 0 ? whole(n) : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i]
}

function setFigure(id, value, text){
  const el = $(id)
  el.dataset.value = String(value)
  el.textContent = text
}

function cell(text, value, cls){
  const td = document.createElement("td")
  td.textContent = text
  if(value !== undefined){ td.dataset.value = String(value) }
  if(cls){ td.className = cls }
  return td
}

// --- status and messages --------------------------------------------------

function status(stateName, text){
  const el = $("status")
  el.dataset.state = stateName
  el.textContent = text
}

function message(text, kind = "error"){
  const el = $("message")
  if(!text){
    el.hidden = true
    el.textContent = ""
    delete el.dataset.kind
    return
  }
  el.hidden = false
  el.dataset.kind = kind
  el.textContent = text
}

// --- the stream -----------------------------------------------------------

function storedKey(){
  try { return sessionStorage.getItem(KEY_STORE) || "" } catch(_e){ return "" }
}

function connect(){
  stop()
  const key = storedKey()
  const controller = new AbortController()
  state.controller = controller
  status("connecting", "connecting")
  const headers = {Accept: "text/event-stream"}
  if(key){ headers["X-API-Key"] = key }
  fetch("/api/dashboard", {headers, signal: controller.signal, cache: "no-store"})
    .then(res => res.ok ? read(res, controller) : refused(res, key))
    .catch(err => {
      if(controller.signal.aborted){ return }
      lost(`the connection to the server failed (${err.message})`)
    })
}

function stop(){
  clearTimeout(state.retryTimer)
  if(state.controller){ state.controller.abort() }
  state.controller = null
}

async function refused(res, key){
  let reason = ""
  try { reason = (await res.json()).error.message } catch(_e){ /* not JSON */ }
  if(res.status === 401){
    status("unauthorized", "key needed")
    message(key
      ? `The server refused this API key (401): it is not the value given to --api-key. Type the key again above.${reason ? " Server: " + reason : ""}`
      : "This server needs its API key for the figures: type the value given to --api-key above and press Use key.")
    $("key").focus()
    return
  }
  if(res.status === 503){
    lost(`the server refused the stream (503): ${reason || "busy"}`)
    return
  }
  status("error", `error ${res.status}`)
  message(`The server answered ${res.status}${reason ? ": " + reason : ""}.`)
}

function lost(why){
  status("offline", "offline")
  message(`No figures: ${why}. Retrying in ${Math.round(state.retry / 1000)} s.`)
  state.retryTimer = setTimeout(connect, state.retry)
  state.retry = Math.min(state.retry * 2, 15000)
}

async function read(res, controller){
  status("live", "live")
  message("")
  state.retry = 1000
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  for(;;){
    let chunk
    try {
      chunk = await reader.read()
    } catch(err){
      if(!controller.signal.aborted){ lost(`the stream broke (${err.message})`) }
      return
    }
    if(chunk.done){
      if(!controller.signal.aborted){ lost("the server ended the stream") }
      return
    }
    buffer += decoder.decode(chunk.value, {stream: true})
    let end
    while((end = buffer.indexOf("\n\n")) >= 0){
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      const data = block.split("\n").filter(l => l.startsWith("data:"))
        .map(l => l.slice(l.startsWith("data: ") ? 6 : 5)).join("\n")
      if(data){ onSample(JSON.parse(data)) }
    }
  }
}

// --- a sample -------------------------------------------------------------

const sum = (nodes, key) => nodes.reduce((n, node) => n + (node.counters[key] || 0), 0)

function onSample(sample){
  const c = sample.cluster
  const prev = state.samples[state.samples.length - 1]
  const dt = prev ? (sample.at_ms - prev.at) / 1000 : 0
  const per = key => prev && dt > 0 ? Math.max(0, (c[key] - prev.cluster[key]) / dt) : 0
  const counters = {}
  for(const node of sample.nodes){
    for(const [k, v] of Object.entries(node.counters)){ counters[k] = (counters[k] || 0) + v }
  }
  const figures = {
    connections: c.connections,
    websockets: c.websockets,
    joins: per("joins"),
    in: per("messages_in"),
    out: per("messages_out"),
    broadcasts: per("broadcasts"),
    bytesIn: per("bytes_in"),
    bytesOut: per("bytes_out"),
  }
  state.samples.push({at: sample.at_ms, cluster: c, figures, counters, nodes: sample.nodes})
  if(state.samples.length > HISTORY){ state.samples.shift() }
  state.last = sample

  setFigure("fig-connections", c.connections, whole(c.connections))
  setFigure("fig-websockets", c.websockets, whole(c.websockets))
  setFigure("fig-longpoll", c.longpoll_sessions, whole(c.longpoll_sessions))
  setFigure("fig-channels", c.channels_joined, whole(c.channels_joined))
  setFigure("fig-topics", sample.topic_count, whole(sample.topic_count))
  setFigure("fig-users", c.users, whole(c.users))
  if(prev){
    setFigure("fig-joins-rate", figures.joins, rate(figures.joins))
    setFigure("fig-broadcasts-rate", figures.broadcasts, rate(figures.broadcasts))
    setFigure("fig-in-rate", figures.in, rate(figures.in))
    setFigure("fig-out-rate", figures.out, rate(figures.out))
    setFigure("fig-bytes-in-rate", figures.bytesIn, bytes(figures.bytesIn))
    setFigure("fig-bytes-out-rate", figures.bytesOut, bytes(figures.bytesOut))
  }
  topics(sample)
  nodes(sample, prev, dt)
  limits(sample)
  integrations(sample, prev, dt)
  charts()
  document.body.dataset.sampleAt = String(sample.at_ms)
  document.body.dataset.samples = String(Number(document.body.dataset.samples || 0) + 1)
  status("live", "live")
  clearTimeout(state.staleTimer)
  state.staleTimer = setTimeout(() => status("stale", "no sample for a few seconds"), STALE_MS)
}

function replaceRows(table, rows){
  const body = $(table).querySelector("tbody")
  body.replaceChildren(...rows)
}

function topics(sample){
  replaceRows("topics", sample.topics.map(t => {
    const tr = document.createElement("tr")
    tr.dataset.topic = t.topic
    tr.dataset.subscribers = String(t.subscribers)
    tr.dataset.presence = t.presence === null ? "" : String(t.presence)
    tr.append(
      cell(t.topic),
      cell(whole(t.subscribers), t.subscribers, "num"),
      cell(t.presence === null ? "off" : whole(t.presence), t.presence === null ? "" : t.presence, "num"))
    return tr
  }))
  $("topics-empty").hidden = sample.topics.length > 0
}

function nodes(sample, prev, dt){
  const before = new Map((prev ? prev.nodes : []).map(n => [n.node, n]))
  replaceRows("nodes", sample.nodes.map(n => {
    const s = n.stats
    const p = before.get(n.node)
    const cpu = p && dt > 0 ? Math.max(0, (s.cpu_ms - p.stats.cpu_ms) / (dt * 1000)) * 100 : null
    const tr = document.createElement("tr")
    tr.dataset.node = n.node
    tr.dataset.connections = String(s.connections)
    tr.dataset.rss = String(s.rss_bytes)
    if(n.node === sample.node){ tr.className = "self" }
    tr.append(
      cell(n.node.slice(0, 8) + (n.node === sample.node ? " (this one)" : ""), n.node),
      cell(whole(s.connections), s.connections, "num"),
      cell(whole(s.websockets), s.websockets, "num"),
      cell(whole(s.longpoll_sessions), s.longpoll_sessions, "num"),
      cell(bytes(s.rss_bytes), s.rss_bytes, "num"),
      cell(cpu === null ? "–" : cpu.toFixed(1) + " %", cpu === null ? "" : cpu, "num"),
      cell(bytes(s.shard_inbox_bytes), s.shard_inbox_bytes, "num"),
      cell(n.report_ms.toFixed(1) + " ms", n.report_ms, "num"))
    return tr
  }))
  $("nodes-note").textContent = `${sample.nodes.length} answered within the gather's wait`
}

function limits(sample){
  const names = new Set(sample.limit_counters)
  const now = state.samples[state.samples.length - 1].counters
  const ago = state.samples[Math.max(0, state.samples.length - 1 - MINUTE)].counters
  const rows = Object.keys(now)
    .filter(k => names.has(k.split("{")[0]) && now[k] > 0)
    .sort()
    .map(k => {
      const moved = now[k] - (ago[k] || 0)
      const tr = document.createElement("tr")
      tr.dataset.counter = k
      tr.dataset.total = String(now[k])
      if(moved > 0){ tr.className = "moved" }
      tr.append(cell(k), cell(whole(now[k]), now[k], "num"), cell(moved > 0 ? "+" + whole(moved) : "0", moved, "num"))
      return tr
    })
  replaceRows("limits", rows)
  $("limits-empty").hidden = rows.length > 0
}

/** `{label value: figure}` of the `name{label="x"}` counters (`hook` by default). */
function byLabel(counters, name, label = "hook"){
  const out = {}
  for(const [k, v] of Object.entries(counters)){
    const m = k.match(/^([a-z_]+)\{([a-z_]+)="([^"]*)"\}$/)
    if(m && m[1] === name && m[2] === label){ out[m[3]] = v }
  }
  return out
}

function integrations(sample, prev, dt){
  const now = state.samples[state.samples.length - 1].counters
  const then = prev ? prev.counters : {}
  const hooksOn = Object.keys(now).some(k => k.startsWith("throng_hook_"))
  $("hooks").hidden = !hooksOn
  $("hooks-off").hidden = hooksOn
  if(hooksOn){
    const requests = byLabel(now, "throng_hook_requests_total")
    const rows = Object.keys(requests).map(hook => {
      const d = name => {
        const key = `${name}{hook="${hook}"}`
        return (now[key] || 0) - (then[key] || 0)
      }
      const total = name => now[`${name}{hook="${hook}"}`] || 0
      const answered = d("throng_hook_duration_seconds_count")
      // The last second's mean; with no answer in it, the mean since start.
      const meanS = answered > 0
        ? d("throng_hook_duration_seconds_sum") / answered
        : total("throng_hook_duration_seconds_count") > 0
          ? total("throng_hook_duration_seconds_sum") / total("throng_hook_duration_seconds_count") : null
      const tr = document.createElement("tr")
      tr.dataset.hook = hook
      tr.append(
        cell(hook),
        cell(dt > 0 ? rate(Math.max(0, d("throng_hook_requests_total")) / dt) : "–", "", "num"),
        cell(dt > 0 ? rate(Math.max(0, d("throng_hook_errors_total")) / dt) : "–", "", "num"),
        cell(meanS === null ? "–" : (meanS * 1000).toFixed(1) + " ms", meanS === null ? "" : meanS * 1000, "num"),
        cell(whole(total("throng_hook_timeouts_total")), undefined, "num"),
        cell(whole(total("throng_hook_refused_total")), undefined, "num"))
      return tr
    })
    replaceRows("hooks", rows)
  }
  const backplaneOn = sample.nodes.some(n => "throng_backplane_connected" in n.counters)
  $("backplane").hidden = !backplaneOn
  $("backplane-off").hidden = backplaneOn
  if(backplaneOn){
    const before = new Map((prev ? prev.nodes : []).map(n => [n.node, n.counters]))
    replaceRows("backplane", sample.nodes.map(n => redisRow(sample, n, before.get(n.node) || {}, dt)))
  }
}

/**
 * A node's row of the Redis tile: its links to Redis (one per user of
 * Redis: backplane, presence, history, occupancy), which are down, how
 * long since Redis last answered and the slowest PING, the link failures
 * so far, then the backplane's traffic.
 */
function redisRow(sample, n, p, dt){
  const k = n.counters
  const per = name => p[name] !== undefined && dt > 0 ? rate(Math.max(0, (k[name] - p[name]) / dt)) : "–"
  const connected = byLabel(k, "throng_redis_connected", "link")
  const down = Object.keys(connected).filter(link => !connected[link]).sort()
  const worst = name => Math.max(0, ...Object.values(byLabel(k, name, "link")))
  const lastAnswer = worst("throng_redis_last_answer_seconds")
  const ping = worst("throng_redis_ping_seconds")
  const failures = Object.values(byLabel(k, "throng_redis_link_failures_total", "link")).reduce((a, b) => a + b, 0)
  const tr = document.createElement("tr")
  tr.dataset.node = n.node
  tr.dataset.down = down.join(" ")
  if(down.length){ tr.className = "moved" }
  tr.append(
    cell(n.node.slice(0, 8)),
    cell(down.length ? "NO: " + down.join(", ") : "yes", down.length ? 0 : 1, "num"),
    cell(lastAnswer.toFixed(1) + " s ago", lastAnswer, "num"),
    cell((ping * 1000).toFixed(1) + " ms", ping * 1000, "num"),
    cell(whole(failures), failures, "num"),
    cell(per("throng_backplane_published_total"), undefined, "num"),
    cell(per("throng_backplane_received_total"), undefined, "num"),
    cell(bytes(k.throng_backplane_queued_bytes || 0), k.throng_backplane_queued_bytes, "num"),
    cell(whole(k.throng_backplane_dropped_total || 0), k.throng_backplane_dropped_total, "num"),
    cell(n.node === sample.node ? "(this one)" : n.report_ms.toFixed(1) + " ms", n.report_ms, "num"))
  return tr
}

// --- charts ---------------------------------------------------------------

const W = 320
const H = 120
const SVG = "http://www.w3.org/2000/svg"

const CHARTS = [
  {id: "chart-connections", format: whole, lines: [["connections", "all"], ["websockets", "WebSockets"]]},
  {id: "chart-joins", format: rate, lines: [["joins", "joins/s"]]},
  {id: "chart-messages", format: rate, lines: [["in", "in"], ["out", "out"], ["broadcasts", "broadcasts"]]},
  {id: "chart-bytes", format: bytes, lines: [["bytesIn", "in"], ["bytesOut", "out"]]},
]

/** Lines over the last HISTORY samples, the newest at the right edge. */
function charts(){
  const samples = state.samples
  for(const chart of CHARTS){
    const fig = $(chart.id)
    const svg = fig.querySelector("svg")
    let max = 0
    for(const s of samples){
      for(const [key] of chart.lines){ max = Math.max(max, s.figures[key]) }
    }
    const top = max > 0 ? max * 1.1 : 1
    const nodes = []
    for(let i = 1; i < 4; i++){
      const grid = document.createElementNS(SVG, "line")
      grid.setAttribute("x1", "0")
      grid.setAttribute("x2", String(W))
      grid.setAttribute("y1", String(H * i / 4))
      grid.setAttribute("y2", String(H * i / 4))
      grid.setAttribute("class", "grid")
      nodes.push(grid)
    }
    chart.lines.forEach(([key], n) => {
      const points = samples.map((s, i) => {
        const x = W - (samples.length - 1 - i) * (W / (HISTORY - 1))
        const y = H - (s.figures[key] / top) * H
        return `${x.toFixed(1)},${y.toFixed(1)}`
      })
      const line = document.createElementNS(SVG, "polyline")
      line.setAttribute("points", points.join(" "))
      line.setAttribute("class", `series s${n}`)
      line.setAttribute("vector-effect", "non-scaling-stroke")
      nodes.push(line)
    })
    svg.replaceChildren(...nodes)
    const latest = samples[samples.length - 1].figures
    const legend = fig.querySelector(".legend")
    legend.replaceChildren(...chart.lines.map(([key, label], n) => {
      const span = document.createElement("span")
      span.className = `s${n}`
      span.textContent = `${label} ${chart.format(latest[key])}`
      return span
    }), Object.assign(document.createElement("span"), {className: "scale", textContent: `top ${chart.format(top)} · 5 min`}))
  }
}

// --- the key form ---------------------------------------------------------

function start(){
  $("key-form").addEventListener("submit", e => {
    e.preventDefault()
    const key = $("key").value
    try { sessionStorage.setItem(KEY_STORE, key) } catch(_e){ /* private mode: this page only */ }
    $("key").value = ""
    $("key").placeholder = key ? "key kept for this tab" : "the value of --api-key"
    message("")
    state.retry = 1000
    connect()
  })
  $("forget-key").addEventListener("click", () => {
    try { sessionStorage.removeItem(KEY_STORE) } catch(_e){ /* nothing kept */ }
    $("key").placeholder = "the value of --api-key"
    stop()
    status("unauthorized", "key forgotten")
    message("The key is forgotten for this tab. Type it again to see the figures.", "info")
  })
  if(storedKey()){ $("key").placeholder = "key kept for this tab" }
  connect()
}

if(document.readyState === "loading"){
  document.addEventListener("DOMContentLoaded", start)
} else {
  start()
}
