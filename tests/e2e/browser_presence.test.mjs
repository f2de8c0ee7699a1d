// The chat page's "who is online" in headless Chromium (playwright-core,
// system Chromium): phoenix.js Presence with onSync, against a server with
// `--presence rooms:lobby=param:user`. Two users, one with two tabs; a tab
// closes, a user leaves.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {existsSync} from "node:fs"
import {startServer, CHROMIUM, launchChromium} from "./helpers.mjs"

const haveChromium = existsSync(CHROMIUM)

let server
let browser

before(async () => {
  if(!haveChromium){ return }
  server = await startServer(["--presence", "rooms:lobby=param:user", "--presence-interval", "50"])
  browser = await launchChromium()
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
  await page.goto(`${server.url}/?user=${encodeURIComponent(user)}`, {waitUntil: "load", timeout: 10000})
  await page.locator("#status").filter({hasText: "joined"}).waitFor({timeout: 8000})
  return {page, context, errors}
}

/** Waits until the page's online list reads exactly `want`. */
async function online(page, want){
  await page.waitForFunction(
    want => JSON.stringify([...document.querySelectorAll("#online li")].map(li => li.textContent)) === JSON.stringify(want),
    want, {timeout: 5000},
  ).catch(async err => {
    const got = await page.locator("#online li").allTextContents()
    throw new Error(`online list ${JSON.stringify(got)}, expected ${JSON.stringify(want)}: ${err.message}`)
  })
}

test("the chat page shows who is online, with tabs, as they come and go", {timeout: 30000}, async t => {
  if(!haveChromium){
    t.skip(`${CHROMIUM} not found: install the Debian package \`chromium\` to run the browser test`)
    return
  }
  const alice = await openChat("alice")
  await online(alice.page, ["alice"])
  assert.equal(await alice.page.locator("#online").isVisible(), true)
  const bob = await openChat("bob")
  await online(bob.page, ["alice", "bob"])
  await online(alice.page, ["alice", "bob"])
  const alice2 = await openChat("alice")
  for(const {page} of [alice, bob, alice2]){ await online(page, ["alice \u00d72", "bob"]) }
  await bob.context.close()
  for(const {page} of [alice, alice2]){ await online(page, ["alice \u00d72"]) }
  await alice2.context.close()
  await online(alice.page, ["alice"])
  // A rename joins again under the new name: the online list follows it.
  await alice.page.locator("#user").fill("alicia")
  await alice.page.locator("#user").dispatchEvent("change")
  await online(alice.page, ["alicia"])
  assert.match(await alice.page.locator(".room-note").first().textContent(), /rooms:lobby.*second tab/)
  assert.deepEqual(alice.errors, [], `page errors: ${alice.errors.join("\n")}`)
  await alice.context.close()
})
