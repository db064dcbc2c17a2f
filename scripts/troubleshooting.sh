#!/usr/bin/env bash
# Reproduces the incidents of docs/troubleshooting.md on throw-away PostgreSQL clusters and
# writes the page from docs/troubleshooting.md.in with the real outputs pasted in.
#
#   scripts/troubleshooting.sh      (about 90 s; needs scripts/setup.sh's .pg/18 with the extension)
#
# PGSNAP_TS_PGDIR names another PostgreSQL tree (17 or later: failover slots) with the
# extension installed; the default is .pg/18.
#
# A primary on 127.0.0.1:55760 (PGSNAP_TS_PORT) and, for the hot-standby incidents, its standby on 55761 (made
# with pg_basebackup -R), data and logs in .work/troubleshooting/ (made afresh at each run and
# kept afterwards for a look; both servers are stopped when the script ends, also on failure).
# The servers run as the OS user postgres (through sudo -n when run as root).
#
# Each incident is made to happen, the queries of the page run with psql, and their outputs are
# kept in .work/troubleshooting/out/. The steps wait for what the server shows (pg_locks,
# pg_stat_activity, pg_replication_slots, the server log, pg_walinspect), each wait bounded by
# PGSNAP_TS_WAIT seconds (default 60). An incident that does not happen as the page says (a
# finding kind missing, a wait that times out) stops the script with a non-zero exit status
# and leaves the page as it was; otherwise the page is rewritten.
#
# The primary runs with autovacuum off and checkpoint_timeout = 1h, so that nothing but the
# script writes WAL: the standby's slot creation then waits for the primary's next
# RUNNING_XACTS record until the script logs one.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PGDIR=${PGSNAP_TS_PGDIR:-$ROOT/.pg/18}
BIN=$PGDIR/bin
W=$ROOT/.work/troubleshooting
OUT=$W/out
RUN=$W/run
PPORT=${PGSNAP_TS_PORT:-55760}
SPORT=$((PPORT + 1))
PDATA=$W/primary/data
PLOG=$W/primary/server.log
SDATA=$W/standby/data
SLOG=$W/standby/server.log
TEMPLATE=$ROOT/docs/troubleshooting.md.in
PAGE=$ROOT/docs/troubleshooting.md
WAIT=${PGSNAP_TS_WAIT:-60}
T0=$(date +%s)

say() { printf '==> %s\n' "$*"; }
fail() { printf 'troubleshooting.sh: %s\n' "$*" >&2; exit 1; }

# a command as the OS user postgres, from a directory it can read
as_pg() {
    if [ "$(id -un)" = postgres ]; then (cd / && "$@")
    else (cd / && sudo -n -u postgres -- "$@"); fi
}

[ -x "$BIN/pg_ctl" ] || fail "no PostgreSQL in $PGDIR: run scripts/setup.sh"
[ -f "$("$BIN/pg_config" --sharedir)/extension/pg_snapbuild.control" ] \
    || fail "pg_snapbuild is not installed into $PGDIR: run scripts/setup.sh"
