#!/usr/bin/env bash
# Benchmark: historic MVCC. One scan of pg_attribute (>= 1 M rows) by snapbuild_visibility
# computing both verdicts (ours and the server's HeapTupleSatisfiesVisibility), against the
# same scan computing only the server's (verdicts => 'server'), in one run, alternating.
# Reports wall time, peak backend memory, the ratio both / server and that the two verdicts
# agree on every row; writes .work/bench-vis/result.json. See README "Benchmark: historic
# visibility".
#
# Like scripts/bench.sh it uses its own copy of the PostgreSQL tree and its own throw-away
# cluster, in .work/bench-vis (recreated on every run; stopped at the end), on port
# PGSNAP_BENCH_VIS_PORT: never the test clusters' ports or data, nor bench.sh's.
#
# Environment:
#   PGSNAP_BENCH_VIS_MAJOR    PostgreSQL tree .pg/MAJOR (default 18)
#   PGSNAP_BENCH_VIS_PORT     port (default 55431)
#   PGSNAP_BENCH_VIS_TABLES   tables created (default 680)
#   PGSNAP_BENCH_VIS_COLUMNS  columns per table (default 1500; 680 x (1500 + 6 system
#                             columns) = 1.02 M pg_attribute rows)
#   PGSNAP_BENCH_VIS_MIN_ROWS pg_attribute rows required (default 1000000)
#   PGSNAP_BENCH_VIS_REPS     repetitions of each mode (default 5)
#   PGSNAP_BENCH_RELEASE=1    benchmark a --release build of the work tree (cargo target dir
#                             .work/bench-vis/target); default: the build installed in .pg/MAJOR
#   PGSNAP_BENCH_KEEP=1       leave the cluster running afterwards
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TABLES=${PGSNAP_BENCH_VIS_TABLES:-680}
COLUMNS=${PGSNAP_BENCH_VIS_COLUMNS:-1500}
MIN_ROWS=${PGSNAP_BENCH_VIS_MIN_ROWS:-1000000}
REPS=${PGSNAP_BENCH_VIS_REPS:-5}
SLOT=bench_vis
# What scripts/bench/common.sh takes; it sets RELEASE, KEEP, DATA, SOCK, LOG, RUNS, META,
# BENCH_LIB and BIN, and defines the shared functions.
MAJOR=${PGSNAP_BENCH_VIS_MAJOR:-18}
PORT=${PGSNAP_BENCH_VIS_PORT:-55431}
W_LABEL=.work/bench-vis
W=$ROOT/$W_LABEL
. "$ROOT/scripts/bench/common.sh"

case $PORT in 5541[4-8] | 55430) echo "port $PORT belongs to the test clusters or bench.sh; pick another PGSNAP_BENCH_VIS_PORT" >&2; exit 2 ;; esac
[ "$COLUMNS" -ge 1 ] && [ "$COLUMNS" -le 1600 ] || { echo "PGSNAP_BENCH_VIS_COLUMNS must be 1..1600" >&2; exit 2; }
[ "$REPS" -ge 1 ] || { echo "PGSNAP_BENCH_VIS_REPS must be >= 1" >&2; exit 2; }
[ -x "$BIN/initdb" ] || { echo "no PostgreSQL $MAJOR in $BIN: run scripts/setup.sh" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }

# ---- 0. a private copy of the tree (scripts/bench/common.sh) ---------------------------------
bench_copy_tree

# ---- 1. a fresh cluster -----------------------------------------------------------------
# shared_buffers holds all of pg_attribute (~150 MiB), so no run reads from disk.
bench_fresh_cluster <<EOF
shared_buffers = 512MB
autovacuum = off
max_locks_per_transaction = 256
EOF
q "CREATE EXTENSION pg_snapbuild" >/dev/null
q "SELECT pg_create_logical_replication_slot('$SLOT', 'test_decoding')" >/dev/null

