#!/usr/bin/env bash
# Captures the fuzz corpus's seeds from real servers: runs a workload on the throw-away cluster
# of each MAJOR (scripts/cluster.sh, PGSNAP_PORT_BASE honoured; its tables, slot and origin are
# dropped afterwards), then copies what the server wrote: pg_logical/snapshots/*.snap,
# pg_logical/mappings/map-* (VACUUM FULL of catalogs with a slot present), heap pages
# (pageinspect get_raw_page), the server log's lines about decoders, and the WAL segments the
# workload wrote. The WAL segments are cut into record main data per record type by `snapfuzz
# capture` (fuzz/src/wal.rs reads the segment files: page headers, records split across pages,
# block headers, CRC-32C checked).
#   fuzz/capture.sh [MAJOR...]      default: 18 16 14 (one per on-disk snapshot version 6, 5, 4)
# Writes fuzz/corpus/<target>/pgMAJOR-*.bin. Needs the majors' binaries in .pg (scripts/setup.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MAJORS=${*:-18 16 14}
RAW=$ROOT/.work/fuzz-capture
cargo build --profile fuzz -q -p snapfuzz
for m in $MAJORS; do
    scripts/cluster.sh start "$m" >/dev/null
    eval "$(scripts/cluster.sh env "$m")"
    DATA=$ROOT/.work/pg$m/data
    first_seg=$(psql -qXAt -c "SELECT pg_walfile_name(pg_current_wal_insert_lsn())")
    psql -qX -v ON_ERROR_STOP=1 -o /dev/null 2>&1 <<'SQL'
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'fuzz%';
DROP TABLE IF EXISTS fz_map, fz, fz2, fz3, fz_sub, fz_open_1, fz_open_2, fz_open_3, fz_toast, fz_copy;
SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin WHERE roname = 'fuzz_origin';
CREATE EXTENSION IF NOT EXISTS pageinspect;
SELECT pg_switch_wal();
SELECT pg_create_logical_replication_slot('fuzz_slot', 'test_decoding');
CREATE TABLE fz(a int primary key, b text);
INSERT INTO fz SELECT g, repeat('x', g % 50) FROM generate_series(1, 300) g;
UPDATE fz SET b = b || 'u' WHERE a % 3 = 0;
DELETE FROM fz WHERE a % 7 = 0;
-- heap changes the reorder buffer accounts specially: TOAST rows (chunks, then the row;
-- updates keeping and replacing values), speculative inserts, COPY's multi-inserts, TRUNCATE
CREATE TABLE fz_toast(a int primary key, b text, c int8, d text);
ALTER TABLE fz_toast ALTER b SET STORAGE EXTERNAL;
INSERT INTO fz_toast SELECT g, repeat(chr(65 + g), 3000 + g), g, NULL FROM generate_series(1, 4) g;
UPDATE fz_toast SET c = c + 1 WHERE a = 1;
UPDATE fz_toast SET b = repeat('z', 2500), d = 'd' WHERE a = 2;
INSERT INTO fz_toast VALUES (1, 'x', 0, NULL) ON CONFLICT (a) DO UPDATE SET c = 7;
INSERT INTO fz_toast VALUES (9, 'x', 0, NULL) ON CONFLICT (a) DO NOTHING;
CREATE TABLE fz_copy(a int, b text);
COPY fz_copy FROM STDIN;
1	one
2	two
3	three
\.
TRUNCATE fz_copy, fz_toast;
BEGIN; INSERT INTO fz VALUES (1001, 'a'); SAVEPOINT s1; INSERT INTO fz VALUES (1002, 'b');
  SAVEPOINT s2; CREATE TABLE fz2(c int); INSERT INTO fz2 VALUES (1); RELEASE s2; ROLLBACK TO s1;
  INSERT INTO fz VALUES (1003, 'c'); COMMIT;
BEGIN; CREATE TABLE fz3(c int); INSERT INTO fz3 VALUES (1); ROLLBACK;
BEGIN; CREATE TABLE fz3(c int); ALTER TABLE fz3 ADD COLUMN d text; INSERT INTO fz3 VALUES (2, 'd');
  PREPARE TRANSACTION 'fuzz_gid_commit'; COMMIT PREPARED 'fuzz_gid_commit';
BEGIN; INSERT INTO fz3 VALUES (3); SAVEPOINT a; INSERT INTO fz3 VALUES (4);
  PREPARE TRANSACTION 'fuzz_gid_rollback_with_a_longer_name'; ROLLBACK PREPARED 'fuzz_gid_rollback_with_a_longer_name';
SELECT pg_logical_emit_message(true, 'fuzz_prefix', 'transactional message');
SELECT pg_logical_emit_message(false, 'fuzz', repeat('m', 300));
SELECT pg_logical_emit_message(false, '', '');
-- 70 subtransactions with DDL: ASSIGNMENT records (more than 64 unreported subxids), NEW_CIDs
CREATE TABLE fz_sub(a int);
DO $$ BEGIN FOR i IN 1..70 LOOP BEGIN EXECUTE 'ALTER TABLE fz_sub ADD COLUMN c' || i || ' int';
  EXCEPTION WHEN others THEN NULL; END; END LOOP; END $$;
