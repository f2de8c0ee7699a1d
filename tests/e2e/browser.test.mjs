// The chat page in headless Chromium (playwright-core, system Chromium): two users talk.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {existsSync} from "node:fs"
import {startServer} from "./helpers.mjs"

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium"
const SCREENSHOT = process.env.THRONG_SCREENSHOT || "/tmp/throng-chat.png"
const haveChromium = existsSync(CHROMIUM)

let server
let browser

before(async () => {
  if(!haveChromium){ return }
  server = await startServer()
  const {chromium} = await import("playwright-core")
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: 15000,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  })
}, {timeout: 20000})

after(async () => {
  await browser?.close().catch(() => {})
  await server?.stop()
}, {timeout: 20000})

async function openChat(user){
  const context = await browser.newContext({viewport: {width: 720, height: 520}})
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
