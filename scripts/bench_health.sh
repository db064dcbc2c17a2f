#!/usr/bin/env bash
# Benchmark: snapbuild_slot_health (the monitoring view) on many slots over a lot of retained
# WAL. N logical slots nobody consumes are created at even steps while pgbench writes
# PGSNAP_BENCH_WAL_MB of WAL, so the first slot keeps all of it and the last a 1/N share.
# Measured in one run, on the same WAL:
#   - the trace rate: snapbuild_trace_range over the whole range (MiB/s), the yardstick of a
#     replay's speed;
#   - the first scrape of a monitoring session (every slot replayed from its restart_lsn, the
#     WAL read once for all): wall time and WAL bytes the replays took (the sum over the slots);
#   - repeated scrapes of the same session, each after about 1 MiB of new WAL (the goal: each
#     < 100 ms): wall time and WAL replayed;
#   - a scrape from a new session that resumes the replays the first session left in shared
#     memory (the cluster preloads pg_snapbuild), and one from a new session that keeps its own
#     (pg_snapbuild.shared_state = off: every slot replayed from its restart_lsn);
#   - peak memory (RssAnon) of the monitoring backend over all its scrapes;
#   - the floor: pg_waldump --stats over the oldest slot's WAL;
#   - in CPU time, PGSNAP_BENCH_BEST_OF (default 5) interleaved tries of the floor and of the
#     first scrape of a new session of its own (every slot replayed from its restart_lsn);
#   - snapbuild_diagnose on the oldest slot in a new session of its own, then again in it, and
#     in a new session resuming the shared replays;
#   - a scrape after about 100 MiB more WAL (pgbench), in the same session;
#   - the first scrape of a new session of its own with 20, 5 and 1 slots over the same WAL
#     (slots dropped from the newest), each beside pg_waldump --stats over the same WAL, and
#     again with pg_snapbuild.join_replays = off (every replay fed on its own);
#   - last, the watcher's TPS cost: scripts/bench_watcher.sh with its defaults (about half an
#     hour; PGSNAP_BENCH_WATCHER=0 leaves it out), its figures copied under "watcher".
# Writes .work/bench-health/result.json. See docs/benchmarks.md "Slot health".
#
# Its own copy of the PostgreSQL tree and its own throw-away cluster in .work/bench-health
# (scripts/bench/common.sh), port PGSNAP_BENCH_PORT.
#
# Environment:
#   PGSNAP_BENCH_WAL_MB    WAL to generate, MiB (default 10240)
#   PGSNAP_BENCH_SLOTS     logical slots (default 20)
#   PGSNAP_BENCH_SCRAPES   repeated scrapes (default 5)
#   PGSNAP_BENCH_SUBSETS   slot counts of the last part, largest first (default "SLOTS 5 1"; with
#                          only SLOTS, every slot is kept, e.g. to compare builds afterwards)
#   PGSNAP_BENCH_MAJOR     PostgreSQL tree .pg/MAJOR (default 18)
#   PGSNAP_BENCH_PORT      port (default 55432)
#   PGSNAP_BENCH_CLIENTS   pgbench clients (default 8)
#   PGSNAP_BENCH_RELEASE=1 benchmark a --release build of the work tree; default: the build
#                          installed in .pg/MAJOR (scripts/setup.sh installs release builds)
#   PGSNAP_BENCH_KEEP=1    leave the cluster running afterwards
#   PGSNAP_BENCH_WATCHER=0 leave out the watcher's TPS cost
#   PGSNAP_BENCH_ROUNDS    rounds of each mode of the watcher's bench (its default: 200)
#   PGSNAP_BENCH_BEST_OF   interleaved CPU-time tries of the floor and of a new session's
#                          first scrape (default 5)
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
# Preloaded: the slots' replays are kept in shared memory (the watcher stays idle).
bench_fresh_cluster <<EOF
max_replication_slots = $((SLOTS + 10))
shared_preload_libraries = 'pg_snapbuild'
pg_snapbuild.log_waits_after = 0
pg_snapbuild.log_holds_after = 0
pg_snapbuild.log_loss_within = 0
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
# a new session resuming the shared replays, then one that keeps its own (a full replay)
UNSHARED="-c pg_snapbuild.shared_state=off"
T0=$(date +%s.%N)
SHARED_BYTES=$(q "SELECT sum(replayed_bytes) FROM snapbuild_slot_health")
T1=$(date +%s.%N)
SHARED_S=$(python3 -c "print(f'{$T1 - $T0:.3f}')")
T0=$(date +%s.%N)
NEW_BYTES=$(PGOPTIONS=$UNSHARED q "SELECT sum(replayed_bytes) FROM snapbuild_slot_health")
T1=$(date +%s.%N)
NEW_S=$(python3 -c "print(f'{$T1 - $T0:.3f}')")

