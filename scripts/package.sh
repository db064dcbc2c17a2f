#!/usr/bin/env bash
# Installable packages of the release build for one PostgreSQL major.
#   package.sh MAJOR [--pg-config PATH]
# PATH is the pg_config of the server the packages are for (default: .pg/MAJOR/bin/pg_config);
# the shared library is built against its server headers (Debian/Ubuntu: postgresql-server-dev-MAJOR,
# /usr/lib/postgresql/MAJOR/bin/pg_config). Writes into target/package/:
#   postgresql-MAJOR-snapbuild_VERSION_ARCH.deb   PGDG layout: /usr/lib/postgresql/MAJOR/lib and
#                                                 /usr/share/postgresql/MAJOR/extension, whatever
#                                                 PATH's own layout; Depends: postgresql-MAJOR
#   pg_snapbuild-VERSION-pgMAJOR-linux-ARCH.tar.gz   the same files and an install.sh that asks
#                                                 pg_config where they go
# VERSION is Cargo.toml's. The build (scripts/install.sh --package: cargo pgrx package, plus the
# frozen install scripts of older versions) uses its own cargo target directory,
# .work/target-package (CARGO_TARGET_DIR replaces it), so that it does not take turns with
# the development builds of other majors in target/.
set -euo pipefail

usage() { echo "usage: $0 MAJOR [--pg-config PATH]" >&2; exit 2; }
[ $# -ge 1 ] || usage
major=$1; shift
case $major in 1[0-9]) ;; *) usage ;; esac
PG_CONFIG=
while [ $# -gt 0 ]; do
    case $1 in
        --pg-config) [ $# -ge 2 ] || usage; PG_CONFIG=$2; shift 2 ;;
        *) usage ;;
    esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-$ROOT/.pg/$major/bin/pg_config}
[ -x "$PG_CONFIG" ] || { echo "$PG_CONFIG: no pg_config there (run scripts/setup.sh, or give --pg-config)" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "dpkg-deb not found (Debian package dpkg)" >&2; exit 1; }
cd "$ROOT"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
arch=$(dpkg --print-architecture)                 # amd64
case $(uname -m) in x86_64) tarch=x86_64 ;; *) tarch=$(uname -m) ;; esac
OUT=$ROOT/target/package
W=$OUT/work-pg$major
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/.work/target-package}

# 1. build and stage: a tree mirroring PG_CONFIG's absolute install paths
rm -rf "$W"; mkdir -p "$W"
"$ROOT/scripts/install.sh" --package "$major" --pg-config "$PG_CONFIG" --out-dir "$W/staged"
libdir=$W/staged$("$PG_CONFIG" --pkglibdir)
extdir=$W/staged$("$PG_CONFIG" --sharedir)/extension
[ -f "$libdir/pg_snapbuild.so" ] && [ -f "$extdir/pg_snapbuild.control" ] \
    && [ -f "$extdir/pg_snapbuild--$version.sql" ] \
    || { echo "cargo pgrx package left no pg_snapbuild.so / control / install script in $W/staged" >&2; exit 1; }
ext_files=("$extdir"/pg_snapbuild.control "$extdir"/pg_snapbuild--*.sql)

# 2. the .deb, laid out as PGDG's postgresql-MAJOR-* packages
name=postgresql-$major-snapbuild
deb=$W/deb
install -d "$deb/DEBIAN" "$deb/usr/lib/postgresql/$major/lib" "$deb/usr/share/postgresql/$major/extension"
install -m 644 "$libdir/pg_snapbuild.so" "$deb/usr/lib/postgresql/$major/lib/"
install -m 644 "${ext_files[@]}" "$deb/usr/share/postgresql/$major/extension/"
cat >"$deb/DEBIAN/control" <<CONTROL
Package: $name
Version: $version
Architecture: $arch
Maintainer: pg_snapbuild developers
Installed-Size: $(du -sk --exclude=DEBIAN "$deb" | cut -f1)
Depends: postgresql-$major
Section: database
Priority: optional
Description: PostgreSQL $major extension replaying logical decoding's snapshot builder
 pg_snapbuild re-runs PostgreSQL's logical decoding snapshot builder (snapbuild.c) over the
 server's WAL, beside the server's own verdicts: why a replication slot's creation hangs and
 which session it waits for, what restart_lsn and catalog_xmin are held back by, and whether
 each step agrees with what the server logged. CREATE EXTENSION pg_snapbuild (superuser);
 wal_level = logical; no shared_preload_libraries entry.
CONTROL
(cd "$deb" && find usr -type f -print0 | sort -z | xargs -0 md5sum >DEBIAN/md5sums)
debfile=$OUT/${name}_${version}_${arch}.deb
rm -f "$debfile"
dpkg-deb --root-owner-group -Zxz --build "$deb" "$debfile" >/dev/null

# 3. the tarball, for other layouts: install.sh asks pg_config where the files go
tname=pg_snapbuild-$version-pg$major-linux-$tarch
t=$W/$tname
install -d "$t/lib" "$t/extension"
install -m 644 "$libdir/pg_snapbuild.so" "$t/lib/"
install -m 644 "${ext_files[@]}" "$t/extension/"
cat >"$t/install.sh" <<INSTALL
#!/bin/sh
# Installs pg_snapbuild $version for PostgreSQL $major where pg_config says: the shared library
# into --pkglibdir, the control and SQL files into --sharedir/extension.
#   ./install.sh [--pg-config PATH]     (default: pg_config on PATH; run as a user who may
#                                        write there, e.g. with sudo)
set -eu
PG_CONFIG=pg_config
case "\${1:-}" in
    --pg-config) [ \$# -eq 2 ] || { echo "usage: \$0 [--pg-config PATH]" >&2; exit 2; }; PG_CONFIG=\$2 ;;
    "") ;;
    *) echo "usage: \$0 [--pg-config PATH]" >&2; exit 2 ;;
esac
command -v "\$PG_CONFIG" >/dev/null 2>&1 || { echo "\$PG_CONFIG not found: put the server's pg_config on PATH or give --pg-config" >&2; exit 1; }
server=\$("\$PG_CONFIG" --version)
case "\$server" in
    "PostgreSQL $major."*|"PostgreSQL ${major}beta"*|"PostgreSQL ${major}rc"*) ;;
    *) echo "this package is for PostgreSQL $major; \$PG_CONFIG is \$server" >&2; exit 1 ;;
esac
here=\$(cd "\$(dirname "\$0")" && pwd)
libdir=\$("\$PG_CONFIG" --pkglibdir)
extdir=\$("\$PG_CONFIG" --sharedir)/extension
install -d "\$libdir" "\$extdir"
install -m 755 "\$here/lib/pg_snapbuild.so" "\$libdir/"
install -m 644 "\$here"/extension/* "\$extdir/"
echo "installed pg_snapbuild $version (\$server): \$libdir/pg_snapbuild.so, \$extdir/pg_snapbuild*"
echo "then, as a superuser, in each database that wants it: CREATE EXTENSION pg_snapbuild;"
INSTALL
chmod 755 "$t/install.sh"
tarfile=$OUT/$tname.tar.gz
rm -f "$tarfile"
tar -C "$W" --owner=0 --group=0 --numeric-owner --sort=name -czf "$tarfile" "$tname"

echo "built against $("$PG_CONFIG" --version) ($PG_CONFIG):"
for f in "$debfile" "$tarfile"; do
    printf '  %s  %s\n' "$(du -h "$f" | cut -f1)" "${f#"$ROOT/"}"
done
