#!/usr/bin/env bash
# Every test of throng, on a fresh Debian machine: installs what is missing
# (apt: redis-server, chromium, tsung, musl-tools, podman; npm ci; cargo
# builds), then runs the Rust unit/property/integration tests, the
# end-to-end suites, the container image's (static binary, FROM scratch
# image in podman) and the third-party client compatibility test (real
# Tsung) against the real binary.
# Each suite is bounded; the whole run takes a few minutes, and fuzzes
# every parser for a minute (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

stage() { echo "== $* (at ${SECONDS}s)"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v tsung >/dev/null || missing+=(tsung)
command -v node >/dev/null || missing+=(nodejs npm)
# tests/e2e/python.mjs makes a venv (phxsocket, PyJWT from PyPI) with python3 -m venv
command -v python3 >/dev/null || missing+=(python3)
python3 -c "import ensurepip" 2>/dev/null || missing+=(python3-venv)
command -v curl >/dev/null || missing+=(curl)
# examples/backend's better-sqlite3 compiles SQLite (node-gyp) where no prebuilt binary can be fetched
command -v make >/dev/null || missing+=(make)
command -v g++ >/dev/null || missing+=(g++)
# the static (musl) binary of the container image: ring's C code needs musl-gcc
command -v musl-gcc >/dev/null || missing+=(musl-tools)
# tests/e2e/deploy_examples.test.mjs reads deploy/'s YAML with PyYAML
python3 -c "import yaml" 2>/dev/null || missing+=(python3-yaml)
if [ ${#missing[@]} -gt 0 ]; then
  stage "installing ${missing[*]} (apt-get)"
  as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q "${missing[@]}"
fi
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust (stable) from https://rustup.rs, then re-run" >&2
  exit 1
fi
# podman runs the image's test; where it cannot be installed (or cannot
# start containers) that test says so and skips the container part only.
if ! command -v podman >/dev/null; then
  stage "installing podman runc (apt-get), for the container image test"
  { as_root apt-get update -q && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q podman runc; } \
    || echo "podman could not be installed: the container image will not be built or run"
fi
MUSL=x86_64-unknown-linux-musl
if ! rustup target list --installed 2>/dev/null | grep -qx "$MUSL"; then
  stage "rustup target add $MUSL"
  rustup target add "$MUSL" || {
    echo "the Rust target $MUSL is missing and rustup could not add it: install Rust with https://rustup.rs, then re-run" >&2
    exit 1
  }
fi

stage "npm ci"
npm ci --no-audit --no-fund --loglevel=error
# The example chat backend's own dependencies (examples/backend: express,
# better-sqlite3), installed while cargo builds, and only when its
# package-lock.json or the Node version changed since the last install.
backend_stamp=examples/backend/node_modules/.installed-by-test-sh
backend_want() { cat examples/backend/package-lock.json; node --version; }
backend_log=$(mktemp)
if backend_want | cmp -s - "$backend_stamp" 2>/dev/null; then
  backend_npm=""
else
  ( npm ci --prefix examples/backend --no-audit --no-fund --loglevel=error && backend_want > "$backend_stamp" ) >"$backend_log" 2>&1 &
  backend_npm=$!
fi

# One build profile for everything (Cargo.toml's `ci`: release speed, no LTO).
# The test hooks (`--test-panic-message`) are a feature, compiled out of
# the product and into the binary the tests run.
export THRONG_BIN="$PWD/target/ci/throng"
stage "cargo build (profile ci)"
cargo build --profile ci -p throng --features throng/test-hooks --quiet

stage "cargo test (unit, property, integration)"
cargo test --profile ci --workspace --features throng/test-hooks

stage "docs name only paths that exist"
scripts/check-doc-paths.sh

stage "no function over 100 lines in any crate (tests aside)"
scripts/check-fn-lengths.py

stage "no import cycles between the modules of any crate"
scripts/check-import-cycles.py

# The corpus replay ran with the unit tests (fuzz::tests); this fuzzes each
# target for 60 s, two at a time (libFuzzer; nightly with AddressSanitizer
# when rustup has or can get a nightly, else stable: fuzz/README.md).
# libfuzzer-sys compiles libFuzzer with g++ (installed above).
stage "fuzz: every target of fuzz/ for 60 s"
scripts/fuzz.sh 60

if [ -n "$backend_npm" ]; then
  stage "npm ci --prefix examples/backend (started with the cargo build)"
  wait "$backend_npm" || { cat "$backend_log" >&2; echo "npm ci --prefix examples/backend failed" >&2; exit 1; }
fi
rm -f "$backend_log"

stage "end-to-end: phoenix.js client, malformed input, HTTP, Chromium, the example backend"
node --test --test-concurrency=1 --test-timeout=60000 tests/e2e/

stage "Pusher wire layer: pusher-js, Laravel Echo and the pusher SDKs for Node and Python"
node --test --test-concurrency=1 --test-timeout=300000 tests/pusher/

# The container image's binary, built as the Containerfile builds it (static,
# musl; the `ci` profile rather than `release`, to build faster), then
# tests/image: it is static, it serves as the image runs it, and the
# Containerfile's FROM scratch stage built around it runs in podman.
stage "container image: static (musl) binary, then the FROM scratch image in podman"
cargo build --profile ci -p throng --target "$MUSL" --quiet
THRONG_BIN="$PWD/target/$MUSL/ci/throng" node --test --test-concurrency=1 --test-timeout=200000 tests/image/

stage "compatibility: real Tsung 1.7 runs scenarios/phoenix.xml, the Phoenix team's 2M-connection benchmark's config (4,000 users)"
node --test --test-concurrency=1 --test-timeout=120000 tests/compat/

if [ -d tests/cluster ]; then
  stage "cluster: real redis-server, workers, failures"
  node --test --test-concurrency=1 --test-timeout=90000 --test-force-exit tests/cluster/
fi

# A soak: 5,000 sessions churned for 3 minutes (connects, closes and
# resets, joins and leaves, presence, hooks to a real backend, long-poll,
# history rejoins with since, server API calls) on 2 workers and Redis;
# exit status 1 when a series of the server grew or a count did not come
# back once the clients left (crates/throng-bench/src/soak/). ~4.5 minutes.
stage "soak: 3 minutes, 5,000 sessions on 2 workers and Redis; fails on growth"
soak_dir=$(mktemp -d)
"$THRONG_BIN" bench --soak 3m --connections 5000 --workers 2 \
  --json "$soak_dir/soak.json" --report "$soak_dir/soak.html"
rm -rf "$soak_dir"
echo "== all passed in ${SECONDS}s"
