#!/usr/bin/env bash
# Benchmark: snapbuild_trace_range, snapbuild_backlog and snapbuild_decoding_cost over >= 1 GiB
# of pgbench WAL, side by side with pg_waldump and pg_walinspect's pg_get_wal_records_info over
# the same LSN range, and over its first 10%, 25% and 50% (does peak memory grow with WAL
# length?). Reports wall time, CPU time, MiB/s and peak memory; writes .work/bench/result.json.
# See docs/benchmarks.md.
#
# It uses its own copy of the PostgreSQL tree and its own throw-away cluster in .work/bench
# (both recreated on every run; the cluster is stopped at the end) on port PGSNAP_BENCH_PORT,
# never the test clusters' ports or data.
#
# Environment:
#   PGSNAP_BENCH_WAL_MB    WAL to generate, MiB (default 1100)
#   PGSNAP_BENCH_MAJOR     PostgreSQL tree .pg/MAJOR (default 18; pg_walinspect needs >= 15)
#   PGSNAP_BENCH_PORT      port (default 55430)
#   PGSNAP_BENCH_CLIENTS   pgbench clients in the TPC-B phase (default 8)
#   PGSNAP_BENCH_PCTS      range prefixes measured, in % (default "10 25 50 100"; must include 100)
#   PGSNAP_BENCH_RELEASE=1 benchmark a --release build of the work tree (cargo target dir
#                          .work/bench/target); default: the build installed in .pg/MAJOR
#   PGSNAP_BENCH_KEEP=1    leave the cluster running afterwards
#   PGSNAP_BENCH_REPEAT    runs of the floor (pg_waldump --stats), of both traces and of the
#                          four decoding replays (snapbuild_backlog; snapbuild_decoding_cost
#                          with the server's logical_decoding_work_mem, with work_mem_kb => 64,
#                          and with work_mem_kb => 64 and streaming => true) over the whole
#                          range, interleaved (default 3); each run's function / floor
#                          ratios are reported, in wall time and in CPU time, beside what
#                          PostgreSQL itself pays for the same output in the same run
#                          (pg_get_wal_stats: its reader in a backend; the executor's
#                          tuplestore for the traces' own rows; pg_get_wal_records_info)
#   PGSNAP_BENCH_BEST_OF   tries of each per run, interleaved (default 3); a run's
#                          figure is the least (on a shared machine noise only adds time, and
#                          one query's CPU time varies by a third from try to try)
#   PGSNAP_BENCH_REUSE=1   skip steps 0-2 and measure the cluster a previous run kept
#                          (PGSNAP_BENCH_KEEP=1) over the same range (.work/bench/meta.tsv)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WAL_MB=${PGSNAP_BENCH_WAL_MB:-1100}
CLIENTS=${PGSNAP_BENCH_CLIENTS:-8}
PCTS=${PGSNAP_BENCH_PCTS:-10 25 50 100}
# What scripts/bench/common.sh takes; it sets RELEASE, KEEP, DATA, SOCK, LOG, RUNS, META,
# BENCH_LIB and BIN, and defines the shared functions.
MAJOR=${PGSNAP_BENCH_MAJOR:-18}
PORT=${PGSNAP_BENCH_PORT:-55430}
W_LABEL=.work/bench
W=$ROOT/$W_LABEL
REPEAT=${PGSNAP_BENCH_REPEAT:-3}
BEST_OF=${PGSNAP_BENCH_BEST_OF:-3}
REUSE=${PGSNAP_BENCH_REUSE:-0}
. "$ROOT/scripts/bench/common.sh"

case $PORT in 5541[4-8]) echo "port $PORT belongs to the test clusters; pick another PGSNAP_BENCH_PORT" >&2; exit 2 ;; esac
case " $PCTS " in *" 100 "*) ;; *) echo "PGSNAP_BENCH_PCTS must include 100" >&2; exit 2 ;; esac
[ "$WAL_MB" -ge 16 ] || { echo "PGSNAP_BENCH_WAL_MB must be >= 16" >&2; exit 2; }
if [ ! -x "$BIN/pg_waldump" ] || [ ! -x "$BIN/pgbench" ]; then
    echo "no PostgreSQL $MAJOR with pg_waldump and pgbench in $BIN: run scripts/setup.sh" >&2; exit 1
