-- .snap files the server wrote decode with the running major's on-disk layout:
-- version 4 up to 15 (no catchange array, no in_slot_creation), 5 in 16 (catchange),
-- 6 from 17 (in_slot_creation too); the file size is that layout's.
SELECT 'created' FROM pg_create_logical_replication_slot('snapbuild_regress_od', 'test_decoding');
CREATE TABLE snapbuild_regress_od_t (a int);
CHECKPOINT;
INSERT INTO snapbuild_regress_od_t VALUES (1);
SELECT count(*) > 0 AS decoded FROM pg_logical_slot_get_changes('snapbuild_regress_od', NULL, NULL);
CHECKPOINT;
INSERT INTO snapbuild_regress_od_t VALUES (2);
SELECT count(*) > 0 AS decoded FROM pg_logical_slot_get_changes('snapbuild_regress_od', NULL, NULL);
CREATE TEMP VIEW od_files AS
SELECT d.name, (pg_stat_file('pg_logical/snapshots/' || d.name)).size FROM pg_ls_dir('pg_logical/snapshots') AS d(name)
WHERE d.name ~ '^[0-9A-F]+-[0-9A-F]+\.snap$'
  AND replace(split_part(d.name, '.', 1), '-', '/')::pg_lsn >=
      (SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'snapbuild_regress_od');
CREATE TEMP VIEW od_major AS
SELECT current_setting('server_version_num')::int / 10000 AS major;
SELECT count(*) > 0 AS have_files FROM od_files;
SELECT bool_and(o.magic = 1369563137) AS magic,
       bool_and(o.version = CASE WHEN m.major <= 15 THEN 4 WHEN m.major = 16 THEN 5 ELSE 6 END) AS version,
       bool_and(o.checksum_ok) AS checksum_ok,
       bool_and(o.state = 'consistent') AS consistent,
       bool_and((o.in_slot_creation IS NULL) = (m.major < 17)) AS in_slot_creation_iff_17,
       bool_and((o.catchange_count IS NULL) = (m.major <= 15)) AS catchange_iff_16,
       bool_and(f.size = CASE WHEN m.major <= 15 THEN 128 ELSE 144 END
                         + 4 * (o.committed_count + coalesce(o.catchange_count, 0))) AS size_is_layout,
       bool_and(o.committed_count = coalesce(cardinality(o.committed_xip), 0)) AS count_matches_array
FROM od_files f, od_major m, LATERAL snapbuild_snapshot_info(f.name) o;
SELECT bool_and(s.error IS NULL) AS no_error,
       bool_and(s.version = CASE WHEN m.major <= 15 THEN 4 WHEN m.major = 16 THEN 5 ELSE 6 END) AS version
FROM snapbuild_snapshot_files() s JOIN od_files f USING (name), od_major m;
DROP VIEW od_major;
DROP VIEW od_files;
SELECT pg_drop_replication_slot('snapbuild_regress_od');
DROP TABLE snapbuild_regress_od_t;