# ---- 2. >= MIN_ROWS pg_attribute rows -------------------------------------------------------
# TABLES tables of COLUMNS int columns, in transactions of 100 tables; then the last
# transaction drops and adds a column in every tenth table (updated and dead pg_attribute
# tuples, so the xmax side is exercised too).
say "create $TABLES tables of $COLUMNS columns"
t0=$SECONDS
for ((first = 0; first < TABLES; first += 100)); do
    last=$((first + 100 < TABLES ? first + 100 : TABLES))
    q "DO \$\$
DECLARE cols text := (SELECT string_agg(format('c%s int', i), ', ') FROM generate_series(1, $COLUMNS) AS i);
BEGIN
  FOR t IN $first .. $((last - 1)) LOOP
    EXECUTE format('CREATE TABLE bench_vis_%s (%s)', t, cols);
  END LOOP;
END \$\$" >/dev/null
    printf '    tables %d..%d\n' "$first" "$((last - 1))"
done
q "DO \$\$
BEGIN
  FOR t IN 0 .. $((TABLES - 1)) BY 10 LOOP
    EXECUTE format('ALTER TABLE bench_vis_%s DROP COLUMN c1, ADD COLUMN extra int', t);
  END LOOP;
END \$\$" >/dev/null
ROWS=$(q "SELECT count(*) FROM pg_attribute")
say "pg_attribute: $ROWS rows, $(q "SELECT pg_relation_size('pg_attribute') / 8192") blocks ($((SECONDS - t0)) s)"
[ "$ROWS" -ge "$MIN_ROWS" ] || { echo "only $ROWS pg_attribute rows (< $MIN_ROWS): raise PGSNAP_BENCH_VIS_TABLES" >&2; exit 1; }
# VACUUM sets the hint bits a long-lived catalog has (the historic routine sets none), so
# both sides mostly read hints rather than the commit log.
q "VACUUM pg_attribute" >/dev/null

# Move the slot's restart_lsn to the end, so the replay that builds the snapshot (common
# to both modes) covers a little WAL only: a RUNNING_XACTS, then consume past it, twice
# (the second confirms the restart candidate of the first).
for _ in 1 2 3; do
    if [ "$MAJOR" -ge 16 ]; then q "SELECT pg_log_standby_snapshot()" >/dev/null; else q "CHECKPOINT"; fi
    q "SELECT pg_replication_slot_advance('$SLOT', pg_current_wal_flush_lsn())" >/dev/null
done
REPLAY_BYTES=$(q "SELECT (pg_current_wal_flush_lsn() - restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = '$SLOT'")
say "slot $SLOT: $REPLAY_BYTES bytes of WAL from restart_lsn to the end"
# Load pg_attribute into shared buffers before the first timed run.
q "SELECT count(*) FROM snapbuild_visibility('pg_attribute', '$SLOT', verdicts => 'server')" >/dev/null

