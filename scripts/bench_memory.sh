#!/usr/bin/env bash
# Benchmark: is every function's memory bounded in WAL length? Peak backend memory of
# snapbuild_trace_range (with and without all_records), snapbuild_trace_json (with and without),
# snapbuild_slot_prediction, snapbuild_diagnose, snapbuild_slot_health and snapbuild_visibility
# on pg_class and pg_attribute of a large catalog, after 1 GiB and again after 4 GiB of pgbench
# WAL, in one run, all over the WAL a slot created at the start retains. Writes
# .work/bench-mem/result.json and prints a table. See README "Reliability".
#
# Like scripts/bench.sh it uses its own copy of the PostgreSQL tree and its own throw-away
# cluster, in .work/bench-mem, on port PGSNAP_BENCH_MEM_PORT; the data (about 6 GB at the
# default sizes) is deleted at the end unless PGSNAP_BENCH_KEEP=1.
#
# Environment:
#   PGSNAP_BENCH_MEM_PORT    port (default 55433)
#   PGSNAP_BENCH_MEM_MAJOR   PostgreSQL tree .pg/MAJOR (default 18)
#   PGSNAP_BENCH_MEM_SIZES   WAL sizes measured, MiB, ascending (default "1024 4096")
#   PGSNAP_BENCH_MEM_TABLES  tables of 20 columns made in the catalog (default 3000)
#   PGSNAP_BENCH_CLIENTS     pgbench clients (default 4)
#   PGSNAP_BENCH_RELEASE=1   a --release build of the work tree; default: the build in .pg/MAJOR
#   PGSNAP_BENCH_KEEP=1      leave the cluster and its data
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZES=${PGSNAP_BENCH_MEM_SIZES:-1024 4096}
TABLES=${PGSNAP_BENCH_MEM_TABLES:-3000}
CLIENTS=${PGSNAP_BENCH_CLIENTS:-4}
SLOT=bench_mem
MAJOR=${PGSNAP_BENCH_MEM_MAJOR:-18}
PORT=${PGSNAP_BENCH_MEM_PORT:-55433}
W_LABEL=.work/bench-mem
W=$ROOT/$W_LABEL
. "$ROOT/scripts/bench/common.sh"

case $PORT in 5541[4-8] | 5543[0-2] | 55440) echo "port $PORT belongs to the test clusters or another benchmark; pick another PGSNAP_BENCH_MEM_PORT" >&2; exit 2 ;; esac
[ -x "$BIN/pgbench" ] || { echo "no pgbench in $BIN: run scripts/setup.sh" >&2; exit 1; }
last_size=0
for s in $SIZES; do
    [ "$s" -gt "$last_size" ] || { echo "PGSNAP_BENCH_MEM_SIZES must be ascending" >&2; exit 2; }
    last_size=$s
done
need_kib=$(( (last_size + 3072) * 1024 ))
free_kib=$(df -Pk "$ROOT" | awk 'NR == 2 { print $4 }')
[ "$free_kib" -gt "$need_kib" ] || { echo "needs about $((need_kib >> 20)) GiB free on $ROOT" >&2; exit 1; }

# the data goes at the end (unless KEEP=1); replaces common.sh's finish (the EXIT trap)
finish() {
    if [ "$KEEP" = 1 ]; then say "cluster left running on port $PORT (data: $DATA)"; return; fi
    stop_cluster
    as_pg rm -rf "$DATA"
    rm -rf "$W/pg"
    say "data deleted (PGSNAP_BENCH_KEEP=1 keeps it)"
}

bench_copy_tree
bench_fresh_cluster <<EOF
wal_keep_size = $((last_size + 1024))MB
max_wal_size = 8GB
checkpoint_timeout = 120s
shared_buffers = 256MB
max_locks_per_transaction = 256
EOF
q "CREATE EXTENSION pg_snapbuild" >/dev/null
# every call goes through bench_try: its result, or 'ERROR <SQLSTATE>' (trace_json may stop at
# its 64 MiB bound), so one failing call does not end the run
q "CREATE FUNCTION bench_try(q text) RETURNS text LANGUAGE plpgsql AS \$\$
DECLARE r text;
BEGIN EXECUTE q INTO r; RETURN r;
EXCEPTION WHEN OTHERS THEN RETURN 'ERROR ' || SQLSTATE;
END \$\$" >/dev/null
q "SELECT pg_create_logical_replication_slot('$SLOT', 'test_decoding')" >/dev/null
START=$(q "SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = '$SLOT'")
wal_mib() { echo $(( $(lsn_diff "$START" "$(q "SELECT pg_current_wal_flush_lsn()")") >> 20 )); }

