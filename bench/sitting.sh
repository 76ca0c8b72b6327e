#!/usr/bin/env bash
# One sitting of issue 19's benchmarks: B3, B5, B6 and scale, each with its peers in the same
# binary run, one after the other on a machine left otherwise idle, so their figures can be
# read side by side. Writes every binary's output and the machine's description to OUT.
#
#   bench/sitting.sh [OUT]            (default OUT: target/sitting-<UTC timestamp>)
#
# Environment: B5_URL / B6_URL (PostgreSQL server, default postgres://postgres@127.0.0.1:5432),
# TAKT_TEST_PG_URL (the scale bench's database), SITTING_QUICK=1 for a shorter sitting
# (fewer rounds and sizes: a smoke run of the script, not figures to publish), SITTING_PARTS
# to run only some of the benches (default "b3 b5 b6 scale"; the full scale part with 10M runs
# in history takes over an hour on 2 cores, the other three about 25 minutes together).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/sitting-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"

machine() {
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "nproc: $(nproc)"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
    echo "rustc: $(rustc --version)"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >>"$out/machine.txt"
}

# A bench's figures only mean something for the binary that produced them: build every one
# first, so no compile runs beside a measurement.
parts="${SITTING_PARTS:-b3 b5 b6 scale}"
has() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
cargo build --release --manifest-path bench/Cargo.toml --bins
cargo build --release --manifest-path bench/apalis-peer/Cargo.toml
if has scale; then cargo build --release -p takt-host --bin takt; fi
bin=bench/target/release
takt=target/release/takt
if [ -n "${CARGO_TARGET_DIR:-}" ]; then bin="$CARGO_TARGET_DIR/release"; takt="$bin/takt"; fi

if [ "${SITTING_QUICK:-0}" = 1 ]; then
  b3=(--n 2000 --rounds 1)
  b5=(--n 2000 --rounds 1)
  b6=(--n 1000 --crons 100 --seconds 10 --rounds 1)
  scale=(--sizes 10000 --backends memory,sqlite --runs 10000 --reps 5 --api-reps 1)
else
  b3=(--rounds 3)
  b5=(--n 20000 --rounds 3)
  b6=(--n 10000 --crons 1000 --seconds 30 --rounds 3)
  scale=(--sizes 10000,100000,1000000 --backends memory,sqlite,pg --runs 10000000
         --sqlite-runs 10000000 --reps 30 --api-reps 3)
fi

run() {
  local name="$1"; shift
  echo "== $name: $*"
  machine
  echo "$name: $* (start $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >>"$out/machine.txt"
  "$@" >"$out/$name.md" 2>"$out/$name.err"
  echo "$name: end $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
}

if has b3; then run b3 "$bin/b3" "${b3[@]}"; fi
if has b5; then run b5 "$bin/b5" "${b5[@]}"; fi
if has b6; then run b6 "$bin/b6" "${b6[@]}"; fi
if has scale; then run scale "$bin/scale" "${scale[@]}" --takt "$takt"; fi
echo "== done: $out"
