#!/usr/bin/env bash
# Short fuzzing runs (cargo-fuzz, libFuzzer) of the code that reads what people and peers
# write: slot amounts, `corral plan` files (as text, and built from bytes: the cycle), the agent
# sync protocol, batch job descriptions rendered into scripts (batch_script), the tunnel's frames. Any crash fails
# this script; libFuzzer leaves the input in
# fuzz/artifacts/TARGET/ (make it a regression test in the crate, see docs/security-checks.md).
#
#   bash .ci/fuzz.sh                                  # what CI runs: 20 s a target
#   SECONDS_PER_TARGET=3600 bash .ci/fuzz.sh          # a longer run
#   TARGETS="exec_answer" FEATURES=exec bash .ci/fuzz.sh   # the exec plugin's answers too
#
# The exec_answer target builds corral-provider (bollard, tokio...), which takes minutes more:
# CI covers those answers with the proptest in crates/provider/tests/plugin_answers.rs and
# leaves this target to longer runs.
#
# No sanitizer (-s none): the code is safe Rust, what we look for is panics, overflows (debug
# assertions are on) and hangs, and the build then works on the stable toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
SECONDS_PER_TARGET=${SECONDS_PER_TARGET:-20}
TARGETS=${TARGETS:-"slots plan cycle protocol batch_script tunnel"}
FEATURES=${FEATURES:-}

if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

features=()
[ -n "$FEATURES" ] && features=(--features "$FEATURES")
echo "== cargo fuzz build"
# All targets at once (one link step each, shared dependencies); exec_answer only with its feature.
cargo fuzz build -s none "${features[@]}"
for target in $TARGETS; do
  echo "== fuzz $target for ${SECONDS_PER_TARGET}s"
  mkdir -p "fuzz/corpus/$target"
  # The first directory takes what the run finds (not committed); the seeds are read only.
  log="fuzz/artifacts/$target.log"
  mkdir -p fuzz/artifacts
  status=0
  cargo fuzz run -s none "${features[@]}" "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -dict="fuzz/$target.dict" -print_final_stats=1 >"$log" 2>&1 || status=$?
  grep -E "^(INFO: seed corpus|stat::number_of_executed_units|stat::peak_rss_mb)|^Done " "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log"
    echo "fuzz target $target failed (exit $status); the input is in fuzz/artifacts/$target/"
    exit "$status"
  fi
done
