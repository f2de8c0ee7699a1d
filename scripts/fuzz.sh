#!/usr/bin/env bash
# Fuzzes every target of fuzz/ (or those named) for SECONDS each, JOBS at
# a time (default 60 s, 2 jobs), starting from the corpus kept in
# fuzz/corpus/<target>/, which it only reads: what a run finds new goes to
# a scratch folder. Exits 1 if any target fails, after printing the input
# that failed (hex and base64), where it is kept and how to replay it.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (FUZZ_JOBS=2 by default;
#                                               FUZZ_MERGE=1 keeps new coverage)
#
# The engine is libFuzzer (the libfuzzer-sys crate), coverage-guided. The
# toolchain: nightly with AddressSanitizer when a nightly is installed or
# rustup can install one (bounded); else stable, without a sanitizer,
# which still fuzzes with coverage (fuzz/README.md says why both). The
# build passes rustc the flags `cargo fuzz build` passes (cargo-fuzz 0.13,
# `src/project.rs`), so it needs no cargo-fuzz, whose own build took
# 341 s on the CI machine; `cargo fuzz run TARGET` works the same by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
[ $# -gt 0 ] && shift
jobs=${FUZZ_JOBS:-2}
all=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^throng-fuzz$')
targets=("$@")
[ ${#targets[@]} -eq 0 ] && read -r -d '' -a targets <<<"$all" || true
triple=$(rustc -vV | sed -n 's/^host: //p')

# The longest input per target: a request head may be 16 KiB.
max_len() {
  case $1 in
    http_request) echo 20480 ;;
    inflate | config_toml) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table
  -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing
  -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth
  -Cdebug-assertions"

toolchain=stable
sanitizer=""
if rustup run nightly rustc --version >/dev/null 2>&1; then
  toolchain=nightly
elif command -v rustup >/dev/null && timeout 180 rustup toolchain install nightly --profile minimal --no-self-update >/dev/null 2>&1; then
  toolchain=nightly
else
  echo "fuzz: no nightly toolchain (rustup could not install one): stable, without AddressSanitizer"
fi

# Code units: 16 by default, to build in minutes on 2 cores; `cargo fuzz`
# uses 1 (FUZZ_CODEGEN_UNITS=1, which also reuses its build), a faster
# fuzzer that took over 40 minutes to build on the loaded CI machine.
build() {
  RUSTFLAGS="$flags $sanitizer -Ccodegen-units=${FUZZ_CODEGEN_UNITS:-16}" cargo "+$1" build \
    --quiet --release --config 'profile.release.debug="line-tables-only"' \
    --manifest-path fuzz/Cargo.toml --target "$triple" --bins
}
if [ "$toolchain" = nightly ]; then
  sanitizer="-Zsanitizer=address"
  if ! build nightly; then
    echo "fuzz: the nightly build failed (above); building on stable, without AddressSanitizer"
    toolchain=stable sanitizer=""
    build stable
  fi
else
  build stable
fi
bin=fuzz/target/$triple/release
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0:detect_leaks=0}
echo "fuzz: ${#targets[@]} targets, ${secs} s each, ${jobs} at a time, $toolchain${sanitizer:+ with AddressSanitizer}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p fuzz/artifacts

# One target's run: its log and scratch corpus in $work, a failing input in fuzz/artifacts/.
run() {
  local t=$1
  mkdir -p "$work/$t"
  rm -f fuzz/artifacts/"$t"-*
  if "$bin/$t" -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t-" "$work/$t" "fuzz/corpus/$t" \
    >"$work/$t.log" 2>&1; then
    echo ok >"$work/$t.status"
  else
    echo failed >"$work/$t.status"
  fi
}

running=0
for t in "${targets[@]}"; do
  [ -x "$bin/$t" ] || { echo "fuzz: no target $t (fuzz/Cargo.toml has: $all)" >&2; exit 2; }
  run "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

# FUZZ_MERGE=1: what the runs found that adds coverage goes into the kept
# corpus (libFuzzer's -merge=1, as `cargo fuzz cmin` keeps one input per
# feature), to commit after a long run by hand; CI leaves the corpus as is.
if [ "${FUZZ_MERGE:-0}" = 1 ]; then
  for t in "${targets[@]}"; do
    "$bin/$t" -merge=1 -max_len="$(max_len "$t")" "fuzz/corpus/$t" "$work/$t" >"$work/$t.merge.log" 2>&1 ||
      echo "fuzz: merging $t's new inputs failed (see above)"
  done
fi

stat() { sed -n "s/^stat::$2: *//p" "$work/$1.log" | tail -1; }
failed=0
for t in "${targets[@]}"; do
  cov=$(grep -o 'cov: [0-9]*' "$work/$t.log" | tail -1 || true)
  echo "fuzz: $t: $(stat "$t" number_of_executed_units) runs in $secs s, ${cov:-cov: ?} edges, $(find "$work/$t" -type f | wc -l) new inputs, peak RSS $(stat "$t" peak_rss_mb) MB: $(cat "$work/$t.status")"
  if [ "$(cat "$work/$t.status")" != ok ]; then
    failed=1
    grep -m1 -A2 "panicked at" "$work/$t.log" || true
    tail -n 30 "$work/$t.log"
    for a in fuzz/artifacts/"$t"-*; do
      [ -f "$a" ] || continue
      echo "fuzz: the input that failed $t, kept in $a ($(wc -c <"$a") bytes):"
      head -c 512 "$a" | od -A d -t x1 | head -20
      echo "base64: $(head -c 4096 "$a" | base64 -w0)"
      echo "replay: $bin/$t $a   (or: cargo fuzz run $t $a)"
      echo "then: copy it into fuzz/corpus/$t/ (the corpus replay test keeps it fixed) and add a unit test with it where the bug was"
    done
  fi
done
exit "$failed"
