// pusher-js in headless Chromium (playwright-core, system Chromium), its
// web build with encryption (pusher-js/with-encryption), `ws` transport
// only, as the docs tell browser apps to configure it: two pages on a
// presence channel see each other once and exchange client events; a
// private-encrypted channel subscribes with the SDK's shared secret, and
// an event the HTTP API relays as the SDK encrypted it is decrypted in the
// page (when this server has the HTTP API).
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {existsSync} from "node:fs"
import path from "node:path"
import PusherServer from "pusher"
import {CHROMIUM, launchChromium, REPO_ROOT} from "../e2e/helpers.mjs"
import {APP_ID, KEY, SECRET, startPusher} from "./channels_helpers.mjs"

const haveChromium = existsSync(CHROMIUM)
const BUNDLE = path.join(REPO_ROOT, "node_modules/pusher-js/dist/web/pusher-with-encryption.min.js")
const MASTER_KEY = Buffer.alloc(32, 9).toString("base64")

let server
let browser
let sdk

before(async () => {
  if(!haveChromium){ return }
  server = await startPusher(["--presence-interval", "50"])
  sdk = new PusherServer({appId: APP_ID, key: KEY, secret: SECRET, host: "127.0.0.1", port: String(server.port), useTLS: false, encryptionMasterKeyBase64: MASTER_KEY})
  browser = await launchChromium()
}, {timeout: 30000})

after(async () => {
  await browser?.close().catch(() => {})
  await server?.stop()
}, {timeout: 20000})

/** A page with pusher-js (with encryption) connected as `user`, its channel auth signed by the SDK in Node. */
async function openPage(user){
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = []
  page.on("pageerror", (err) => errors.push(err.message))
  await page.exposeFunction("signChannel", (socketId, channel) =>
    sdk.authorizeChannel(socketId, channel, channel.startsWith("presence-") ? {user_id: user, user_info: {name: user}} : undefined))
  await page.setContent("<!doctype html><title>pusher</title>")
  await page.addScriptTag({path: BUNDLE})
  await page.evaluate(({key, port}) => {
    window.log = []
    window.pusher = new Pusher(key, {
      cluster: "mt1", wsHost: "127.0.0.1", wsPort: port, forceTLS: false,
      enabledTransports: ["ws"], disableStats: true,
      channelAuthorization: {customHandler: ({socketId, channelName}, cb) =>
        window.signChannel(socketId, channelName).then((auth) => cb(null, auth), (e) => cb(e, null))},
    })
    return new Promise((resolve) => window.pusher.connection.bind("connected", resolve))
  }, {key: KEY, port: server.port})
  return {page, errors}
}

test("pusher-js in Chromium: presence once per user, client events between pages, encrypted channels", {timeout: 40000}, async (t) => {
  if(!haveChromium){
    t.skip(`${CHROMIUM} not found: install the Debian package \`chromium\` to run the browser test`)
    return
  }
  const a = await openPage("alice")
  const b = await openPage("bob")
  const join = (page) => page.evaluate(() => new Promise((resolve) => {
    const ch = window.pusher.subscribe("presence-browser")
    ch.bind("pusher:member_added", (m) => window.log.push(`added ${m.id}`))
    ch.bind("client-wave", (d, meta) => window.log.push(`wave ${d.from} ${meta.user_id}`))
    ch.bind("pusher:subscription_succeeded", (members) => resolve(members.count))
  }))
  assert.equal(await join(a.page), 1)
  await join(b.page)
  await a.page.waitForFunction(() => window.log.includes("added bob"), null, {timeout: 5000})
  // bob's list has alice, or alice comes as member_added: alice once either way.
  await b.page.waitForFunction(() => window.pusher.channel("presence-browser").members.get("alice") !== null, null, {timeout: 5000})
  await a.page.evaluate(() => window.pusher.channel("presence-browser").trigger("client-wave", {from: "alice"}))
  await b.page.waitForFunction(() => window.log.includes("wave alice alice"), null, {timeout: 5000})
  assert.deepEqual(await a.page.evaluate(() => window.log.filter((l) => l.startsWith("wave"))), [], "not echoed")
  assert.equal(await b.page.evaluate(() => window.pusher.channel("presence-browser").members.count), 2)

  // private-encrypted: subscribed with the shared secret the SDK derives.
  await b.page.evaluate(() => new Promise((resolve, reject) => {
    const ch = window.pusher.subscribe("private-encrypted-browser")
    ch.bind("secret", (d) => window.log.push(`secret ${d.n}`))
    ch.bind("pusher:subscription_succeeded", resolve)
    ch.bind("pusher:subscription_error", reject)
  }))
  const sent = await sdk.trigger("private-encrypted-browser", "secret", {n: 42}).catch((e) => e)
  if(sent.status === 200){
    await b.page.waitForFunction(() => window.log.includes("secret 42"), null, {timeout: 5000})
  } else {
    t.diagnostic(`no HTTP API on this server (status ${sent.status}): the encrypted event's relay is not checked`)
  }
  assert.deepEqual([...a.errors, ...b.errors], [])
  await a.page.context().close()
  await b.page.context().close()
})
