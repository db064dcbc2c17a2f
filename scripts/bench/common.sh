# shellcheck shell=bash disable=SC2034 # sets variables for the scripts that source it
# The part scripts/bench.sh, scripts/bench_ablation.sh and scripts/bench_visibility.sh share: the layout of their
# directory, the Python tools in scripts/bench, the private copy of the PostgreSQL tree (with the optional release
# build), the throw-away cluster, the idle backend's baseline and the psql session that samples
# a backend's memory. Sourced by them, not run: sourcing it sets the variables below and
# defines the functions, nothing else.
#
# The caller sets, before sourcing it:
#   ROOT     the repository root
#   MAJOR    PostgreSQL major version: the tree .pg/MAJOR is the one copied
#   PORT     the benchmark cluster's port
#   W        the benchmark's own directory (absolute): $ROOT/W_LABEL
#   W_LABEL  how the messages name W, relative to ROOT, e.g. .work/bench
#
# Sourcing it sets:
#   RELEASE  PGSNAP_BENCH_RELEASE (default 0); 1: bench_copy_tree installs a --release build
#            of the work tree into the copy (cargo target dir $W/target, log $W/build.log)
#   KEEP     PGSNAP_BENCH_KEEP (default 0); 1: finish leaves the cluster running
#   DATA     $W/data, the cluster's data directory; SOCK $W/sock, its unix_socket_directories;
#            LOG $W/server.log, its server log
#   RUNS     $W/runs.tsv, one line per measurement; META $W/meta.tsv, the run's facts
#   BENCH_LIB  $ROOT/scripts/bench (report.py, sample.py, ...)
#   BIN      $ROOT/.pg/$MAJOR/bin; bench_copy_tree points it at the copy, $W/pg/bin
#
# Functions:
#   say TEXT...          prints "==> TEXT"
#   as_pg CMD...         runs CMD as the OS user postgres, from /
#   stop_cluster         stops the cluster in DATA, if it runs
#   finish               the EXIT trap bench_fresh_cluster sets: stop_cluster unless KEEP=1
#   bench_copy_tree      creates W, stops the cluster of an earlier run, copies .pg/MAJOR to
#                        $W/pg (and builds into it); sets BIN, SO (the extension's .so), BUILD
#                        (debug | release) and SOURCE (where the build comes from); exports
#                        PGHOST, PGPORT, PGUSER, PGDATABASE and PATH (BIN first)
#   q SQL                runs SQL, unaligned tuples only
#   lsn_diff A B         bytes from LSN A to LSN B
#   bench_fresh_cluster  initdbs a new cluster in DATA, appends the settings every benchmark
#                        uses (127.0.0.1, PORT, SOCK, wal_level logical, max_wal_size 4GB,
#                        fsync off, log_line_prefix '%m [%p] ') and then its stdin (the
#                        benchmark's own settings) to postgresql.conf, sets the EXIT trap and
#                        starts the cluster; give it a here-document: called in a subshell (at
#                        the end of a pipe) it refuses, as that subshell's exit would run the
#                        trap and stop the cluster
#   bench_idle_backend   sets IDLE_KIB and IDLE_ANON_KIB: VmHWM and RssAnon of a fresh backend
#                        that ran nothing, the baseline for the backends' figures
#   bench_start_kept_cluster
#                        starts the cluster a previous run left in DATA (PGSNAP_BENCH_KEEP=1)
#   bench_sampled_psql QUERY
#                        a psql session (the caller exports BENCH_LIB_DIR=$BENCH_LIB and
#                        BENCH_SAMPLES, a scratch directory) with :query set to QUERY, on a
#                        fresh connection: it sets :pid and BENCH_PID to the backend's pid and
#                        starts scripts/bench/sample.py, which samples the backend's RssAnon
#                        every 5 ms, then runs the script on stdin. That script must end the
#                        sampling (touch "$BENCH_SAMPLES/stop", then wait for
#                        "$BENCH_SAMPLES/peaks"); prints psql's output
#   bench_store_rows T ALL START END
#                        the rows of snapbuild_trace_range(START, END, all_records => ALL) in
#                        the unlogged table bench_T_rows (columns c1..cN), made anew
#   bench_rows_cte T     a FROM item reading bench_T_rows through a MATERIALIZED CTE (a CTE
#                        Scan reads its rows through a tuplestore of work_mem, as a function
#                        in FROM does); bench_check_cte T fails unless it is planned so
#   bench_rows_scan T    a FROM item reading bench_T_rows with a plain scan
for v in ROOT MAJOR PORT W W_LABEL; do
    [ -n "${!v:-}" ] || { echo "scripts/bench/common.sh: set $v before sourcing it" >&2; exit 2; }
