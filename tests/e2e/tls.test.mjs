// TLS on the public port (--tls-cert, --tls-key) and the server API
// (--api-tls-cert): real clients only. phoenix.js over wss:// (ws with the
// test certificate as its CA), Chromium loading the chat page over https
// (trusting the certificate by its SPKI hash), `openssl s_client` for the
// protocol versions, a plaintext request to the TLS port, a handshake that
// never finishes, and certificate reloads while sockets stay open.
import {test, before, after} from "node:test"
import assert from "node:assert/strict"
import {execFileSync, spawnSync} from "node:child_process"
import {existsSync, mkdtempSync, writeFileSync, readFileSync, rmSync, copyFileSync} from "node:fs"
import {createHash, X509Certificate} from "node:crypto"
import net from "node:net"
import tls from "node:tls"
import os from "node:os"
import path from "node:path"
import WebSocket from "ws"
import {section} from "./docs.mjs"
import {
  startServer, connectPhoenix, closePhoenix, joinResult, nextEvent, pushResult, withTimeout,
  CHROMIUM, httpRequest, blockWebSockets,
} from "./helpers.mjs"

const T = {timeout: 20000}
const dir = mkdtempSync(path.join(os.tmpdir(), "throng-tls-"))
const file = name => path.join(dir, name)

/** A self-signed certificate for localhost and 127.0.0.1 (`ec` P-256 or `rsa` 2048). */
function makeCert(name, kind){
  const key = kind === "ec"
    ? ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    : ["-newkey", "rsa:2048"]
  execFileSync("openssl", ["req", "-x509", ...key, "-nodes", "-days", "2", "-subj", `/CN=throng test ${name}`,
    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    "-keyout", file(`${name}.key`), "-out", file(`${name}.crt`)], {stdio: "ignore"})
  return {cert: file(`${name}.crt`), key: file(`${name}.key`), pem: readFileSync(file(`${name}.crt`), "utf8")}
}

let server, ec, rsa, wssUrl, apiUrl
before(async () => {
  ec = makeCert("ec", "ec")
  rsa = makeCert("rsa", "rsa")
  copyFileSync(ec.cert, file("live.crt"))
  copyFileSync(ec.key, file("live.key"))
  server = await startServer([
    "--tls-cert", file("live.crt"), "--tls-key", file("live.key"),
    "--api-tls-cert", rsa.cert, "--api-tls-key", rsa.key,
    "--handshake-timeout", "1",
  ])
  wssUrl = `wss://localhost:${server.port}`
  apiUrl = `https://localhost:${server.apiPort}`
}, T)
after(async () => {
  await server?.stop()
  rmSync(dir, {recursive: true, force: true})
}, T)

/** ws, trusting both test certificates (the one in force changes below). */
class TestWebSocket extends WebSocket {
  constructor(url, protocols){ super(url, protocols, {ca: [ec.pem, rsa.pem]}) }
}

/** A metric over the API, itself over TLS (the RSA certificate). */
async function metric(name){
  const text = await new Promise((resolve, reject) => {
    const url = new URL(`${apiUrl}/metrics`)
    const req = tls.connect({host: "localhost", port: url.port, ca: rsa.pem, servername: "localhost"}, () => {
      req.write(`GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`)
    })
    let body = ""
    req.setEncoding("utf8")
    req.on("data", d => { body += d })
    req.on("end", () => resolve(body))
    req.on("error", reject)
  })
  const line = text.split("\n").find(l => l.startsWith(`${name} `))
  assert.ok(line, `${name} not in /metrics`)
  return Number(line.split(" ").pop())
}

/** The certificate the server presents to a new TLS connection, as PEM-less DER fingerprint. */
function presented(){
  return withTimeout(new Promise((resolve, reject) => {
    const s = tls.connect({host: "127.0.0.1", port: server.port, ca: [ec.pem, rsa.pem], servername: "localhost", ALPNProtocols: ["http/1.1"]}, () => {
      const fp = s.getPeerCertificate().fingerprint256
      assert.equal(s.alpnProtocol, "http/1.1")
      s.end()
      resolve(fp)
    })
    s.on("error", reject)
  }), 5000, "a TLS handshake")
}

const fingerprint = pem => new X509Certificate(pem).fingerprint256

