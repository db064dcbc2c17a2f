#!/usr/bin/env bash
# Benchmark: what one look of the watcher (pg_snapbuild's background worker) costs on a hot
# standby that holds 20 logical slots of three kinds. A primary and its hot standby (made with
# pg_basebackup -R -C -S, hot_standby_feedback = on, sync_replication_slots = on on the
# standby, synchronized_standby_slots on the primary naming the standby's physical slot), both
# with pg_snapbuild in shared_preload_libraries. The standby's watcher sees:
#   5 temporary synced copies  failover slots of the primary (failover => true) that the slot
#                              sync worker copies but keeps temporary: made before the
#                              ordinary slots below and followed by a transaction, their
#                              catalog_xmin is older than the standby's horizon, and nobody
#                              consumes them (a prepared transaction on the primary stays
#                              open too, as in scripts/troubleshooting.sh incident 8);
#   3 invalidated slots        logical slots created on the standby (each creation waits for a
#                              RUNNING_XACTS: the script logs them with pg_log_standby_snapshot()
#                              on the primary), then invalidated (wal_removed) by the
#                              standby's restartpoints under max_slot_wal_keep_size = 1MB
#                              (reset afterwards); made first, so that no other slot exists
#                              when the standby gives up WAL;
#   12 ordinary slots          logical slots created on the standby (consistent), nobody
#                              consumes them.
# Then the watcher looks every second without writing a line (pg_snapbuild.watch_interval = 1s,
# log_holds_after = 1h, log_waits_after = 0) and, with log_min_messages = debug1, logs each look
# as "pg_snapbuild watcher: look N: S slots in T ms (catalogs A ms, WAL B ms for X bytes,
# judging C ms)". The first look (cold: it replays the backlog, every slot from its
# restart_lsn; small here, the slots are new) runs on an idle primary; then pgbench's simple-update script (-N) runs on the
# primary at a fixed rate (-R) for PGSNAP_BENCH_SECONDS, and the looks in that time (warm: each
# reads only the WAL written since the last) are counted. Reports the cold look's figures and,
# over the warm looks, the count, median, p90 and max of the total and of each part (catalogs,
# WAL, judging) and of the bytes read per look; the same for the primary's watcher (its own 5
# failover slots). Writes .work/bench-look/result.json. See docs/benchmarks.md "The watcher's
# look".
#
# Environment:
#   PGSNAP_BENCH_SECONDS   seconds of write load on the primary (default 60)
#   PGSNAP_BENCH_RATE      pgbench transactions per second (-R; default 50)
#   PGSNAP_BENCH_CLIENTS   pgbench clients (default 2)
#   PGSNAP_BENCH_WAIT      seconds any wait may last before the script gives up (default 120)
#   PGSNAP_BENCH_MAJOR     PostgreSQL tree .pg/MAJOR (default 18; 17 or later: failover slots)
#   PGSNAP_BENCH_PORT      the primary's port (default 55436)
#   PGSNAP_BENCH_SPORT     the standby's port (default 55437)
#   PGSNAP_BENCH_RELEASE=1 benchmark a --release build of the work tree
#   PGSNAP_BENCH_KEEP=1    leave both servers running afterwards (the prepared transaction
#                          that keeps the synced copies temporary stays)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECONDS_LOAD=${PGSNAP_BENCH_SECONDS:-60}
RATE=${PGSNAP_BENCH_RATE:-50}
CLIENTS=${PGSNAP_BENCH_CLIENTS:-2}
WAIT=${PGSNAP_BENCH_WAIT:-120}
MAJOR=${PGSNAP_BENCH_MAJOR:-18}
PORT=${PGSNAP_BENCH_PORT:-55436}
SPORT=${PGSNAP_BENCH_SPORT:-55437}
W_LABEL=.work/bench-look
W=$ROOT/$W_LABEL
. "$ROOT/scripts/bench/common.sh"

# the primary is common.sh's cluster; the standby is this script's own
DATA=$W/primary
SOCK=$W/sock-primary
LOG=$W/primary.log
SDATA=$W/standby
SSOCK=$W/sock-standby
SLOG=$W/standby.log
PHYS=bench_look_standby
N_SYNCED=5
N_LOST=3
N_PLAIN=12

