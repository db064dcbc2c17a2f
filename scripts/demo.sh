#!/usr/bin/env bash
# The demo (README, "Two commands"): create a logical slot on PostgreSQL 18 while other sessions hold transactions
# open, so that the snapshot builder goes START -> BUILDING -> FULL -> CONSISTENT (branches c-1,
# c-2, c-3); while it hangs, snapbuild_diagnose names the sessions it waits for, the watcher (the
# background worker) writes them to the server log unasked, and the creation finishes once they commit. Then decode a little so .snap files exist, and show pg_snapbuild's
# verdicts beside the server's own LOG lines. Safe to re-run. Leaves the cluster running
# (`scripts/cluster.sh stop MAJOR` with MAJOR=18 stops it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
D=$ROOT/.work/demo
MAJOR=18
PGSNAP_MAJORS=$MAJOR "$ROOT/scripts/setup.sh"   # builds and installs only what the demo runs
"$ROOT/scripts/cluster.sh" start "$MAJOR"
eval "$("$ROOT/scripts/cluster.sh" env "$MAJOR")"
# The watcher (a background worker) needs the library preloaded: a cluster started before the
# extension was installed is restarted once.
if [ "$(psql -X -At -c 'SHOW shared_preload_libraries')" != pg_snapbuild ]; then
    "$ROOT/scripts/cluster.sh" stop "$MAJOR" >/dev/null
    "$ROOT/scripts/cluster.sh" start "$MAJOR"
fi
rm -rf "$D"; mkdir -p "$D"