fi
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }

# pg_wal is mode 0700 postgres: read it directly as root or postgres, else through sudo
WAL_READER=()
case $(id -un) in root | postgres) ;; *) WAL_READER=(sudo -n -u postgres --) ;; esac

# ---- 0. a private copy of the tree (scripts/bench/common.sh) ---------------------------------
bench_copy_tree

meta_value() { awk -F'\t' -v k="$1" '$1 == k { print $2 }' "$META"; }
if [ "$REUSE" = 1 ]; then
    # ---- 1-2. the cluster and the WAL a previous run kept -------------------------------------
    [ -f "$DATA/PG_VERSION" ] && [ -f "$META" ] ||
        { echo "PGSNAP_BENCH_REUSE=1: no kept cluster in $W_LABEL (run once with PGSNAP_BENCH_KEEP=1)" >&2; exit 1; }
    bench_start_kept_cluster
    START=$(meta_value start_lsn) END=$(meta_value end_lsn)
    SCALE=$(meta_value pgbench_scale) CLIENTS=$(meta_value pgbench_clients) txns=$(meta_value pgbench_transactions)
    WAL_BYTES=$(lsn_diff "$START" "$END")
    say "reusing range [$START, $END]: $WAL_BYTES bytes of WAL, $txns pgbench transactions"
else
    # ---- 1. a fresh cluster -----------------------------------------------------------------
    # The logical slot keeps every segment of the range; wal_keep_size is a second guard.
    # A here-document, not a pipe: a function at the end of a pipe runs in a subshell, whose
    # exit ran the EXIT trap it sets and stopped the new cluster at once.
    # No timed checkpoint during the run: how many full-page images the WAL holds (and so how
    # many records fit in WAL_MB) would otherwise depend on how fast pgbench runs; without
    # them the WAL is the many-small-records shape of a fast machine on every machine.
    bench_fresh_cluster <<EOF
wal_keep_size = $((WAL_MB * 2 + 1024))MB
checkpoint_timeout = 1d
EOF
    q "CREATE EXTENSION pg_snapbuild; CREATE EXTENSION pg_walinspect" >/dev/null
    q "SELECT pg_create_logical_replication_slot('bench_slot', 'test_decoding')" >/dev/null

    # ---- 2. >= WAL_MB of pgbench WAL ------------------------------------------------------------
    START=$(q "SELECT pg_current_wal_lsn()")
    wal_since_start() { q "SELECT (pg_current_wal_lsn() - '$START'::pg_lsn)::bigint"; }
    target=$((WAL_MB * 1024 * 1024))
    # Scale WAL_MB/34: pgbench -i writes ~12 MiB of WAL per scale unit, so ~35% of the WAL;
    # the rest comes from TPC-B transactions (many small commits, full-page images after each
    # checkpoint).
    SCALE=$(( (WAL_MB / 2 + 16) / 17 ))
    say "start LSN $START (after creating slot bench_slot); pgbench -i -s $SCALE"
    pgbench -i -q -s "$SCALE" >"$W/pgbench-init.log" 2>&1 || { cat "$W/pgbench-init.log" >&2; exit 1; }
    say "WAL after init: $(( $(wal_since_start) / 1048576 )) MiB; pgbench -c $CLIENTS in 15 s rounds until $WAL_MB MiB"
    : >"$W/pgbench-run.log"
    txns=0 rounds=0
    while [ "$(wal_since_start)" -lt "$target" ]; do
        rounds=$((rounds + 1))
        [ "$rounds" -le 500 ] || { echo "WAL does not grow: see $W/pgbench-run.log" >&2; exit 1; }
        pgbench -n -c "$CLIENTS" -j 2 -T 15 >>"$W/pgbench-run.log" 2>&1 ||
            { tail -n 20 "$W/pgbench-run.log" >&2; exit 1; }
        n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$W/pgbench-run.log" | tail -n 1)
        txns=$((txns + n))
        printf '    round %d: %d transactions, WAL %d MiB\n' "$rounds" "$n" $(( $(wal_since_start) / 1048576 ))
    done
    END=$(q "SELECT pg_current_wal_flush_lsn()")
    WAL_BYTES=$(lsn_diff "$START" "$END")
    say "range [$START, $END]: $WAL_BYTES bytes of WAL ($((WAL_BYTES / 1048576)) MiB), $txns pgbench transactions"
