-- snapbuild_diagnose: argument errors and the findings of an idle consistent slot
-- (LSNs and byte counts are not printed; they vary).
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE q;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
-- an unknown slot: undefined_object; NULL: null_value_not_allowed
SELECT pg_temp.err($$SELECT * FROM snapbuild_diagnose('snapbuild_regress_no_such_slot')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_diagnose(NULL)$$);
-- a physical slot: object_not_in_prerequisite_state
SELECT slot_name FROM pg_create_physical_replication_slot('snapbuild_regress_diag_phys');
SELECT pg_temp.err($$SELECT * FROM snapbuild_diagnose('snapbuild_regress_diag_phys')$$);
SELECT pg_drop_replication_slot('snapbuild_regress_diag_phys');
-- a consistent slot that no process uses: no creation rows, its lag and retained WAL
SELECT slot_name FROM pg_create_logical_replication_slot('snapbuild_regress_diag', 'test_decoding');
CREATE TEMP VIEW diag AS
SELECT kind,
       regexp_replace(regexp_replace(finding, '[0-9A-F]+/[0-9A-F]+', 'X/X', 'g'),
                      '[0-9]+ bytes', 'N bytes', 'g') AS finding,
       xid IS NULL AS no_xid, pid IS NULL AS no_pid, lsn IS NOT NULL AS has_lsn,
       bytes >= 0 AS bytes_counted, remedy
FROM snapbuild_diagnose('snapbuild_regress_diag') WHERE kind <> 'catalog horizon';
\x on
SELECT * FROM diag;
\x off
-- the slot's catalog_xmin is the oldest horizon of the cluster (nothing else holds one
-- older; the calling backend's own xmin does not count)
SELECT kind, finding ~ '^catalog_xmin [0-9]+ \(age [0-9]+ xids\) is the cluster''s oldest xmin horizon' AS oldest,
       xid = (SELECT catalog_xmin FROM pg_replication_slots WHERE slot_name = 'snapbuild_regress_diag') AS names_catalog_xmin
FROM snapbuild_diagnose('snapbuild_regress_diag') WHERE kind = 'catalog horizon';
-- after consuming: the same kinds, nothing lags
SELECT count(*) >= 0 AS consumed FROM pg_logical_slot_get_changes('snapbuild_regress_diag', NULL, NULL);
SELECT kind, bytes < 65536 AS caught_up FROM snapbuild_diagnose('snapbuild_regress_diag') WHERE kind = 'consumer lag';
-- the health view: one row for it, numbers only; it resumes the replay the diagnosis above
-- kept in this session, and a repeated scrape reads no WAL that was read before
SELECT slot_name, state, in_creation, waiting_xids, oldest_blocking_pid,
       restart_lsn_lag_bytes >= 0 AS restart_lag, confirmed_flush_lag_bytes >= 0 AS confirmed_lag,
       catalog_xmin_age >= 0 AS age, last_running_xacts IS NOT NULL AS has_running_xacts,
       replayed_bytes < 65536 AS resumed, running_xacts_age_s >= 0 AS aged,
       releasable_bytes AS releasable
FROM snapbuild_slot_health WHERE slot_name = 'snapbuild_regress_diag';
SELECT replayed_bytes < 65536 AS resumed FROM snapbuild_slot_health
WHERE slot_name = 'snapbuild_regress_diag';
SELECT pg_drop_replication_slot('snapbuild_regress_diag');
SELECT count(*) AS rows_for_the_dropped_slot FROM snapbuild_slot_health
WHERE slot_name = 'snapbuild_regress_diag';