async function waitFor(check, label, ms = 8000){
  const until = Date.now() + ms
  for(;;){
    if(await check()){ return }
    if(Date.now() > until){ throw new Error(`timed out waiting for ${label}`) }
    await new Promise(r => setTimeout(r, 100))
  }
}

test("phoenix.js over wss:// joins and gets broadcasts; the API answers over https", T, async t => {
  const a = await connectPhoenix(wssUrl, "2.0.0", {transport: TestWebSocket})
  const b = await connectPhoenix(wssUrl, "2.0.0", {transport: TestWebSocket})
  t.after(() => Promise.all([closePhoenix(a), closePhoenix(b)]))
  const ca = a.channel("rooms:lobby", {user: "alice"})
  const cb = b.channel("rooms:lobby", {user: "bob"})
  assert.equal((await joinResult(ca)).status, "ok")
  assert.equal((await joinResult(cb)).status, "ok")
  const got = nextEvent(cb, "new:msg", 5000, p => p.body === "over tls")
  assert.equal((await pushResult(ca, "new:msg", {body: "over tls", user: "alice"})).status, "ok")
  assert.equal((await got).body, "over tls")
  // A message larger than one TLS record (16 KiB) both ways.
  const big = "x".repeat(40000)
  const gotBig = nextEvent(cb, "new:msg", 5000, p => p.body === big)
  assert.equal((await pushResult(ca, "new:msg", {body: big, user: "alice"})).status, "ok")
  assert.equal((await gotBig).body.length, big.length)
  assert.ok(await metric("throng_tls_handshakes_total") >= 2)
})

test("openssl s_client: TLS 1.2 and 1.3 with ALPN http/1.1; TLS 1.0 refused", T, async () => {
  const run = args => spawnSync("openssl", ["s_client", "-connect", `127.0.0.1:${server.port}`, "-servername", "localhost", ...args],
    {input: "", encoding: "utf8", timeout: 10000})
  for(const [flag, name] of [["-tls1_2", "TLSv1.2"], ["-tls1_3", "TLSv1.3"]]){
    const out = run([flag, "-alpn", "http/1.1"]).stdout
    assert.match(out, new RegExp(`New, ${name.replace(".", "\\.")}, Cipher is `), out)
    assert.match(out, /ALPN protocol: http\/1\.1/, out)
  }
  const before = await metric("throng_tls_handshake_failures_total")
  const old = run(["-tls1", "-cipher", "DEFAULT@SECLEVEL=0"])
  const text = old.stdout + old.stderr
  // Refused by the server (its handshake_failure alert), not by the client's own settings.
  assert.match(text, /Cipher is \(NONE\)/, text)
  assert.match(text, /alert handshake failure/, text)
  await waitFor(async () => await metric("throng_tls_handshake_failures_total") > before, "the failure's count")
})