fi

# ---- 3. measurements ----------------------------------------------------------------------
# One line per measurement in $RUNS (read by scripts/bench/report.py):
#   id tool pct lo hi wal_bytes rows wall_s peak_rss_kib peak_anon_kib kind run cpu_s
: >"$RUNS"
: >"$W/decoding_cost.tsv"
export BENCH_LIB_DIR=$BENCH_LIB BENCH_SAMPLES=$W/samples
RUN=1
record_run() { # ID TOOL PCT LO HI ROWS SECS PEAK_KIB ANON_KIB KIND CPU_SECS
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$1" "$2" "$3" "$4" "$5" "$(lsn_diff "$4" "$5")" "$6" "$7" "$8" "$9" "${10}" "$RUN" "${11}" >>"$RUNS"
    printf '    %-34s %4s%% run %d  %10s rows  %8.2f s (CPU %6.2f s)  peak RSS %5d MiB  peak anon %5d MiB\n' \
        "$2" "$3" "$RUN" "$6" "$7" "${11}" $(($8 / 1024)) $(($9 / 1024))
}
# sql_peak ID TOOL PCT LO HI QUERY: "SELECT count(*) FROM QUERY" on a fresh connection.
# Wall time: the server's clock around the statement; CPU time: the backend's utime +
# stime (/proc/<pid>/stat) around it. Peak RSS: the backend's VmHWM, read
# from /proc/<pid>/status right after the statement, on the same open connection. Peak anon:
# RssAnon (private memory; VmHWM also counts the shared buffers the backend touched),
# sampled every 5 ms during the statement by scripts/bench/sample.py.
sql_peak() {
    local id=$1 tool=$2 pct=$3 lo=$4 hi=$5 query=$6 out n secs hwm anon
    out=$(bench_sampled_psql "$query" <<'SQL'
\! awk '{ print $14 + $15 }' "/proc/$BENCH_PID/stat" >"$BENCH_SAMPLES/cpu0"
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) AS n FROM :query \gset
SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) AS secs \gset
\! awk '{ print $14 + $15 }' "/proc/$BENCH_PID/stat" >"$BENCH_SAMPLES/cpu1"
\! touch "$BENCH_SAMPLES/stop"; i=0; while [ ! -e "$BENCH_SAMPLES/peaks" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
\echo :n :secs
\! awk '$1 == "VmHWM:" { print $2 }' "/proc/$BENCH_PID/status"
SQL
)
    read -r n secs <<<"$(sed -n 1p <<<"$out")"
    hwm=$(sed -n 2p <<<"$out")
    cpu=$(awk -v t="$(getconf CLK_TCK)" 'NR == 1 { a = $1 } NR == 2 { printf "%.2f", ($1 - a) / t }' \
        "$BENCH_SAMPLES/cpu0" "$BENCH_SAMPLES/cpu1")
    if [ -z "$hwm" ] || [ ! -s "$BENCH_SAMPLES/peaks" ]; then
        echo "no memory figures for $id: $out" >&2; exit 1
    fi
    read -r _ anon _ <"$BENCH_SAMPLES/peaks"
    record_run "$id" "$tool" "$pct" "$lo" "$hi" "$n" "$secs" "$hwm" "$anon" backend "$cpu"
}
# proc_peak ID TOOL PCT LO HI ROWS OUTFILE CMD...: wall time, ru_maxrss, sampled RssAnon and
# CPU time (user + system) of CMD (scripts/bench/rusage.py), its stdout to OUTFILE. ROWS
# "stats": the record count of the pg_waldump --stats output in OUTFILE.
proc_peak() {
    local id=$1 tool=$2 pct=$3 lo=$4 hi=$5 rows=$6 outfile=$7 secs kib anon cpu
    shift 7
    read -r secs kib anon cpu <<<"$(python3 "$BENCH_LIB/rusage.py" "$outfile" "${WAL_READER[@]}" "$@")"
    if [ "$rows" = stats ]; then rows=$(awk '$1 == "Total" { print $2; exit }' "$outfile"); fi
    record_run "$id" "$tool" "$pct" "$lo" "$hi" "$rows" "$secs" "$kib" "$anon" process "$cpu"
}

