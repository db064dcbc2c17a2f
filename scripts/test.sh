#!/usr/bin/env bash
# README command 2: every test, on PostgreSQL 18, 17, 16, 15 and 14.
#   setup.sh; cargo test -p snapbuild-core; the monitoring kit's check (no server); a short fuzz pass (scripts/fuzz.sh); then per major: cargo pgrx test, pg_regress against a
#   throw-away cluster (scripts/cluster.sh), the multi-session tests (pgrx-tests/), cluster stop; on 18 a
#   90 s soak (scripts/soak.sh 90: fails on a crash or an undocumented SQLSTATE).
# Prints one summary line per stage; exits non-zero if any stage failed.
# PGSNAP_MAJORS="18" limits the majors (default "18 17 16 15 14"). PGSNAP_MINORS=all adds, after them,
# the multi-session and random-workload tests on every older minor release of those majors (setup
# unpacks them into .pg/MAJOR.MINOR; about 2 min each), with the random workload's seeds from
# PGSNAP_MINOR_SEEDS (default: PGSNAP_SEEDS, else 1,2,3). Test stages have time limits (below) so a
# hung test cannot eat a CI budget: setup from nothing ~25 min (cargo-pgrx ~10, release builds ~3.5 min
# for the first major + ~1 min per further one) + at most 5 x (6 + 2 + 8) min.
# Disk: about 9 GB at the peak (builds ~7 GB; each major's cluster is removed once its tests passed,
# the soak's too); the run says how much is free first and fails early below PGSNAP_MIN_FREE_GB (8).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
W=$ROOT/.work
MAJORS=${PGSNAP_MAJORS:-18 17 16 15 14}
export PGSNAP_MAJORS=$MAJORS
LIMIT=360 REGRESS_LIMIT=120 MULTI_LIMIT=480   # seconds
cd "$ROOT" || exit 1
[ -d "$HOME/.cargo/bin" ] && PATH=$HOME/.cargo/bin:$PATH
T0=$SECONDS
summary=() failed=0
export CARGO_INCREMENTAL=0   # no incremental caches: nothing is rebuilt twice here, and they are GBs

# stage NAME CMD...: run, record PASS / FAIL / SKIP (exit code 77) with its duration
stage() {
    local name=$1 start=$SECONDS rc; shift
    printf '\n######## %s\n' "$name"
    "$@"; rc=$?
    case $rc in
        0) summary+=("PASS  $name ($((SECONDS - start))s)") ;;
        77) summary+=("SKIP  $name") ;;
        124) summary+=("FAIL  $name (timed out after $((SECONDS - start))s)"); failed=1 ;;
        *) summary+=("FAIL  $name ($((SECONDS - start))s, exit $rc)"); failed=1 ;;
    esac
    return $rc
}
older_minors() { # the .pg/MAJOR.MINOR trees of the selected majors, newest first
    for m in $MAJORS; do
        for d in "$ROOT"/.pg/"$m".*; do [ -d "$d" ] && basename "$d"; done | sort -t. -k2,2nr
    done
}
finish() {
    for m in $MAJORS $([ "${PGSNAP_MINORS:-}" = all ] && older_minors); do "$ROOT/scripts/cluster.sh" stop "$m" >/dev/null 2>&1; done
    printf '\n######## summary (%ss)\n' "$((SECONDS - T0))"
    printf '%s\n' "${summary[@]}"
    exit $failed
}
trap finish EXIT

