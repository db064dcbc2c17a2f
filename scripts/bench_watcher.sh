#!/usr/bin/env bash
# Benchmark: what the watcher (pg_snapbuild's background worker) costs a busy server. One
# cluster with pg_snapbuild in shared_preload_libraries, PGSNAP_BENCH_SLOTS logical slots nobody
# consumes (every look replays, for all of them, the WAL pgbench wrote since the last look).
# pgbench's simple-update script (-N: TPC-B without the updates of the branch and teller rows,
# whose 10 rows the clients would queue on: TPS swings by a sixth from second to second with
# them) runs in rounds of PGSNAP_BENCH_ROUND_S seconds, the two modes in the order
# idle, watching, watching, idle, ... (so that a drift of the server's speed over the run falls
# on both alike):
#   idle     pg_snapbuild.log_waits_after, log_holds_after and log_loss_within = 0: the
#            watcher only sleeps (as without it);
#   watching log_waits_after = 1s, log_holds_after = 1s, log_loss_within = 1h (its default),
#            watch_interval = PGSNAP_BENCH_INTERVAL (default 1s).
# Short rounds, because this machine's speed moves in steps of several percent every few
# seconds whatever runs on it: the shorter the rounds, the likelier both rounds of a pair fall
# on the same step. After each switch the script waits a second before the round starts: on
# entering "watching", the watcher's first look replays the WAL written while it slept, in that
# second, so a round counts only the looks at its own WAL. A 1 s watch_interval puts three looks
# in each 3 s round; it is five times the default's rate, so the fixed part of a look's cost
# (what a look costs with no WAL to read) weighs five times what it does by default: the cost
# measured is an upper bound of the default's.
# Commits do not wait for the disk (synchronous_commit = off): TPS is bound by the CPUs, the
# resource the watcher shares, and not by fsync times, whose spread would hide it.
# Reports, in one run, each round's TPS and the watcher's CPU time (utime + stime from /proc),
# the median TPS of each mode and their ratio, the mean of the rounds' pair ratios with a 90 %
# bootstrap interval, and whether that interval shows the cost under 2 % (its low end at or
# above 0.98: one-sided, 95 % sure). Writes
# .work/bench-watcher/result.json. See docs/benchmarks.md "The watcher's cost".
#
# Environment:
#   PGSNAP_BENCH_SLOTS     logical slots held (default 5)
#   PGSNAP_BENCH_ROUNDS    rounds of each mode (default 200)
#   PGSNAP_BENCH_ROUND_S   seconds per round (default 3)
#   PGSNAP_BENCH_INTERVAL  watch_interval while watching (default 1s)
#   PGSNAP_BENCH_CLIENTS   pgbench clients (default 4)
#   PGSNAP_BENCH_MAJOR     PostgreSQL tree .pg/MAJOR (default 18)
#   PGSNAP_BENCH_PORT      port (default 55434)
#   PGSNAP_BENCH_PLACEBO=1 an A/A run: the "watching" rounds are idle too, so the result shows
#                          what the bench reports when there is no difference (its own bias
#                          and spread)
#   PGSNAP_BENCH_RELEASE=1 benchmark a --release build of the work tree
#   PGSNAP_BENCH_KEEP=1    leave the cluster running afterwards
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLOTS=${PGSNAP_BENCH_SLOTS:-5}
ROUNDS=${PGSNAP_BENCH_ROUNDS:-200}
ROUND_S=${PGSNAP_BENCH_ROUND_S:-3}
INTERVAL=${PGSNAP_BENCH_INTERVAL:-1s}
CLIENTS=${PGSNAP_BENCH_CLIENTS:-4}
MAJOR=${PGSNAP_BENCH_MAJOR:-18}
PORT=${PGSNAP_BENCH_PORT:-55434}
W_LABEL=.work/bench-watcher
W=$ROOT/$W_LABEL
. "$ROOT/scripts/bench/common.sh"

case $PORT in 5541[4-8]) echo "port $PORT belongs to the test clusters; pick another PGSNAP_BENCH_PORT" >&2; exit 2 ;; esac
[ -x "$BIN/pgbench" ] || { echo "no pgbench in $BIN: run scripts/setup.sh" >&2; exit 1; }

bench_copy_tree

# No checkpoint, no autovacuum and no eviction of pgbench's pages during the rounds: any of
# them, falling on some rounds and not others, would move their TPS far more than the watcher
# does.
bench_fresh_cluster <<EOF
shared_buffers = 1GB
max_replication_slots = $((SLOTS + 10))
checkpoint_timeout = 1h
max_wal_size = 20GB
autovacuum = off
synchronous_commit = off
shared_preload_libraries = 'pg_snapbuild'
pg_snapbuild.log_waits_after = 0
pg_snapbuild.log_holds_after = 0
pg_snapbuild.log_loss_within = 0
EOF
q "CREATE EXTENSION pg_snapbuild" >/dev/null

WATCHER=
for _ in $(seq 1 100); do
    WATCHER=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_snapbuild watcher'")
    [ -n "$WATCHER" ] && break
    sleep 0.1
done
[ -n "$WATCHER" ] || { echo "the watcher did not start; see $LOG" >&2; exit 1; }
say "watcher pid $WATCHER"