done
unset v

RELEASE=${PGSNAP_BENCH_RELEASE:-0}
KEEP=${PGSNAP_BENCH_KEEP:-0}
DATA=$W/data
SOCK=$W/sock
LOG=$W/server.log
RUNS=$W/runs.tsv
META=$W/meta.tsv
BENCH_LIB=$ROOT/scripts/bench
BIN=$ROOT/.pg/$MAJOR/bin

say() { printf '==> %s\n' "$*"; }
# run a command as the OS user postgres (servers refuse to run as root)
as_pg() {
    if [ "$(id -un)" = postgres ]; then (cd / && "$@")
    else (cd / && sudo -n -u postgres -- "$@"); fi
}
stop_cluster() {
    if [ -f "$DATA/postmaster.pid" ]; then
        as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 120 stop >/dev/null 2>&1 || true
    fi
}
finish() {
    if [ "$KEEP" = 1 ]; then say "cluster left running on port $PORT (data: $DATA)"
    else stop_cluster; fi
}

# The benchmark runs from $W/pg, a copy of .pg/MAJOR: a `cargo pgrx install` into .pg/MAJOR
# rewrites pg_snapbuild.so in place, which kills backends that have it mapped (SIGBUS), and a
# release build must not replace the tests' build.
bench_copy_tree() {
    mkdir -p "$W"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$W"; fi
    stop_cluster

    say "copy .pg/$MAJOR to $W_LABEL/pg"
    rm -rf "$W/pg"
    cp -a "$ROOT/.pg/$MAJOR" "$W/pg"
    BIN=$W/pg/bin
    if [ "$RELEASE" = 1 ]; then
        say "release build of the work tree into $W_LABEL/pg (log: $W/build.log)"
        if [ -d "$HOME/.cargo/bin" ]; then PATH=$HOME/.cargo/bin:$PATH; fi
        (cd "$ROOT" && CARGO_TARGET_DIR=$W/target cargo pgrx install --release --pg-config "$BIN/pg_config" \
            --no-default-features --features "pg$MAJOR") >"$W/build.log" 2>&1 ||
            { tail -n 30 "$W/build.log" >&2; exit 1; }
    fi
    SO=$("$BIN/pg_config" --pkglibdir)/pg_snapbuild.so
    [ -f "$SO" ] || { echo "pg_snapbuild is not installed in $BIN/..: run scripts/setup.sh" >&2; exit 1; }
    # An unoptimized (cargo pgrx install without --release) build keeps core's debug checks.
    if grep -q 'precondition_check' "$SO"; then BUILD=debug; else BUILD=release; fi
    if [ "$RELEASE" = 1 ]; then
        SOURCE="work tree at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
        if [ -n "$(git -C "$ROOT" status --porcelain -- src 2>/dev/null)" ]; then SOURCE="$SOURCE+changes"; fi
    else
        SOURCE="as installed in .pg/$MAJOR on $(date -u -r "$SO" '+%Y-%m-%d %H:%M UTC')"
    fi
    say "extension $SO: $BUILD build, $SOURCE"
    if [ "$BUILD" = debug ]; then
        say "note: an unoptimized build; for representative wall times use PGSNAP_BENCH_RELEASE=1"
    fi

    export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
    export PATH=$BIN:$PATH
}

q() { psql -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }
lsn_diff() { q "SELECT ('$2'::pg_lsn - '$1'::pg_lsn)::bigint"; }

