// The deploy/ examples and the Containerfile say what the server accepts:
// every `throng serve` argument list in them (Kubernetes args, compose
// commands, the systemd ExecStart, the image's THRONG_* variables) passes
// `throng check-config`, and the stop timeouts are longer than the drain
// they wait for. (Building the image itself needs a container runtime and
// base images, which this suite does not download.)
import {test} from "node:test"
import assert from "node:assert/strict"
import {execFileSync, spawnSync} from "node:child_process"
import {readFileSync, writeFileSync, mkdtempSync} from "node:fs"
import os from "node:os"
import path from "node:path"
import {REPO_ROOT, THRONG_BIN} from "./helpers.mjs"

const read = name => readFileSync(path.join(REPO_ROOT, name), "utf8")
const dir = mkdtempSync(path.join(os.tmpdir(), "throng-deploy-"))
const empty = path.join(dir, "empty.toml")
writeFileSync(empty, "")

/** check-config with a serve argument list (after "serve"); asserts it is accepted. */
function accepts(file, serveArgs, env = {}){
  const r = spawnSync(THRONG_BIN, ["check-config", file, ...serveArgs],
    {encoding: "utf8", env: {...process.env, ...env}, timeout: 10000})
  assert.equal(r.status, 0, `check-config ${serveArgs.join(" ")}:\n${r.stdout}\n${r.stderr}`)
  return r.stdout
}

const drainOf = args => { const i = args.indexOf("--drain-seconds"); return i >= 0 ? Number(args[i + 1]) : 10 }
const LINGER = 3

test("Kubernetes: the args pass check-config; probes and the grace period fit the drain", {timeout: 20000}, () => {
  const text = read("deploy/kubernetes.yaml")
  const args = JSON.parse(text.match(/^\s+args: (\[.*\])$/m)[1])
  assert.equal(args[0], "serve")
  const report = accepts(empty, args.slice(1))
  assert.match(report, /ready_redis_grace = 10 {2}# flag/)
  const grace = Number(text.match(/terminationGracePeriodSeconds: (\d+)/)[1])
  const preStop = Number(text.match(/sleep: \{seconds: (\d+)\}/)[1])
  assert.ok(grace > preStop + drainOf(args) + LINGER, `grace ${grace} vs preStop ${preStop} + drain ${drainOf(args)} + linger`)
  assert.match(text, /livenessProbe:\n\s+httpGet: \{path: \/healthz/)
  assert.match(text, /readinessProbe:\n(.*\n)*?\s+httpGet: \{path: \/readyz/)
})

test("compose: both nodes' commands pass check-config and stop after their drain", {timeout: 20000}, () => {
  const text = read("deploy/compose.yaml")
  const commands = [...text.matchAll(/^\s+command: (\["serve".*\])$/gm)].map(m => JSON.parse(m[1]))
  assert.equal(commands.length, 2)
  for(const c of commands){ accepts(empty, c.slice(1)) }
  for(const m of text.matchAll(/stop_grace_period: (\d+)s/g)){
    assert.ok(Number(m[1]) > drainOf(commands[0]) + LINGER)
  }
})

test("systemd: ExecStart with gen-config's file passes check-config; files and stop limits", {timeout: 20000}, () => {
  const text = read("deploy/throng.service")
  const exec = text.match(/^ExecStart=(\S+) (.*)$/m)[2].split(/\s+/)
  assert.equal(exec[0], "serve")
  const config = path.join(dir, "throng.toml")
  writeFileSync(config, execFileSync(THRONG_BIN, ["gen-config"], {encoding: "utf8"}))
  const args = exec.slice(1)
  const i = args.indexOf("--config")
  assert.ok(i >= 0)
  args.splice(i, 2)
  accepts(config, args)
  assert.ok(Number(text.match(/^LimitNOFILE=(\d+)$/m)[1]) >= 65536)
  assert.match(text, /^KillSignal=SIGTERM$/m)
  assert.ok(Number(text.match(/^TimeoutStopSec=(\d+)$/m)[1]) > 10 + LINGER)
})

test("Containerfile: non-root, SIGTERM, and its THRONG_* variables are settings serve reads", {timeout: 20000}, () => {
  const text = read("Containerfile")
  assert.match(text, /^STOPSIGNAL SIGTERM$/m)
  assert.match(text, /^USER 65534:65534$/m)
  assert.match(text, /^FROM scratch$/m)
  const env = Object.fromEntries([...text.match(/^ENV (.*)$/m)[1].matchAll(/(\w+)=(\S+)/g)].map(m => [m[1], m[2]]))
  assert.ok(Object.keys(env).length >= 2)
  const report = accepts(empty, [], env)
  assert.match(report, /bind = "0\.0\.0\.0" {2}# env/)
  assert.match(report, /api_bind = "0\.0\.0\.0:4001" {2}# env/)
})
