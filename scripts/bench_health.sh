#!/usr/bin/env bash
# Benchmark: snapbuild_slot_health (the monitoring view) on many slots over a lot of retained
# WAL. N logical slots nobody consumes are created at even steps while pgbench writes
# PGSNAP_BENCH_WAL_MB of WAL, so the first slot keeps all of it and the last a 1/N share.
# Measured in one run, on the same WAL:
#   - the trace rate: snapbuild_trace_range over the whole range (MiB/s), the yardstick of a
#     replay's speed;
#   - the first scrape of a monitoring session (every slot replayed from its restart_lsn):
#     wall time, WAL bytes replayed (the sum over the slots), and the ratio of the wall time to
#     what the trace rate gives for those bytes (the goal: about 1, "bounded by the trace rate");
#   - repeated scrapes of the same session, each after about 1 MiB of new WAL (the goal: each
#     < 100 ms): wall time and WAL replayed;
#   - a scrape from a new session (no cache);
#   - peak memory (RssAnon) of the monitoring backend over all its scrapes.
# Writes .work/bench-health/result.json. See README "Benchmark: slot health".
#
# Its own copy of the PostgreSQL tree and its own throw-away cluster in .work/bench-health
# (scripts/bench/common.sh), port PGSNAP_BENCH_PORT.
#
# Environment:
#   PGSNAP_BENCH_WAL_MB    WAL to generate, MiB (default 10240)
#   PGSNAP_BENCH_SLOTS     logical slots (default 20)
#   PGSNAP_BENCH_SCRAPES   repeated scrapes (default 5)
#   PGSNAP_BENCH_MAJOR     PostgreSQL tree .pg/MAJOR (default 18)
#   PGSNAP_BENCH_PORT      port (default 55432)
#   PGSNAP_BENCH_CLIENTS   pgbench clients (default 8)
#   PGSNAP_BENCH_RELEASE=1 benchmark a --release build of the work tree; default: the build
#                          installed in .pg/MAJOR (scripts/setup.sh installs release builds)
#   PGSNAP_BENCH_KEEP=1    leave the cluster running afterwards
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WAL_MB=${PGSNAP_BENCH_WAL_MB:-10240}
SLOTS=${PGSNAP_BENCH_SLOTS:-20}
SCRAPES=${PGSNAP_BENCH_SCRAPES:-5}
CLIENTS=${PGSNAP_BENCH_CLIENTS:-8}
MAJOR=${PGSNAP_BENCH_MAJOR:-18}
PORT=${PGSNAP_BENCH_PORT:-55432}
W_LABEL=.work/bench-health
W=$ROOT/$W_LABEL
. "$ROOT/scripts/bench/common.sh"

case $PORT in 5541[4-8]) echo "port $PORT belongs to the test clusters; pick another PGSNAP_BENCH_PORT" >&2; exit 2 ;; esac
[ "$SLOTS" -ge 1 ] && [ "$WAL_MB" -ge 64 ] || { echo "need PGSNAP_BENCH_SLOTS >= 1 and PGSNAP_BENCH_WAL_MB >= 64" >&2; exit 2; }
[ -x "$BIN/pgbench" ] || { echo "no pgbench in $BIN: run scripts/setup.sh" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }

bench_copy_tree

# Slots keep every segment from their restart_lsn; max_slot_wal_keep_size stays unlimited.
bench_fresh_cluster <<EOF
max_replication_slots = $((SLOTS + 10))
EOF
q "CREATE EXTENSION pg_snapbuild" >/dev/null

# ---- WAL, with a slot created every WAL_MB/SLOTS MiB --------------------------------------
START=$(q "SELECT pg_current_wal_lsn()")
wal_since_start() { q "SELECT (pg_current_wal_lsn() - '$START'::pg_lsn)::bigint"; }
target=$((WAL_MB * 1024 * 1024))
step=$((target / SLOTS))
made=0
make_due_slots() { # creates the slots whose share of the WAL has been written
    local w
    w=$(wal_since_start)
    while [ "$made" -lt "$SLOTS" ] && [ "$w" -ge $((made * step)) ]; do
        q "SELECT pg_create_logical_replication_slot('health_$made', 'test_decoding')" >/dev/null
        made=$((made + 1))
    done
}
make_due_slots
SCALE=$(( (WAL_MB / 2 + 16) / 17 ))
[ "$SCALE" -le 300 ] || SCALE=300
say "pgbench -i -s $SCALE, then pgbench -c $CLIENTS in 15 s rounds until $WAL_MB MiB; a slot every $((step / 1048576)) MiB"
pgbench -i -q -s "$SCALE" >"$W/pgbench-init.log" 2>&1 || { cat "$W/pgbench-init.log" >&2; exit 1; }
make_due_slots
: >"$W/pgbench-run.log"
rounds=0
while [ "$(wal_since_start)" -lt "$target" ] || [ "$made" -lt "$SLOTS" ]; do
    rounds=$((rounds + 1))
    [ "$rounds" -le 2000 ] || { echo "WAL does not grow: see $W/pgbench-run.log" >&2; exit 1; }
    pgbench -n -c "$CLIENTS" -j 2 -T 15 >>"$W/pgbench-run.log" 2>&1 ||
        { tail -n 20 "$W/pgbench-run.log" >&2; exit 1; }
    make_due_slots
    printf '    round %d: WAL %d MiB, %d slots\n' "$rounds" $(( $(wal_since_start) / 1048576 )) "$made"
done
q "CHECKPOINT" >/dev/null
END=$(q "SELECT pg_current_wal_flush_lsn()")
RETAINED=$(q "SELECT sum(pg_current_wal_flush_lsn() - restart_lsn)::bigint FROM pg_replication_slots")
say "range [$START, $END]: $(( $(lsn_diff "$START" "$END") / 1048576 )) MiB; $SLOTS slots retain $((RETAINED / 1048576)) MiB in all"