# The decoding replays: what the slot's next decode reads, from its restart_lsn (the slot was
# created just before START) through the record ending at or after HI. decoding_cost three
# ways: the server's logical_decoding_work_mem (64 MB), 64 kB (the least allowed: the largest
# transaction is spilled whenever the buffer holds more), and 64 kB with a streaming consumer
# (the largest top-level transaction is streamed instead). After each prefix's timings, what
# each variant computed over it goes to $W/decoding_cost.tsv (one untimed call each), which
# the report prints.
decoding_peaks() { # PCT HI
    sql_peak "backlog_$1" "snapbuild_backlog" "$1" "$START" "$2" \
        "snapbuild_backlog('bench_slot', '$2')"
    sql_peak "cost_$1" "snapbuild_decoding_cost" "$1" "$START" "$2" \
        "snapbuild_decoding_cost('bench_slot', '$2')"
    sql_peak "cost_spill_$1" "snapbuild_decoding_cost 64 kB" "$1" "$START" "$2" \
        "snapbuild_decoding_cost('bench_slot', '$2', work_mem_kb => 64)"
    sql_peak "cost_stream_$1" "snapbuild_decoding_cost 64 kB streaming" "$1" "$START" "$2" \
        "snapbuild_decoding_cost('bench_slot', '$2', work_mem_kb => 64, streaming => true)"
}

bench_idle_backend # a fresh backend that ran nothing: the baseline for the backends' figures

# What PostgreSQL itself pays for the traces' output, measured in the runs below beside the
# floor: its reader inside a backend (pg_walinspect's pg_get_wal_stats: every record read and
# CRC-checked, a row per rmgr returned), and the executor's tuplestore that every row of a
# function in FROM goes through (nodeFunctionscan.c), spilling past work_mem. The tuplestore
# is measured on the traces' own rows, stored once in unlogged tables (scripts/bench/common.sh
# bench_store_rows): a MATERIALIZED CTE over a table less a plain scan of it.
for t in trace trace_all; do
    all=false
    [ "$t" = trace_all ] && all=true
    say "the rows of snapbuild_trace_range(all_records => $all) in table bench_${t}_rows"
    bench_store_rows "$t" "$all" "$START" "$END"
    bench_check_cte "$t"
done

for pct in $PCTS; do
    HI=$(q "SELECT '$START'::pg_lsn + round(('$END'::pg_lsn - '$START'::pg_lsn) * $pct / 100)")
    say "range $pct%: [$START, $HI]"
    wal_args=(--path "$DATA/pg_wal" --start "$START" --end "$HI")
    proc_peak "waldump_stats_$pct" "pg_waldump --stats" "$pct" "$START" "$HI" stats \
        "$W/waldump-stats-$pct.txt" "$BIN/pg_waldump" --stats "${wal_args[@]}"
    records=$(awk '$1 == "Total" { print $2; exit }' "$W/waldump-stats-$pct.txt")
    proc_peak "waldump_$pct" "pg_waldump" "$pct" "$START" "$HI" "$records" /dev/null \
        "$BIN/pg_waldump" "${wal_args[@]}"
    sql_peak "walinspect_$pct" "pg_get_wal_records_info" "$pct" "$START" "$HI" \
        "pg_get_wal_records_info('$START', '$HI')"
    sql_peak "trace_$pct" "snapbuild_trace_range" "$pct" "$START" "$HI" \
        "snapbuild_trace_range('$START', '$HI', all_records => false)"
    sql_peak "trace_all_$pct" "snapbuild_trace_range all_records" "$pct" "$START" "$HI" \
        "snapbuild_trace_range('$START', '$HI', all_records => true)"
    decoding_peaks "$pct" "$HI"
    # what each decoding_cost variant computed over this prefix (not timed)
    for v in "" ", work_mem_kb => 64" ", work_mem_kb => 64, streaming => true"; do
        q "SELECT $pct, work_mem_kb, streaming, records, wal_bytes, total_txns, total_bytes, spill_txns,
                  spill_count, spill_bytes, stream_txns, stream_count, stream_bytes, pending_txns,
                  peak_memory_bytes, coalesce(undecided, '')
           FROM snapbuild_decoding_cost('bench_slot', '$HI'$v)" | tr '|' '\t' >>"$W/decoding_cost.tsv"
    done
