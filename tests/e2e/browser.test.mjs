// The chat page in headless Chromium (playwright-core, system Chromium): two
// users talk; and a page whose WebSockets are blocked falls back to
// long-poll (phoenix.js longPollFallbackMs) and talks with a WebSocket one.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {existsSync} from "node:fs"
import {startServer, CHROMIUM, launchChromium, blockWebSockets} from "./helpers.mjs"

const SCREENSHOT = process.env.THRONG_SCREENSHOT || "/tmp/throng-chat.png"
const haveChromium = existsSync(CHROMIUM)

let server
let browser

before(async () => {
  if(!haveChromium){ return }
  server = await startServer()
  browser = await launchChromium()
}, {timeout: 20000})

after(async () => {
  await browser?.close().catch(() => {})
  await server?.stop()
}, {timeout: 20000})

async function openChat(user, {blockWs = false} = {}){
  const context = await browser.newContext({viewport: {width: 720, height: 520}})
  if(blockWs){ await context.addInitScript(blockWebSockets) }
  const page = await context.newPage()
  const errors = []
  page.on("pageerror", err => errors.push(err.message))
  page.on("console", msg => { if(msg.type() === "error"){ errors.push(msg.text()) } })
  await page.goto(server.url + "/", {waitUntil: "load", timeout: 10000})
  await page.locator("#status").filter({hasText: "joined"}).waitFor({timeout: 8000})
  await page.fill("#user", user)
  return {page, errors}
}

async function send(page, text, {enter = false} = {}){
  await page.fill("#message", text)
  if(enter){ await page.press("#message", "Enter") } else { await page.click("#send") }
}

const line = (page, text) => page.locator("#messages li", {hasText: text})

test("two browsers chat through rooms:lobby", {timeout: 20000}, async t => {
  if(!haveChromium){
    t.skip(`${CHROMIUM} not found: install the Debian package \`chromium\` to run the browser test`)
    return
  }
  const a = await openChat("alice")
  const b = await openChat("bob")

  await send(a.page, "hello from alice")
  for(const {page} of [a, b]){
    await line(page, "alice: hello from alice").waitFor({timeout: 5000})
  }
  assert.equal(await a.page.inputValue("#message"), "", "message input is cleared after sending")

  await send(b.page, "hi alice, bob here", {enter: true})
  for(const {page} of [a, b]){
    await line(page, "bob: hi alice, bob here").waitFor({timeout: 5000})
  }

  // each page shows exactly these two messages, in order
  for(const {page} of [a, b]){
    assert.deepEqual(await page.locator("#messages li").allTextContents(),
      ["alice: hello from alice", "bob: hi alice, bob here"])
  }
  // a blank message is not sent: the next real one is the third line
  await send(a.page, "   ")
  await send(a.page, "bye")
  await line(b.page, "alice: bye").waitFor({timeout: 5000})
  assert.equal(await b.page.locator("#messages li").count(), 3)

  assert.equal((await a.page.textContent("#status")).trim(), "joined")
  await a.page.screenshot({path: SCREENSHOT})
  assert.deepEqual(a.errors, [], `page A errors: ${a.errors.join("\n")}`)
  assert.deepEqual(b.errors, [], `page B errors: ${b.errors.join("\n")}`)
})

test("WebSockets blocked: the page falls back to long-poll and chats with a WebSocket page", {timeout: 30000}, async t => {
  if(!haveChromium){
    t.skip(`${CHROMIUM} not found: install the Debian package \`chromium\` to run the browser test`)
    return
  }
  const lp = await openChat("carol", {blockWs: true})
  const ws = await openChat("dave")
  const transport = page => page.evaluate(() => document.getElementById("status").dataset.transport)
  assert.equal(await transport(lp.page), "longpoll")
  assert.equal(await transport(ws.page), "websocket")

  await send(lp.page, "hello over long-poll")
  for(const {page} of [lp, ws]){
    await line(page, "carol: hello over long-poll").waitFor({timeout: 5000})
  }
  await send(ws.page, "hi carol, from a websocket", {enter: true})
  for(const {page} of [lp, ws]){
    await line(page, "dave: hi carol, from a websocket").waitFor({timeout: 5000})
  }
  // the long-poll page made its requests to /socket/longpoll only, and is still joined
  assert.equal((await lp.page.textContent("#status")).trim(), "joined")
  assert.deepEqual(lp.errors, [], `long-poll page errors: ${lp.errors.join("\n")}`)
  assert.deepEqual(ws.errors, [], `WebSocket page errors: ${ws.errors.join("\n")}`)
})
