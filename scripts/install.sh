#!/usr/bin/env bash
# Build pg_snapbuild and install it into one PostgreSQL tree, or stage it for packaging.
#   install.sh MAJOR            cargo pgrx install --release into .pg/MAJOR
#   install.sh --package MAJOR [--pg-config PATH] [--out-dir DIR]
#                               cargo pgrx package (release) for PATH (default .pg/MAJOR/bin/pg_config)
#                               into DIR (default target/release/pg_snapbuild-pgMAJOR/), a tree that
#                               mirrors the absolute install paths PATH reports (--pkglibdir,
#                               --sharedir); scripts/package.sh makes the .deb and tarball from it
# Both then add the frozen install scripts of older versions (sql/pg_snapbuild--X.Y.Z.sql), which
# pgrx does not copy: it generates the current version's script and copies only the upgrade
# scripts sql/pg_snapbuild--A--B.sql. PGSNAP_BUILD=debug builds without --release.
# With --package the bindings are generated from PATH's server headers (PGRX_PG_CONFIG_PATH):
# `cargo pgrx package --pg-config` alone takes only the install paths from it and builds against
# the pg_config that ~/.pgrx/config.toml lists for the major.
set -euo pipefail

usage() { echo "usage: $0 MAJOR | $0 --package MAJOR [--pg-config PATH] [--out-dir DIR]" >&2; exit 2; }
package=0 PG_CONFIG= out=
[ "${1:-}" = --package ] && { package=1; shift; }
[ $# -ge 1 ] || usage
major=$1; shift
case $major in 1[0-9]) ;; *) usage ;; esac
while [ $# -gt 0 ]; do
    case $1 in
        --pg-config) [ "$package" = 1 ] && [ $# -ge 2 ] || usage; PG_CONFIG=$2; shift 2 ;;
        --out-dir) [ "$package" = 1 ] && [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
        *) usage ;;
    esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "$PG_CONFIG" ]; then
    PG_CONFIG=$ROOT/.pg/$major/bin/pg_config
    [ -x "$PG_CONFIG" ] || { echo "no PostgreSQL $major in $ROOT/.pg/$major: run scripts/setup.sh" >&2; exit 1; }
fi
[ -x "$PG_CONFIG" ] || { echo "$PG_CONFIG: not an executable pg_config" >&2; exit 1; }
PG_CONFIG=$(cd "$(dirname "$PG_CONFIG")" && pwd)/$(basename "$PG_CONFIG")
got=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')
[ "$got" = "$major" ] || { echo "$PG_CONFIG is PostgreSQL ${got:-?}, not $major" >&2; exit 1; }
[ -d "$HOME/.cargo/bin" ] && PATH=$HOME/.cargo/bin:$PATH
cd "$ROOT"
features=(--no-default-features --features "pg$major")
extdir=$("$PG_CONFIG" --sharedir)/extension

if [ "$package" = 1 ]; then
    if [ -z "$out" ]; then
        out=$ROOT/target/release/pg_snapbuild-pg$major
        [ "${PGSNAP_BUILD:-release}" = debug ] && out=$ROOT/target/debug/pg_snapbuild-pg$major
    fi
    [ "${PGSNAP_BUILD:-release}" = debug ] && features+=(--debug)
    mkdir -p "$out"; out=$(cd "$out" && pwd)
    rm -rf "$out"   # no files of an earlier version left in the package
    PGRX_PG_CONFIG_PATH=$PG_CONFIG cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$out" "${features[@]}"
    dest=$out$extdir
else
    [ "${PGSNAP_BUILD:-release}" = debug ] || features+=(--release)
    cargo pgrx install --pg-config "$PG_CONFIG" "${features[@]}"
    dest=$extdir
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
for f in "$ROOT"/sql/pg_snapbuild--*.sql; do
    name=$(basename "$f")
    case $name in
        pg_snapbuild--*--*.sql) ;;                # upgrade script: pgrx copied it
        "pg_snapbuild--$version.sql") ;;          # the current version: pgrx generated it
        *) echo "     Copying frozen install script to ${dest#"$ROOT/"}/$name"
           install -m 644 "$f" "$dest/$name" ;;
    esac
done