pgrx_test() ( # MAJOR: #[pg_test] functions in a server pgrx starts itself, as user postgres
    d=$W/pgrx-test-$1
    stop_leftovers() { # servers of a killed earlier run (pgrx stops and removes its own otherwise)
        for pidfile in "$d"/*/postmaster.pid; do
            [ -e "$pidfile" ] && sudo -n -u postgres "$ROOT/.pg/$1/bin/pg_ctl" stop -m immediate \
                -D "${pidfile%/postmaster.pid}" >/dev/null 2>&1
        done
    }
    stop_leftovers "$1"; rm -rf "$d"
    mkdir -p "$d" && chown postgres: "$d" || exit 1
    timeout -k 30 "$LIMIT" cargo pgrx test "pg$1" --runas postgres --pgdata "$d"; rc=$?
    stop_leftovers "$1"
    exit $rc
)

start_cluster() ( # MAJOR: `cargo pgrx test` installed a test build: put the normal one back,
    # then start a new cluster (a kept one could hold an older version of the extension).
    # Same release build as setup.sh (scripts/install.sh, with the frozen old-version scripts).
    "$ROOT/scripts/install.sh" "$1" >"$W/logs/install-$1.log" 2>&1 || { tail -n 40 "$W/logs/install-$1.log"; exit 1; }
    "$ROOT/scripts/cluster.sh" stop "$1" >/dev/null 2>&1
    rm -rf "$W/pg$1"
    "$ROOT/scripts/cluster.sh" start "$1"
)

regress() ( # MAJOR: pg_regress over pgrx-tests/regress, against the running cluster
    major=$1 dir=$ROOT/pgrx-tests/regress out=$W/regress-$1
    eval "$("$ROOT/scripts/cluster.sh" env "$major")"
    tests=()
    if [ -f "$dir/schedule-$major" ]; then
        read -r -a tests <<<"$(sed -e 's/#.*//' -e 's/^ *test://' "$dir/schedule-$major" | tr '\n' ' ')"
    else
        for f in "$dir"/sql/*.sql; do [ -e "$f" ] && tests+=("$(basename "$f" .sql)"); done
    fi
    [ ${#tests[@]} -gt 0 ] || { echo "no tests in pgrx-tests/regress/sql yet: skipped"; exit 77; }
    PGOPTIONS="-c client_min_messages=warning" dropdb --if-exists snapbuild_regress && createdb snapbuild_regress || exit 1
    rm -rf "$out"; mkdir -p "$out"
    timeout -k 10 "$REGRESS_LIMIT" "$ROOT/.pg/$major/lib/pgxs/src/test/regress/pg_regress" --use-existing --bindir="$ROOT/.pg/$major/bin" \
        --host=127.0.0.1 --port="$PGPORT" --user=postgres --dbname=snapbuild_regress \
        --inputdir="$dir" --outputdir="$out" "${tests[@]}" && exit 0
    [ -f "$out/regression.diffs" ] && head -n 300 "$out/regression.diffs"
    exit 1
)

meta_version() ( # META.json (PGXN) carries Cargo.toml's version, for the distribution and the extension
    cargo_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
    python3 - "$cargo_version" <<'PY'
import json, sys
want = sys.argv[1]
meta = json.load(open("META.json"))
got = {"version": meta["version"], "provides.pg_snapbuild.version": meta["provides"]["pg_snapbuild"]["version"]}
bad = {k: v for k, v in got.items() if v != want}
print(f"Cargo.toml {want}; META.json {got}")
sys.exit(1 if bad else 0)
PY
)

disk_space() ( # enough free disk under the work tree for the builds and the clusters
    need=${PGSNAP_MIN_FREE_GB:-8}
    free=$(df -Pk "$ROOT" | awk 'NR == 2 { print int($4 / 1048576) }')
    df -h "$ROOT"
    [ "$free" -ge "$need" ] && { echo "$free GB free (needs about $need)"; exit 0; }
    echo "only $free GB free under $ROOT; a run needs about $need GB (PGSNAP_MIN_FREE_GB)" >&2
    exit 1
)

multi_session() ( # MAJOR: pgrx-tests/ (pg_snapbuild_tests) with the cluster's environment
    eval "$("$ROOT/scripts/cluster.sh" env "$1")"
    timeout -k 30 "$MULTI_LIMIT" cargo test -p pg_snapbuild_tests --no-fail-fast -- --test-threads=1 --nocapture
)

stage "disk: free space under the work tree" disk_space || exit
stage "setup" "$ROOT/scripts/setup.sh" || exit
stage "META.json version = Cargo.toml version" meta_version
stage "core: cargo test -p snapbuild-core" cargo test -p snapbuild-core
stage "monitoring kit: cargo test -p pg_snapbuild_tests --test monitoring" cargo test -p pg_snapbuild_tests --test monitoring
stage "core: fuzz, short pass (scripts/fuzz.sh 500000)" timeout -k 10 240 "$ROOT/scripts/fuzz.sh" 500000
for m in $MAJORS; do
    stage "pg$m: cargo pgrx test" pgrx_test "$m"
    if stage "pg$m: reinstall + start cluster" start_cluster "$m"; then
        stage "pg$m: pg_regress" regress "$m"
        stage "pg$m: multi-session tests" multi_session "$m" && ok=1 || ok=0
        stage "pg$m: stop cluster" "$ROOT/scripts/cluster.sh" stop "$m" && [ $ok = 1 ] && rm -rf "$W/pg$m"
        # the short soak (its own cluster, the build just installed): PostgreSQL 18 only
        if [ "$m" = 18 ]; then
            stage "pg18: soak, 90 s (scripts/soak.sh 90)" timeout -k 30 300 "$ROOT/scripts/soak.sh" 90 &&
                find "$W/soak" -mindepth 1 -maxdepth 1 ! -name 'result.json' ! -name '*.log' -exec rm -rf {} +
        fi
    else
        summary+=("SKIP  pg$m: pg_regress, multi-session tests (no cluster)")
    fi
done
# the .deb on Debian's packaged PostgreSQL 15 (apt), its own cluster on port 55815; skipped without apt
stage "debian: postgresql-15 from apt + the .deb, pg_regress, a hung creation (scripts/debian_stage.sh)" \
    timeout -k 30 900 "$ROOT/scripts/debian_stage.sh"
if [ "${PGSNAP_MINORS:-}" = all ]; then
    for v in $(older_minors); do   # the build of the major, copied by setup.sh
        rm -rf "$W/pg$v"
        if stage "pg$v: start cluster" "$ROOT/scripts/cluster.sh" start "$v"; then
            PGSNAP_SEEDS=${PGSNAP_MINOR_SEEDS:-${PGSNAP_SEEDS:-1,2,3}} stage "pg$v: multi-session tests" multi_session "$v"
            stage "pg$v: stop cluster" "$ROOT/scripts/cluster.sh" stop "$v"
        fi
    done
fi
