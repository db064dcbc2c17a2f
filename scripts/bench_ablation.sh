#!/usr/bin/env bash
# Where snapbuild_trace_range's time goes, by ablation, on the WAL a kept benchmark cluster
# holds (run `PGSNAP_BENCH_KEEP=1 ./scripts/bench.sh` first). See docs/benchmarks.md, "The
# trace's parts, by ablation".
#
# It builds the extension (release) four times from the work tree: as it is, and with the
# cargo features that leave out one part of the trace's work (Cargo.toml `ablation-*`: their
# traces are wrong, they exist only to be timed here):
#   full          the product
#   no-rows       every trace row of the same record as the row formed last is that tuple
#                 again: nothing formed (columns, datums, tuple), the tuplestore gets as many
#                 rows of the same size (on pgbench WAL all but a few dozen rows: only a change
#                 of record, COMMIT <-> RUNNING_XACTS, forms one)
#   no-lean-feed  records that need only their head (heap, btree, full-page images: ~85% of
#                 pgbench WAL) are read but not fed to the replay; commits, RUNNING_XACTS and
#                 the rest still are (their transactions are then unknown to the replay, so
#                 the commit path also gets cheaper)
#   neither       both left out
# Then, TRIES times interleaved, each on a fresh connection and timed in CPU seconds (user +
# system of the process, as scripts/bench.sh does): the floor (pg_waldump --stats), PostgreSQL's
# reader inside a backend (pg_get_wal_stats), the executor's tuplestore for the trace's own rows
# (a MATERIALIZED CTE over bench_trace_rows less a plain scan of it, as scripts/bench.sh
# measures it) and `count(*)` over snapbuild_trace_range with each build. The report
# (scripts/bench/report_ablation.py) gives each one's least, median and mean CPU, each as a
# multiple of the same try's floor, and the parts' costs as paired differences.
#
# The installed pg_snapbuild.so of the benchmark's tree (.work/bench/pg) is put back at the end
# (scripts/bench.sh copies that tree afresh on every run anyway). A cluster found running is
# left running; one it starts, it stops.
#
# Environment:
#   PGSNAP_BENCH_MAJOR      the benchmark tree's major (default 18)
#   PGSNAP_BENCH_PORT       its cluster's port (default 55430)
#   PGSNAP_ABLATION_TRIES   interleaved tries (default 8)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MAJOR=${PGSNAP_BENCH_MAJOR:-18}
PORT=${PGSNAP_BENCH_PORT:-55430}
W_LABEL=.work/bench
W=$ROOT/$W_LABEL
TRIES=${PGSNAP_ABLATION_TRIES:-8}
. "$ROOT/scripts/bench/common.sh"

case $TRIES in '' | *[!0-9]* | 0) echo "PGSNAP_ABLATION_TRIES must be a positive integer" >&2; exit 2 ;; esac
[ -f "$DATA/PG_VERSION" ] && [ -f "$META" ] && [ -x "$W/pg/bin/pg_waldump" ] ||
    { echo "no kept benchmark cluster in $W_LABEL: run PGSNAP_BENCH_KEEP=1 ./scripts/bench.sh first" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }
if [ -d "$HOME/.cargo/bin" ]; then PATH=$HOME/.cargo/bin:$PATH; fi
BIN=$W/pg/bin
export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
export PATH=$BIN:$PATH
SO=$("$BIN/pg_config" --pkglibdir)/pg_snapbuild.so
A=$W/ablation
mkdir -p "$A"
[ -f "$SO" ] || { echo "no pg_snapbuild.so in $W_LABEL/pg: run ./scripts/bench.sh first" >&2; exit 1; }
cp "$SO" "$A/installed.so"

# A backend that has the .so mapped must not see it rewritten in place: each build is put in
# place by a rename, and new connections load it.
install_so() { cp "$1" "$SO.new" && mv "$SO.new" "$SO"; }
restore() {
    install_so "$A/installed.so" || true
    finish
}