major=$("$BIN/pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
[ "$major" -ge 17 ] || fail "PostgreSQL $major in $PGDIR: the failover slot incident needs 17 or later"
[ -f "$TEMPLATE" ] || fail "no template $TEMPLATE"

# ---------------------------------------------------------------------------------------
# servers and sessions
# ---------------------------------------------------------------------------------------

declare -A S_FD=() S_PID=() C_PID=()

stop_server() { # DATA
    if [ -f "$1/postmaster.pid" ]; then
        as_pg "$BIN/pg_ctl" -D "$1" -m fast -w -t 60 stop >/dev/null 2>&1 \
            || as_pg "$BIN/pg_ctl" -D "$1" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
    fi
}

cleanup() {
    local rc=$? name fd
    set +e
    for name in "${!S_FD[@]}"; do fd=${S_FD[$name]}; exec {fd}>&-; done
    for pid in "${S_PID[@]}" "${C_PID[@]}"; do kill "$pid" 2>/dev/null; done
    stop_server "$SDATA"
    stop_server "$PDATA"
    if [ $rc -ne 0 ]; then
        echo "troubleshooting.sh: failed after $(( $(date +%s) - T0 )) s; servers stopped; logs in $W" >&2
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

conninfo() { # PORT [DB] [APPLICATION_NAME]
    echo "host=127.0.0.1 port=$1 user=postgres dbname=${2:-postgres} application_name=${3:-troubleshooting}"
}

# One statement's single value (or rows, one a line, columns separated by |).
q() { # PORT SQL [DB]
    "$BIN/psql" -X -At -v ON_ERROR_STOP=1 -d "$(conninfo "$1" "${3:-postgres}")" -c "$2"
}

# Waits until SQL returns t (polling every 0.1 s); fails after WAIT seconds.
wait_for() { # DESCRIPTION PORT SQL
    local deadline=$(( $(date +%s) + WAIT )) v
    while :; do
        v=$(q "$2" "$3" 2>/dev/null || true)
        [ "$v" = t ] && return 0
        [ "$(date +%s)" -ge "$deadline" ] && fail "timed out after ${WAIT}s waiting for $1"
        sleep 0.1
    done
}

# A psql session kept open (application_name NAME), fed statements through a FIFO; its
# output goes to run/NAME.log.
session_open() { # NAME PORT [DB]
    local name=$1 fifo=$RUN/$1.in fd
    mkfifo "$fifo"
    "$BIN/psql" -X -q -d "$(conninfo "$2" "${3:-postgres}" "$name")" <"$fifo" >"$RUN/$name.log" 2>&1 &
    S_PID[$name]=$!
    exec {fd}>"$fifo"
    S_FD[$name]=$fd
    wait_for "session $name to connect" "$2" \
        "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$name'"
}

session_send() { # NAME SQL
    printf '%s\n' "$2" >&"${S_FD[$1]}"
}

session_close() { # NAME: end of input; psql exits
    local fd=${S_FD[$1]} pid=${S_PID[$1]} deadline=$(( $(date +%s) + WAIT ))
    exec {fd}>&-
    unset "S_FD[$1]"
    while kill -0 "$pid" 2>/dev/null; do
        [ "$(date +%s)" -ge "$deadline" ] && fail "session $1 did not end"
        sleep 0.1
    done
    wait "$pid" 2>/dev/null || true
    unset "S_PID[$1]"
}

# A session NAME holding an open transaction with an xid: BEGIN and SQL (a write), then idle.
open_xact() { # NAME PORT SQL [DB]
    session_open "$1" "$2" "${4:-postgres}"
    session_send "$1" "BEGIN; $3"
    wait_for "session $1 to hold an xid, idle in transaction" "$2" \
        "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$1'
           AND state = 'idle in transaction' AND backend_xid IS NOT NULL"
}

app_pid() { q "$1" "SELECT pid FROM pg_stat_activity WHERE application_name = '$2'"; }
app_xid() { q "$1" "SELECT backend_xid FROM pg_stat_activity WHERE application_name = '$2'"; }

# pg_create_logical_replication_slot(SLOT, 'test_decoding') in the background, as a CDC
# tool's connection (application_name NAME) would run it.
create_in_background() { # NAME PORT SLOT
    timeout -k 5 $(( WAIT * 3 )) "$BIN/psql" -X -P pager=off -v ON_ERROR_STOP=1 -d "$(conninfo "$2" postgres "$1")" \
        -c "SELECT slot_name, lsn FROM pg_create_logical_replication_slot('$3', 'test_decoding')" \
        >"$RUN/$1.out" 2>&1 &
    C_PID[$1]=$!
}

creation_running() { kill -0 "${C_PID[$1]}" 2>/dev/null; }

# Waits until the background creation NAME returned, and checks it succeeded.
creation_returned() { # NAME
    local pid=${C_PID[$1]} deadline=$(( $(date +%s) + WAIT ))
    while kill -0 "$pid" 2>/dev/null; do
        [ "$(date +%s)" -ge "$deadline" ] && fail "the slot creation of $1 did not return within ${WAIT}s"
        sleep 0.1
    done
    wait "$pid" || fail "the slot creation of $1 failed: $(cat "$RUN/$1.out")"
    unset "C_PID[$1]"
}

# Waits until the creating backend NAME waits for a transaction lock (SnapBuildWaitSnapshot).
creator_waits() { # NAME PORT
    wait_for "$1 to wait for a transaction in pg_locks" "$2" \
        "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
           WHERE a.application_name = '$1' AND l.locktype = 'transactionid' AND NOT l.granted)"
}

log_offset() { stat -c %s "$1"; }

# Waits until the server log FILE has a line matching the extended regex PATTERN after OFFSET.
wait_logged() { # DESCRIPTION FILE OFFSET PATTERN
    local deadline=$(( $(date +%s) + WAIT ))
    until tail -c +"$(( $3 + 1 ))" "$2" | grep -qE "$4"; do
        [ "$(date +%s)" -ge "$deadline" ] && fail "timed out after ${WAIT}s waiting for $1 in $2"
        sleep 0.1
    done
}

# ---------------------------------------------------------------------------------------
# the outputs pasted into the page
# ---------------------------------------------------------------------------------------

# Runs SQL with psql and keeps it for the page as out/NAME.sql and out/NAME.out (``@@show
# NAME@@`` in the template). Options: -x expanded display (shown as \x on), -e an ERROR is
# the expected output, -p PORT (default: the primary), -d DB.
show() { # [-x] [-e] [-p PORT] [-d DB] NAME SQL
    local x=0 e=0 port=$PPORT db=postgres
    while :; do
        case $1 in
        -x) x=1; shift ;;
        -e) e=1; shift ;;
        -p) port=$2; shift 2 ;;
        -d) db=$2; shift 2 ;;
        *) break ;;
        esac
    done
    local name=$1 sql=$2 args=(-X -P pager=off -v ON_ERROR_STOP=1)
    [ $x = 1 ] && args+=(-P expanded=on)
    { [ $x = 1 ] && echo '\x on'; printf '%s\n' "$sql"; } >"$OUT/$name.sql"
    if "$BIN/psql" "${args[@]}" -d "$(conninfo "$port" "$db" psql)" -c "$sql" >"$OUT/$name.out" 2>&1; then
        [ $e = 0 ] || fail "$name: an ERROR was expected: $(cat "$OUT/$name.out")"
    else
        [ $e = 1 ] || fail "$name: $(cat "$OUT/$name.out")"
    fi
    # no trailing blanks; an expanded record's header line no longer than 60 characters or
    # its label column (psql draws it as wide as the widest value)
    sed -i -E -e 's/[[:space:]]*$//' \
        -e 's/^(-\[ RECORD [0-9]+ \]-*(\+-{0,20})?)-*$/\1/' \
        -e 's/^(-\[ RECORD [0-9]+ \][-+]{46}).*/\1/' "$OUT/$name.out"
}

# Keeps lines of a server log for the page as out/NAME.out (``@@out NAME@@``): after OFFSET,
# the first COUNT lines matching the extended regex PATTERN, each with the DETAIL / HINT /
# CONTEXT / STATEMENT lines the same process logged right after it.
log_excerpt() { # NAME FILE OFFSET PATTERN [COUNT]
    tail -c +"$(( $3 + 1 ))" "$2" | awk -v pat="$4" -v max="${5:-1}" '
        n < max && $0 ~ pat { print; pid = $4; n++; follow = 1; next }
        follow && $4 == pid && $5 ~ /^(DETAIL|HINT|CONTEXT|STATEMENT):/ { print; next }
        { follow = 0 }' >"$OUT/$1.out"
    [ -s "$OUT/$1.out" ] || fail "$1: no line matching '$4' in $2"
}

# Kept as out/NAME.out (``@@out NAME@@``).
keep() { printf '%s\n' "$2" | sed -e 's/[[:space:]]*$//' >"$OUT/$1.out"; }

# The kinds of snapbuild_diagnose(SLOT), one a line.
kinds() { q "$1" "SELECT kind FROM snapbuild_diagnose('$2')"; }

# Fails unless snapbuild_diagnose(SLOT) has a row of each KIND.
expect_kinds() { # INCIDENT PORT SLOT KIND...
    local what=$1 port=$2 slot=$3 got k
    shift 3
    got=$(kinds "$port" "$slot")
    for k in "$@"; do
        grep -qxF "$k" <<<"$got" \
            || fail "$what did not reproduce: no '$k' row in snapbuild_diagnose('$slot') (kinds: $(paste -sd, <<<"$got"))"
    done
}

# Fails unless SQL returns t.
expect() { # INCIDENT PORT SQL
    [ "$(q "$2" "$3")" = t ] || fail "$1 did not reproduce: false: $3"
}

# A RUNNING_XACTS record, then a committed row (its commit flushes the record), then the
# slot consumed to the end: the candidates proposed at the record are confirmed.
consume_round() { # SLOT
    q $PPORT "SELECT pg_log_standby_snapshot()" >/dev/null
    q $PPORT "INSERT INTO orders (status) VALUES ('round')" >/dev/null
    q $PPORT "SELECT count(*) FROM pg_logical_slot_get_changes('$1', NULL, NULL)" >/dev/null
}

# ---------------------------------------------------------------------------------------
# the primary
# ---------------------------------------------------------------------------------------