# ---- the trace rate over the whole range ----------------------------------------------------
T0=$(date +%s.%N)
q "SELECT count(*) FROM snapbuild_trace_range('$START', '$END')" >/dev/null
T1=$(date +%s.%N)
TRACE_S=$(python3 -c "print(f'{$T1 - $T0:.3f}')")
TRACE_BYTES=$(lsn_diff "$START" "$END")
say "snapbuild_trace_range over the range: $TRACE_S s ($(python3 -c "print(f'{$TRACE_BYTES / 1048576 / $TRACE_S:.0f}')") MiB/s)"

# ---- scrapes: one monitoring session, sampled --------------------------------------------
export BENCH_LIB_DIR=$BENCH_LIB BENCH_SAMPLES=$W/samples
q "CREATE TABLE IF NOT EXISTS health_pad (t text)" >/dev/null
{
    echo "SELECT extract(epoch FROM clock_timestamp()) AS t0 \\gset"
    echo "SELECT count(*) AS n, sum(replayed_bytes) AS b FROM snapbuild_slot_health \\gset"
    echo "SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 4) AS dt \\gset"
    echo "\\echo scrape first :n :b :dt"
    for i in $(seq 1 "$SCRAPES"); do
        # about 1 MiB of new WAL, by another session
        echo "\\! psql -X -q -At -c \"INSERT INTO health_pad SELECT repeat('x', 1000) FROM generate_series(1, 900)\""
        echo "SELECT extract(epoch FROM clock_timestamp()) AS t0 \\gset"
        echo "SELECT count(*) AS n, sum(replayed_bytes) AS b FROM snapbuild_slot_health \\gset"
        echo "SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 4) AS dt \\gset"
        echo "\\echo scrape again_$i :n :b :dt"
    done
    echo "\\! touch \"\$BENCH_SAMPLES/stop\"; i=0; while [ ! -e \"\$BENCH_SAMPLES/peaks\" ] && [ \$i -lt 500 ]; do sleep 0.01; i=\$((i + 1)); done; cat \"\$BENCH_SAMPLES/peaks\""
} >"$W/scrapes.sql"
bench_idle_backend
bench_sampled_psql "snapbuild_slot_health" <"$W/scrapes.sql" >"$W/scrapes.out"
cat "$W/scrapes.out"
# a new session: no cache
T0=$(date +%s.%N)
NEW_BYTES=$(q "SELECT sum(replayed_bytes) FROM snapbuild_slot_health")
T1=$(date +%s.%N)
NEW_S=$(python3 -c "print(f'{$T1 - $T0:.3f}')")

python3 - "$W" "$TRACE_BYTES" "$TRACE_S" "$RETAINED" "$NEW_BYTES" "$NEW_S" "$SLOTS" "$IDLE_ANON_KIB" <<'PY'
import json, sys
w, trace_bytes, trace_s, retained, new_bytes, new_s, slots, idle_anon = sys.argv[1:]
trace_bytes, retained, new_bytes, slots, idle_anon = map(int, (trace_bytes, retained, new_bytes, slots, idle_anon))
trace_s, new_s = float(trace_s), float(new_s)
scrapes, peaks = [], None
for line in open(f"{w}/scrapes.out"):
    p = line.split()
    if p[:1] == ["scrape"]:
        scrapes.append({"scrape": p[1], "slots": int(p[2]), "replayed_bytes": int(p[3]), "wall_s": float(p[4])})
    elif len(p) == 4 and all(x.isdigit() for x in p):  # sample.py: vmrss anon file shmem
        peaks = {"peak_rss_kib": int(p[0]), "peak_anon_kib": int(p[1])}
rate = trace_bytes / trace_s
first = scrapes[0]
res = {
    "slots": slots,
    "retained_bytes": retained,
    "trace": {"bytes": trace_bytes, "wall_s": trace_s, "mib_per_s": rate / 1048576},
    "first_scrape": dict(first, at_trace_rate_s=first["replayed_bytes"] / rate,
                         ratio_to_trace_rate=first["wall_s"] / (first["replayed_bytes"] / rate)),
    "repeated_scrapes": scrapes[1:],
    "new_session_scrape": {"replayed_bytes": new_bytes, "wall_s": new_s},
    "monitoring_backend": dict(peaks or {}, idle_anon_kib=idle_anon),
}
json.dump(res, open(f"{w}/result.json", "w"), indent=2)
print(f"trace rate: {rate / 1048576:.0f} MiB/s over {trace_bytes / 1048576:.0f} MiB")
print(f"first scrape: {first['slots']} slots, {first['replayed_bytes'] / 1048576:.0f} MiB replayed in {first['wall_s']:.2f} s "
      f"({res['first_scrape']['ratio_to_trace_rate']:.2f}x the time the trace rate gives for those bytes)")
for s in scrapes[1:]:
    print(f"repeated scrape {s['scrape']}: {s['wall_s'] * 1000:.1f} ms, {s['replayed_bytes'] / 1024:.0f} KiB replayed")
print(f"new session: {new_s:.2f} s, {new_bytes / 1048576:.0f} MiB replayed")
if peaks:
    print(f"monitoring backend: peak RssAnon {peaks['peak_anon_kib'] / 1024:.1f} MiB (idle {idle_anon / 1024:.1f} MiB)")
worst = max((s["wall_s"] for s in scrapes[1:]), default=0)
print(f"goal: repeated scrapes < 100 ms: {'met' if worst < 0.1 else 'NOT met'} (worst {worst * 1000:.1f} ms)")
PY