# ---- the floor: pg_waldump --stats over the oldest slot's WAL ------------------------------
timed() { # prints the wall seconds of "$@" (its output discarded)
    local t0 t1
    t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.3f}')"
}
OLDEST=$(q "SELECT min(restart_lsn) FROM pg_replication_slots")
FLUSH=$(q "SELECT pg_current_wal_flush_lsn()")
FLOOR_BYTES=$(lsn_diff "$OLDEST" "$FLUSH")
FLOOR_S=$(timed "$BIN/pg_waldump" --stats -p "$DATA/pg_wal" -s "$OLDEST" -e "$FLUSH")
say "pg_waldump --stats from the oldest restart_lsn: $FLOOR_S s over $((FLOOR_BYTES / 1048576)) MiB"

# ---- CPU time, interleaved: the floor and a new session's first scrape ---------------------
# BEST_OF tries of each, alternating, over the same WAL: pg_waldump --stats over the oldest
# slot's WAL (its rusage) and the first scrape of a new session of its own (every slot
# replayed from its restart_lsn; the backend's utime + stime from /proc around the
# statement). CPU time is what a machine others share inflates least; each figure is the
# least of its tries, and each try's ratio is its scrape over the floor measured just before.
BEST_OF=${PGSNAP_BENCH_BEST_OF:-5}
: >"$W/cpu.out"
for try in $(seq 1 "$BEST_OF"); do
    FLUSH=$(q "SELECT pg_current_wal_flush_lsn()")
    read -r fw _ _ fc <<<"$(python3 "$BENCH_LIB/rusage.py" /dev/null "$BIN/pg_waldump" --stats -p "$DATA/pg_wal" -s "$OLDEST" -e "$FLUSH")"
    sc=$(PGOPTIONS=$UNSHARED psql -X -q -At -v ON_ERROR_STOP=1 <<'SQL'
SELECT pg_backend_pid() AS pid \gset
\setenv BENCH_PID :pid
SELECT clock_timestamp() AS t0 \gset
\! awk '{ print $14 + $15 }' "/proc/$BENCH_PID/stat" >"$BENCH_SAMPLES.cpu0"
SELECT count(*) AS n FROM snapbuild_slot_health \gset
\! awk '{ print $14 + $15 }' "/proc/$BENCH_PID/stat" >"$BENCH_SAMPLES.cpu1"
SELECT extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) AS secs \gset
\echo :n :secs
SQL
)
    read -r sn sw <<<"$sc"
    scpu=$(awk -v t="$(getconf CLK_TCK)" 'NR == 1 { a = $1 } NR == 2 { printf "%.2f", ($1 - a) / t }' \
        "$BENCH_SAMPLES.cpu0" "$BENCH_SAMPLES.cpu1")
    echo "cpu $try $sn $fw $fc $sw $scpu" | tee -a "$W/cpu.out"
done