# ---- 3. measurements ----------------------------------------------------------------------
# One line per run in $RUNS: id mode rep rows agrees server_visible wall_s cpu_s vmhwm_kib anon_kib
: >"$RUNS"
export BENCH_LIB_DIR=$BENCH_LIB BENCH_SAMPLES=$W/samples
# run_one ID MODE REP QUERY: QUERY (returns n, agree, vis) on a fresh connection. Wall time:
# the server's clock around the statement; CPU time: the backend's utime + stime
# (/proc/<pid>/stat) around it, which other load on the machine disturbs less. Peak RSS:
# the backend's VmHWM right after it, on the same connection; peak anon: RssAnon sampled
# every 5 ms (scripts/bench/sample.py).
run_one() {
    local id=$1 mode=$2 rep=$3 query=$4 out n agree vis secs ticks0 ticks1 cpu hwm anon
    out=$(bench_sampled_psql "$query" <<'SQL'
\! cut -d')' -f2- "/proc/$BENCH_PID/stat" | awk '{ print $12 + $13 }'
SELECT clock_timestamp() AS t0 \gset
:query \gset
SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) AS secs \gset
\! cut -d')' -f2- "/proc/$BENCH_PID/stat" | awk '{ print $12 + $13 }'
\! touch "$BENCH_SAMPLES/stop"; i=0; while [ ! -e "$BENCH_SAMPLES/peaks" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
\echo :n :agree :vis :secs
\! awk '$1 == "VmHWM:" { print $2 }' "/proc/$BENCH_PID/status"
SQL
)
    ticks0=$(sed -n 1p <<<"$out")
    ticks1=$(sed -n 2p <<<"$out")
    read -r n agree vis secs <<<"$(sed -n 3p <<<"$out")"
    hwm=$(sed -n 4p <<<"$out")
    cpu=$(awk -v a="$ticks0" -v b="$ticks1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
    if [ -z "$hwm" ] || [ ! -s "$BENCH_SAMPLES/peaks" ]; then
        echo "no memory figures for $id: $out" >&2; exit 1
    fi
    read -r _ anon _ <"$BENCH_SAMPLES/peaks"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$mode" "$rep" "$n" "$agree" "$vis" "$secs" "$cpu" "$hwm" "$anon" >>"$RUNS"
    printf '    %-8s #%s %8s rows  agree %8s  visible %8s  %6.2f s (cpu %5.2f s)  peak RSS %4d MiB  anon %4d MiB\n' \
        "$mode" "$rep" "$n" "$agree" "$vis" "$secs" "$cpu" $((hwm / 1024)) $((anon / 1024))
}
scan_query() { # MODE: the same statement text for both modes
    echo "SELECT count(*) AS n, count(*) FILTER (WHERE agrees) AS agree, count(*) FILTER (WHERE server_visible) AS vis FROM snapbuild_visibility('pg_attribute', '$SLOT', verdicts => '$1')"
}

bench_idle_backend
say "$REPS runs of each mode, alternating (server first in odd rounds, both first in even ones)"
for ((rep = 1; rep <= REPS; rep++)); do
    if ((rep % 2)); then order=(server both); else order=(both server); fi
    for mode in "${order[@]}"; do run_one "${mode}_$rep" "$mode" "$rep" "$(scan_query "$mode")"; done
    # The snapshot alone (the replay from restart_lsn both modes start with).
    run_one "snapshot_$rep" snapshot "$rep" \
        "SELECT count(*) AS n, 0 AS agree, 0 AS vis FROM snapbuild_historic_snapshot('$SLOT')"
done

# Branch mix of the scan (untimed).
q "SELECT coalesce(rust_branch, '?') || E'\t' || count(*) FROM snapbuild_visibility('pg_attribute', '$SLOT') GROUP BY rust_branch ORDER BY count(*) DESC" >"$W/branches.tsv"

# ---- 4. report ----------------------------------------------------------------------------
{
    printf 'postgresql\t%s\n' "$(q "SHOW server_version")"
    printf 'extension_so\t%s\nextension_build\t%s\nextension_source\t%s\n' "$SO" "$BUILD" "$SOURCE"
    printf 'cpus\t%s\n' "$(nproc)"
    printf 'tables\t%s\ncolumns\t%s\npg_attribute_rows\t%s\n' "$TABLES" "$COLUMNS" "$ROWS"
    printf 'pg_attribute_blocks\t%s\n' "$(q "SELECT pg_relation_size('pg_attribute') / 8192")"
    printf 'replay_wal_bytes\t%s\n' "$REPLAY_BYTES"
    printf 'idle_backend_peak_kib\t%s\nidle_backend_anon_kib\t%s\n' "$IDLE_KIB" "$IDLE_ANON_KIB"
    printf 'shared_buffers\t%s\n' "$(q "SHOW shared_buffers")"
} >"$META"
echo
python3 "$BENCH_LIB/report_visibility.py" "$RUNS" "$META" "$W/branches.tsv" "$W/result.json"