say "primary: PostgreSQL $major on 127.0.0.1:$PPORT, data in $W"
stop_server "$SDATA"
stop_server "$PDATA"
as_pg rm -rf "$W/primary" "$W/standby"
rm -rf "$OUT" "$RUN"
mkdir -p "$W" "$OUT" "$RUN"
chown postgres: "$W" 2>/dev/null || true
as_pg mkdir -p "$W/primary/sock" "$W/standby/sock"
initdb_args=(-D "$PDATA" -U postgres --auth=trust -E UTF8 --no-locale)
# no WAL for hint bits (data checksums are on by default from 18 on)
"$BIN/initdb" --help | grep -q -- --no-data-checksums && initdb_args+=(--no-data-checksums)
as_pg "$BIN/initdb" "${initdb_args[@]}" \
    >"$W/primary/initdb.log" 2>&1 || { cat "$W/primary/initdb.log" >&2; fail "initdb failed"; }
echo "include 'troubleshooting.conf'" | as_pg tee -a "$PDATA/postgresql.conf" >/dev/null
as_pg tee "$PDATA/troubleshooting.conf" >/dev/null <<EOF
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
max_prepared_transactions = 10
listen_addresses = '127.0.0.1'
port = $PPORT
unix_socket_directories = '$W/primary/sock'
log_line_prefix = '%m [%p] '
fsync = off
autovacuum = off
checkpoint_timeout = '1h'
EOF
as_pg "$BIN/pg_ctl" -D "$PDATA" -l "$PLOG" -w -t 60 start >/dev/null \
    || { tail -n 30 "$PLOG" >&2; fail "the primary did not start"; }
q $PPORT "CREATE EXTENSION pg_snapbuild" >/dev/null
q $PPORT "CREATE EXTENSION pg_walinspect" >/dev/null
q $PPORT "CREATE TABLE orders (id serial PRIMARY KEY, status text)" >/dev/null
q $PPORT "CREATE DATABASE inventory" >/dev/null
q $PPORT "CREATE TABLE stock (item int PRIMARY KEY, qty int)" inventory >/dev/null
q $PPORT "INSERT INTO stock SELECT g, 10 FROM generate_series(1, 100) g" inventory >/dev/null
keep versions "PostgreSQL $(q $PPORT "SHOW server_version"), pg_snapbuild $(q $PPORT \
    "SELECT extversion FROM pg_extension WHERE extname = 'pg_snapbuild'")"

# The diagnosis of a hung creation, as the page shows it.
DIAG_CREATION="SELECT kind, finding, xid, pid, datname, application_name, state, remedy
FROM snapbuild_diagnose('%s');"

# ---------------------------------------------------------------------------------------
# 1. a hung slot creation on a primary: a session idle in transaction with an xid
# ---------------------------------------------------------------------------------------

say "1. hung creation: a session idle in transaction"
open_xact billing_job $PPORT "INSERT INTO orders (status) VALUES ('open');"
off=$(log_offset "$PLOG")
create_in_background cdc_connector $PPORT cdc_slot
creator_waits cdc_connector $PPORT
wait_logged "the creation's LOG line" "$PLOG" "$off" 'Waiting for transactions'
show h1_activity "SELECT pid, application_name, state, wait_event_type, wait_event, backend_xid,
       left(query, 40) AS query
FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid();"
log_excerpt h1_log "$PLOG" "$off" 'logical decoding found initial starting point'
show -x h1_diag "$(printf "$DIAG_CREATION" cdc_slot)"
show h1_health "SELECT slot_name, state, in_creation, waiting_xids, oldest_blocking_pid
FROM snapbuild_slot_health;"
expect_kinds "1 (hung creation)" $PPORT cdc_slot "creation waiting" "waiting for transaction"
bj_pid=$(app_pid $PPORT billing_job)
bj_xid=$(app_xid $PPORT billing_job)
expect "1 (hung creation)" $PPORT "SELECT EXISTS (SELECT FROM snapbuild_diagnose('cdc_slot')
    WHERE kind = 'waiting for transaction' AND pid = $bj_pid AND xid = '$bj_xid')"
expect "1 (hung creation)" $PPORT "SELECT oldest_blocking_pid = $bj_pid FROM snapbuild_slot_health
    WHERE slot_name = 'cdc_slot'"
# the remedy: the session commits; the creation returns
session_send billing_job "COMMIT;"
creation_returned cdc_connector
session_close billing_job
keep h1_created "$(cat "$RUN/cdc_connector.out")"

# ---------------------------------------------------------------------------------------
# 2. a hung creation blocked by a transaction in another database
# ---------------------------------------------------------------------------------------

say "2. hung creation: a transaction in another database"
open_xact nightly_sync $PPORT "UPDATE stock SET qty = qty - 1 WHERE item = 7;" inventory
create_in_background cdc_connector $PPORT cdc_orders
creator_waits cdc_connector $PPORT
show h2_local "SELECT pid, application_name, state, backend_xid
FROM pg_stat_activity
WHERE datname = current_database() AND state LIKE 'idle in transaction%';"
show -x h2_diag "$(printf "$DIAG_CREATION" cdc_orders)"
expect_kinds "2 (another database)" $PPORT cdc_orders "creation waiting" "waiting for transaction"
ns_pid=$(app_pid $PPORT nightly_sync)
expect "2 (another database)" $PPORT "SELECT EXISTS (SELECT FROM snapbuild_diagnose('cdc_orders')
    WHERE kind = 'waiting for transaction' AND pid = $ns_pid AND datname = 'inventory')"
# the remedy: end that session
show h2_terminate "SELECT pg_terminate_backend($ns_pid);"
creation_returned cdc_connector
session_close nightly_sync
keep h2_created "$(cat "$RUN/cdc_connector.out")"
q $PPORT "SELECT pg_drop_replication_slot('cdc_orders')" >/dev/null

# ---------------------------------------------------------------------------------------
# 3. a hung creation blocked by a prepared transaction
# ---------------------------------------------------------------------------------------

say "3. hung creation: a prepared transaction"
"$BIN/psql" -X -q -v ON_ERROR_STOP=1 -d "$(conninfo $PPORT postgres payment_service)" \
    -c "BEGIN" -c "INSERT INTO orders (status) VALUES ('paid')" \
    -c "PREPARE TRANSACTION 'order-42-payment'" >/dev/null
create_in_background cdc_connector $PPORT cdc_payments
creator_waits cdc_connector $PPORT
show h3_activity "SELECT pid, application_name, state, backend_xid, wait_event_type, wait_event
FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid();"
show h3_prepared "SELECT transaction, gid, prepared, owner, database FROM pg_prepared_xacts;"
show -x h3_diag "SELECT kind, finding, xid, gid, usename, datname, since, remedy
FROM snapbuild_diagnose('cdc_payments');"
expect_kinds "3 (prepared transaction)" $PPORT cdc_payments "creation waiting" "waiting for prepared transaction"
expect "3 (prepared transaction)" $PPORT "SELECT EXISTS (SELECT FROM snapbuild_diagnose('cdc_payments')
    WHERE kind = 'waiting for prepared transaction' AND gid = 'order-42-payment')"
