#!/usr/bin/env bash
# Throw-away PostgreSQL cluster for one major (or one older minor release), run as the OS user postgres.
#   cluster.sh start MAJOR   initdb if needed, start (reuses a running cluster)
#   cluster.sh stop MAJOR    fast shutdown
#   cluster.sh status MAJOR
#   cluster.sh env MAJOR     export lines: eval "$(scripts/cluster.sh env 18)"
# MAJOR is 14..18 (the newest minor, in .pg/MAJOR) or MAJOR.MINOR for an older minor release that
# `PGSNAP_MINORS=all scripts/setup.sh` unpacked into .pg/MAJOR.MINOR (e.g. 18.3).
# Data in <repo>/.work/pgMAJOR/data, log in <repo>/.work/pgMAJOR/server.log, port 55400+MAJOR
# (55500+40*(MAJOR-10)+MINOR for an older minor; PGSNAP_PORT_BASE replaces 55400 when set, e.g. for
# two checkouts' clusters at once), 127.0.0.1 only, trust auth, user postgres.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status|env MAJOR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1 major=$2
case $major in 1[0-9]) minor= ;; 1[0-9].[0-9]|1[0-9].[0-9][0-9]) minor=${major#*.}; major=${major%.*} ;; *) usage ;; esac
version=$major${minor:+.$minor}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/.pg/$version/bin
W=$ROOT/.work/pg$version
DATA=$W/data
SOCK=$W/sock
LOG=$W/server.log
if [ -z "$minor" ]; then PORT=$((${PGSNAP_PORT_BASE:-55400} + major))
else PORT=$((${PGSNAP_PORT_BASE:-55400} + 100 + 40 * (major - 10) + minor)); fi

# run a command as the OS user postgres, from a directory it can read
as_pg() {
    if [ "$(id -un)" = postgres ]; then (cd / && "$@")
    else (cd / && sudo -n -u postgres -- "$@"); fi
}
running() { [ -f "$DATA/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

case $cmd in
start)
    [ -x "$BIN/pg_ctl" ] || { echo "no PostgreSQL $version in $ROOT/.pg/$version: run scripts/setup.sh" >&2; exit 1; }
    if running; then echo "cluster pg$version already running on port $PORT"; exit 0; fi
    mkdir -p "$W"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$W"; fi
    as_pg mkdir -p "$SOCK"
    if [ ! -f "$DATA/PG_VERSION" ]; then
        as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --no-locale >"$W/initdb.log" 2>&1 \
            || { cat "$W/initdb.log" >&2; exit 1; }
        echo "include 'pg_snapbuild.conf'" | as_pg tee -a "$DATA/postgresql.conf" >/dev/null
    fi
    # rewritten at every start, so a changed script applies to an existing cluster
    as_pg tee "$DATA/pg_snapbuild.conf" >/dev/null <<EOF
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
max_prepared_transactions = 10
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCK'
log_line_prefix = '%m [%p] '
fsync = off
EOF
    # The watcher (pg_snapbuild's background worker) runs in every test cluster once the
    # extension is installed in this tree, idle: the tests that check it turn its logging on.
    if [ -e "$ROOT/.pg/$version/lib/pg_snapbuild.so" ]; then
        as_pg tee -a "$DATA/pg_snapbuild.conf" >/dev/null <<EOF
shared_preload_libraries = 'pg_snapbuild'
pg_snapbuild.log_waits_after = 0
pg_snapbuild.log_holds_after = 0
pg_snapbuild.log_loss_within = 0
EOF
    fi
    # The server's modules that link libpq (dblink, postgres_fdw, the walreceiver) must
    # load this release's libpq, not an older one the system has (17's dblink needs
    # libpq 17's PQcancelStart).
    LIBS=
    [ -e "$ROOT/.pg/$version/lib/libpq.so.5" ] && LIBS=$ROOT/.pg/$version/lib
    as_pg env ${LIBS:+LD_LIBRARY_PATH=$LIBS} "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null \
        || { echo "cluster pg$version failed to start; tail of $LOG:" >&2; tail -n 30 "$LOG" >&2; exit 1; }
    echo "cluster pg$version started on 127.0.0.1:$PORT (log: $LOG)"
    ;;
stop)
    # the hot standby and its cascading standby the multi-session tests make
    # (pgrx-tests/src/standby.rs), if any
    for sb in cascade standby; do
        if [ -f "$W/$sb/data/postmaster.pid" ]; then
            as_pg "$BIN/pg_ctl" -D "$W/$sb/data" -m fast -w -t 60 stop >/dev/null 2>&1 \
                && echo "$sb of pg$version stopped"
        fi
    done
    if running; then
        as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null
        echo "cluster pg$version stopped"
    else
        echo "cluster pg$version not running"
    fi
    ;;
status)
    if running; then echo "cluster pg$version running on 127.0.0.1:$PORT"; else echo "cluster pg$version not running"; exit 3; fi
    ;;
env)
    cat <<EOF
export PGHOST=127.0.0.1
export PGPORT=$PORT
export PGUSER=postgres
export PGDATABASE=postgres
export PGSNAP_LOG='$LOG'
export PGSNAP_PGDATA='$DATA'
export PGSNAP_MAJOR=$major
export PGSNAP_VERSION=$version
export PATH='$BIN':"\$PATH"
EOF
    ;;
*) usage ;;
esac
