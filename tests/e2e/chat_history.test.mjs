// History without a config file (issue 38, item 5): `throng serve
// --history 'rooms:*=100'`, and the built-in chat page in headless
// Chromium, which rejoins with `since`. Its connection goes through a TCP
// proxy that the test cuts twice while the server API publishes numbered
// messages; the page must show every number exactly once, in order.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {existsSync} from "node:fs"
import net from "node:net"
import {startServer, CHROMIUM, launchChromium, withTimeout} from "./helpers.mjs"

const haveChromium = existsSync(CHROMIUM)
const N = 60

let server
let browser
let proxy
const links = new Set()

/** A TCP proxy to the server that can drop every connection at once. */
function startProxy(port){
  const srv = net.createServer(client => {
    const upstream = net.connect(port, "127.0.0.1")
    const link = {client, upstream}
    links.add(link)
    const drop = () => { links.delete(link); client.destroy(); upstream.destroy() }
    client.on("error", drop).on("close", drop)
    upstream.on("error", drop).on("close", drop)
    client.pipe(upstream)
    upstream.pipe(client)
  })
  return new Promise(resolve => srv.listen(0, "127.0.0.1", () => resolve(srv)))
}

/** Cuts every connection through the proxy, as a network that drops them. */
function cut(){
  const n = links.size
  for(const {client, upstream} of [...links]){ client.resetAndDestroy(); upstream.destroy() }
  return n
}

before(async () => {
  if(!haveChromium){ return }
  server = await startServer(["--history", "rooms:*=100"])
  proxy = await startProxy(server.port)
  browser = await launchChromium()
}, {timeout: 20000})

after(async () => {
  await browser?.close().catch(() => {})
  proxy?.close()
  cut()
  await server?.stop()
}, {timeout: 20000})

const publish = async n => {
  const res = await fetch(`${server.apiUrl}/api/broadcast`, {
    method: "POST",
    headers: {"content-type": "application/json"},
    body: JSON.stringify({topic: "rooms:lobby", event: "new:msg", payload: {user: "bot", body: String(n)}}),
  })
  assert.equal(res.status, 200, await res.text())
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

test("the chat page, cut off mid-stream, gets every message after it reconnects", {timeout: 60000}, async t => {
  if(!haveChromium){
    t.skip(`${CHROMIUM} not found: install the Debian package \`chromium\` to run the browser test`)
    return
  }
  const page = await browser.newPage()
  const errors = []
  page.on("pageerror", err => errors.push(err.message))
  await page.goto(`http://127.0.0.1:${proxy.address().port}/`, {waitUntil: "load", timeout: 10000})
  await page.locator("#status", {hasText: "joined"}).waitFor({timeout: 8000})
  const bodies = () => page.$$eval("#messages li", items => items
    .filter(li => li.querySelector(".user")?.textContent === "bot")
    .map(li => li.querySelector(".body").textContent))
  let cuts = 0
  for(let n = 1; n <= N; n++){
    await publish(n)
    if(n === 20 || n === 40){
      // Some messages in flight reach nobody: they come back by `since`.
      cuts += cut()
      await sleep(5)
    } else {
      await sleep(10)
    }
  }
  assert.ok(cuts >= 2, `the page's connection was cut (${cuts} connections)`)
  const want = Array.from({length: N}, (_, i) => String(i + 1))
  let shown = []
  await withTimeout((async () => {
    while((shown = await bodies()).length < N){ await sleep(50) }
  })(), 20000, `all ${N} messages on the page`).catch(e => {
    throw new Error(`${e.message}; it shows ${JSON.stringify(shown)}`)
  })
  await sleep(200)
  assert.deepEqual(await bodies(), want, "every message once, in order")
  // Reconnected: the status is back, no "lost" notice, no page error.
  await page.locator("#status", {hasText: "joined"}).waitFor({timeout: 8000})
  assert.equal(await page.locator("#messages li.notice").count(), 0)
  assert.deepEqual(errors, [])
  await page.close()
})