# the remedy: commit (or roll back) the prepared transaction
show h3_commit "COMMIT PREPARED 'order-42-payment';"
creation_returned cdc_connector
keep h3_created "$(cat "$RUN/cdc_connector.out")"
q $PPORT "SELECT pg_drop_replication_slot('cdc_payments')" >/dev/null

# ---------------------------------------------------------------------------------------
# 5. restart_lsn that will not move: a long transaction that wrote WAL
# 6b. the same transaction holds catalog_xmin
# ---------------------------------------------------------------------------------------

say "5. restart_lsn held by a long transaction"
# cdc_slot (incident 1) is consumed past a few RUNNING_XACTS: its decoder restarts from a
# serialized snapshot and has a restart point when the long transaction begins
for _ in 1 2 3; do consume_round cdc_slot; done
open_xact batch_import $PPORT "INSERT INTO orders (status) SELECT 'imported' FROM generate_series(1, 1000);"
for _ in 1 2 3; do consume_round cdc_slot; done
SLOT_SQL="SELECT slot_name, active, restart_lsn, confirmed_flush_lsn, catalog_xmin,
       pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) AS retained_wal
FROM pg_replication_slots WHERE slot_name = 'cdc_slot';"
show r5_slot_before "$SLOT_SQL"
held_before=$(q $PPORT "SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'cdc_slot'")
# the application goes on writing; the consumer keeps up
q $PPORT "INSERT INTO orders (status) SELECT 'new' FROM generate_series(1, 50000)" >/dev/null
for _ in 1 2 3; do consume_round cdc_slot; done
show r5_slot_after "$SLOT_SQL"
expect "5 (restart_lsn held)" $PPORT "SELECT restart_lsn = '$held_before' FROM pg_replication_slots
    WHERE slot_name = 'cdc_slot'"
show r5_diag "SELECT kind, xid, pid, application_name, lsn, pg_size_pretty(bytes) AS bytes
FROM snapbuild_diagnose('cdc_slot');"
show -x r5_held "SELECT kind, finding, remedy FROM snapbuild_diagnose('cdc_slot')
WHERE kind IN ('restart_lsn held', 'forecast');"
show -x c6_held "SELECT kind, finding, xid, pid, state, since, remedy
FROM snapbuild_diagnose('cdc_slot') WHERE kind = 'catalog_xmin held';"
show r5_health "SELECT slot_name, state, oldest_blocking_pid,
       pg_size_pretty(restart_lsn_lag_bytes) AS restart_lsn_lag, catalog_xmin_age,
       pg_size_pretty(releasable_bytes) AS releasable
FROM snapbuild_slot_health;"
expect_kinds "5 (restart_lsn held)" $PPORT cdc_slot "restart_lsn held" "catalog_xmin held" "forecast"
bi_pid=$(app_pid $PPORT batch_import)
expect "5 (restart_lsn held)" $PPORT "SELECT count(*) = 2 FROM snapbuild_diagnose('cdc_slot')
    WHERE kind IN ('restart_lsn held', 'catalog_xmin held') AND pid = $bi_pid"
expect "5 (restart_lsn held)" $PPORT "SELECT (SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'cdc_slot')
    = (SELECT lsn FROM snapbuild_diagnose('cdc_slot') WHERE kind = 'restart_lsn held')"
forecast_lsn=$(q $PPORT "SELECT lsn FROM snapbuild_diagnose('cdc_slot') WHERE kind = 'forecast'
    AND xid = (SELECT xid FROM snapbuild_diagnose('cdc_slot') WHERE kind = 'restart_lsn held')")
# the remedy: the transaction ends; the consumer confirms past the next RUNNING_XACTS
session_send batch_import "COMMIT;"
session_close batch_import
consume_round cdc_slot
show r5_released "$SLOT_SQL"
expect "5 (restart_lsn held)" $PPORT "SELECT restart_lsn > '$held_before' FROM pg_replication_slots
    WHERE slot_name = 'cdc_slot'"
keep r5_forecast_lsn "${forecast_lsn:-(none)}"
q $PPORT "SELECT pg_drop_replication_slot('cdc_slot')" >/dev/null

# ---------------------------------------------------------------------------------------
# 6. catalog_xmin holding back VACUUM: an abandoned slot
# ---------------------------------------------------------------------------------------

say "6. catalog_xmin of an abandoned slot holds back VACUUM"
q $PPORT "SELECT pg_create_logical_replication_slot('old_slot', 'test_decoding')" >/dev/null
# an application that creates and drops temporary tables: dead rows in the catalogs
CHURN="DO \$\$ BEGIN FOR i IN 1..200 LOOP
  EXECUTE 'CREATE TEMP TABLE report_tmp (id int, total numeric)'; EXECUTE 'DROP TABLE report_tmp';
END LOOP; END \$\$"
for _ in 1 2 3; do q $PPORT "$CHURN" >/dev/null; done
VACUUM_SQL="VACUUM (VERBOSE) pg_catalog.pg_attribute;"
vacuum_excerpt() { # NAME: the VACUUM VERBOSE lines with the tuple counts and the cutoff
    "$BIN/psql" -X -d "$(conninfo $PPORT postgres psql)" -c "$VACUUM_SQL" 2>&1 \
        | grep -E '^INFO:  (finished )?vacuuming|^tuples:|^removable cutoff:' >"$OUT/$1.out" || true
    printf '%s\n' "$VACUUM_SQL" >"$OUT/$1.sql"
    [ -s "$OUT/$1.out" ] || fail "no VACUUM VERBOSE output"
}
vacuum_excerpt c6_vacuum
show c6_stats "SELECT relname, n_live_tup, n_dead_tup, last_vacuum IS NOT NULL AS vacuumed
FROM pg_stat_sys_tables
WHERE relname IN ('pg_attribute', 'pg_class', 'pg_type') ORDER BY relname;"
show c6_slots "SELECT slot_name, active, catalog_xmin, age(catalog_xmin) AS catalog_xmin_age
FROM pg_replication_slots;"
show -x c6_diag "SELECT kind, finding, xid, remedy FROM snapbuild_diagnose('old_slot')
WHERE kind IN ('no consumer', 'catalog horizon');"
expect_kinds "6 (catalog_xmin)" $PPORT old_slot "no consumer" "catalog horizon"
old_cx=$(q $PPORT "SELECT catalog_xmin FROM pg_replication_slots WHERE slot_name = 'old_slot'")
expect "6 (catalog_xmin)" $PPORT "SELECT xid = '$old_cx' FROM snapbuild_diagnose('old_slot')
    WHERE kind = 'catalog horizon'"
grep -qE "^removable cutoff: $old_cx," "$OUT/c6_vacuum.out" \
    || fail "6 (catalog_xmin) did not reproduce: VACUUM's cutoff is not the slot's catalog_xmin $old_cx: $(cat "$OUT/c6_vacuum.out")"
grep -qE '^tuples: .* [1-9][0-9]* are dead but not yet removable' "$OUT/c6_vacuum.out" \
    || fail "6 (catalog_xmin) did not reproduce: no dead rows kept: $(cat "$OUT/c6_vacuum.out")"
# the remedy: the consumer is gone for good: drop the slot; VACUUM removes the rows
show c6_drop "SELECT pg_drop_replication_slot('old_slot');"
vacuum_excerpt c6_vacuum_after
grep -qE '^tuples: [1-9][0-9]* removed' "$OUT/c6_vacuum_after.out" \
    || fail "6 (catalog_xmin): VACUUM removed nothing after the slot was dropped: $(cat "$OUT/c6_vacuum_after.out")"

# ---------------------------------------------------------------------------------------
# 7. WAL retained, then the slot invalidated (max_slot_wal_keep_size)
# ---------------------------------------------------------------------------------------

say "7. WAL retained and the slot invalidated"
q $PPORT "SELECT pg_create_logical_replication_slot('lagging_slot', 'test_decoding')" >/dev/null
show w7_setting "ALTER SYSTEM SET max_slot_wal_keep_size = '64MB';"
q $PPORT "SELECT pg_reload_conf()" >/dev/null
wait_for "max_slot_wal_keep_size to apply" $PPORT "SELECT current_setting('max_slot_wal_keep_size') = '64MB'"
# the application writes; nobody consumes the slot (two WAL segments' worth)
for _ in 1 2; do
    q $PPORT "INSERT INTO orders (status) VALUES ('w')" >/dev/null
    q $PPORT "SELECT pg_switch_wal()" >/dev/null
done
q $PPORT "CHECKPOINT" >/dev/null
WAL_SQL="SELECT slot_name, wal_status, pg_size_pretty(safe_wal_size) AS safe_wal_size,
       pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) AS retained_wal,
       invalidation_reason