# ---- snapbuild_diagnose on the oldest slot: a new session, then again in it ---------------
OLDEST_SLOT=$(q "SELECT slot_name FROM pg_replication_slots ORDER BY restart_lsn LIMIT 1")
{
    echo "SELECT extract(epoch FROM clock_timestamp()) AS t0 \\gset"
    echo "SELECT count(*) AS n FROM snapbuild_diagnose('$OLDEST_SLOT') \\gset"
    echo "SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 4) AS dt \\gset"
    echo "\\echo diagnose first :dt"
    echo "SELECT extract(epoch FROM clock_timestamp()) AS t0 \\gset"
    echo "SELECT count(*) AS n FROM snapbuild_diagnose('$OLDEST_SLOT') \\gset"
    echo "SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 4) AS dt \\gset"
    echo "\\echo diagnose again :dt"
} | PGOPTIONS=$UNSHARED psql -X -q -At -v ON_ERROR_STOP=1 >"$W/diagnose.out"
{
    echo "SELECT extract(epoch FROM clock_timestamp()) AS t0 \\gset"
    echo "SELECT count(*) AS n FROM snapbuild_diagnose('$OLDEST_SLOT') \\gset"
    echo "SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 4) AS dt \\gset"
    echo "\\echo diagnose shared :dt"
} | psql -X -q -At -v ON_ERROR_STOP=1 >>"$W/diagnose.out"
cat "$W/diagnose.out"

# ---- a scrape after about 100 MiB more WAL, same session ----------------------------------
{
    echo "SELECT count(*) FROM snapbuild_slot_health \\gset"
    echo "\\! pgbench -n -c $CLIENTS -j 2 -T 600 >/dev/null 2>&1 & p=\$!; s=\$(psql -X -At -c 'SELECT pg_current_wal_lsn()'); while [ \$(psql -X -At -c \"SELECT (pg_current_wal_lsn() - '\$s'::pg_lsn)::bigint\") -lt 104857600 ]; do sleep 0.5; done; kill \$p; wait \$p 2>/dev/null; true"
    echo "SELECT extract(epoch FROM clock_timestamp()) AS t0 \\gset"
    echo "SELECT sum(replayed_bytes) AS b FROM snapbuild_slot_health \\gset"
    echo "SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 4) AS dt \\gset"
    echo "\\echo after100 :b :dt"
} | psql -X -q -At -v ON_ERROR_STOP=1 >"$W/after100.out"
cat "$W/after100.out"

# ---- first scrapes of a new session with 20, 5 and 1 slots over the same WAL ---------------
# Slots are dropped from the newest; the oldest (and so the WAL) stays.
: >"$W/subsets.out"
for keep in ${PGSNAP_BENCH_SUBSETS:-$SLOTS 5 1}; do
    [ "$keep" -le "$SLOTS" ] || continue
    # keep the oldest slot and the newest keep-1 of the others
    q "SELECT pg_drop_replication_slot(slot_name) FROM (SELECT slot_name, row_number() OVER (ORDER BY restart_lsn) AS r, count(*) OVER () AS n FROM pg_replication_slots) s WHERE r > 1 AND r <= n - ($keep - 1)" >/dev/null
    FLUSH=$(q "SELECT pg_current_wal_flush_lsn()")
    FB=$(lsn_diff "$OLDEST" "$FLUSH")
    FS=$(timed "$BIN/pg_waldump" --stats -p "$DATA/pg_wal" -s "$OLDEST" -e "$FLUSH")
    T0=$(date +%s.%N)
    B=$(PGOPTIONS=$UNSHARED q "SELECT sum(replayed_bytes) FROM snapbuild_slot_health")
    T1=$(date +%s.%N)
    PGOPTIONS="$UNSHARED -c pg_snapbuild.join_replays=off" q "SELECT sum(replayed_bytes) FROM snapbuild_slot_health" >/dev/null
    T2=$(date +%s.%N)
    n=$(q "SELECT count(*) FROM pg_replication_slots")
    echo "subset $n $B $(python3 -c "print(f'{$T1 - $T0:.3f} {$T2 - $T1:.3f}')") $FB $FS" | tee -a "$W/subsets.out"
done