done
# The floor, both traces and the decoding replays again over the whole range, interleaved with what PostgreSQL
# itself pays for the same output, so that each run's ratios compare figures taken under the
# same load: run 1 has the tries above (floor, traces, pg_get_wal_records_info, decoding replays), and each run
# has BEST_OF tries of each in all.
for RUN in $(seq 1 "$REPEAT"); do
    for try in $(seq 1 "$BEST_OF"); do
        say "run $RUN of $REPEAT over the whole range, try $try of $BEST_OF"
        if [ "$RUN" != 1 ] || [ "$try" != 1 ]; then
            proc_peak "waldump_stats_100" "pg_waldump --stats" 100 "$START" "$END" stats \
                "$W/waldump-stats-100.txt" "$BIN/pg_waldump" --stats --path "$DATA/pg_wal" --start "$START" --end "$END"
            sql_peak "trace_100" "snapbuild_trace_range" 100 "$START" "$END" \
                "snapbuild_trace_range('$START', '$END', all_records => false)"
            sql_peak "trace_all_100" "snapbuild_trace_range all_records" 100 "$START" "$END" \
                "snapbuild_trace_range('$START', '$END', all_records => true)"
            sql_peak "walinspect_100" "pg_get_wal_records_info" 100 "$START" "$END" \
                "pg_get_wal_records_info('$START', '$END')"
            decoding_peaks 100 "$END"
        fi
        sql_peak "walstats_100" "pg_get_wal_stats" 100 "$START" "$END" \
            "pg_get_wal_stats('$START', '$END')"
        for t in trace trace_all; do
            sql_peak "${t}_rows_cte_100" "$t rows via a tuplestore (CTE)" 100 "$START" "$END" "$(bench_rows_cte "$t")"
            sql_peak "${t}_rows_scan_100" "$t rows from a table scan" 100 "$START" "$END" "$(bench_rows_scan "$t")"
        done
    done
done

# ---- 4. report ----------------------------------------------------------------------------
{
    printf 'postgresql\t%s\n' "$(q "SHOW server_version")"
    printf 'extension_so\t%s\nextension_build\t%s\nextension_source\t%s\n' "$SO" "$BUILD" "$SOURCE"
    printf 'cpus\t%s\n' "$(nproc)"
    printf 'start_lsn\t%s\nend_lsn\t%s\nwal_bytes\t%s\n' "$START" "$END" "$WAL_BYTES"
    printf 'pgbench_scale\t%s\npgbench_clients\t%s\npgbench_transactions\t%s\n' "$SCALE" "$CLIENTS" "$txns"
    printf 'idle_backend_peak_kib\t%s\nidle_backend_anon_kib\t%s\n' "$IDLE_KIB" "$IDLE_ANON_KIB"
    printf 'work_mem\t%s\nshared_buffers\t%s\n' "$(q "SHOW work_mem")" "$(q "SHOW shared_buffers")"
} >"$META"
echo
python3 "$BENCH_LIB/report.py" "$RUNS" "$META" "$W/result.json" "$W/decoding_cost.tsv"
