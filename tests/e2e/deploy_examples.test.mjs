// The deploy/ examples, the Containerfile and the container commands of
// docs/operations.md (section Container image) say what the server and each other accept: every `throng serve`
// argument list in them (Kubernetes args, compose commands, the systemd
// ExecStart, the image's THRONG_* variables) passes `throng check-config`,
// the stop timeouts are longer than the drain they wait for, the YAML
// parses (PyYAML) and hangs together (probes on declared ports, the
// Service's selector, compose's Redis and Containerfile), and every image
// they name is the one the docs' build command tags. (Building and
// running the image: tests/image/image.test.mjs.)
import {test} from "node:test"
import assert from "node:assert/strict"
import {execFileSync, spawnSync} from "node:child_process"
import {existsSync, readFileSync, writeFileSync, mkdtempSync} from "node:fs"
import os from "node:os"
import path from "node:path"
import {REPO_ROOT, THRONG_BIN} from "./helpers.mjs"
import {section} from "./docs.mjs"

const read = name => readFileSync(path.join(REPO_ROOT, name), "utf8")

/** The documents of a YAML file, read by PyYAML (scripts/test.sh installs python3-yaml). */
function yaml(name){
  const r = spawnSync("python3", ["-c", "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
    path.join(REPO_ROOT, name)], {encoding: "utf8", timeout: 10000})
  assert.equal(r.status, 0, `python3 with PyYAML (apt-get install python3-yaml) reads ${name}:\n${r.stderr}`)
  return JSON.parse(r.stdout)
}

/** The docs' build and run commands (section Container image) and the image name they use; the key is made before, in the environment. */
function readmeImage(){
  const block = section("## Container image").blocks.find(b => b.lang === "sh").text.trim().split("\n")
  assert.equal(block.length, 3, "three commands: the key, build and run")
  const [key, build, run] = block
  assert.match(key, /^export THRONG_API_KEY=\$\(openssl rand -hex \d+\)\s/, "a fresh key for the server API")
  const tag = build.match(/^podman build -t (\S+) -f Containerfile \.$/)?.[1]
  assert.ok(tag, `the build command: ${build}`)
  return {build, run, tag, words: run.split(/\s+/)}
}

/** Whether `image` (compose, Kubernetes) is the docs' tag, with or without :latest. */
const isReadmeImage = (image, tag) => image === tag || image === `${tag}:latest`
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

