-- Execution is revoked from PUBLIC: a role without pg_read_server_files (files, trace)
-- or pg_monitor (slots) is refused; with them it may call the functions.
\set VERBOSITY terse
DROP ROLE IF EXISTS snapbuild_regress_nobody;
DROP ROLE IF EXISTS snapbuild_regress_reader;
CREATE ROLE snapbuild_regress_nobody;
CREATE ROLE snapbuild_regress_reader;
GRANT pg_read_server_files, pg_monitor TO snapbuild_regress_reader;
-- every function of the extension
SELECT count(*) >= 4 AS has_functions,
       bool_or(has_function_privilege('snapbuild_regress_nobody', p.oid, 'EXECUTE')) AS nobody_may_call_any,
       bool_and(has_function_privilege('snapbuild_regress_reader', p.oid, 'EXECUTE')) AS reader_may_call_all
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_snapbuild';
SET ROLE snapbuild_regress_nobody;
SELECT * FROM snapbuild_snapshot_info('0-0.snap');
SELECT count(*) FROM snapbuild_snapshot_files();
SELECT count(*) FROM snapbuild_trace('snapbuild_regress_none');
SELECT count(*) FROM snapbuild_slots();
RESET ROLE;
SET ROLE snapbuild_regress_reader;
SELECT count(*) >= 0 AS listed FROM snapbuild_snapshot_files();
SELECT count(*) >= 0 AS listed FROM snapbuild_slots();
SELECT * FROM snapbuild_snapshot_info('FFFFFFFF-FFFFFFFF.snap');
SELECT count(*) FROM snapbuild_trace('snapbuild_regress_none');
RESET ROLE;
DROP ROLE snapbuild_regress_nobody;
DROP ROLE snapbuild_regress_reader;