FROM pg_replication_slots WHERE slot_name = 'lagging_slot';"
show w7_before "$WAL_SQL"
show -x w7_diag_before "SELECT kind, finding, bytes FROM snapbuild_diagnose('lagging_slot')
WHERE kind IN ('no consumer', 'retained WAL');"
show w7_health "SELECT slot_name, pg_size_pretty(restart_lsn_lag_bytes) AS restart_lsn_lag,
       pg_size_pretty(confirmed_flush_lag_bytes) AS confirmed_flush_lag
FROM snapbuild_slot_health;"
expect_kinds "7 (WAL retained)" $PPORT lagging_slot "no consumer" "retained WAL"
expect "7 (WAL retained)" $PPORT "SELECT wal_status <> 'lost' FROM pg_replication_slots WHERE slot_name = 'lagging_slot'"
off=$(log_offset "$PLOG")
# more WAL: a segment at a time, a checkpoint after each, until the server gives up the slot
deadline=$(( $(date +%s) + WAIT ))
until [ "$(q $PPORT "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'lagging_slot'")" = lost ]; do
    [ "$(date +%s)" -ge "$deadline" ] && fail "7 (invalidated) did not reproduce: wal_status not lost after ${WAIT}s"
    q $PPORT "INSERT INTO orders (status) VALUES ('w')" >/dev/null
    q $PPORT "SELECT pg_switch_wal()" >/dev/null
    q $PPORT "CHECKPOINT" >/dev/null
done
show w7_after "$WAL_SQL"
log_excerpt w7_log "$PLOG" "$off" 'invalidating obsolete replication slot'
show -e w7_consume "SELECT count(*) FROM pg_logical_slot_get_changes('lagging_slot', NULL, NULL);"
show -x w7_diag "SELECT kind, finding, lsn, since, remedy FROM snapbuild_diagnose('lagging_slot');"
expect_kinds "7 (invalidated)" $PPORT lagging_slot "invalidated"
expect "7 (invalidated)" $PPORT "SELECT count(*) = 1 AND bool_and(finding LIKE '%wal_removed%')
    FROM snapbuild_diagnose('lagging_slot')"
# the remedy: drop it (and create it again, the consumer copies its tables anew)
q $PPORT "SELECT pg_drop_replication_slot('lagging_slot')" >/dev/null
q $PPORT "ALTER SYSTEM RESET max_slot_wal_keep_size" >/dev/null
q $PPORT "SELECT pg_reload_conf()" >/dev/null

# ---------------------------------------------------------------------------------------
# the standby
# ---------------------------------------------------------------------------------------

say "standby: pg_basebackup -R from the primary, 127.0.0.1:$SPORT"
as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p $PPORT -U postgres -X stream -c fast -R -C -S ts_standby \
    -D "$SDATA" >"$W/standby/basebackup.log" 2>&1 \
    || { cat "$W/standby/basebackup.log" >&2; fail "pg_basebackup failed"; }
# -R writes a primary_conninfo with every option this libpq knows; a walreceiver that loads
# another libpq may refuse some: the basic ones only (dbname: the slot sync worker needs it)
as_pg sh -c "grep -v '^primary_conninfo' '$SDATA/postgresql.auto.conf' >'$SDATA/postgresql.auto.conf.new' \
    && mv '$SDATA/postgresql.auto.conf.new' '$SDATA/postgresql.auto.conf'"
as_pg tee "$SDATA/troubleshooting.conf" >/dev/null <<EOF
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
max_prepared_transactions = 10
listen_addresses = '127.0.0.1'
port = $SPORT
unix_socket_directories = '$W/standby/sock'
log_line_prefix = '%m [%p] '
fsync = off
hot_standby_feedback = on
primary_slot_name = 'ts_standby'
primary_conninfo = 'host=127.0.0.1 port=$PPORT user=postgres dbname=postgres application_name=ts_standby'
EOF
as_pg "$BIN/pg_ctl" -D "$SDATA" -l "$SLOG" -w -t 120 start >/dev/null \
    || { tail -n 30 "$SLOG" >&2; fail "the standby did not start"; }
wait_for "the standby to stream" $SPORT \
    "SELECT count(*) = 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'"

