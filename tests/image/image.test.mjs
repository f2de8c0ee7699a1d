// The product as the container image ships it: the static (musl) binary
// that scripts/test.sh builds (THRONG_BIN points to it there), then, where
// podman runs, the Containerfile's `FROM scratch` stage built around that
// binary and run as a container.
//
// - The binary asks the kernel for no loader: no ELF interpreter, so it
//   runs on an empty base.
// - It serves as the image runs it: an empty environment but for THRONG_*
//   settings, `/` as its directory (not writable), user 65534: the chat
//   page and its assets, a phoenix.js join, a push between two clients, a
//   server API broadcast, /readyz, and a SIGTERM that drains (1012, exit 0).
// - The container: the Containerfile's lines from `FROM scratch` on,
//   verbatim, built on a first stage that holds this binary (so nothing is
//   downloaded: the Containerfile's own first stage compiles in Alpine's
//   Rust image, which this suite does not pull); run with podman by the
//   docs' run command (docs/operations.md, "## Container image"; adapted to this sandbox: see readmeRun), the
//   same checks plus the chat page in Chromium, the image's user, stop
//   signal and size, and `podman stop` draining it.
//
// Where podman is missing or cannot start a container, the container test
// says why and is skipped (THRONG_REQUIRE_PODMAN=1 makes that a failure);
// the binary's tests always run.
import {test} from "node:test"
import assert from "node:assert/strict"
import {spawn, spawnSync} from "node:child_process"
import {copyFileSync, existsSync, mkdtempSync, openSync, readSync, closeSync, readFileSync, rmSync, writeFileSync} from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"
import {randomBytes} from "node:crypto"
import {
  REPO_ROOT, THRONG_BIN, withTimeout, httpRequest, connectPhoenix, closePhoenix, joinResult, nextEvent, CHROMIUM, launchChromium
} from "../e2e/helpers.mjs"
import {section} from "../e2e/docs.mjs"

const KEY = randomBytes(16).toString("hex")
const REQUIRE_PODMAN = process.env.THRONG_REQUIRE_PODMAN === "1"

/** The ELF program header types of `file` (PT_INTERP = 3 names the dynamic loader). */
function elfSegments(file){
  const fd = openSync(file, "r")
  try {
    const head = Buffer.alloc(64)
    readSync(fd, head, 0, 64, 0)
    assert.equal(head.subarray(0, 4).toString("latin1"), "\x7fELF", `${file} is not an ELF file`)
    assert.equal(head[4], 2, "a 64-bit ELF")
    const phoff = Number(head.readBigUInt64LE(32))
    const phentsize = head.readUInt16LE(54)
    const phnum = head.readUInt16LE(56)
    const table = Buffer.alloc(phentsize * phnum)
    readSync(fd, table, 0, table.length, phoff)
    return Array.from({length: phnum}, (_, i) => table.readUInt32LE(i * phentsize))
  } finally {
    closeSync(fd)
  }
}

/** A TCP port free on this machine now (the container shares the host's network). */
function freePort(){
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.once("error", reject)
    srv.listen(0, "0.0.0.0", () => { const {port} = srv.address(); srv.close(() => resolve(port)) })
  })
}

/**
 * Spawns `cmd args` (the server, or `podman run` of it) and waits (`ms`) for
 * the server's `listening on` and `api at` lines on its stdout.
 */
async function launch(cmd, args, options, ms = 20000){
  const proc = spawn(cmd, args, {...options, stdio: ["ignore", "pipe", "pipe"]})
  let out = ""
  let err = ""
  proc.stderr.setEncoding("utf8")
  proc.stderr.on("data", c => { err = (err + c).slice(-32768) })
  const exited = new Promise(resolve => proc.once("exit", (code, signal) => resolve({code, signal})))
  const ready = new Promise((resolve, reject) => {
    proc.stdout.setEncoding("utf8")
    proc.stdout.on("data", c => {
      out += c
      const listening = out.match(/^listening on \S+:(\d+)$/m)
      const api = out.match(/^api at \S+:(\d+)$/m)
      if(listening && api){ resolve({port: Number(listening[1]), apiPort: Number(api[1])}) }
    })
    proc.once("error", reject)
    exited.then(({code, signal}) => reject(new Error(`${cmd} exited (${code ?? signal}) before listening\nstdout: ${out}\nstderr: ${err}`)))
  })
  const kill = () => { if(proc.exitCode === null && proc.signalCode === null){ proc.kill("SIGKILL") } }
  try {
    const ports = await withTimeout(ready, ms, `${path.basename(cmd)}'s listening lines`)
    return {...ports, proc, exited, stderr: () => err, kill}
  } catch(e){
    kill()
    throw e
  }
}