say "pgbench -i -s 10; $SLOTS slots"
pgbench -i -q -s 10 >"$W/pgbench-init.log" 2>&1 || { cat "$W/pgbench-init.log" >&2; exit 1; }
for i in $(seq 1 "$SLOTS"); do
    q "SELECT pg_create_logical_replication_slot('watch_$i', 'test_decoding')" >/dev/null
done
q "VACUUM ANALYZE" >/dev/null
q "CHECKPOINT" >/dev/null

cpu_ticks() { awk '{print $14 + $15}' "/proc/$WATCHER/stat"; }
PLACEBO=${PGSNAP_BENCH_PLACEBO:-0}
mode() { # idle | watching
    if [ "$1" = idle ] || [ "$PLACEBO" = 1 ]; then
        q "ALTER SYSTEM SET pg_snapbuild.log_waits_after = 0" >/dev/null
        q "ALTER SYSTEM SET pg_snapbuild.log_holds_after = 0" >/dev/null
        q "ALTER SYSTEM SET pg_snapbuild.log_loss_within = 0" >/dev/null
    else
        q "ALTER SYSTEM SET pg_snapbuild.log_waits_after = '1s'" >/dev/null
        q "ALTER SYSTEM SET pg_snapbuild.log_holds_after = '1s'" >/dev/null
        q "ALTER SYSTEM SET pg_snapbuild.log_loss_within = '1h'" >/dev/null
        q "ALTER SYSTEM SET pg_snapbuild.watch_interval = '$INTERVAL'" >/dev/null
    fi
    q "SELECT pg_reload_conf()" >/dev/null
    sleep 1
}

HZ=$(getconf CLK_TCK)
: >"$W/rounds.tsv"
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="idle watching"; else order="watching idle"; fi
    for m in $order; do
        mode "$m"
        c0=$(cpu_ticks)
        tps=$(pgbench -n -N -M prepared -c "$CLIENTS" -j 2 -T "$ROUND_S" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        c1=$(cpu_ticks)
        wal=$(q "SELECT pg_current_wal_lsn()")
        printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$m" "$tps" "$(python3 -c "print(($c1 - $c0) / $HZ)")" "$wal" >>"$W/rounds.tsv"
        printf '    round %d %-8s %8s TPS, watcher CPU %s s\n' "$r" "$m" "$tps" "$(python3 -c "print(($c1 - $c0) / $HZ)")"
    done
done
mode idle
[ "$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_snapbuild watcher'")" = "$WATCHER" ] ||
    { echo "the watcher restarted during the run; see $LOG" >&2; exit 1; }

python3 - "$W/rounds.tsv" "$ROUND_S" "$SLOTS" "$INTERVAL" "$W/result.json" "$PLACEBO" <<'PY'
import json, random, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
round_s, slots, interval, out = float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
placebo = sys.argv[6] == "1"
if placebo:
    print("A/A run (PGSNAP_BENCH_PLACEBO=1): the 'watching' rounds were idle too")
by = {m: [(float(t), float(c)) for _, mm, t, c, _ in rows if mm == m] for m in ("idle", "watching")}
med = {m: statistics.median(t for t, _ in v) for m, v in by.items()}
cpu = {m: statistics.median(c for _, c in v) for m, v in by.items()}
ratio = med["watching"] / med["idle"]
# Each round's pair (the two modes back to back): how far the noise reaches.
pairs = sorted(float(w[2]) / float(i[2]) for i in rows if i[1] == "idle"
               for w in rows if w[1] == "watching" and w[0] == i[0])
# The cost as the mean pair ratio, and how sure: a 90 % interval from 10 000 resamples.
rng = random.Random(1)
boot = sorted(statistics.fmean(rng.choices(pairs, k=len(pairs))) for _ in range(10000))
pm, lo, hi = statistics.fmean(pairs), boot[500], boot[9499]
res = {"placebo": placebo, "slots": slots, "round_s": round_s, "watch_interval": interval, "rounds": rows,
       "median_tps": med, "watcher_cpu_s_per_round": cpu, "tps_ratio": ratio,
       "pair_ratios": pairs, "pair_ratio_median": statistics.median(pairs), "pair_ratio_mean": pm,
       "pair_ratio_mean_90": [lo, hi]}
json.dump(res, open(out, "w"), indent=2)
print(f"median TPS: idle {med['idle']:.0f}, watching {med['watching']:.0f}: {100 * (1 - ratio):.1f} % fewer")
print(f"watching / idle, round by round: {', '.join(f'{p:.3f}' for p in pairs)}")
print(f"watcher CPU per {round_s:.0f} s round: idle {cpu['idle']:.2f} s, watching {cpu['watching']:.2f} s "
      f"({100 * cpu['watching'] / round_s:.1f} % of one CPU)")
print(f"pair ratios: median {statistics.median(pairs):.3f}, mean {pm:.3f} (90 % interval {lo:.3f} to {hi:.3f}): "
      f"{100 * (1 - pm):.1f} % fewer TPS (interval {100 * (1 - hi):.1f} to {100 * (1 - lo):.1f} %)")
verdict = "met" if lo >= 0.98 else ("not met" if hi < 0.98 else "not shown (the interval reaches past 2 %)")
print(f"goal (<= 2 % fewer TPS): {verdict}")
PY