# Waits until the standby replayed the primary's WAL up to its insert position now (a
# RUNNING_XACTS record is flushed by the WAL writer, shortly after it is written).
wait_replayed() {
    local lsn
    lsn=$(q $PPORT "SELECT pg_current_wal_insert_lsn()")
    wait_for "the standby to replay up to $lsn" $SPORT \
        "SELECT pg_last_wal_replay_lsn() >= '$lsn'"
}

# The query a standby's remedy gives to find the primary's holder of XID ("on the primary,
# find its holder: SELECT …; end it there"), run on the primary and kept as NAME; fails
# unless it finds PID.
holder_query() { # NAME SLOT CONDITION XID PID
    local remedy sql
    remedy=$(q $SPORT "SELECT remedy FROM snapbuild_diagnose('$2') WHERE $3")
    sql=$(sed -n 's/.*find its holder: \(SELECT .*\); end it there.*/\1/p' <<<"$remedy")
    [ -n "$sql" ] || fail "$1: no query to run on the primary in the remedy of xid $4: $remedy"
    sql=$(sed -e 's/ FROM /\nFROM /; s/ WHERE /\nWHERE /; s/ LEFT JOIN /\n  LEFT JOIN /g; s/ AND / AND\n      /g' <<<"$sql")
    show -x "$1" "$sql;"
    grep -qE "^pid +\| $5\$" "$OUT/$1.out" \
        || fail "$1: the remedy's query on the primary does not find pid $5: $(cat "$OUT/$1.out")"
}

# ---------------------------------------------------------------------------------------
# 4. a hung creation on a hot standby
# ---------------------------------------------------------------------------------------

say "4. hung creation on the standby"
open_xact invoice_run $PPORT "INSERT INTO orders (status) VALUES ('invoiced');"
ir_xid=$(app_xid $PPORT invoice_run)
after=$(q $PPORT "SELECT pg_current_wal_insert_lsn()")
# The background writer logs a RUNNING_XACTS (listing invoice_run) within 15 s of the write;
# after it the primary writes nothing: the standby's creation waits for the next one.
wait_for "the background writer's RUNNING_XACTS after $after" $PPORT \
    "SELECT EXISTS (SELECT FROM pg_get_wal_records_info('$after', pg_current_wal_flush_lsn())
       WHERE resource_manager = 'Standby' AND record_type = 'RUNNING_XACTS')"
wait_replayed
create_in_background standby_cdc $SPORT standby_slot
wait_for "the creation's slot on the standby" $SPORT \
    "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'standby_slot'
       AND restart_lsn IS NOT NULL AND active_pid IS NOT NULL)"
STANDBY_ACTIVITY="SELECT pid, application_name, state, wait_event_type, wait_event, left(query, 40) AS query
FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid();"
show -p $SPORT s4_wal_activity "$STANDBY_ACTIVITY"
show -p $SPORT -x s4_wal_diag "SELECT kind, finding, lsn, remedy FROM snapbuild_diagnose('standby_slot');"
creation_running standby_cdc || fail "4 (standby) did not reproduce: the creation returned: $(cat "$RUN/standby_cdc.out")"
expect_kinds "4 (standby, waiting for WAL)" $SPORT standby_slot "creation waiting" "waiting for WAL"
# the remedy for that: a RUNNING_XACTS on the primary; now it waits for invoice_run
show s4_log_snapshot "SELECT pg_log_standby_snapshot();"
# The record lists invoice_run, older than the slot's xmin horizon (on a standby: its next
# xid): the builder stays in START and waits for it, logging nothing (snapbuild.c's
# "skipping snapshot" is DEBUG1).
wait_replayed
show -p $SPORT s4_xact_activity "$STANDBY_ACTIVITY"
show -p $SPORT -x s4_xact_diag "SELECT kind, finding, xid, remedy FROM snapbuild_diagnose('standby_slot');"
expect_kinds "4 (standby, primary transaction)" $SPORT standby_slot "creation waiting" "waiting for primary transaction"
expect "4 (standby, primary transaction)" $SPORT "SELECT EXISTS (SELECT FROM snapbuild_diagnose('standby_slot')
    WHERE kind = 'waiting for primary transaction' AND xid = '$ir_xid')"
creation_running standby_cdc || fail "4 (standby) did not reproduce: the creation returned: $(cat "$RUN/standby_cdc.out")"
# the remedy's query, run on the primary, finds the session
holder_query s4_primary standby_slot "kind = 'waiting for primary transaction' AND xid = '$ir_xid'" \
    "$ir_xid" "$(app_pid $PPORT invoice_run)"
session_send invoice_run "COMMIT;"
session_close invoice_run
q $PPORT "SELECT pg_log_standby_snapshot()" >/dev/null
creation_returned standby_cdc
keep s4_created "$(cat "$RUN/standby_cdc.out")"
q $SPORT "SELECT pg_drop_replication_slot('standby_slot')" >/dev/null

# ---------------------------------------------------------------------------------------
# 8. a failover slot not synchronized to the standby
# ---------------------------------------------------------------------------------------

say "8. failover slot not synced"
show f8_create "SELECT slot_name FROM pg_create_logical_replication_slot('failover_slot', 'test_decoding',
       failover => true);"
q $PPORT "ALTER SYSTEM SET synchronized_standby_slots = 'ts_standby'" >/dev/null
q $PPORT "SELECT pg_reload_conf()" >/dev/null
open_xact month_end $PPORT "INSERT INTO orders (status) VALUES ('closing');"
wait_replayed
off=$(log_offset "$SLOG")
show -p $SPORT f8_enable "ALTER SYSTEM SET sync_replication_slots = on;"
q $SPORT "SELECT pg_reload_conf()" >/dev/null
wait_for "the slot sync worker" $SPORT \
    "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'slotsync worker'"
wait_for "the synced copy of failover_slot on the standby" $SPORT \
    "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'failover_slot' AND synced)"
wait_logged "the standby's 'could not synchronize' line" "$SLOG" "$off" \
    'could not synchronize replication slot "failover_slot"'
show f8_primary "SELECT slot_name, failover, restart_lsn, confirmed_flush_lsn, catalog_xmin
FROM pg_replication_slots WHERE slot_name = 'failover_slot';"
show -p $SPORT f8_standby "SELECT slot_name, synced, temporary, restart_lsn, confirmed_flush_lsn, catalog_xmin
FROM pg_replication_slots WHERE slot_name = 'failover_slot';"
log_excerpt f8_log "$SLOG" "$off" 'could not synchronize replication slot "failover_slot"'
show -p $SPORT -x f8_diag "SELECT kind, finding, xid, remedy FROM snapbuild_diagnose('failover_slot');"
show -p $SPORT f8_health "SELECT slot_name, state, in_creation, restart_lsn_lag_bytes, catalog_xmin_age
FROM snapbuild_slot_health;"
expect "8 (failover slot)" $SPORT "SELECT temporary FROM pg_replication_slots WHERE slot_name = 'failover_slot'"
expect_kinds "8 (failover slot)" $SPORT failover_slot "sync pending"
me_xid=$(app_xid $PPORT month_end)
me_pid=$(app_pid $PPORT month_end)
expect "8 (failover slot)" $SPORT "SELECT EXISTS (SELECT FROM snapbuild_diagnose('failover_slot')
    WHERE kind = 'sync pending' AND xid = '$me_xid')"