python3 - "$W" "$TRACE_BYTES" "$TRACE_S" "$RETAINED" "$NEW_BYTES" "$NEW_S" "$SLOTS" "$IDLE_ANON_KIB" "$FLOOR_BYTES" "$FLOOR_S" "$SHARED_BYTES" "$SHARED_S" <<'PY'
import json, sys
w, trace_bytes, trace_s, retained, new_bytes, new_s, slots, idle_anon, floor_bytes, floor_s, shared_bytes, shared_s = sys.argv[1:]
trace_bytes, retained, new_bytes, slots, idle_anon, floor_bytes, shared_bytes = map(int, (trace_bytes, retained, new_bytes, slots, idle_anon, floor_bytes, shared_bytes))
trace_s, new_s, floor_s, shared_s = float(trace_s), float(new_s), float(floor_s), float(shared_s)
diag = {p.split()[1]: float(p.split()[2]) for p in open(f"{w}/diagnose.out") if p.startswith("diagnose ")}
after100 = [dict(replayed_bytes=int(p.split()[1]), wall_s=float(p.split()[2])) for p in open(f"{w}/after100.out") if p.startswith("after100 ")]
subsets = [dict(slots=int(a[1]), replayed_bytes=int(a[2]), wall_s=float(a[3]), unjoined_wall_s=float(a[4]), floor_bytes=int(a[5]), floor_s=float(a[6]))
           for a in (p.split() for p in open(f"{w}/subsets.out")) if a[:1] == ["subset"]]
scrapes, peaks = [], None
for line in open(f"{w}/scrapes.out"):
    p = line.split()
    if p[:1] == ["scrape"]:
        scrapes.append({"scrape": p[1], "slots": int(p[2]), "replayed_bytes": int(p[3]), "wall_s": float(p[4])})
    elif len(p) == 4 and all(x.isdigit() for x in p):  # sample.py: vmrss anon file shmem
        peaks = {"peak_rss_kib": int(p[0]), "peak_anon_kib": int(p[1])}
cpu = [dict(try_=int(a[1]), slots=int(a[2]), floor_wall_s=float(a[3]), floor_cpu_s=float(a[4]), scrape_wall_s=float(a[5]), scrape_cpu_s=float(a[6]))
       for a in (p.split() for p in open(f"{w}/cpu.out")) if a[:1] == ["cpu"]]
rate = trace_bytes / trace_s
first = scrapes[0]
res = {
    "slots": slots,
    "retained_bytes": retained,
    "trace": {"bytes": trace_bytes, "wall_s": trace_s, "mib_per_s": rate / 1048576},
    "first_scrape": dict(first, ratio_to_floor=first["wall_s"] / floor_s),
    "repeated_scrapes": scrapes[1:],
    "new_session_scrape": {"replayed_bytes": new_bytes, "wall_s": new_s},
    "new_session_shared_scrape": {"replayed_bytes": shared_bytes, "wall_s": shared_s},
    "floor_pg_waldump_stats": {"bytes": floor_bytes, "wall_s": floor_s},
    "diagnose_oldest_slot": {"new_session_s": diag.get("first"), "again_s": diag.get("again"),
                             "new_session_shared_s": diag.get("shared")},
    "scrape_after_100_mib": after100[0] if after100 else None,
    "new_session_by_slot_count": subsets,
    "cpu_interleaved": cpu,
    "monitoring_backend": dict(peaks or {}, idle_anon_kib=idle_anon),
}
json.dump(res, open(f"{w}/result.json", "w"), indent=2)
print(f"trace rate: {rate / 1048576:.0f} MiB/s over {trace_bytes / 1048576:.0f} MiB")
print(f"first scrape: {first['slots']} slots, {first['replayed_bytes'] / 1048576:.0f} MiB taken by the replays in all, in {first['wall_s']:.2f} s "
      f"({first['wall_s'] / floor_s:.2f}x pg_waldump --stats over the oldest slot's WAL)")
for s in scrapes[1:]:
    print(f"repeated scrape {s['scrape']}: {s['wall_s'] * 1000:.1f} ms, {s['replayed_bytes'] / 1024:.0f} KiB replayed")
