// `throng bench` end to end: a small run against its embedded server, then
// its self-contained HTML report opened in headless Chromium (offline: every
// request the page makes is refused), with no page errors and every chart drawn.
import {test} from "node:test"
import assert from "node:assert/strict"
import {existsSync, mkdtempSync, readFileSync, rmSync} from "node:fs"
import {spawn} from "node:child_process"
import os from "node:os"
import path from "node:path"
import {REPO_ROOT, THRONG_BIN, CHROMIUM, launchChromium} from "./helpers.mjs"

const BIN = THRONG_BIN || path.join(REPO_ROOT, "target/release/throng")

function run(args, ms){
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, {stdio: ["ignore", "pipe", "pipe"]})
    let out = "", err = ""
    child.stdout.on("data", d => { out += d })
    child.stderr.on("data", d => { err += d })
    const timer = setTimeout(() => { child.kill("SIGKILL"); reject(new Error(`throng ${args.join(" ")} took over ${ms} ms`)) }, ms)
    child.on("exit", code => { clearTimeout(timer); resolve({code, out, err}) })
  })
}

test("bench report: a real run's report opens offline in Chromium without errors", {timeout: 60000}, async t => {
  if(!existsSync(CHROMIUM)){ t.skip(`no Chromium at ${CHROMIUM}`); return }
  const dir = mkdtempSync(path.join(os.tmpdir(), "throng-report-"))
  t.after(() => rmSync(dir, {recursive: true, force: true}))
  const report = path.join(dir, "report.html"), json = path.join(dir, "run.json")
  const r = await run(["bench", "--connections", "400", "--arrival-rate", "2000", "--broadcasts", "2",
    "--broadcast-interval", "0.2", "--hold", "2", "--dashboard-port", "0", "--json", json, "--report", report], 45000)
  assert.equal(r.code, 0, `bench failed:\n${r.err}`)
  const results = JSON.parse(readFileSync(json, "utf8"))
  assert.equal(results.connections.connected, 400)
  assert.equal(results.errors.total, 0)
  assert.equal(results.broadcast.receivers, 800)

  const browser = await launchChromium()
  t.after(() => browser.close().catch(() => {}))
  const page = await browser.newPage()
  const errors = [], requests = []
  page.on("pageerror", e => errors.push(e.message))
  page.on("console", m => { if(m.type() === "error"){ errors.push(m.text()) } })
  // Offline: anything other than the file itself is refused and recorded.
  await page.route("**/*", route => {
    if(route.request().url().startsWith("file:")){ return route.continue() }
    requests.push(route.request().url())
    return route.abort()
  })
  await page.goto("file://" + report, {waitUntil: "load", timeout: 15000})
  assert.deepEqual(errors, [], "page errors")
  assert.deepEqual(requests, [], "the report fetched something from the network")
  const text = await page.textContent("body")
  assert.match(text, /connections target/)
  assert.match(text, /400/)
  const charts = await page.$$eval("svg", svgs => svgs.filter(s => s.querySelector("path, polyline, line")).length)
  assert.ok(charts >= 4, `expected the charts to be drawn, found ${charts}`)
})
