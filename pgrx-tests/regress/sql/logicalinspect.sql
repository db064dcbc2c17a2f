-- PG 18: snapbuild_snapshot_info against pg_logicalinspect, for .snap files the server
-- wrote, column by column.
CREATE EXTENSION IF NOT EXISTS pg_logicalinspect;
SELECT 'created' FROM pg_create_logical_replication_slot('snapbuild_regress_li', 'test_decoding');
CREATE TABLE snapbuild_regress_li_t (a int);
-- a catalog change left uncommitted in another session would need two sessions; one
-- committed DDL and a few RUNNING_XACTS suffice for committed xids
SELECT pg_log_standby_snapshot() IS NOT NULL AS logged;
INSERT INTO snapbuild_regress_li_t VALUES (1);
SELECT count(*) > 0 AS decoded FROM pg_logical_slot_get_changes('snapbuild_regress_li', NULL, NULL);
SELECT pg_log_standby_snapshot() IS NOT NULL AS logged;
INSERT INTO snapbuild_regress_li_t VALUES (2);
SELECT count(*) > 0 AS decoded FROM pg_logical_slot_get_changes('snapbuild_regress_li', NULL, NULL);
-- files this slot still protects from removal
CREATE TEMP VIEW li_files AS
SELECT d.name FROM pg_ls_logicalsnapdir() d
WHERE d.name ~ '^[0-9A-F]+-[0-9A-F]+\.snap$'
  AND replace(split_part(d.name, '.', 1), '-', '/')::pg_lsn >=
      (SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'snapbuild_regress_li');
SELECT count(*) > 0 AS have_files FROM li_files;
SELECT bool_and(o.magic IS NOT DISTINCT FROM m.magic) AS magic,
       bool_and(o.checksum IS NOT DISTINCT FROM m.checksum) AS checksum,
       bool_and(o.version IS NOT DISTINCT FROM m.version) AS version,
       bool_and(o.checksum_ok) AS checksum_ok,
       bool_and(o.state IS NOT DISTINCT FROM i.state) AS state,
       bool_and(o.xmin IS NOT DISTINCT FROM i.xmin) AS xmin,
       bool_and(o.xmax IS NOT DISTINCT FROM i.xmax) AS xmax,
       bool_and(o.start_decoding_at IS NOT DISTINCT FROM i.start_decoding_at) AS start_decoding_at,
       bool_and(o.two_phase_at IS NOT DISTINCT FROM i.two_phase_at) AS two_phase_at,
       bool_and(o.initial_xmin_horizon IS NOT DISTINCT FROM i.initial_xmin_horizon) AS initial_xmin_horizon,
       bool_and(o.building_full_snapshot IS NOT DISTINCT FROM i.building_full_snapshot) AS building_full_snapshot,
       bool_and(o.in_slot_creation IS NOT DISTINCT FROM i.in_slot_creation) AS in_slot_creation,
       bool_and(o.last_serialized_snapshot IS NOT DISTINCT FROM i.last_serialized_snapshot) AS last_serialized_snapshot,
       bool_and(o.next_phase_at IS NOT DISTINCT FROM i.next_phase_at) AS next_phase_at,
       bool_and(o.committed_count IS NOT DISTINCT FROM i.committed_count) AS committed_count,
       bool_and(o.committed_xip IS NOT DISTINCT FROM i.committed_xip) AS committed_xip,
       bool_and(o.catchange_count IS NOT DISTINCT FROM i.catchange_count) AS catchange_count,
       bool_and(o.catchange_xip IS NOT DISTINCT FROM i.catchange_xip) AS catchange_xip
FROM li_files f,
     LATERAL snapbuild_snapshot_info(f.name) o,
     LATERAL pg_get_logical_snapshot_meta(f.name) m,
     LATERAL pg_get_logical_snapshot_info(f.name) i;
-- the listing decodes the same files the same way
SELECT bool_and(s.error IS NULL) AS no_error,
       bool_and(s.version = 6) AS version_6,
       bool_and(s.state IS NOT DISTINCT FROM i.state AND s.xmin IS NOT DISTINCT FROM i.xmin
                AND s.xmax IS NOT DISTINCT FROM i.xmax
                AND s.committed_xip IS NOT DISTINCT FROM i.committed_xip
                AND s.catchange_xip IS NOT DISTINCT FROM i.catchange_xip) AS same_as_server,
       bool_and(s.lsn = replace(split_part(s.name, '.', 1), '-', '/')::pg_lsn) AS lsn_from_name
FROM snapbuild_snapshot_files() s JOIN li_files f USING (name),
     LATERAL pg_get_logical_snapshot_info(s.name) i;
-- a missing file: the same SQLSTATE and text as pg_logicalinspect (the server's own error)
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE q;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT pg_temp.err($$SELECT * FROM snapbuild_snapshot_info('FFFFFFFF-FFFFFFFF.snap')$$)
     = pg_temp.err($$SELECT * FROM pg_get_logical_snapshot_meta('FFFFFFFF-FFFFFFFF.snap')$$)
       AS same_error;
DROP VIEW li_files;
SELECT pg_drop_replication_slot('snapbuild_regress_li');
DROP TABLE snapbuild_regress_li_t;