/** What a user of the image does first: the chat page, phoenix.js joins and a push, the API's broadcast, readiness. */
async function serves(port, apiPort, key = KEY){
  const page = await httpRequest(port, "GET", "/")
  assert.equal(page.status, 200)
  assert.match(page.headers["content-type"], /^text\/html/)
  assert.match(page.body.toString(), /<script defer src="\/assets\/app\.js"><\/script>/)
  const js = await httpRequest(port, "GET", "/assets/app.js")
  assert.equal(js.status, 200)
  assert.ok(js.body.length > 10000, `the bundled page script (${js.body.length} bytes)`)
  for(const p of [port, apiPort]){
    const ready = await httpRequest(p, "GET", "/readyz")
    assert.equal(ready.status, 200, `/readyz on ${p}: ${ready.body}`)
  }

  const sockets = []
  const url = `ws://127.0.0.1:${port}`
  const joined = []
  for(const user of ["ann", "ben"]){
    const socket = await connectPhoenix(url, "2.0.0")
    sockets.push(socket)
    const channel = socket.channel("rooms:lobby", {user})
    assert.equal((await joinResult(channel)).status, "ok", `${user} joins rooms:lobby`)
    joined.push(channel)
  }
  const [ann, ben] = joined
  const fromBen = nextEvent(ann, "new:msg", 5000, m => m.user === "ben")
  ben.push("new:msg", {user: "ben", body: "hello ann"})
  assert.deepEqual(await fromBen, {user: "ben", body: "hello ann"})

  const fromBot = joined.map(c => nextEvent(c, "new:msg", 5000, m => m.user === "bot"))
  const res = await withTimeout(fetch(`http://127.0.0.1:${apiPort}/api/broadcast`, {
    method: "POST",
    headers: {"X-API-Key": key, "Content-Type": "application/json"},
    body: JSON.stringify({topic: "rooms:lobby", event: "new:msg", payload: {user: "bot", body: "hi"}}),
  }).then(r => r.text()), 5000, "the API's broadcast answer")
  assert.equal(res, "{\"ok\":true}\n")
  for(const m of await Promise.all(fromBot)){ assert.deepEqual(m, {user: "bot", body: "hi"}) }
  return {sockets, channels: joined}
}

/** Resolves with the close code of the socket's next close. */
function closeCode(socket, ms){
  return withTimeout(new Promise(resolve => socket.onClose(e => resolve(e.code))), ms, "the socket's close")
}

test("the binary is static: no ELF interpreter, so an empty base image runs it", {timeout: 10000}, t => {
  assert.ok(existsSync(THRONG_BIN), `no binary at ${THRONG_BIN}: scripts/test.sh builds it (cargo build --target x86_64-unknown-linux-musl) and sets THRONG_BIN`)
  const segments = elfSegments(THRONG_BIN)
  assert.ok(segments.length > 0)
  assert.ok(!segments.includes(3), `${THRONG_BIN} asks for a dynamic loader (PT_INTERP): build it for x86_64-unknown-linux-musl`)
  const file = spawnSync("file", ["-b", THRONG_BIN], {encoding: "utf8", timeout: 5000})
  if(file.status === 0){
    assert.match(file.stdout, /static(-pie)? linked|statically linked/, file.stdout)
    t.diagnostic(`file: ${file.stdout.trim()}`)
  }
  const ldd = spawnSync("ldd", [THRONG_BIN], {encoding: "utf8", timeout: 5000})
  assert.doesNotMatch(ldd.stdout, /=>/, `ldd lists shared libraries:\n${ldd.stdout}`)
})

test("the binary serves as the image runs it: no environment, / as its directory, user 65534; SIGTERM drains", {timeout: 30000}, async t => {
  const env = {THRONG_PORT: "0", THRONG_BIND: "127.0.0.1", THRONG_API_BIND: "127.0.0.1:0", THRONG_API_KEY: KEY}
  const asNobody = process.getuid?.() === 0 ? {uid: 65534, gid: 65534} : {}
  if(!asNobody.uid){ t.diagnostic("not root: the server runs as this user, not 65534") }
  const server = await launch(THRONG_BIN, ["serve"], {cwd: "/", env, ...asNobody})
  let sockets = []
  try {
    sockets = (await serves(server.port, server.apiPort)).sockets
    const closed = closeCode(sockets[0], 10000)
    server.proc.kill("SIGTERM")
    assert.equal(await closed, 1012, "a drain closes sockets with 1012 (Service Restart)")
    assert.deepEqual(await withTimeout(server.exited, 15000, "the drained server's exit"), {code: 0, signal: null})
  } finally {
    await Promise.all(sockets.map(s => closePhoenix(s)))
    server.kill()
  }
})

// ---------------------------------------------------------------------------
// the container