CREATE TABLE fz2(c int); DROP TABLE fz2;
INSERT INTO fz_sub(a) SELECT g FROM generate_series(1, 50) g;
DELETE FROM fz_sub WHERE a % 4 = 0;
SELECT pg_replication_origin_create('fuzz_origin');
SELECT pg_replication_origin_session_setup('fuzz_origin');
BEGIN; SELECT pg_replication_origin_xact_setup('0/1000', now()); INSERT INTO fz VALUES (2001, 'origin'); COMMIT;
SELECT pg_replication_origin_session_reset();
SELECT pg_replication_origin_drop('fuzz_origin');
CHECKPOINT;
SELECT count(*) FROM pg_logical_slot_get_changes('fuzz_slot', NULL, NULL);
CHECKPOINT;
INSERT INTO fz VALUES (3001, 'after checkpoint');
SELECT count(*) FROM pg_logical_slot_get_changes('fuzz_slot', NULL, NULL);
SQL
    rm -rf "$RAW/pg$m" "$ROOT/fuzz/corpus"/*/"pg$m"-*; mkdir -p "$RAW/pg$m"/{wal,snapshots,mappings,pages}
    # more .snap files: serialization points while a catalog-changing transaction is open
    # (catchange xids, v5+) and after committed catalog changes (committed xids)
    for i in 1 2 3; do
        psql -qX -c "BEGIN; CREATE TABLE fz_open_$i(a int); SELECT pg_sleep(2); COMMIT" >/dev/null 2>&1 &
        sleep 0.5
        psql -qX -o /dev/null -c "CHECKPOINT" -c "SELECT count(*) FROM pg_logical_slot_get_changes('fuzz_slot', NULL, NULL)"
        sudo -n sh -c "cp $DATA/pg_logical/snapshots/*.snap $RAW/pg$m/snapshots/ 2>/dev/null" || true
        wait
        psql -qX -o /dev/null -c "DROP TABLE fz_open_$i" -c "CHECKPOINT" \
            -c "SELECT count(*) FROM pg_logical_slot_get_changes('fuzz_slot', NULL, NULL)"
    done
    # catalog rewrites with a slot whose catalog_xmin is older than the DDL: logical rewrite
    # mapping files (copied before a checkpoint could remove them)
    psql -qX -o /dev/null -c "ALTER TABLE fz ADD COLUMN e int" -c "CREATE TABLE fz_map(a int)" \
        -c "VACUUM FULL pg_class" -c "VACUUM FULL pg_attribute" -c "DROP TABLE fz_map"
    sudo -n sh -c "cp $DATA/pg_logical/mappings/map-* $RAW/pg$m/mappings/ 2>/dev/null" || true
    psql -qX -c "CHECKPOINT" >/dev/null
    sudo -n sh -c "cp $DATA/pg_logical/snapshots/*.snap $RAW/pg$m/snapshots/ 2>/dev/null; \
        cp $DATA/pg_logical/mappings/map-* $RAW/pg$m/mappings/ 2>/dev/null; \
        chown -R $(id -u) $RAW/pg$m" || true
    # the segments the workload wrote (from the one current at its start)
    for f in $(sudo -n ls "$DATA/pg_wal" | grep -E '^[0-9A-F]{24}$'); do
        [[ "$f" < "$first_seg" ]] || sudo -n cat "$DATA/pg_wal/$f" >"$RAW/pg$m/wal/$f"
    done
    for rel in pg_class pg_attribute pg_type fz fz3 fz_sub; do
        n=$(psql -qXAt -c "SELECT pg_relation_size('$rel') / 8192")
        for blk in $(printf "%s\n" 0 $((n / 2)) $((n - 1)) | sort -nu); do
            [ "$blk" -ge 0 ] && [ "$blk" -lt "$n" ] || continue
            psql -qXAt -c "SELECT encode(get_raw_page('$rel', $blk), 'hex')" | xxd -r -p >"$RAW/pg$m/pages/$rel-$blk.page"
        done
    done
    # the server log's lines about decoders (stderr format, log_line_prefix '%m [%p] ')
    tail -c 262144 "$ROOT/.work/pg$m/server.log" >"$RAW/pg$m/server.log"
    psql -qX -c "SELECT pg_drop_replication_slot('fuzz_slot')" \
        -c "DROP TABLE IF EXISTS fz, fz3, fz_sub, fz_toast, fz_copy" -c "DROP EXTENSION IF EXISTS pageinspect" >/dev/null
    target/fuzz/snapfuzz capture "$m" "$RAW/pg$m" "$ROOT/fuzz/corpus"
done