print(f"new session resuming the shared replays: {shared_s * 1000:.1f} ms, {shared_bytes / 1024:.0f} KiB replayed")
print(f"new session, replays of its own: {new_s:.2f} s, {new_bytes / 1048576:.0f} MiB replayed "
      f"({new_s / floor_s:.2f}x pg_waldump --stats over the oldest slot's {floor_bytes / 1048576:.0f} MiB: {floor_s:.2f} s)")
print(f"snapbuild_diagnose on the oldest slot: new session of its own {diag.get('first', 0):.2f} s, again {diag.get('again', 0) * 1000:.1f} ms; "
      f"new session resuming the shared replays {diag.get('shared', 0) * 1000:.1f} ms")
if after100:
    print(f"scrape after 100 MiB more WAL, same session: {after100[0]['wall_s']:.2f} s, {after100[0]['replayed_bytes'] / 1048576:.0f} MiB taken in all")
for s_ in subsets:
    print(f"new session, {s_['slots']:2d} slots: {s_['wall_s']:.2f} s ({s_['wall_s'] / s_['floor_s']:.2f}x pg_waldump --stats: {s_['floor_s']:.2f} s over {s_['floor_bytes'] / 1048576:.0f} MiB); "
          f"join_replays off: {s_['unjoined_wall_s']:.2f} s")
if len(subsets) > 1 and subsets[-1]["slots"] == 1:
    most, one = subsets[0], subsets[-1]
    print(f"{most['slots']} slots / 1 slot: {most['wall_s'] / one['wall_s']:.2f}x (join_replays off: {most['unjoined_wall_s'] / one['unjoined_wall_s']:.2f}x)")
if cpu:
    least_f = min(c["floor_cpu_s"] for c in cpu)
    least_s = min(c["scrape_cpu_s"] for c in cpu)
    print(f"CPU, {len(cpu)} interleaved tries: floor {least_f:.2f} s, first scrape of a new session ({cpu[0]['slots']} slots) "
          f"{least_s:.2f} s (least of each: {least_s / least_f:.2f}x); per try: "
          + ", ".join(f"{c['scrape_cpu_s'] / c['floor_cpu_s']:.2f}x" for c in cpu if c["floor_cpu_s"]))
if peaks:
    print(f"monitoring backend: peak RssAnon {peaks['peak_anon_kib'] / 1024:.1f} MiB (idle {idle_anon / 1024:.1f} MiB)")
worst = max((s["wall_s"] for s in scrapes[1:]), default=0)
print(f"goal: repeated scrapes < 100 ms: {'met' if worst < 0.1 else 'NOT met'} (worst {worst * 1000:.1f} ms)")
PY

# Last, the watcher's TPS cost (scripts/bench_watcher.sh, with its own defaults: its own
# cluster on its own port, about half an hour). This cluster stops first (unless kept), so that
# only pgbench and the watcher share the CPUs there.
if [ "${PGSNAP_BENCH_WATCHER:-1}" = 1 ]; then
    [ "$KEEP" = 1 ] || stop_cluster
    say "the watcher's TPS cost: scripts/bench_watcher.sh"
    env -u PGSNAP_BENCH_PORT -u PGSNAP_BENCH_SLOTS -u PGSNAP_BENCH_CLIENTS -u PGSNAP_BENCH_KEEP \
        "$ROOT/scripts/bench_watcher.sh"
    python3 - "$W/result.json" "$ROOT/.work/bench-watcher/result.json" <<'PY'
import json, sys
health, watcher = sys.argv[1], sys.argv[2]
res, wr = json.load(open(health)), json.load(open(watcher))
res["watcher"] = {k: wr[k] for k in ("slots", "round_s", "watch_interval", "median_tps",
                                     "watcher_cpu_s_per_round", "pair_ratio_median",
                                     "pair_ratio_mean", "pair_ratio_mean_90")}
res["watcher"]["rounds_of_each_mode"] = len(wr["rounds"]) // 2
res["watcher"]["result"] = watcher
json.dump(res, open(health, "w"), indent=2)
PY
fi