# the remedy's query, run on the primary, finds the transaction's session
holder_query f8_holder failover_slot "kind = 'sync pending' AND xid = '$me_xid'" "$me_xid" "$me_pid"
# the remedy: the primary transaction ends, the consumer confirms past a RUNNING_XACTS; the
# worker persists the copy
session_send month_end "COMMIT;"
session_close month_end
for _ in 1 2 3; do consume_round failover_slot; done
show f8_consumed "SELECT slot_name, restart_lsn, confirmed_flush_lsn, catalog_xmin
FROM pg_replication_slots WHERE slot_name = 'failover_slot';"
WAIT=$(( WAIT > 90 ? WAIT : 90 )) wait_for "the worker to persist the copy (its naptime grows to 30 s)" $SPORT \
    "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'failover_slot' AND synced AND NOT temporary)"
show -p $SPORT f8_standby_after "SELECT slot_name, synced, temporary, restart_lsn, confirmed_flush_lsn, catalog_xmin
FROM pg_replication_slots WHERE slot_name = 'failover_slot';"
log_excerpt f8_log_after "$SLOG" "$off" '"failover_slot" is sync-ready now'
show -p $SPORT -x f8_diag_after "SELECT kind, finding, remedy FROM snapbuild_diagnose('failover_slot');"
expect_kinds "8 (failover slot)" $SPORT failover_slot "synchronized"

# ---------------------------------------------------------------------------------------
# 9. will the slot be invalidated, and when: max_slot_wal_keep_size and an unused slot
# ---------------------------------------------------------------------------------------

say "9. the WAL loss forecast of an unused slot"
q $PPORT "ALTER SYSTEM SET max_slot_wal_keep_size = '64MB'" >/dev/null
q $PPORT "SELECT pg_reload_conf()" >/dev/null
sleep 1
q $PPORT "SELECT pg_create_logical_replication_slot('reporting_slot', 'test_decoding')" >/dev/null
# the application writes at a steady pace; nobody consumes reporting_slot
for _ in $(seq 1 40); do
    q $PPORT "INSERT INTO orders (status) SELECT 'steady' FROM generate_series(1, 3000)" >/dev/null
    sleep 0.25
done
show l9_settings "SELECT name, setting, unit FROM pg_settings
WHERE name IN ('max_slot_wal_keep_size', 'wal_keep_size', 'wal_segment_size');"
show l9_slot "SELECT slot_name, active, restart_lsn, wal_status,
       pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) AS retained_wal
FROM pg_replication_slots WHERE slot_name = 'reporting_slot';"
show l9_health "SELECT slot_name, consumer_attached, wal_loss_lsn, wal_loss_at,
       round(wal_loss_in_s) AS wal_loss_in_s, wal_loss_cause
FROM snapbuild_slot_health WHERE slot_name = 'reporting_slot';"
show -x l9_diag "SELECT kind, finding, lsn, since, pg_size_pretty(bytes) AS bytes_left, remedy
FROM snapbuild_diagnose('reporting_slot') WHERE kind = 'wal loss forecast';"
expect_kinds "9 (WAL loss forecast)" $PPORT reporting_slot "wal loss forecast" "no consumer"
expect "9 (WAL loss forecast)" $PPORT "SELECT wal_loss_cause = 'wal_removed' AND wal_loss_in_s > 0
    FROM snapbuild_slot_health WHERE slot_name = 'reporting_slot'"
loss_lsn=$(q $PPORT "SELECT wal_loss_lsn FROM snapbuild_slot_health WHERE slot_name = 'reporting_slot'")
# the application goes on until the WAL passes the position: the server says unreserved
until [ "$(q $PPORT "SELECT pg_current_wal_lsn() >= '$loss_lsn'")" = t ]; do
    q $PPORT "INSERT INTO orders (status) SELECT 'more' FROM generate_series(1, 20000)" >/dev/null
done
show l9_unreserved "SELECT slot_name, restart_lsn, wal_status, pg_current_wal_lsn() AS wal_position
FROM pg_replication_slots WHERE slot_name = 'reporting_slot';"
expect "9 (WAL loss forecast)" $PPORT "SELECT wal_status = 'unreserved' FROM pg_replication_slots
    WHERE slot_name = 'reporting_slot'"
show l9_checkpoint "CHECKPOINT;"
show l9_lost "SELECT slot_name, restart_lsn, wal_status, invalidation_reason
FROM pg_replication_slots WHERE slot_name = 'reporting_slot';"
expect "9 (WAL loss forecast)" $PPORT "SELECT invalidation_reason = 'wal_removed' FROM pg_replication_slots
    WHERE slot_name = 'reporting_slot'"
keep l9_loss_lsn "$loss_lsn"
q $PPORT "SELECT pg_drop_replication_slot('reporting_slot')" >/dev/null
q $PPORT "ALTER SYSTEM RESET max_slot_wal_keep_size" >/dev/null
q $PPORT "SELECT pg_reload_conf()" >/dev/null

# ---------------------------------------------------------------------------------------
# 10. a consumer behind, a big transaction: the next decode spills to disk
# ---------------------------------------------------------------------------------------