for p in $PORT $SPORT; do
    case $p in 5541[4-8]) echo "port $p belongs to the test clusters; pick another PGSNAP_BENCH_PORT / _SPORT" >&2; exit 2 ;; esac
done
[ "$MAJOR" -ge 17 ] || { echo "PostgreSQL $MAJOR: slot synchronization needs 17 or later" >&2; exit 2; }
[ -x "$BIN/pgbench" ] && [ -x "$BIN/pg_basebackup" ] || { echo "no pgbench / pg_basebackup in $BIN: run scripts/setup.sh" >&2; exit 1; }

fail() { printf 'bench_look.sh: %s (logs: %s, %s)\n' "$*" "$LOG" "$SLOG" >&2; exit 1; }
qs() { psql -X -q -At -v ON_ERROR_STOP=1 -p "$SPORT" -c "$1"; }
qp() { # PORT SQL
    psql -X -q -At -v ON_ERROR_STOP=1 -p "$1" -c "$2"
}

# Waits until SQL on PORT returns t (polling every 0.2 s); fails after WAIT seconds.
wait_for() { # DESCRIPTION PORT SQL
    local deadline=$(( $(date +%s) + WAIT )) v
    while :; do
        v=$(qp "$2" "$3" 2>/dev/null || true)
        [ "$v" = t ] && return 0
        [ "$(date +%s)" -ge "$deadline" ] && fail "timed out after ${WAIT}s waiting for $1"
        sleep 0.2
    done
}

# Waits until the standby replayed the primary's WAL up to its insert position now.
wait_replayed() {
    local lsn
    lsn=$(q "SELECT pg_current_wal_insert_lsn()")
    wait_for "the standby to replay up to $lsn" "$SPORT" "SELECT pg_last_wal_replay_lsn() >= '$lsn'"
}

stop_server() { # DATA
    if [ -f "$1/postmaster.pid" ]; then
        as_pg "$BIN/pg_ctl" -D "$1" -m fast -w -t 120 stop >/dev/null 2>&1 ||
            as_pg "$BIN/pg_ctl" -D "$1" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
    fi
}

declare -a BG_PIDS=()
cleanup() {
    local rc=$?
    set +e
    for pid in "${BG_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
    if [ "$KEEP" = 1 ]; then
        say "servers left running: primary on port $PORT (data: $DATA), standby on port $SPORT (data: $SDATA)"
    else
        stop_server "$SDATA"
        stop_server "$DATA"
    fi
    [ $rc -eq 0 ] || echo "bench_look.sh: failed; logs in $W" >&2
    exit $rc
}

# Creates logical slots NAME... on the standby, each in its own background connection; a
# creation there waits for a RUNNING_XACTS record from the primary: logs one every 0.2 s
# until all returned.
create_on_standby() { # NAME...
    local name pid deadline=$(( $(date +%s) + WAIT )) running
    local -a pids=()
    for name in "$@"; do
        psql -X -q -At -v ON_ERROR_STOP=1 -p "$SPORT" \
            -c "SELECT lsn FROM pg_create_logical_replication_slot('$name', 'test_decoding')" \
            >"$W/create-$name.log" 2>&1 &
        pids+=($!)
        BG_PIDS+=($!)
    done
    while :; do
        running=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
        [ $running = 0 ] && break
        [ "$(date +%s)" -ge "$deadline" ] && fail "the creation of $* on the standby did not return within ${WAIT}s"
        q "SELECT pg_log_standby_snapshot()" >/dev/null
        sleep 0.2
    done
    set -- "$@"
    for pid in "${pids[@]}"; do
        wait "$pid" || fail "a slot creation on the standby failed: $(cat "$W/create-$1.log")"
        shift
    done
    BG_PIDS=()
}

log_offset() { stat -c %s "$1"; }
LOOK_RE='pg_snapbuild watcher: look [0-9]+: [0-9]+ slots in'
watcher_pid() { qp "$1" "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_snapbuild watcher'"; }