say "a large catalog: $TABLES tables of 20 columns (in transactions of 100)"
for ((t = 0; t < TABLES; t += 100)); do
    q "DO \$\$ BEGIN FOR i IN $t..$((t + 99 < TABLES - 1 ? t + 99 : TABLES - 1)) LOOP
        EXECUTE format('CREATE TABLE bench_cat_%s (%s)', i,
            (SELECT string_agg('c' || c || ' int', ', ') FROM generate_series(1, 20) c));
    END LOOP; END \$\$" >/dev/null
done
say "pg_class: $(q "SELECT count(*) FROM pg_class") rows, pg_attribute: $(q "SELECT count(*) FROM pg_attribute") rows"

say "pgbench -i -s 20"
pgbench -i -q -s 20 >"$W/pgbench-init.log" 2>&1 || { cat "$W/pgbench-init.log" >&2; exit 1; }
# TPC-B (many small transactions) with a bulk insert now and then (WAL faster)
q "CREATE TABLE bench_bulk (a int, b text)" >/dev/null
cat >"$W/bulk.sql" <<'EOF'
INSERT INTO bench_bulk SELECT g, repeat('x', 200) FROM generate_series(1, 2000) g;
EOF
: >"$W/pgbench-run.log"
: >"$RUNS"
export BENCH_LIB_DIR=$BENCH_LIB BENCH_SAMPLES=$W/samples
bench_idle_backend

# measure SIZE ID TOOL QUERY: a fresh connection runs SELECT bench_try(QUERY) sampled by
# scripts/bench/sample.py (RssAnon every 5 ms), then reads its VmHWM
measure() {
    local size=$1 id=$2 tool=$3 query=$4 out res secs hwm anon
    out=$(bench_sampled_psql "$query" <<'SQL'
SELECT clock_timestamp() AS t0 \gset
SELECT bench_try(:'query') AS res \gset
SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) AS secs \gset
\! touch "$BENCH_SAMPLES/stop"; i=0; while [ ! -e "$BENCH_SAMPLES/peaks" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
\echo :secs :res
\! awk '$1 == "VmHWM:" { print $2 }' "/proc/$BENCH_PID/status"
SQL
)
    read -r secs res <<<"$(sed -n 1p <<<"$out")"
    hwm=$(sed -n 2p <<<"$out")
    if [ -z "$hwm" ] || [ ! -s "$BENCH_SAMPLES/peaks" ]; then echo "no memory figures for $id: $out" >&2; exit 1; fi
    read -r _ anon _ <"$BENCH_SAMPLES/peaks"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$WAL_BYTES" "$id" "$tool" "$res" "$secs" "$hwm" "$anon" >>"$RUNS"
    printf '    %-40s %-14s %8.2f s  VmHWM %5d MiB  peak anon %5d MiB\n' "$tool" "$res" "$secs" $((hwm / 1024)) $((anon / 1024))
}