# ---- 1. the four builds ----------------------------------------------------------------------
VARIANTS=(full no-rows no-lean-feed neither)
features_of() {
    case $1 in
        full) echo "pg$MAJOR" ;;
        no-rows) echo "pg$MAJOR ablation-no-rows" ;;
        no-lean-feed) echo "pg$MAJOR ablation-no-lean-feed" ;;
        neither) echo "pg$MAJOR ablation-no-rows ablation-no-lean-feed" ;;
    esac
}
for v in "${VARIANTS[@]}"; do
    say "release build '$v' (features: $(features_of "$v"); log $W_LABEL/ablation/build-$v.log)"
    rm -rf "$A/pkg-$v"
    (cd "$ROOT" && CARGO_TARGET_DIR=$W/target cargo pgrx package --pg-config "$BIN/pg_config" \
        --no-default-features --features "$(features_of "$v")" --out-dir "$A/pkg-$v") \
        >"$A/build-$v.log" 2>&1 || { tail -n 30 "$A/build-$v.log" >&2; exit 1; }
    so=$(find "$A/pkg-$v" -name pg_snapbuild.so | head -n 1)
    [ -n "$so" ] || { echo "build '$v' left no pg_snapbuild.so" >&2; exit 1; }
    cp "$so" "$A/$v.so"
done

# ---- 2. the kept cluster ---------------------------------------------------------------------
if as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    say "kept cluster in $DATA on port $PORT, already running (left running)"
    KEEP=1
else
    bench_start_kept_cluster
fi
trap restore EXIT
START=$(awk -F'\t' '$1 == "start_lsn" { print $2 }' "$META")
END=$(awk -F'\t' '$1 == "end_lsn" { print $2 }' "$META")
say "range [$START, $END]: $(lsn_diff "$START" "$END") bytes of WAL"
if [ "$(q "SELECT to_regclass('bench_trace_rows') IS NOT NULL")" != t ]; then
    say "the rows of snapbuild_trace_range in table bench_trace_rows"
    install_so "$A/full.so"
    bench_store_rows trace false "$START" "$END"
fi
bench_check_cte trace
CTE=$(bench_rows_cte trace)
SCAN=$(bench_rows_scan trace)

# backend_cpu QUERY: "rows cpu_s" of SELECT count(*) FROM QUERY on a fresh connection (the
# backend's utime + stime from /proc/<pid>/stat around the statement).
backend_cpu() {
    psql -X -q -At -v ON_ERROR_STOP=1 -v "query=$1" <<'SQL'
SELECT pg_backend_pid() AS pid \gset
\setenv BENCH_PID :pid
\! awk '{ print $14 + $15 }' "/proc/$BENCH_PID/stat" >"$BENCH_CPU0"
SELECT count(*) AS n FROM :query \gset
\! awk '{ print $14 + $15 }' "/proc/$BENCH_PID/stat" >"$BENCH_CPU1"
\echo :n
SQL
}
export BENCH_CPU0=$A/cpu0 BENCH_CPU1=$A/cpu1
ticks=$(getconf CLK_TCK)
cpu_of_last() { awk -v t="$ticks" 'NR == 1 { a = $1 } NR == 2 { printf "%.2f", ($1 - a) / t }' "$BENCH_CPU0" "$BENCH_CPU1"; }
OUT=$A/runs.tsv
: >"$OUT"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$OUT"; printf '    try %2d  %-28s %10s rows  CPU %6.2f s\n' "$1" "$2" "$3" "$4"; }

# ---- 3. the interleaved tries ----------------------------------------------------------------
WAL_READER=()
case $(id -un) in root | postgres) ;; *) WAL_READER=(sudo -n -u postgres --) ;; esac
for try in $(seq 1 "$TRIES"); do
    say "try $try of $TRIES"
    read -r _ _ _ cpu <<<"$(python3 "$BENCH_LIB/rusage.py" "$A/waldump-stats.txt" "${WAL_READER[@]}" \
        "$BIN/pg_waldump" --stats --path "$DATA/pg_wal" --start "$START" --end "$END")"
    row "$try" floor "$(awk '$1 == "Total" { print $2; exit }' "$A/waldump-stats.txt")" "$cpu"
    n=$(backend_cpu "pg_get_wal_stats('$START', '$END')")
    row "$try" pg_get_wal_stats "$n" "$(cpu_of_last)"
    n=$(backend_cpu "$CTE")
    row "$try" rows_cte "$n" "$(cpu_of_last)"
    n=$(backend_cpu "$SCAN")
    row "$try" rows_scan "$n" "$(cpu_of_last)"
    for v in "${VARIANTS[@]}"; do
        install_so "$A/$v.so"
        n=$(backend_cpu "snapbuild_trace_range('$START', '$END')")
        row "$try" "trace_$v" "$n" "$(cpu_of_last)"
    done
done
echo
python3 "$BENCH_LIB/report_ablation.py" "$OUT" "$A/result.json"