# looks on (every second, no lines written, each look logged at DEBUG1) or off (the
# watcher sleeps); on the server at PORT
looks() { # PORT on|off
    if [ "$2" = on ]; then
        qp "$1" "ALTER SYSTEM SET pg_snapbuild.watch_interval = '1s'" >/dev/null
        qp "$1" "ALTER SYSTEM SET pg_snapbuild.log_waits_after = 0" >/dev/null
        qp "$1" "ALTER SYSTEM SET pg_snapbuild.log_holds_after = '1h'" >/dev/null
        qp "$1" "ALTER SYSTEM SET log_min_messages = debug1" >/dev/null
    else
        qp "$1" "ALTER SYSTEM SET pg_snapbuild.log_holds_after = 0" >/dev/null
        qp "$1" "ALTER SYSTEM RESET log_min_messages" >/dev/null
    fi
    qp "$1" "SELECT pg_reload_conf()" >/dev/null
}

# ---------------------------------------------------------------------------------------
# the primary
# ---------------------------------------------------------------------------------------

stop_server "$SDATA" # an earlier run's standby
bench_copy_tree
as_pg rm -rf "$SDATA" "$SSOCK"
# pg_ctl -l appends: an earlier run's lines would be counted
rm -f "$LOG" "$SLOG" "$W"/create-*.log "$W"/looks-*.log "$W"/watcher-problems-*.log "$W/result.json"

# The watcher sleeps during the setup (log_waits_after = 0 and log_holds_after = 0). No
# autovacuum and no timed checkpoint: nothing but the script writes WAL.
bench_fresh_cluster <<EOF
shared_preload_libraries = 'pg_snapbuild'
max_replication_slots = 40
max_wal_senders = 20
max_prepared_transactions = 5
autovacuum = off
checkpoint_timeout = 1h
pg_snapbuild.log_waits_after = 0
pg_snapbuild.log_holds_after = 0
pg_snapbuild.watch_interval = '1s'
EOF
trap cleanup EXIT
trap 'exit 130' INT TERM
say "primary: PostgreSQL $(q "SHOW server_version") on port $PORT"
q "CREATE EXTENSION pg_snapbuild" >/dev/null
q "CREATE TABLE bench_look_hold (i int)" >/dev/null
pgbench -i -q -s 1 >"$W/pgbench-init.log" 2>&1 || { cat "$W/pgbench-init.log" >&2; exit 1; }
q "CHECKPOINT" >/dev/null

# ---------------------------------------------------------------------------------------
# the standby
# ---------------------------------------------------------------------------------------

say "standby: pg_basebackup -R -C -S $PHYS, port $SPORT"
as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$PORT" -U postgres -X stream -c fast -R -C -S "$PHYS" \
    -D "$SDATA" >"$W/basebackup.log" 2>&1 || { cat "$W/basebackup.log" >&2; fail "pg_basebackup failed"; }
# -R writes a primary_conninfo with every option libpq knows: the basic ones only, with
# dbname (the slot sync worker needs it); the settings appended last win over the primary's
as_pg sh -c "grep -v '^primary_conninfo' '$SDATA/postgresql.auto.conf' >'$SDATA/postgresql.auto.conf.new' \
    && mv '$SDATA/postgresql.auto.conf.new' '$SDATA/postgresql.auto.conf'"
as_pg mkdir -p "$SSOCK"
as_pg tee -a "$SDATA/postgresql.conf" >/dev/null <<EOF
# the standby's own
port = $SPORT
unix_socket_directories = '$SSOCK'
hot_standby = on
hot_standby_feedback = on
primary_slot_name = '$PHYS'
primary_conninfo = 'host=127.0.0.1 port=$PORT user=postgres dbname=postgres application_name=$PHYS'
EOF
as_pg "$BIN/pg_ctl" -D "$SDATA" -l "$SLOG" -w -t 120 start >/dev/null ||
    { tail -n 30 "$SLOG" >&2; fail "the standby did not start"; }
wait_for "the standby to stream" "$SPORT" \
    "SELECT count(*) = 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'"
wait_replayed

# ---------------------------------------------------------------------------------------
# the standby's 20 slots
# ---------------------------------------------------------------------------------------

# 1. the slots to invalidate, first: when the standby gives up their WAL, no other slot exists
LOST=$(seq -f 'lost_%g' 1 $N_LOST)
say "standby: $N_LOST logical slots, then invalidated (max_slot_wal_keep_size = 1MB)"
# shellcheck disable=SC2086 # the names, split
create_on_standby $LOST
qs "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'" >/dev/null
qs "SELECT pg_reload_conf()" >/dev/null
wait_for "max_slot_wal_keep_size to apply on the standby" "$SPORT" \
    "SELECT current_setting('max_slot_wal_keep_size') = '1MB'"
