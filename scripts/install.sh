#!/usr/bin/env bash
# Build pg_snapbuild and install it into one PostgreSQL tree, or package it.
#   install.sh MAJOR            cargo pgrx install --release into .pg/MAJOR
#   install.sh --package MAJOR  cargo pgrx package (release) into target/release/pg_snapbuild-pgMAJOR/,
#                               a tree that mirrors the absolute install paths of .pg/MAJOR
# Both then add the frozen install scripts of older versions (sql/pg_snapbuild--X.Y.Z.sql), which
# pgrx does not copy: it generates the current version's script and copies only the upgrade
# scripts sql/pg_snapbuild--A--B.sql. PGSNAP_BUILD=debug builds without --release.
set -euo pipefail

usage() { echo "usage: $0 [--package] MAJOR" >&2; exit 2; }
package=0
[ "${1:-}" = --package ] && { package=1; shift; }
[ $# -eq 1 ] || usage
major=$1
case $major in 1[0-9]) ;; *) usage ;; esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_CONFIG=$ROOT/.pg/$major/bin/pg_config
[ -x "$PG_CONFIG" ] || { echo "no PostgreSQL $major in $ROOT/.pg/$major: run scripts/setup.sh" >&2; exit 1; }
[ -d "$HOME/.cargo/bin" ] && PATH=$HOME/.cargo/bin:$PATH
cd "$ROOT"
features=(--no-default-features --features "pg$major")
extdir=$("$PG_CONFIG" --sharedir)/extension

if [ "$package" = 1 ]; then
    out=$ROOT/target/release/pg_snapbuild-pg$major
    [ "${PGSNAP_BUILD:-release}" = debug ] && { out=$ROOT/target/debug/pg_snapbuild-pg$major; features+=(--debug); }
    rm -rf "$out"   # no files of an earlier version left in the package
    cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$out" "${features[@]}"
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