test("Kubernetes: the args pass check-config; probes, ports, user and the grace period fit the image and the drain", {timeout: 20000}, () => {
  const docs = yaml("deploy/kubernetes.yaml")
  const deployment = docs.find(d => d.kind === "Deployment")
  const service = docs.find(d => d.kind === "Service")
  assert.ok(deployment && service, "a Deployment and a Service")
  const pod = deployment.spec.template
  const [container] = pod.spec.containers
  const {tag} = readmeImage()
  assert.ok(isReadmeImage(container.image, tag), `image ${container.image}, the docs build ${tag}`)

  const args = container.args
  assert.equal(args[0], "serve")
  const report = accepts(empty, args.slice(1))
  assert.match(report, /ready_redis_grace = 10 {2}# flag/)
  const grace = pod.spec.terminationGracePeriodSeconds
  const preStop = container.lifecycle.preStop.sleep.seconds
  assert.ok(grace > preStop + drainOf(args) + LINGER, `grace ${grace} vs preStop ${preStop} + drain ${drainOf(args)} + linger`)

  // Probes on ports the container declares, the API's being the one serve binds.
  const ports = Object.fromEntries(container.ports.map(p => [p.name, p.containerPort]))
  const apiBind = args[args.indexOf("--api-bind") + 1]
  assert.equal(ports.api, Number(apiBind.split(":").pop()))
  assert.equal(ports.http, 4000)
  assert.equal(container.livenessProbe.httpGet.path, "/healthz")
  assert.equal(container.readinessProbe.httpGet.path, "/readyz")
  for(const probe of ["livenessProbe", "readinessProbe", "startupProbe"]){
    assert.ok(container[probe].httpGet.port in ports, `${probe} port ${container[probe].httpGet.port}`)
  }
  // The image's user; nothing to write, so a read-only root works (tests/image runs it so).
  const user = read("Containerfile").match(/^USER (\d+):(\d+)$/m)
  assert.equal(pod.spec.securityContext.runAsUser, Number(user[1]))
  assert.equal(pod.spec.securityContext.runAsGroup, Number(user[2]))
  assert.equal(pod.spec.securityContext.runAsNonRoot, true)
  assert.equal(container.securityContext.readOnlyRootFilesystem, true)
  assert.equal(container.env.find(e => e.name === "THRONG_API_KEY")?.valueFrom?.secretKeyRef?.key, "api-key")

  // The Service reaches these pods, on a port they declare.
  for(const [k, v] of Object.entries(deployment.spec.selector.matchLabels)){ assert.equal(pod.metadata.labels[k], v) }
  for(const [k, v] of Object.entries(service.spec.selector)){ assert.equal(pod.metadata.labels[k], v) }
  for(const p of service.spec.ports){ assert.ok(p.targetPort in ports, `Service targetPort ${p.targetPort}`) }
})

test("compose: Redis and two nodes of the docs' image; commands pass check-config; limits, key, and stop after the drain", {timeout: 20000}, () => {
  const [compose] = yaml("deploy/compose.yaml")
  const {tag} = readmeImage()
  const nodes = Object.entries(compose.services).filter(([, s]) => isReadmeImage(s.image, tag))
  assert.equal(nodes.length, 2, `two services run ${tag}`)
  const hostPorts = []
  for(const [name, node] of nodes){
    assert.equal(node.command[0], "serve")
    accepts(empty, node.command.slice(1))
    // The image they run is the Containerfile's.
    assert.ok(existsSync(path.join(REPO_ROOT, "deploy", node.build.context, node.build.dockerfile)), `${name}: build ${JSON.stringify(node.build)}`)
    assert.ok(Number(node.stop_grace_period.match(/^(\d+)s$/)[1]) > drainOf(node.command) + LINGER, `${name}: stop_grace_period`)
    assert.ok(node.ulimits.nofile.soft >= 65536 && node.ulimits.nofile.hard >= node.ulimits.nofile.soft, `${name}: nofile`)
    assert.match(node.environment.THRONG_API_KEY, /^\$\{THRONG_API_KEY:\?.+\}$/, `${name}: the API key is required`)
    // Redis: a service of this file, started and healthy first.
    const redis = node.command[node.command.indexOf("--redis") + 1]
    const host = new URL(redis).hostname
    assert.ok(compose.services[host]?.healthcheck, `${name}: --redis ${redis} names a service with a healthcheck`)
    assert.equal(node.depends_on[host].condition, "service_healthy")
    // The API published on the host's loopback only.
    const api = node.ports.find(p => p.endsWith(":4001"))
    assert.match(api, /^127\.0\.0\.1:\d+:4001$/, `${name}: API port ${api}`)
    hostPorts.push(...node.ports.map(p => p.split(":").slice(-2)[0]))
  }
  assert.equal(new Set(hostPorts).size, hostPorts.length, `host ports ${hostPorts}`)
})

test("systemd: ExecStart with gen-config's file passes check-config; limits; systemd-analyze verify is silent", {timeout: 20000}, t => {
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
  // systemd's own reading of the unit (with the binary under test in place
  // of /usr/local/bin/throng): it prints every setting it ignores.
  const unit = path.join(dir, "throng.service")
  writeFileSync(unit, text.replaceAll("/usr/local/bin/throng", THRONG_BIN))
  const verify = spawnSync("systemd-analyze", ["verify", unit], {encoding: "utf8", timeout: 15000})
  if(verify.error?.code === "ENOENT"){
    t.diagnostic("systemd-analyze not found: the unit's syntax was not checked by systemd")
  } else {
    assert.equal(verify.status, 0, verify.stderr)
    assert.equal(`${verify.stdout}${verify.stderr}`, "", "systemd-analyze verify")
  }
})

test("Containerfile: non-root, SIGTERM, exposed ports, and its THRONG_* variables are settings serve reads", {timeout: 20000}, () => {
  const text = read("Containerfile")
  assert.match(text, /^STOPSIGNAL SIGTERM$/m)
  assert.match(text, /^USER 65534:65534$/m)
  assert.match(text, /^FROM scratch$/m)
  const env = Object.fromEntries([...text.match(/^ENV (.*)$/m)[1].matchAll(/(\w+)=(\S+)/g)].map(m => [m[1], m[2]]))
  assert.ok(Object.keys(env).length >= 2)
  const report = accepts(empty, [], env)
  assert.match(report, /bind = "0\.0\.0\.0" {2}# env/)
  assert.match(report, /api_bind = "0\.0\.0\.0:4001" {2}# env/)
  const exposed = text.match(/^EXPOSE (.*)$/m)[1].split(/\s+/).map(Number)
  assert.deepEqual(exposed, [4000, Number(env.THRONG_API_BIND.split(":").pop())])
})

test("docs, Container image: the image's build and run commands are the Containerfile's, and the run gives what the image needs", {timeout: 20000}, () => {
  const {build, run, tag, words} = readmeImage()
  const text = read("Containerfile")
  // The Containerfile's header shows the same two commands.
  assert.ok(text.includes(`#   ${build} `), "the Containerfile's header has the docs' build command")
  assert.ok(text.includes(`#   ${run}\n`), "the Containerfile's header has the docs' run command")
  assert.deepEqual(words.slice(0, 2), ["podman", "run"])
  assert.equal(words.at(-1), tag, "the run command runs the image the build tags")
  const option = name => words.flatMap((w, i) => w === name ? [words[i + 1]] : [])
  const [soft, hard] = option("--ulimit").find(u => u.startsWith("nofile="))?.slice(7).split(":").map(Number) ?? []
  assert.ok(soft >= 65536 && hard >= soft, "an open-files limit for many connections")
  assert.ok(option("-e").includes("THRONG_API_KEY"), "the API key, passed on from the environment (never a key written in the command)")
  const published = option("-p")
  assert.ok(published.includes("4000:4000"))
  assert.ok(published.includes("127.0.0.1:4001:4001"), "the API on the host's loopback only")
})