LOST_SQL="SELECT count(*) = $N_LOST FROM pg_replication_slots
    WHERE slot_name LIKE 'lost\_%' AND (invalidation_reason IS NOT NULL OR wal_status = 'lost')"
deadline=$(( $(date +%s) + WAIT ))
until [ "$(qs "$LOST_SQL")" = t ]; do
    [ "$(date +%s)" -ge "$deadline" ] &&
        fail "the standby's slots lost_* were not invalidated within ${WAIT}s: $(qs "SELECT string_agg(slot_name || ' ' || coalesce(wal_status, '-') || ' ' || coalesce(invalidation_reason, '-'), ', ') FROM pg_replication_slots")"
    # a segment of WAL and a checkpoint on the primary; the standby's restartpoint at it
    # removes the segments past max_slot_wal_keep_size and invalidates the slots needing them
    q "INSERT INTO bench_look_hold VALUES (0)" >/dev/null
    q "SELECT pg_switch_wal()" >/dev/null
    q "CHECKPOINT" >/dev/null
    wait_replayed
    qs "CHECKPOINT" >/dev/null
done
qs "ALTER SYSTEM RESET max_slot_wal_keep_size" >/dev/null
qs "SELECT pg_reload_conf()" >/dev/null
wait_for "max_slot_wal_keep_size to reset on the standby" "$SPORT" \
    "SELECT current_setting('max_slot_wal_keep_size') = '-1'"

# 2. the failover slots on the primary, and a transaction after them: their catalog_xmin is
# older than any xid the standby's ordinary slots (next) will hold. The slot sync worker gives
# a new copy the standby's oldest safe catalog_xmin (the least of its slots' and its next xid);
# while the remote slot's catalog_xmin is older than that, the copy stays temporary
# (scripts/troubleshooting.sh, incident 8). Ordinary slots made before the failover slots would
# hold the standby's horizon at or below theirs, and the copies would be persisted at once.
say "primary: $N_SYNCED failover slots"
for i in $(seq 1 $N_SYNCED); do
    q "SELECT pg_create_logical_replication_slot('synced_$i', 'test_decoding', failover => true)" >/dev/null
done
q "ALTER SYSTEM SET synchronized_standby_slots = '$PHYS'" >/dev/null
q "SELECT pg_reload_conf()" >/dev/null
q "INSERT INTO bench_look_hold VALUES (1)" >/dev/null

# 3. the ordinary slots: before the prepared transaction below, which a creation would wait for
say "standby: $N_PLAIN ordinary logical slots"
# shellcheck disable=SC2086
create_on_standby $(seq -f 'plain_%g' 1 $N_PLAIN)

# 4. the temporary synced copies
say "primary: a prepared transaction; standby: sync_replication_slots = on"
# a transaction left open past the failover slots' position (prepared: it needs no session):
# it keeps the remote slots behind the standby's horizon while nobody consumes them
q "BEGIN; INSERT INTO bench_look_hold VALUES (2); PREPARE TRANSACTION 'bench_look_hold'" >/dev/null
wait_replayed
qs "ALTER SYSTEM SET sync_replication_slots = on" >/dev/null
qs "SELECT pg_reload_conf()" >/dev/null
wait_for "the slot sync worker" "$SPORT" \
    "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'slotsync worker'"
wait_for "$N_SYNCED temporary synced copies on the standby" "$SPORT" \
    "SELECT count(*) = $N_SYNCED FROM pg_replication_slots WHERE synced AND temporary"

SLOTS_SQL="SELECT json_build_object(
    'logical', count(*) FILTER (WHERE slot_type = 'logical'),
    'synced_temporary', count(*) FILTER (WHERE synced AND temporary),
    'synced_persistent', count(*) FILTER (WHERE synced AND NOT temporary),
    'invalidated', count(*) FILTER (WHERE invalidation_reason IS NOT NULL OR wal_status = 'lost'),
    'invalidated_lost', count(*) FILTER (WHERE slot_name LIKE 'lost\_%'
                                          AND (invalidation_reason IS NOT NULL OR wal_status = 'lost')),
    'ordinary', count(*) FILTER (WHERE slot_type = 'logical' AND NOT synced AND slot_name LIKE 'plain\_%'
                                  AND invalidation_reason IS NULL AND wal_status <> 'lost'))
  FROM pg_replication_slots"