/**
 * podman's global options. This sandbox runs containers only with runc (crun
 * fails on its hybrid cgroups) and the cgroupfs manager; a machine with
 * systemd and crun needs neither.
 */
const PODMAN = ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]

function podman(args, timeout = 60000){
  return spawnSync("podman", [...PODMAN, ...args], {encoding: "utf8", timeout, maxBuffer: 16 << 20})
}

/** The Containerfile's last stage (from `FROM scratch`), as written. */
function runtimeStage(){
  const text = readFileSync(path.join(REPO_ROOT, "Containerfile"), "utf8")
  const at = text.search(/^FROM scratch$/m)
  assert.ok(at >= 0, "the Containerfile has a FROM scratch stage")
  return text.slice(at)
}

/**
 * A build context whose first stage, `build`, holds what the runtime stage
 * copies from the Containerfile's Alpine stage: /throng is the binary under
 * test, other files (the CA bundle) come from this machine's same path.
 */
function buildContext(dir){
  const stage = runtimeStage()
  const lines = ["FROM scratch AS build"]
  const copies = [...stage.matchAll(/^COPY --from=build (\S+) (\S+)$/gm)].map(m => m[1])
  assert.ok(copies.includes("/throng"), "the runtime stage copies /throng from the build stage")
  copies.forEach((src, i) => {
    const from = src === "/throng" ? THRONG_BIN : src
    assert.ok(existsSync(from), `${from} (the runtime stage copies ${src}) is missing on this machine`)
    copyFileSync(from, path.join(dir, `f${i}`))
    lines.push(`COPY f${i} ${src}`)
  })
  writeFileSync(path.join(dir, "Containerfile"), `${lines.join("\n")}\n\n${stage}`)
}

/**
 * The docs' `podman run` line (docs/operations.md, "## Container image")
 * as this sandbox can run it: its options but `-p` (the host's network
 * instead, with free ports through THRONG_PORT and THRONG_API_BIND) and an
 * open-files limit within this machine's hard limit; `--name` added, the
 * test's tag for the image name. The docs pass the API key on from the
 * environment (`-e THRONG_API_KEY`, after `export THRONG_API_KEY=...`): the
 * key is a fresh one, in the environment podman runs with. Returns
 * {options, key, env}.
 */
function readmeRun(name, nofileLimit){
  const lines = section("## Container image").blocks.find(b => b.lang === "sh").text.trim().split("\n")
  const run = lines.find(l => l.startsWith("podman run "))
  assert.ok(run, "docs, Container image: a podman run line")
  assert.ok(lines.some(l => l.startsWith("export THRONG_API_KEY=")), "the docs export the key the run passes on")
  const words = run.split(/\s+/).slice(2, -1)
  const options = ["--name", name, "--network", "host"]
  let passed = false
  for(let i = 0; i < words.length; i++){
    const [w, v] = [words[i], words[i + 1]]
    if(w === "-p"){ i++; continue }
    if(w === "--ulimit" && v.startsWith("nofile=")){ options.push(w, `nofile=${nofileLimit}:${nofileLimit}`); i++; continue }
    if(w === "-e" && v === "THRONG_API_KEY"){ passed = true }
    options.push(w)
  }
  assert.ok(passed, "the docs' run passes THRONG_API_KEY on")
  const key = randomBytes(24).toString("hex")
  return {options, key, env: {...process.env, THRONG_API_KEY: key}}
}

/** The open-files limit to give the container: the runtime's default exceeds this machine's hard limit. */
function nofile(){
  const hard = spawnSync("sh", ["-c", "ulimit -Hn"], {encoding: "utf8"}).stdout.trim()
  return Math.min(16384, hard === "unlimited" ? 16384 : Number(hard))
}

