-- PG 15 (no pg_logicalinspect): .snap files the server wrote decode with version 4, no
-- catchange array, no in_slot_creation; the size is the version-4 layout.
SELECT 'created' FROM pg_create_logical_replication_slot('snapbuild_regress_od', 'test_decoding');
CREATE TABLE snapbuild_regress_od_t (a int);
CHECKPOINT;
INSERT INTO snapbuild_regress_od_t VALUES (1);
SELECT count(*) > 0 AS decoded FROM pg_logical_slot_get_changes('snapbuild_regress_od', NULL, NULL);
CHECKPOINT;
INSERT INTO snapbuild_regress_od_t VALUES (2);
SELECT count(*) > 0 AS decoded FROM pg_logical_slot_get_changes('snapbuild_regress_od', NULL, NULL);
CREATE TEMP VIEW od_files AS
SELECT d.name, d.size FROM pg_ls_logicalsnapdir() d
WHERE d.name ~ '^[0-9A-F]+-[0-9A-F]+\.snap$'
  AND replace(split_part(d.name, '.', 1), '-', '/')::pg_lsn >=
      (SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'snapbuild_regress_od');
SELECT count(*) > 0 AS have_files FROM od_files;
SELECT bool_and(o.magic = 1369563137) AS magic,
       bool_and(o.version = 4) AS version_4,
       bool_and(o.checksum_ok) AS checksum_ok,
       bool_and(o.state = 'consistent') AS consistent,
       bool_and(o.in_slot_creation IS NULL) AS no_in_slot_creation,
       bool_and(o.catchange_count IS NULL AND o.catchange_xip IS NULL) AS no_catchange,
       bool_and(f.size = 128 + 4 * o.committed_count) AS size_is_v4_layout,
       bool_and(o.committed_count = coalesce(cardinality(o.committed_xip), 0)) AS count_matches_array
FROM od_files f, LATERAL snapbuild_snapshot_info(f.name) o;
SELECT bool_and(s.error IS NULL) AS no_error, bool_and(s.version = 4) AS version_4
FROM snapbuild_snapshot_files() s JOIN od_files f USING (name);
DROP VIEW od_files;
SELECT pg_drop_replication_slot('snapbuild_regress_od');
DROP TABLE snapbuild_regress_od_t;