SLOTS_OK="SELECT count(*) FILTER (WHERE slot_type = 'logical') = $((N_SYNCED + N_LOST + N_PLAIN))
    AND count(*) FILTER (WHERE synced AND temporary) = $N_SYNCED
    AND count(*) FILTER (WHERE invalidation_reason IS NOT NULL OR wal_status = 'lost') = $N_LOST
    AND count(*) FILTER (WHERE slot_name LIKE 'lost\_%' AND (invalidation_reason IS NOT NULL OR wal_status = 'lost')) = $N_LOST
  FROM pg_replication_slots"
[ "$(qs "$SLOTS_OK")" = t ] || fail "the standby's slots are not as intended: $(qs "$SLOTS_SQL")"
SLOTS_BEFORE=$(qs "$SLOTS_SQL")
say "standby's slots: $SLOTS_BEFORE"
qs "SELECT slot_name, synced, temporary, wal_status, coalesce(invalidation_reason, '') FROM pg_replication_slots
    ORDER BY slot_name" >"$W/slots-before.txt"

# ---------------------------------------------------------------------------------------
# the looks
# ---------------------------------------------------------------------------------------

S_WATCHER=$(watcher_pid "$SPORT")
P_WATCHER=$(watcher_pid "$PORT")
[ -n "$S_WATCHER" ] || fail "no pg_snapbuild watcher on the standby"
[ -n "$P_WATCHER" ] || fail "no pg_snapbuild watcher on the primary"
say "watchers: standby pid $S_WATCHER, primary pid $P_WATCHER; looks on (every 1 s, logged at DEBUG1)"
s_off=$(log_offset "$SLOG")
p_off=$(log_offset "$LOG")
looks "$SPORT" on
looks "$PORT" on
# the cold look: it replays the backlog (every slot from its restart_lsn), primary idle
deadline=$(( $(date +%s) + WAIT ))
until tail -c +"$((s_off + 1))" "$SLOG" | grep -qE "$LOOK_RE"; do
    [ "$(date +%s)" -ge "$deadline" ] && fail "no look of the standby's watcher logged within ${WAIT}s"
    sleep 0.2
done
say "first look on the standby logged; pgbench -N -R $RATE -c $CLIENTS for $SECONDS_LOAD s on the primary"
lsn0=$(q "SELECT pg_current_wal_lsn()")
pgbench -n -N -M prepared -c "$CLIENTS" -j 1 -R "$RATE" -T "$SECONDS_LOAD" >"$W/pgbench.log" 2>&1 ||
    { cat "$W/pgbench.log" >&2; fail "pgbench failed"; }
lsn1=$(q "SELECT pg_current_wal_lsn()")
s_end=$(log_offset "$SLOG")
p_end=$(log_offset "$LOG")
looks "$SPORT" off
looks "$PORT" off
TPS=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$W/pgbench.log")
WAL_BYTES=$(lsn_diff "$lsn0" "$lsn1")
say "pgbench: $TPS TPS, $WAL_BYTES bytes of WAL"

[ "$(watcher_pid "$SPORT")" = "$S_WATCHER" ] || fail "the standby's watcher restarted during the run"
[ "$(watcher_pid "$PORT")" = "$P_WATCHER" ] || fail "the primary's watcher restarted during the run"
[ "$(qs "$SLOTS_OK")" = t ] || fail "the standby's slots changed during the run: $(qs "$SLOTS_SQL")"
SLOTS_AFTER=$(qs "$SLOTS_SQL")

tail -c +"$((s_off + 1))" "$SLOG" | head -c "$((s_end - s_off))" | grep -E "$LOOK_RE" >"$W/looks-standby.log" || true
tail -c +"$((p_off + 1))" "$LOG" | head -c "$((p_end - p_off))" | grep -E "$LOOK_RE" >"$W/looks-primary.log" || true
# what the watchers logged at WARNING or above, over the whole run
grep -E '(WARNING|ERROR|FATAL|PANIC):.*pg_snapbuild' "$SLOG" >"$W/watcher-problems-standby.log" || true
grep -E '(WARNING|ERROR|FATAL|PANIC):.*pg_snapbuild' "$LOG" >"$W/watcher-problems-primary.log" || true

