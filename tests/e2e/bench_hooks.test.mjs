// `throng bench --hooks` end to end, at a tiny size: the built-in backend,
// the embedded server with a join hook on one topic pattern and none on
// the other, and a report that carries every figure of the hooks scenario
// (joins/s both ways and their ratio, the latency the hook adds, memory per
// idle joined socket). Only that the figures are there is checked, never
// their values: those are BENCHMARKS.md's, measured on a quiet machine.
import {test} from "node:test"
import assert from "node:assert/strict"
import {mkdtempSync, readFileSync, rmSync} from "node:fs"
import {spawn} from "node:child_process"
import os from "node:os"
import path from "node:path"
import {REPO_ROOT, THRONG_BIN} from "./helpers.mjs"

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

const isNumber = v => typeof v === "number" && Number.isFinite(v)

test("bench --hooks: a tiny run reports joins/s both ways, the ratio, the hook's latency and memory per socket", {timeout: 60000}, async t => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "throng-bench-hooks-"))
  t.after(() => rmSync(dir, {recursive: true, force: true}))
  const json = path.join(dir, "hooks.json")
  const r = await run(["bench", "--hooks", "--connections", "300", "--hook-rounds", "1", "--json", json], 50000)
  assert.equal(r.code, 0, `bench --hooks failed:\n${r.err}\n${r.out}`)
  const rep = JSON.parse(readFileSync(json, "utf8"))
  assert.equal(rep.scenario, "hooks")
  assert.equal(rep.sockets_per_phase, 300)
  assert.equal(rep.rounds.length, 1)
  assert.equal(rep.errors, 0, rep.first_error)
  for(const k of ["plain_joins_per_sec", "hooked_joins_per_sec", "ratio", "ratio_min", "ratio_max", "plain_server_cpu_us", "hooked_server_cpu_us"]){
    assert.ok(isNumber(rep[k]), `${k}: ${rep[k]}`)
  }
  assert.ok(rep.plain_joins_per_sec > 0 && rep.hooked_joins_per_sec > 0)
  for(const l of [rep.join_latency, rep.join_latency_one_at_a_time]){
    for(const k of ["added_p50_us", "added_p99_us"]){ assert.ok(isNumber(l[k]), k) }
    for(const side of [l.plain, l.hooked]){
      assert.ok(side.count > 0 && isNumber(side.p50_us) && isNumber(side.p99_us))
    }
  }
  assert.equal(rep.memory.sockets, 300)
  assert.equal(rep.memory.assigns_bytes, 50)
  for(const k of ["plain_bytes_per_socket", "hooked_bytes_per_socket"]){ assert.ok(isNumber(rep.memory[k]), k) }
  // Every hooked join went through the built-in backend, and no plain one did:
  // warm-up (256) + memory (300) on one server, warm-up (256) + a rate phase
  // (300) + a one-at-a-time phase (300) on the other.
  assert.equal(rep.backend_requests.join, 256 + 300 + 256 + 300 + 300)
  assert.equal(rep.backend_requests.connect, 0)
  assert.equal(typeof rep.goals.ratio_met, "boolean")
  assert.equal(typeof rep.goals.memory_met, "boolean")
  assert.match(r.out, /ratio: [\d.]+ \(median of rounds/)
  assert.match(r.out, /the hook adds -?\d+ us at p50, -?\d+ us at p99/)
  assert.match(r.out, /server memory per idle joined socket/)
})

test("bench --hooks refuses a --target, no rounds and no sockets, saying what to do instead", {timeout: 30000}, async () => {
  let r = await run(["bench", "--hooks", "--target", "127.0.0.1:9"], 15000)
  assert.notEqual(r.code, 0)
  assert.match(r.err, /--hooks starts its own server and backend/)
  r = await run(["bench", "--hooks", "--hook-rounds", "0"], 15000)
  assert.notEqual(r.code, 0)
  assert.match(r.err, /--hook-rounds 0: 1 to 100 rounds/)
  r = await run(["bench", "--hooks", "--connections", "0"], 15000)
  assert.notEqual(r.code, 0)
  assert.match(r.err, /--connections 0: .* 1 to \d+/)
})
