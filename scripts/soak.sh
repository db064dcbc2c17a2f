#!/usr/bin/env bash
# Soak: SECONDS (default 600) of pgbench on a PostgreSQL 18 cluster while slots are created (SQL
# and the replication protocol), consumed, advanced and dropped in loops and every SQL function
# of the extension runs in a loop of its own session (scripts/soak/soak.py says what exactly).
# Fails on a crash, on an error with an SQLSTATE not documented for that call, or on a backend
# whose memory grows. Writes .work/soak/result.json and prints a table. See README "Reliability".
#
#   scripts/soak.sh [SECONDS]
#
# Like scripts/bench.sh it runs its own copy of the PostgreSQL tree and its own throw-away cluster
# in .work/soak (recreated on every run, stopped at the end) on port PGSNAP_SOAK_PORT.
#
# Environment:
#   PGSNAP_SOAK_PORT        port (default PGSNAP_PORT_BASE + 40, i.e. 55440)
#   PGSNAP_SOAK_MAJOR       PostgreSQL tree .pg/MAJOR (default 18)
#   PGSNAP_SOAK_CLIENTS     pgbench clients (default 4)
#   PGSNAP_SOAK_SCALE       pgbench -i scale (default 10)
#   PGSNAP_SOAK_GROWTH_MIB  how far a function's backend may grow, last window over first (default 64)
#   PGSNAP_SOAK_DENY        SQLSTATEs to count as undocumented (e.g. "42704": that run must fail)
#   PGSNAP_SOAK_TERMINATE_S how often the watcher is terminated (default 10 s)
#   PGSNAP_BENCH_RELEASE=1  a --release build of the work tree (cargo target dir .work/soak/target);
#                           default: the build installed in .pg/MAJOR
#   PGSNAP_BENCH_KEEP=1     leave the cluster running afterwards
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECS=${1:-600}
SCALE=${PGSNAP_SOAK_SCALE:-10}
MAJOR=${PGSNAP_SOAK_MAJOR:-18}
PORT=${PGSNAP_SOAK_PORT:-$((${PGSNAP_PORT_BASE:-55400} + 40))}
W_LABEL=.work/soak
W=$ROOT/$W_LABEL
. "$ROOT/scripts/bench/common.sh"

case $SECS in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
[ "$SECS" -ge 10 ] || { echo "SECONDS must be >= 10" >&2; exit 2; }
case $PORT in 5541[4-8] | 5543[0-3]) echo "port $PORT belongs to the test clusters or a benchmark; pick another PGSNAP_SOAK_PORT" >&2; exit 2 ;; esac
for b in pgbench pg_recvlogical initdb; do
    [ -x "$BIN/$b" ] || { echo "no $b in $BIN: run scripts/setup.sh" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }
command -v stdbuf >/dev/null || { echo "stdbuf (coreutils) is required" >&2; exit 1; }

bench_copy_tree
# Checkpoints every minute: .snap files are removed and WAL recycled under the loops' feet.
# The watcher runs too (soak.py terminates it every PGSNAP_SOAK_TERMINATE_S seconds).
bench_fresh_cluster <<EOF
shared_preload_libraries = 'pg_snapbuild'
pg_snapbuild.watch_interval = 1s
pg_snapbuild.log_waits_after = 1s
pg_snapbuild.log_holds_after = 10s
max_replication_slots = 40
max_wal_senders = 20
max_prepared_transactions = 10
checkpoint_timeout = 60s
wal_keep_size = 256MB
EOF
q "CREATE EXTENSION pg_snapbuild" >/dev/null
say "pgbench -i -s $SCALE"
pgbench -i -q -s "$SCALE" >"$W/pgbench-init.log" 2>&1 || { cat "$W/pgbench-init.log" >&2; exit 1; }
say "soak for $SECS s (server log: $LOG)"
python3 "$ROOT/scripts/soak/soak.py" "$SECS" "$W" "$LOG"