python3 - "$W" "$SECONDS_LOAD" "$RATE" "$CLIENTS" "$TPS" "$WAL_BYTES" "$BUILD" "$SOURCE" \
    "$(q "SHOW server_version")" "$SLOTS_BEFORE" "$SLOTS_AFTER" <<'PY'
import json, math, os, re, statistics, sys
w, seconds, rate, clients, tps, wal_bytes, build, source, version, before, after = sys.argv[1:]
LINE = re.compile(r"look (\d+): (\d+) slots in ([\d.]+) ms \(catalogs ([\d.]+) ms, WAL ([\d.]+) ms "
                  r"for (\d+) bytes, judging ([\d.]+) ms\)")
PARTS = ("total_ms", "catalogs_ms", "wal_ms", "judging_ms", "bytes")

def looks(path):
    out = []
    for l in open(path):
        m = LINE.search(l)
        if m:
            n, s, t, c, wl, b, j = m.groups()
            out.append({"look": int(n), "slots": int(s), "total_ms": float(t), "catalogs_ms": float(c),
                        "wal_ms": float(wl), "bytes": int(b), "judging_ms": float(j)})
    return out

def p90(v):
    v = sorted(v)
    return v[math.ceil(0.9 * len(v)) - 1]

def summary(ls):
    if not ls:
        return None
    warm = ls[1:]
    res = {"cold": ls[0], "warm_count": len(warm), "slots": sorted({l["slots"] for l in ls})}
    if warm:
        res["warm"] = {k: {"median": statistics.median(l[k] for l in warm), "p90": p90(l[k] for l in warm),
                           "max": max(l[k] for l in warm), "mean": statistics.fmean(l[k] for l in warm)}
                       for k in PARTS}
    return res

res = {"postgres": version, "build": build, "source": source, "load_seconds": int(seconds),
       "pgbench_rate": int(rate), "pgbench_clients": int(clients), "pgbench_tps": float(tps or 0),
       "wal_bytes_during_load": int(wal_bytes), "watch_interval": "1s",
       "standby_slots_before": json.loads(before), "standby_slots_after": json.loads(after)}
for node in ("standby", "primary"):
    ls = looks(os.path.join(w, f"looks-{node}.log"))
    res[node] = summary(ls)
    res[node + "_looks"] = ls
    probs = [l.rstrip("\n") for l in open(os.path.join(w, f"watcher-problems-{node}.log"))]
    res[node + "_watcher_problems"] = probs
json.dump(res, open(os.path.join(w, "result.json"), "w"), indent=2)

if res["standby"] is None or res["standby"]["warm_count"] == 0:
    sys.exit("bench_look.sh: too few looks logged on the standby")
print(f"PostgreSQL {version}, {build} build; pgbench -N -R {rate} -c {clients} for {seconds} s: "
      f"{float(tps or 0):.1f} TPS, {int(wal_bytes)} bytes of WAL")
fmt = lambda x: f"{x:.1f}"
for node in ("standby", "primary"):
    s = res[node]
    if s is None:
        print(f"{node}: no looks logged")
        continue
    c = s["cold"]
    print(f"{node} ({'/'.join(map(str, s['slots']))} slots in the look line):")
    print(f"  cold look {c['look']}: total {fmt(c['total_ms'])} ms (catalogs {fmt(c['catalogs_ms'])}, "
          f"WAL {fmt(c['wal_ms'])} for {c['bytes']} bytes, judging {fmt(c['judging_ms'])})")
    if s["warm_count"]:
        wm = s["warm"]
        print(f"  warm looks: {s['warm_count']}       median     p90     max  (ms)")
        for k, label in (("total_ms", "total"), ("catalogs_ms", "catalogs"), ("wal_ms", "WAL"),
                         ("judging_ms", "judging")):
            print(f"    {label:<10} {wm[k]['median']:>12.1f} {wm[k]['p90']:>7.1f} {wm[k]['max']:>7.1f}")
        b = wm["bytes"]
        print(f"    bytes/look {b['median']:>12.0f} {b['p90']:>7.0f} {b['max']:>7.0f}")
    if res[node + "_watcher_problems"]:
        print(f"  {len(res[node + '_watcher_problems'])} WARNING/ERROR/FATAL lines naming pg_snapbuild in the {node}'s log")
PY
say "wrote $W_LABEL/result.json"
