#!/usr/bin/env bash
# Fuzzes every parser of untrusted bytes in snapbuild-core (fuzz/, the `snapfuzz` binary): seeds
# from real servers (fuzz/corpus, captured by fuzz/capture.sh), their truncations and bit flips,
# then stacked structure-aware mutations. Every input runs under catch_unwind and a counting
# allocator; a panic (index out of bounds included), or one allocation above 64 x input length
# + 4096 bytes, is a crash, saved to fuzz/crashes/TARGET-HASH.bin (rerun one with
# `target/fuzz/snapfuzz repro TARGET FILE`). Prints per target: inputs run, corpus entries and
# bytes, inputs accepted by the parser, crashes, allocations over the bound, time, throughput.
#   scripts/fuzz.sh [INPUTS_PER_PARSER] [snapfuzz run options: --targets a,b --seed N --seconds S]
# Default 10000000 per parser (about 6 min on one quiet core). CI (scripts/test.sh) runs 500000.
# Exits non-zero if anything crashed. Run long passes with `nice -n 10`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[ -d "$HOME/.cargo/bin" ] && PATH=$HOME/.cargo/bin:$PATH
N=${1:-10000000}
shift || true
cargo build --profile fuzz -q -p snapfuzz
cargo test --profile fuzz -q -p snapfuzz   # self-test: the harness catches a panic and a large allocation
exec target/fuzz/snapfuzz run --inputs "$N" "$@"