test("a plaintext HTTP request to the TLS port gets a 400 saying to use https://", T, async () => {
  const res = await httpRequest(server.port, "GET", "/")
  assert.equal(res.status, 400)
  assert.match(res.body.toString(), /use https:\/\/ or wss:\/\//)
  assert.ok(await metric("throng_tls_plaintext_refusals_total") >= 1)
})

test("a handshake that never finishes is closed by --handshake-timeout", T, async () => {
  const closed = await withTimeout(new Promise((resolve, reject) => {
    const s = net.connect({host: "127.0.0.1", port: server.port}, () => {
      // The first bytes of a ClientHello record, then nothing.
      s.write(Buffer.from([22, 3, 1, 0, 200, 1, 0]))
    })
    s.on("close", () => resolve(true))
    s.on("error", () => resolve(true))
    s.resume()
    s.on("timeout", reject)
  }), 6000, "the server to close a stalled handshake")
  assert.ok(closed)
})

test("certificates reload on SIGHUP during traffic; a bad one is refused and the old kept", T, async t => {
  const sock = await connectPhoenix(wssUrl, "2.0.0", {transport: TestWebSocket})
  t.after(() => closePhoenix(sock))
  const ch = sock.channel("rooms:lobby", {user: "carol"})
  assert.equal((await joinResult(ch)).status, "ok")
  assert.equal(await presented(), fingerprint(ec.pem))

  // A new certificate (RSA this time): new handshakes get it, the open socket keeps working.
  copyFileSync(rsa.key, file("live.key"))
  copyFileSync(rsa.cert, file("live.crt"))
  server.proc.kill("SIGHUP")
  await waitFor(async () => await presented() === fingerprint(rsa.pem), "the new certificate")
  assert.ok(await metric("throng_tls_reloads_total") >= 1)
  assert.equal((await pushResult(ch, "new:msg", {body: "after reload", user: "carol"})).status, "ok")

  // A certificate whose key is not its own: refused, the RSA one stays.
  const failures = await metric("throng_tls_reload_failures_total")
  copyFileSync(ec.cert, file("live.crt"))
  server.proc.kill("SIGHUP")
  await waitFor(async () => await metric("throng_tls_reload_failures_total") > failures, "the refused reload")
  assert.equal(await presented(), fingerprint(rsa.pem))
  await waitFor(async () => /TLS certificate not reloaded/.test(server.stderr()), "the refused reload's log line")
  assert.equal((await pushResult(ch, "new:msg", {body: "still here", user: "carol"})).status, "ok")
  // Put the pair back for the other tests.
  copyFileSync(rsa.cert, file("live.crt"))
  server.proc.kill("SIGHUP")
  await waitFor(async () => await metric("throng_tls_reload_failures_total") === failures + 1 &&
    await metric("throng_tls_reloads_total") >= 2, "the good pair again")
})

test("Chromium loads the chat page over https:// and joins over wss://", T, async t => {
  if(!existsSync(CHROMIUM)){
    t.skip(`${CHROMIUM} not found: install the Debian package \`chromium\``)
    return
  }
  const spki = pem => createHash("sha256")
    .update(new X509Certificate(pem).publicKey.export({type: "spki", format: "der"})).digest("base64")
  const {chromium} = await import("playwright-core")
  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true, timeout: 15000,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      `--ignore-certificate-errors-spki-list=${spki(ec.pem)},${spki(rsa.pem)}`],
  })
  t.after(() => browser.close().catch(() => {}))
  const page = await browser.newPage()
  await page.goto(`https://localhost:${server.port}/`, {waitUntil: "load", timeout: 10000})
  await page.locator("#status").filter({hasText: "joined"}).waitFor({timeout: 8000})
  assert.equal(new URL(page.url()).protocol, "https:")
  // WebSockets blocked: phoenix.js falls back to long-poll, over https too.
  const context = await browser.newContext()
  await context.addInitScript(blockWebSockets)
  const lp = await context.newPage()
  const polls = []
  lp.on("request", r => { if(r.url().includes("/socket/longpoll")){ polls.push(r.url()) } })
  await lp.goto(`https://localhost:${server.port}/`, {waitUntil: "load", timeout: 10000})
  await lp.locator("#status").filter({hasText: "joined"}).waitFor({timeout: 10000})
  assert.ok(polls.length > 0 && polls.every(u => u.startsWith("https://")), JSON.stringify(polls.slice(0, 3)))
})

test("the docs' TLS example (docs/tls.md) works as written", T, async t => {
  const block = section("## throng terminates TLS").blocks.find(b => b.lang === "sh").text
  const lines = block.replace(/\\\n/g, " ").split("\n").filter(l => l && !l.startsWith("#"))
  const [gen, serve, curl] = lines
  assert.match(gen, /^openssl req /)
  assert.match(serve, /^throng serve --tls-cert cert.pem --tls-key key.pem$/)
  assert.match(curl, /^curl --cacert cert.pem https:\/\/localhost:4000\/healthz$/)
  const cwd = mkdtempSync(path.join(os.tmpdir(), "throng-readme-tls-"))
  t.after(() => rmSync(cwd, {recursive: true, force: true}))
  execFileSync("sh", ["-c", gen], {cwd, stdio: "ignore"})
  copyFileSync(path.join(cwd, "cert.pem"), file("readme.crt"))
  copyFileSync(path.join(cwd, "key.pem"), file("readme.key"))
  const s = await startServer(["--tls-cert", file("readme.crt"), "--tls-key", file("readme.key"), "--api-bind", "none"])
  t.after(() => s.stop())
  const out = execFileSync("sh", ["-c", curl.replace("localhost:4000", `localhost:${s.port}`)], {cwd, encoding: "utf8", timeout: 10000})
  assert.match(out, /alive/)
})