bench_fresh_cluster() { # settings for postgresql.conf on stdin
    local settings
    # In a subshell (e.g. at the end of a pipe) the EXIT trap set below would run when the
    # subshell ends and stop the cluster just started: refuse.
    if [ "$BASHPID" != "$$" ]; then
        echo "bench_fresh_cluster: called in a subshell (a pipe?); give the settings as a here-document" >&2
        exit 2
    fi
    settings="listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCK'
wal_level = logical
max_wal_size = 4GB
fsync = off
log_line_prefix = '%m [%p] '
$(cat)"
    say "fresh cluster in $DATA on port $PORT"
    as_pg rm -rf "$DATA" "$SOCK"
    as_pg mkdir -p "$SOCK"
    as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --no-locale >"$W/initdb.log" 2>&1 ||
        { cat "$W/initdb.log" >&2; exit 1; }
    as_pg tee -a "$DATA/postgresql.conf" >/dev/null <<<"$settings"
    trap finish EXIT
    as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null ||
        { echo "bench cluster failed to start; tail of $LOG:" >&2; tail -n 30 "$LOG" >&2; exit 1; }
}

bench_start_kept_cluster() { # the cluster in $DATA a run with PGSNAP_BENCH_KEEP=1 left
    say "kept cluster in $DATA on port $PORT"
    trap finish EXIT
    as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null ||
        { echo "bench cluster failed to start; tail of $LOG:" >&2; tail -n 30 "$LOG" >&2; exit 1; }
}

bench_idle_backend() {
    read -r IDLE_KIB IDLE_ANON_KIB <<<"$(psql -X -q -At -v ON_ERROR_STOP=1 <<'SQL'
SELECT pg_backend_pid() AS pid \gset
\setenv BENCH_PID :pid
\! awk '$1 == "VmHWM:" { h = $2 } $1 == "RssAnon:" { a = $2 } END { print h, a }' "/proc/$BENCH_PID/status"
SQL
)"
    say "idle backend: peak RSS (VmHWM) $((IDLE_KIB / 1024)) MiB, RssAnon $((IDLE_ANON_KIB / 1024)) MiB"
}

bench_sampled_psql() {
    rm -rf "$BENCH_SAMPLES"
    mkdir -p "$BENCH_SAMPLES"
    {
        cat <<'SQL'
SELECT pg_backend_pid() AS pid \gset
\setenv BENCH_PID :pid
\! python3 "$BENCH_LIB_DIR/sample.py" "$BENCH_PID" "$BENCH_SAMPLES" >/dev/null & i=0; while [ ! -e "$BENCH_SAMPLES/ready" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
SQL
        cat
    } | psql -X -q -At -v ON_ERROR_STOP=1 -v "query=$1"
}

# The traces' own rows, stored once, to measure the executor's tuplestore on them: count(*)
# over bench_rows_cte less count(*) over bench_rows_scan. Columns are renamed c1..cN (as many
# as the function returns, read from pg_proc): a table cannot have columns named xmin.
bench_store_rows() { # T ALL START END
    local ncols
    ncols=$(q "SELECT count(*) FROM pg_proc p, unnest(p.proargmodes) AS m
               WHERE p.proname = 'snapbuild_trace_range' AND m = 't'")
    q "DROP TABLE IF EXISTS bench_$1_rows" >/dev/null
    q "CREATE UNLOGGED TABLE bench_$1_rows AS SELECT * FROM \
         snapbuild_trace_range('$3', '$4', all_records => $2) AS t($(seq -s, -f 'c%g' 1 "$ncols"))" >/dev/null
    q "VACUUM ANALYZE bench_$1_rows" >/dev/null
}
bench_rows_cte() { echo "(WITH m AS MATERIALIZED (SELECT * FROM bench_$1_rows) SELECT * FROM m) AS s"; }
bench_rows_scan() { echo "(SELECT * FROM bench_$1_rows OFFSET 0) AS s"; }
bench_check_cte() { # T
    q "EXPLAIN SELECT count(*) FROM $(bench_rows_cte "$1")" | grep -q 'CTE Scan' ||
        { echo "the CTE over bench_$1_rows was not planned as a CTE Scan" >&2; exit 1; }
}