say "10. the decoding cost: a consumer behind, a big transaction spilled"
# the 64kB minimum keeps the incident cheap; the default is 64MB
q $PPORT "ALTER SYSTEM SET logical_decoding_work_mem = '64kB'" >/dev/null
q $PPORT "SELECT pg_reload_conf()" >/dev/null
wait_for "logical_decoding_work_mem to apply" $PPORT "SELECT current_setting('logical_decoding_work_mem') = '64kB'"
q $PPORT "CREATE TABLE order_lines (order_id int, line int, sku varchar(100))" >/dev/null
q $PPORT "SELECT pg_create_logical_replication_slot('analytics_slot', 'test_decoding')" >/dev/null
# the application: small transactions, one big one (a month's order lines in one statement),
# more small ones; the inventory database is busy too. Nobody consumes analytics_slot.
small_txns() { # N
    for i in $(seq 1 "$1"); do echo "INSERT INTO orders (status) VALUES ('small $i');"; done \
        | "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -d "$(conninfo $PPORT postgres order_entry)" >/dev/null
}
small_txns 150
big_xid=$("$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -d "$(conninfo $PPORT postgres month_close)" \
    -c "BEGIN" \
    -c "INSERT INTO order_lines SELECT g / 10, g % 10, repeat(md5(g::text), 3)::varchar(100) FROM generate_series(1, 2000) g" \
    -c "SELECT pg_current_xact_id()" -c "COMMIT")
for _ in 1 2 3 4 5; do q $PPORT "UPDATE stock SET qty = qty + 1" inventory >/dev/null; done
small_txns 150
show t10_lag "SELECT slot_name, active, pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)) AS behind,
       current_setting('logical_decoding_work_mem') AS logical_decoding_work_mem
FROM pg_replication_slots WHERE slot_name = 'analytics_slot';"
show -x t10_cost "SELECT * FROM snapbuild_decoding_cost('analytics_slot');"
show t10_whatif "SELECT c.work_mem_kb, c.streaming, c.spill_txns, c.spill_count, c.spill_bytes,
       c.stream_txns, c.stream_count, c.stream_bytes, c.peak_memory_bytes
FROM (VALUES (64, false), (1024, false), (64, true)) AS w(kb, streaming),
     snapbuild_decoding_cost('analytics_slot', work_mem_kb => w.kb, streaming => w.streaming) AS c;"
show t10_backlog "SELECT xid, outcome, inserts, wal_bytes, queued_bytes, total_bytes, decoder, spill_count, spill_bytes
FROM snapbuild_backlog('analytics_slot') ORDER BY queued_bytes DESC, first_lsn LIMIT 3;"
show t10_backlog_sum "SELECT decoder, count(*) AS txns, sum(wal_bytes) AS wal_bytes, sum(total_bytes) AS total_bytes
FROM snapbuild_backlog('analytics_slot') GROUP BY decoder ORDER BY txns DESC;"
expect "10 (decoding cost)" $PPORT "SELECT undecided IS NULL AND spill_txns = 1 AND largest_xid = '$big_xid'
    FROM snapbuild_decoding_cost('analytics_slot')"
expect "10 (decoding cost)" $PPORT "SELECT spill_txns = 0 AND stream_txns = 0
    FROM snapbuild_decoding_cost('analytics_slot', work_mem_kb => 1024)"
expect "10 (decoding cost)" $PPORT "SELECT spill_txns = 0 AND stream_txns = 1
    FROM snapbuild_decoding_cost('analytics_slot', streaming => true)"
expect "10 (decoding cost)" $PPORT "SELECT xid = '$big_xid' AND spilled
    FROM snapbuild_backlog('analytics_slot') ORDER BY queued_bytes DESC LIMIT 1"
# the remedies tried on copies of the slot (same restart_lsn and confirmed_flush)
show t10_copies "SELECT pg_copy_logical_replication_slot('analytics_slot', 'analytics_try_1mb'),
       pg_copy_logical_replication_slot('analytics_slot', 'analytics_try_stream');"
COUNTERS="total_txns, total_bytes, spill_txns, spill_count, spill_bytes, stream_txns, stream_count, stream_bytes"
predicted() { # SLOT [ARGS]: the eight counters predicted, as one line
    q $PPORT "SELECT concat_ws(' ', $COUNTERS) FROM snapbuild_decoding_cost('$1'${2:-})"
}
pred_slot=$(predicted analytics_slot)
pred_1mb=$(predicted analytics_try_1mb ", work_mem_kb => 1024")
pred_stream=$(predicted analytics_try_stream ", streaming => true")
# the decode, with the slot's statistics reset first
show t10_reset "SELECT pg_stat_reset_replication_slot('analytics_slot');"
show t10_decode "SELECT count(*) AS changes FROM pg_logical_slot_get_changes('analytics_slot', NULL, NULL);"
show t10_try "SET logical_decoding_work_mem = '1MB';
SELECT count(*) AS changes FROM pg_logical_slot_get_changes('analytics_try_1mb', NULL, NULL);
RESET logical_decoding_work_mem;
SELECT count(*) AS changes FROM pg_logical_slot_get_changes('analytics_try_stream', NULL, NULL,
       'stream-changes', 'on');"
wait_for "the decodes' statistics" $PPORT "SELECT count(*) = 3 AND bool_and(total_txns > 0)
    FROM pg_stat_replication_slots WHERE slot_name LIKE 'analytics%'"
show t10_stats "SELECT slot_name, $COUNTERS
FROM pg_stat_replication_slots WHERE slot_name LIKE 'analytics%' ORDER BY slot_name;"
server() { q $PPORT "SELECT concat_ws(' ', $COUNTERS) FROM pg_stat_replication_slots WHERE slot_name = '$1'"; }
for pair in "analytics_slot:$pred_slot" "analytics_try_1mb:$pred_1mb" "analytics_try_stream:$pred_stream"; do
    slot=${pair%%:*} want=${pair#*:} got=$(server "${pair%%:*}")
    [ "$got" = "$want" ] \
        || fail "10 (decoding cost): $slot: predicted ($COUNTERS) $want, pg_stat_replication_slots $got"
done
keep t10_big_xid "$big_xid"
keep t10_predicted "$pred_slot"
q $PPORT "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'analytics%'" >/dev/null
q $PPORT "ALTER SYSTEM RESET logical_decoding_work_mem" >/dev/null
q $PPORT "SELECT pg_reload_conf()" >/dev/null

# ---------------------------------------------------------------------------------------
# the page
# ---------------------------------------------------------------------------------------

python3 - "$TEMPLATE" "$OUT" "$PAGE.new" <<'PY'
import os, re, sys
template, out, page = sys.argv[1:]

def read(name, ext):
    path = os.path.join(out, f"{name}.{ext}")
    if not os.path.exists(path):
        sys.exit(f"troubleshooting.sh: the template names {name}, which the script did not keep")
    return open(path).read().rstrip("\n")

lines = []
for line in open(template).read().split("\n"):
    m = re.fullmatch(r"@@(show|out|sql) ([a-z0-9_]+)@@", line.strip())
    if m:
        kind, name = m.groups()
        if kind in ("show", "sql"):
            lines += ["```sql", read(name, "sql"), "```"]
        if kind in ("show", "out"):
            lines += ["```", read(name, "out"), "```"]
        continue
    line = re.sub(r"@@value ([a-z0-9_]+)@@", lambda m: read(m.group(1), "out"), line)
    if "@@" in line:
        sys.exit(f"troubleshooting.sh: unknown marker in: {line}")
    lines.append(line)
open(page, "w").write("\n".join(lines))
PY
mv "$PAGE.new" "$PAGE"
say "wrote docs/troubleshooting.md ($(( $(date +%s) - T0 )) s; every incident reproduced)"
