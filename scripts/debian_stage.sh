#!/usr/bin/env bash
# The extension as a package on a distribution's server: Debian's PostgreSQL 15.
#   1. apt: postgresql-15 and postgresql-server-dev-15 (its pg_config and server headers)
#   2. scripts/package.sh 15 --pg-config /usr/lib/postgresql/15/bin/pg_config (the .deb, built
#      against Debian's headers; ~/.pgrx/config.toml is not changed), then dpkg -i
#   3. pg_createcluster 15 snapbuild_ci -p 55815 (wal_level = logical, log_timezone = Europe/Berlin, trust for
#      local and 127.0.0.1), pg_ctlcluster start: the log is pg_ctlcluster's stderr redirection to
#      /var/log/postgresql/postgresql-15-snapbuild_ci.log, no logging collector
#   4. pg_regress over pgrx-tests/regress (schedule-15) against it
#   5. a hung slot creation: a session holds an xid, snapbuild_diagnose names its pid in a
#      "waiting for transaction" row; it commits, the creation ends; the trace's builder rows
#      (the "logical decoding found ..." ones) agree from the creating backend's lines in that log
#   6. pg_dropcluster --stop, dpkg -r, and the package's files are gone
# Exits 77 (skipped) where there is no apt-get/dpkg or no root (sudo -n). Safe to re-run: a cluster
# or package left by an interrupted run is removed first; the cluster is dropped on every exit
# (PGSNAP_KEEP=1: left running after a failure, to look at).
# Other clusters (15/main included) are not touched. Work files in .work/debian/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
W=$ROOT/.work/debian
MAJOR=15 CLUSTER=snapbuild_ci PORT=55815
PKG=postgresql-$MAJOR-snapbuild
BIN=/usr/lib/postgresql/$MAJOR/bin
PGLOG=/var/log/postgresql/postgresql-$MAJOR-$CLUSTER.log
SLOT=snapbuild_ci_hung