round=0
for size in $SIZES; do
    say "pgbench (-c $CLIENTS, TPC-B 9 : bulk insert 1) until $size MiB of WAL since the slot"
    while [ "$(wal_mib)" -lt "$size" ]; do
        round=$((round + 1))
        pgbench -n -c "$CLIENTS" -j 2 -T 20 -b tpcb-like@9 -f "$W/bulk.sql@1" >>"$W/pgbench-run.log" 2>&1 ||
            { tail -n 20 "$W/pgbench-run.log" >&2; exit 1; }
        q "TRUNCATE bench_bulk" >/dev/null
        printf '    round %d: WAL %d MiB\n' "$round" "$(wal_mib)"
    done
    END=$(q "SELECT pg_current_wal_flush_lsn()")
    WAL_BYTES=$(lsn_diff "$START" "$END")
    say "measure over [$START, $END] ($((WAL_BYTES >> 20)) MiB)"
    measure "$size" trace_range "snapbuild_trace_range" \
        "SELECT count(*)::text FROM snapbuild_trace_range('$START', '$END')"
    measure "$size" trace_range_all "snapbuild_trace_range all_records" \
        "SELECT count(*)::text FROM snapbuild_trace_range('$START', '$END', all_records => true)"
    measure "$size" trace_json "snapbuild_trace_json" \
        "SELECT length(snapbuild_trace_json('$SLOT')::text)::text"
    measure "$size" trace_json_all "snapbuild_trace_json all_records" \
        "SELECT length(snapbuild_trace_json('$SLOT', true)::text)::text"
    measure "$size" prediction "snapbuild_slot_prediction" \
        "SELECT records::text FROM snapbuild_slot_prediction('$SLOT')"
    measure "$size" diagnose "snapbuild_diagnose" \
        "SELECT count(*)::text FROM snapbuild_diagnose('$SLOT')"
    measure "$size" health "snapbuild_slot_health" \
        "SELECT replayed_bytes::text FROM snapbuild_slot_health() WHERE slot_name = '$SLOT'"
    measure "$size" visibility_pg_class "snapbuild_visibility pg_class" \
        "SELECT count(*)::text FROM snapbuild_visibility('pg_class', '$SLOT')"
    measure "$size" visibility_pg_attribute "snapbuild_visibility pg_attribute" \
        "SELECT count(*)::text FROM snapbuild_visibility('pg_attribute', '$SLOT')"
done

{
    printf 'postgresql\t%s\n' "$(q "SHOW server_version")"
    printf 'extension_so\t%s\nextension_build\t%s\nextension_source\t%s\n' "$SO" "$BUILD" "$SOURCE"
    printf 'start_lsn\t%s\ntables\t%s\n' "$START" "$TABLES"
    printf 'pg_class_rows\t%s\npg_attribute_rows\t%s\n' "$(q "SELECT count(*) FROM pg_class")" "$(q "SELECT count(*) FROM pg_attribute")"
    printf 'idle_backend_peak_kib\t%s\nidle_backend_anon_kib\t%s\n' "$IDLE_KIB" "$IDLE_ANON_KIB"
} >"$META"
python3 - "$RUNS" "$META" "$W/result.json" <<'PY'
import json, sys
runs, meta, out = sys.argv[1:]
m = dict(l.rstrip("\n").split("\t", 1) for l in open(meta) if "\t" in l)
rows = []
for l in open(runs):
    size, wal, rid, tool, res, secs, hwm, anon = l.rstrip("\n").split("\t")
    rows.append({"size_mib": int(size), "wal_bytes": int(wal), "id": rid, "tool": tool, "result": res,
                 "wall_s": float(secs), "vmhwm_kib": int(hwm), "peak_anon_kib": int(anon)})
sizes = sorted({r["size_mib"] for r in rows})
json.dump({"meta": m, "runs": rows}, open(out, "w"), indent=1)
print(f"\nPostgreSQL {m['postgresql']}, {m['extension_build']} build; pg_class {m['pg_class_rows']} rows, "
      f"pg_attribute {m['pg_attribute_rows']} rows; idle backend: VmHWM {int(m['idle_backend_peak_kib'])/1024:.1f} MiB, "
      f"RssAnon {int(m['idle_backend_anon_kib'])/1024:.1f} MiB")
hdr = "| function | " + " | ".join(f"{s} MiB: result | s | VmHWM MiB | peak anon MiB" for s in sizes) + " |"
print(hdr)
print("|---|" + "---|---:|---:|---:|" * len(sizes))
for tool in dict.fromkeys(r["tool"] for r in rows):
    cells = []
    for s in sizes:
        r = next((x for x in rows if x["tool"] == tool and x["size_mib"] == s), None)
        cells.append("- | - | - | -" if r is None else
                     f"{r['result']} | {r['wall_s']:.1f} | {r['vmhwm_kib']/1024:.1f} | {r['peak_anon_kib']/1024:.1f}")
    print(f"| {tool} | " + " | ".join(cells) + " |")
print(f"\nresult: {out}")
PY