say() { printf '==> %s\n' "$*"; }
sql() { psql -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }
log_since() { { tail -c +$(($1 + 1)) "$PGSNAP_LOG" || true; } | head -c "${2:-999999999}"; }  # FROM [LENGTH]
# wait_until WHAT CMD...: poll CMD for up to 60 s
wait_until() {
    local what=$1 i; shift
    for ((i = 0; i < 600; i++)); do "$@" && return 0; sleep 0.1; done
    echo "timed out waiting for $what; session output:" >&2; tail -n 5 "$D"/*.out >&2; exit 1
}
log_has() { log_since "$OFF" | grep "$1" >/dev/null; }
sql_true() { [ "$(sql "$1")" = t ]; }
xid_of() { sql "SELECT backend_xid FROM pg_stat_activity WHERE application_name = 'demo_$1'"; }
has_xid() { [ -n "$(xid_of "$1")" ]; }
show_log() { log_since "$@" | awk '/logical decoding found|starting logical decoding/ {print "    " $0; d=1; next}
                                   d && /DETAIL/ {print "    " $0} {d=0}'; }

# Background sessions; all of them are ended on exit.
bg=()
cleanup() {
    exec 3>&- 2>/dev/null || true; for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
    psql -X -q -c "ALTER SYSTEM RESET pg_snapbuild.log_waits_after" -c "ALTER SYSTEM RESET pg_snapbuild.watch_interval" \
        -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "resetting the demo: extension, slot, leftover sessions, table"
sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
     WHERE application_name LIKE 'demo\_%' AND pid <> pg_backend_pid()" >/dev/null
wait_until "old demo sessions to end" sql_true "SELECT count(*) = 0 FROM pg_replication_slots
     WHERE slot_name = 'demo_slot' AND active_pid IS NOT NULL"
sql "SELECT pg_drop_replication_slot('demo_slot') FROM pg_replication_slots WHERE slot_name = 'demo_slot'" >/dev/null
sql "CHECKPOINT"   # removes .snap files no slot needs any more
psql -X -q -v ON_ERROR_STOP=1 <<'SQL'
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_snapbuild;
CREATE EXTENSION pg_snapbuild;
CREATE EXTENSION IF NOT EXISTS pg_logicalinspect;
DROP TABLE IF EXISTS demo_t;
CREATE TABLE demo_t (id int PRIMARY KEY, note text);
SQL

# The controller session holds advisory locks 1..5; session k keeps its transaction open until
# the controller releases lock k. No sleeps: every step waits for what it needs.
mkfifo "$D/ctl.fifo"
PGAPPNAME=demo_ctl psql -X -q -v ON_ERROR_STOP=1 <"$D/ctl.fifo" >"$D/ctl.out" 2>&1 &
bg+=($!)
exec 3>"$D/ctl.fifo"
echo "SELECT pg_advisory_lock(k) FROM generate_series(1, 5) k;" >&3
wait_until "controller locks" sql_true "SELECT count(*) = 5 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
     WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'demo_ctl'"

declare -A pid
hold() { # NAME KEY: open a transaction with an xid, keep it open until lock KEY is released
    PGAPPNAME=demo_$1 psql -X -q -At -v ON_ERROR_STOP=1 >"$D/$1.out" 2>&1 3>&- <<SQL &
BEGIN;
SELECT pg_current_xact_id();
SELECT pg_advisory_lock_shared($2);
COMMIT;
SQL
    pid[$1]=$!; bg+=($!)
    wait_until "session $1 to get an xid" has_xid "$1"
}
release() { echo "SELECT pg_advisory_unlock($2);" >&3; wait "${pid[$1]}"; }
# found TEXT: wait for the server's LOG line "logical decoding found TEXT at X/Y", print X/Y
found() {
    wait_until "\"logical decoding found $1\"" log_has "logical decoding found $1 at"
    log_since "$OFF" | grep -o "logical decoding found $1 at [0-9A-F/]*" | tail -n 1 | awk '{print $NF}'
}
show() { echo; say "$1"; psql -X -q -x -v ON_ERROR_STOP=1 -c "$2"; }

say "the watcher logs a slot creation that waits 2 s or more (pg_snapbuild.log_waits_after, default 10 s)"
psql -X -q -v ON_ERROR_STOP=1 -c "ALTER SYSTEM SET pg_snapbuild.log_waits_after = '2s'" \
    -c "ALTER SYSTEM SET pg_snapbuild.watch_interval = '500ms'" -c "SELECT pg_reload_conf()" >/dev/null
OFF=$(stat -c %s "$PGSNAP_LOG")
hold A 1; hold B 2
say "sessions A and B hold xids $(xid_of A) and $(xid_of B)"

say "creating slot demo_slot (test_decoding) in the background"
PGAPPNAME=demo_create psql -X -q -At -v ON_ERROR_STOP=1 >"$D/create.out" 2>&1 3>&- \
    -c "SELECT lsn FROM pg_create_logical_replication_slot('demo_slot', 'test_decoding')" &
pid[create]=$!; bg+=($!)
echo "    RUNNING_XACTS at $(found "initial starting point") lists A and B: START -> BUILDING (c-1)"

hold C 3
say "session C opens xid $(xid_of C) while the builder is BUILDING"
diagnose="SELECT kind, finding, xid, pid, application_name, state, remedy FROM snapbuild_diagnose('demo_slot')
          WHERE kind LIKE 'creation%' OR kind LIKE 'waiting%'"
show "pg_snapbuild: why does the creation of demo_slot hang? (snapbuild_diagnose names the sessions)" "$diagnose"
echo; say "meanwhile the watcher wrote to the server log, unasked:"
wait_until "the watcher's LOG line" log_has 'creation of logical replication slot "demo_slot" has waited'
log_since "$OFF" | awk '/creation of logical replication slot "demo_slot" has waited/ {p=1; print "    " $0; next}
                        p && /^[0-9]{4}-/ && !/(DETAIL|HINT):/ {exit} p {print "    " $0}'
say "the remedy: A and B commit (the slot's backend waited for them, then logs a RUNNING_XACTS itself)"
release A 1; release B 2
echo "    RUNNING_XACTS at $(found "initial consistent point") lists only C: BUILDING -> FULL (c-2)"
show "pg_snapbuild: what the creation waits for now" "$diagnose"

hold D 4
say "session D opens xid $(xid_of D) after FULL"
say "the remedy: C commits"
release C 3
echo "    RUNNING_XACTS at $(found "consistent point") lists only D, which began after FULL:"
echo "    FULL -> CONSISTENT (c-3), \"There are no old transactions anymore\""
wait "${pid[create]}"
say "slot created; confirmed_flush $(cat "$D/create.out"). D commits"
release D 4
OFF2=$(stat -c %s "$PGSNAP_LOG")

show "pg_snapbuild: the builder re-run over demo_slot's WAL from its restart_lsn, beside the server's verdicts" \
    "SELECT * FROM snapbuild_trace('demo_slot')"

echo; say "decoding: session E open across a RUNNING_XACTS (the consistent decoder serializes a .snap there)"
hold E 5
sql "INSERT INTO demo_t VALUES (1, 'before the snapshot')"
sql "SELECT pg_log_standby_snapshot()" >/dev/null
sql "INSERT INTO demo_t VALUES (2, 'after the snapshot')"   # its commit flushes WAL past the snapshot
release E 5
psql -X -q -v ON_ERROR_STOP=1 -c "SELECT lsn, xid, data FROM pg_logical_slot_get_changes('demo_slot', NULL, NULL)"

say "a peek: the server's decoder restarts at the new restart_lsn and restores the .snap (its LOG line says so)"
sql "SELECT count(*) FROM pg_logical_slot_peek_changes('demo_slot', NULL, NULL)" >/dev/null
show "pg_snapbuild: the trace again; restart_lsn moved to the .snap, and E was running there: branch b restores it, as the peek's decoder did" \
    "SELECT * FROM snapbuild_trace('demo_slot')"
show "pg_snapbuild: .snap files in pg_logical/snapshots" \
    "SELECT * FROM snapbuild_snapshot_files()"
show "the server's own reading of the same files (pg_logicalinspect)" \
    "SELECT f.name, i.* FROM pg_ls_logicalsnapdir() f, pg_get_logical_snapshot_info(f.name) i ORDER BY f.name"
echo; say "server LOG lines during slot creation"; show_log "$OFF" $((OFF2 - OFF))
echo; say "server LOG lines during pg_logical_slot_get_changes"; show_log "$OFF2"
echo
say "cluster left running: eval \"\$(scripts/cluster.sh env $MAJOR)\"; psql   --   to stop it: scripts/cluster.sh stop $MAJOR"