test("the FROM scratch image: chat page in Chromium, phoenix.js, API; non-root, SIGTERM on stop, small", {timeout: 180000}, async t => {
  const skip = why => {
    if(REQUIRE_PODMAN){ assert.fail(`THRONG_REQUIRE_PODMAN=1, but ${why}`) }
    t.skip(why)
  }
  const version = spawnSync("podman", ["--version"], {encoding: "utf8", timeout: 10000})
  if(version.error || version.status !== 0){
    return skip("podman is not installed (scripts/test.sh installs it with apt-get where it can): the image is not built or run")
  }
  const info = podman(["info", "--format", "{{.Host.OCIRuntime.Name}}"], 30000)
  if(info.status !== 0){
    return skip(`podman cannot run here (\`podman info\` failed): ${info.stderr.trim().split("\n").pop()}`)
  }
  t.diagnostic(version.stdout.trim())

  const tag = `localhost/throng-image-test:${process.pid}-${randomBytes(3).toString("hex")}`
  const name = `throng-image-test-${process.pid}`
  const dir = mkdtempSync(path.join(os.tmpdir(), "throng-image-"))
  // A runner that ends this process early (its timeout) leaves no container behind.
  const cleanup = () => {
    podman(["rm", "--force", "--ignore", "--time", "0", name], 30000)
    podman(["rmi", "--force", tag], 30000)
  }
  process.once("exit", cleanup)
  let server
  let browser
  let sockets = []
  try {
    buildContext(dir)
    const build = podman(["build", "--quiet", "--tag", tag, "--file", path.join(dir, "Containerfile"), dir], 120000)
    assert.equal(build.status, 0, `podman build:\n${build.stdout}\n${build.stderr}`)

    const [image] = JSON.parse(podman(["image", "inspect", tag]).stdout)
    assert.equal(image.Config.User, "65534:65534")
    assert.equal(image.Config.StopSignal, "SIGTERM")
    assert.deepEqual(image.Config.Entrypoint, ["/throng"])
    assert.deepEqual(image.Config.Cmd, ["serve"])
    assert.ok(image.Size < 32 << 20, `image size ${image.Size} bytes`)
    t.diagnostic(`image size: ${image.Size} bytes (${(image.Size / 1048576).toFixed(1)} MiB)`)

    const limits = ["--ulimit", `nofile=${nofile()}:${nofile()}`, "--ulimit", "nproc=4096:4096"]
    // A container that prints the version: whether podman can start one here at all.
    const probe = podman(["run", "--rm", "--network", "host", ...limits, tag, "--version"], 60000)
    if(probe.status === 125){
      return skip(`podman cannot start a container here: ${probe.stderr.trim().split("\n").pop()}`)
    }
    assert.equal(probe.status, 0, `the image's /throng --version:\n${probe.stdout}\n${probe.stderr}`)
    assert.match(probe.stdout, /^throng \d+\.\d+\.\d+/)

    // The docs' run command, on the host's network (this sandbox has no
    // other) with ports chosen free here; as deploy/kubernetes.yaml runs
    // it: a read-only root file system, no capabilities, no privilege
    // escalation.
    const port = await freePort()
    const apiPort = await freePort()
    const readme = readmeRun(name, nofile())
    server = await launch("podman", [...PODMAN, "run", ...readme.options, "--ulimit", "nproc=4096:4096",
      "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
      "-e", `THRONG_PORT=${port}`, "-e", `THRONG_API_BIND=0.0.0.0:${apiPort}`, tag], {env: readme.env}, 60000)
    assert.deepEqual([server.port, server.apiPort], [port, apiPort])

    const pid = podman(["inspect", "--format", "{{.State.Pid}}", name]).stdout.trim()
    const uid = readFileSync(`/proc/${pid}/status`, "utf8").match(/^Uid:\s+(\d+)/m)[1]
    assert.equal(uid, "65534", "the server runs as user 65534")

    const joined = await serves(port, apiPort, readme.key)
    sockets = joined.sockets

    // The chat page, in a browser, talks with the phoenix.js clients.
    if(existsSync(CHROMIUM)){
      browser = await launchChromium()
      const page = await browser.newPage()
      const errors = []
      page.on("pageerror", e => errors.push(e.message))
      await page.goto(`http://127.0.0.1:${port}/`, {waitUntil: "load", timeout: 10000})
      await page.locator("#status").filter({hasText: "joined"}).waitFor({timeout: 8000})
      await page.fill("#user", "cleo")
      const seen = nextEvent(joined.channels[0], "new:msg", 5000, m => m.user === "cleo")
      await page.fill("#message", "hello from the page")
      await page.click("#send")
      assert.deepEqual(await seen, {user: "cleo", body: "hello from the page"})
      joined.channels[0].push("new:msg", {user: "ann", body: "from node"})
      await page.locator("#messages li", {hasText: "ann: from node"}).waitFor({timeout: 5000})
      assert.deepEqual(errors, [])
    } else {
      t.diagnostic(`${CHROMIUM} not found: the chat page was fetched, not run in a browser`)
    }

    // `podman stop` sends the image's STOPSIGNAL: the server drains and exits 0.
    const closed = closeCode(sockets[0], 20000)
    const stop = podman(["stop", "--time", "20", name], 40000)
    assert.equal(stop.status, 0, `podman stop: ${stop.stderr}`)
    assert.equal(await closed, 1012)
    assert.deepEqual(await withTimeout(server.exited, 20000, "podman run's exit"), {code: 0, signal: null})
  } finally {
    await browser?.close().catch(() => {})
    await Promise.all(sockets.map(s => closePhoenix(s)))
    server?.kill()
    cleanup()
    process.off("exit", cleanup)
    rmSync(dir, {recursive: true, force: true})
  }
})
