-- Errors: SQLSTATE and message of each (numbers that vary are not printed).
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE q;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
-- file names must be %X-%X.snap, no path
SELECT n, pg_temp.err(format('SELECT * FROM snapbuild_snapshot_info(%L)', n))
FROM unnest(ARRAY['foo', '', '../0-1.snap', '/tmp/0-1.snap', 'pg_logical/snapshots/0-1.snap',
                  '0-1', '0-1.snap.123.tmp', 'G-1.snap', '0-1.SNAP', '0-1.snapx']) AS n;
-- a well-formed name without a file: undefined_file, the server's text
SELECT pg_temp.err($$SELECT * FROM snapbuild_snapshot_info('FFFFFFFF-FFFFFFFF.snap')$$);
-- an unknown slot: undefined_object
SELECT pg_temp.err($$SELECT * FROM snapbuild_trace('snapbuild_regress_no_such_slot')$$);
-- STRICT: NULL in, no row out
SELECT count(*) FROM snapbuild_snapshot_info(NULL);
SELECT count(*) FROM snapbuild_trace(NULL);
-- a listing never errors, a row per file
SELECT count(*) = (SELECT count(*) FROM pg_ls_dir('pg_logical/snapshots') AS name WHERE name LIKE '%.snap') AS one_row_per_file
FROM snapbuild_snapshot_files();
-- snapbuild_trace_range: argument errors
SELECT pg_temp.err($$SELECT * FROM snapbuild_trace_range(NULL)$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_trace_range('0/0')$$);
SELECT regexp_replace(pg_temp.err(format('SELECT * FROM snapbuild_trace_range(%L, %L)',
                                          pg_current_wal_flush_lsn(), '0/1')),
                      '[0-9A-F]+/[0-9A-F]+', 'X/X', 'g') AS end_before_start;
SELECT pg_temp.err($$SELECT * FROM snapbuild_trace_range('FFFFFFFF/0')$$) LIKE '22023: %' AS future_start_is_22023;
-- required arguments given as NULL: null_value_not_allowed, not an internal error
SELECT pg_temp.err($$SELECT * FROM snapbuild_trace_range(pg_current_wal_flush_lsn(), in_slot_creation => NULL)$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_trace_range(pg_current_wal_flush_lsn(), all_records => NULL)$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_slot_prediction(NULL)$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_slot_prediction('no_such_slot', by_advance => NULL)$$);