say() { printf '==> %s\n' "$*"; }
skip() { echo "SKIP: $*"; exit 77; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

command -v apt-get >/dev/null && command -v dpkg >/dev/null \
    || skip "no apt-get/dpkg here (not a Debian-family system): Debian's packaged PostgreSQL is not tried"
SUDO=
if [ "$(id -u)" != 0 ]; then
    sudo -n true 2>/dev/null || skip "not root and no password-less sudo: cannot install packages"
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
T0=$(now)

# 1. Debian's PostgreSQL 15 with its server headers
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
if installed postgresql-$MAJOR && installed postgresql-server-dev-$MAJOR; then
    say "postgresql-$MAJOR and postgresql-server-dev-$MAJOR present"
else
    t=$(now)
    if ! $SUDO apt-get install -y -q --no-install-recommends postgresql-$MAJOR postgresql-server-dev-$MAJOR \
            >/dev/null 2>&1; then
        $SUDO apt-get update -q >/dev/null
        $SUDO apt-get install -y -q --no-install-recommends postgresql-$MAJOR postgresql-server-dev-$MAJOR >/dev/null
    fi
    say "apt-get install postgresql-$MAJOR postgresql-server-dev-$MAJOR: $(since "$t")"
fi
command -v pg_createcluster >/dev/null || { echo "pg_createcluster missing (postgresql-common)" >&2; exit 1; }
say "server: $("$BIN/postgres" --version)"

# what an interrupted run left
has_cluster() { pg_lsclusters -h 2>/dev/null | awk -v v="$MAJOR" -v c="$CLUSTER" '$1 == v && $2 == c {f = 1} END {exit !f}'; }
drop_cluster() { if has_cluster; then $SUDO pg_dropcluster --stop "$MAJOR" "$CLUSTER"; fi; }
if has_cluster; then say "dropping cluster $MAJOR/$CLUSTER left by an earlier run"; drop_cluster; fi
if installed "$PKG"; then say "removing $PKG left by an earlier run"; $SUDO dpkg -r "$PKG" >/dev/null 2>&1; fi
rm -rf "$W"; mkdir -p "$W"
bg=()
cleanup() {
    exec 4>&- 2>/dev/null || true
    for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -f "$PGLOG" ] && cp "$PGLOG" "$W/server.log" 2>/dev/null || true
    if [ -n "${PGSNAP_KEEP:-}" ] && has_cluster; then echo "PGSNAP_KEEP: cluster $MAJOR/$CLUSTER left running" >&2
    else drop_cluster >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# 2. the .deb against Debian's pg_config, installed with dpkg
t=$(now)
"$ROOT/scripts/package.sh" "$MAJOR" --pg-config "$BIN/pg_config" >"$W/package.log" 2>&1 \
    || { tail -n 40 "$W/package.log"; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n 1)
deb=$ROOT/target/package/${PKG}_${version}_$(dpkg --print-architecture).deb
say "scripts/package.sh $MAJOR --pg-config $BIN/pg_config: $(since "$t"); $(basename "$deb"): $(stat -c %s "$deb") bytes"
t=$(now)
$SUDO dpkg -i "$deb" >"$W/dpkg.log" 2>&1 || { cat "$W/dpkg.log"; exit 1; }
say "dpkg -i: $(since "$t")"
dpkg -L "$PKG" >"$W/files"
libdir=$("$BIN/pg_config" --pkglibdir) extdir=$("$BIN/pg_config" --sharedir)/extension
for f in "$libdir/pg_snapbuild.so" "$extdir/pg_snapbuild.control" "$extdir/pg_snapbuild--$version.sql" \
         "$extdir"/pg_snapbuild--0.1.0.sql "$extdir"/pg_snapbuild--0.1.0--0.2.0.sql; do
    grep -qx "$f" "$W/files" && [ -f "$f" ] || { echo "$PKG did not install $f" >&2; exit 1; }
done

# 3. a cluster of Debian's own making, on one of our ports
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "port $PORT is taken by another server: not starting $MAJOR/$CLUSTER there" >&2; exit 1
fi
t=$(now)
$SUDO pg_createcluster "$MAJOR" "$CLUSTER" -p "$PORT" --locale=C --encoding=UTF8 --start-conf=manual \
    >"$W/createcluster.log" 2>&1 || { cat "$W/createcluster.log"; exit 1; }
conf=/etc/postgresql/$MAJOR/$CLUSTER
$SUDO tee "$conf/conf.d/pg_snapbuild.conf" >/dev/null <<'EOF'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
max_prepared_transactions = 10
listen_addresses = '127.0.0.1'
# a zone with a named abbreviation (CET/CEST): the log's times must be read in it
log_timezone = 'Europe/Berlin'
EOF
$SUDO tee "$conf/pg_hba.conf" >/dev/null <<'EOF'
# the test cluster of scripts/debian_stage.sh: trust, local and 127.0.0.1 only
local   all             all                                     trust
host    all             all             127.0.0.1/32            trust
local   replication     all                                     trust
host    replication     all             127.0.0.1/32            trust
EOF
$SUDO pg_ctlcluster "$MAJOR" "$CLUSTER" start
say "pg_createcluster + pg_ctlcluster start: $(since "$t") (port $PORT, log $PGLOG)"

export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
sql() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
logfile=$(sql -c "SELECT coalesce(pg_current_logfile(), 'NULL') || ' ' || current_setting('logging_collector')")
pm=$($SUDO head -n 1 "$(sql -c "SHOW data_directory")/postmaster.pid")
stderr=$($SUDO readlink "/proc/$pm/fd/2")
say "pg_current_logfile(), logging_collector: $logfile; the server's standard error: $stderr"
[ "$stderr" = "$PGLOG" ] || { echo "pg_ctlcluster did not send the server's standard error to $PGLOG" >&2; exit 1; }

# 4. the regress suite
t=$(now)
dir=$ROOT/pgrx-tests/regress
read -r -a tests <<<"$(sed -e 's/#.*//' -e 's/^ *test://' "$dir/schedule-$MAJOR" | tr '\n' ' ')"
PGOPTIONS="-c client_min_messages=warning" "$BIN/dropdb" --if-exists snapbuild_regress
"$BIN/createdb" snapbuild_regress
if ! timeout -k 10 180 "$libdir/pgxs/src/test/regress/pg_regress" --use-existing --bindir="$BIN" \
        --host=127.0.0.1 --port="$PORT" --user=postgres --dbname=snapbuild_regress \
        --inputdir="$dir" --outputdir="$W/regress" "${tests[@]}"; then
    [ -f "$W/regress/regression.diffs" ] && head -n 300 "$W/regress/regression.diffs"
    exit 1
fi
say "pg_regress (${#tests[@]} tests): $(since "$t")"

# 5. a hung creation, its diagnosis, and its trace from the server log
t=$(now)
sql -c "CREATE EXTENSION IF NOT EXISTS pg_snapbuild"
wait_until() { # WHAT CMD...: poll CMD for up to 60 s
    local what=$1 i; shift
    for ((i = 0; i < 600; i++)); do "$@" && return 0; sleep 0.1; done
    echo "timed out waiting for $what" >&2; tail -n 5 "$W"/*.out >&2; exit 1
}
is_true() { [ "$(sql -c "$1")" = t ]; }
mkfifo "$W/hold.fifo"
PGAPPNAME=snapbuild_ci_hold "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 <"$W/hold.fifo" >"$W/hold.out" 2>&1 &
bg+=($!)
exec 4>"$W/hold.fifo"
echo "BEGIN; SELECT pg_current_xact_id();" >&4
wait_until "the holding session's xid" is_true \
    "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'snapbuild_ci_hold' AND backend_xid IS NOT NULL"
hold_pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'snapbuild_ci_hold'")
PGAPPNAME=snapbuild_ci_create "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 >"$W/create.out" 2>&1 \
    -c "SELECT lsn FROM pg_create_logical_replication_slot('$SLOT', 'test_decoding')" &
create=$!; bg+=($create)
wait_until "the creation to wait for pid $hold_pid's transaction" is_true \
    "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'snapbuild_ci_create'
       AND wait_event_type = 'Lock' AND wait_event = 'transactionid'"
creator=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'snapbuild_ci_create'")
diagnose="SELECT kind, finding, xid, pid, application_name, state, remedy FROM snapbuild_diagnose('$SLOT')
          WHERE kind LIKE 'creation%' OR kind LIKE 'waiting%'"
"$BIN/psql" -X -q -x -v ON_ERROR_STOP=1 -c "$diagnose" | tee "$W/diagnose.out"
is_true "SELECT count(*) = 1 FROM snapbuild_diagnose('$SLOT') WHERE kind = 'waiting for transaction' AND pid = $hold_pid" \
    || { echo "snapbuild_diagnose('$SLOT') has no 'waiting for transaction' row naming pid $hold_pid" >&2; exit 1; }
echo "COMMIT;" >&4; exec 4>&-
for ((i = 0; i < 600; i++)); do kill -0 "$create" 2>/dev/null || break; sleep 0.1; done
kill -0 "$create" 2>/dev/null && { echo "the slot creation still runs 60 s after the COMMIT" >&2; exit 1; }
wait "$create" || { echo "the slot creation failed:" >&2; cat "$W/create.out" >&2; exit 1; }
say "the creation waited for pid $hold_pid, snapbuild_diagnose named it; after its COMMIT the slot exists (confirmed_flush $(cat "$W/create.out")): $(since "$t")"
"$BIN/psql" -X -q -v ON_ERROR_STOP=1 -c "SELECT lsn, record, branch, state_before, state, level, agrees, server_source
    FROM snapbuild_trace('$SLOT')" | tee "$W/trace.out"
builder="FROM snapbuild_trace('$SLOT') WHERE level = 'LOG' AND message LIKE 'logical decoding found%'"
is_true "SELECT count(*) >= 2 AND bool_and(coalesce(agrees, false) AND server_source LIKE '%server log: pid $creator at %') $builder" \
    || { echo "the trace's builder rows do not all agree from pid $creator's lines in the server log" >&2; exit 1; }
is_true "SELECT count(*) = 0 FROM snapbuild_trace('$SLOT') WHERE agrees = false" \
    || { echo "a row of the trace disagrees with the server" >&2; exit 1; }
say "the trace's builder rows agree from pid $creator's lines in $PGLOG"
sql -c "SELECT pg_drop_replication_slot('$SLOT')" >/dev/null

# 6. the cluster dropped, the package removed, its files gone
t=$(now)
cp "$PGLOG" "$W/server.log"
$SUDO pg_dropcluster --stop "$MAJOR" "$CLUSTER"
$SUDO dpkg -r "$PKG" >>"$W/dpkg.log" 2>&1 || { cat "$W/dpkg.log"; exit 1; }
! installed "$PKG" || { echo "$PKG still installed after dpkg -r" >&2; exit 1; }
left=()
while read -r f; do [ -f "$f" ] && left+=("$f"); done <"$W/files"
[ ${#left[@]} -eq 0 ] || { echo "dpkg -r left: ${left[*]}" >&2; exit 1; }
say "pg_dropcluster --stop, dpkg -r (no file of $PKG left): $(since "$t")"
say "Debian's PostgreSQL $MAJOR with the package: all checks passed in $(since "$T0")"
