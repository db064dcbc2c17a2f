-- Upgrade path, as contrib's oldextversions tests: install the oldest frozen version
-- (sql/pg_snapbuild--0.1.0.sql), ALTER EXTENSION ... UPDATE to the default version, and
-- compare every object of the updated extension with a fresh install. Runs last in the
-- schedule and leaves a fresh install of the default version behind.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_snapbuild;
CREATE EXTENSION pg_snapbuild VERSION '0.1.0';
SELECT extversion FROM pg_extension WHERE extname = 'pg_snapbuild';
-- the update path the server found (from the sql/ upgrade scripts that were installed)
SELECT target, path FROM pg_extension_update_paths('pg_snapbuild')
WHERE source = '0.1.0' AND path IS NOT NULL ORDER BY target;
ALTER EXTENSION pg_snapbuild UPDATE;
SELECT e.extversion, e.extversion = a.default_version AS is_default_version
FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
WHERE e.extname = 'pg_snapbuild';
-- the updated extension works
SELECT count(*) >= 0 AS listed FROM snapbuild_snapshot_files();
SELECT count(*) >= 0 AS listed FROM snapbuild_slots();
-- every member of the extension; for functions their signature, result, defaults,
-- privileges, attributes and C symbol
CREATE TEMP VIEW snapbuild_objects AS
SELECT e.extversion, e.extrelocatable, e.extnamespace::regnamespace::text AS schema,
       pg_describe_object(d.classid, d.objid, d.objsubid) AS object,
       p.oid::regprocedure::text AS function, pg_get_function_result(p.oid) AS result,
       pg_get_function_arguments(p.oid) AS arguments, p.proacl::text AS acl,
       p.prosecdef, p.provolatile, p.proisstrict, p.proretset, p.proparallel,
       p.prosrc, p.probin
FROM pg_extension e
JOIN pg_depend d ON d.refclassid = 'pg_extension'::regclass AND d.refobjid = e.oid
                AND d.deptype = 'e'
LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
WHERE e.extname = 'pg_snapbuild';
CREATE TEMP TABLE snapbuild_updated AS TABLE snapbuild_objects;
DROP EXTENSION pg_snapbuild;
CREATE EXTENSION pg_snapbuild;
CREATE TEMP TABLE snapbuild_fresh AS TABLE snapbuild_objects;
-- what differs between the updated and the fresh extension: nothing
\x on
SELECT * FROM (
    SELECT 'fresh only' AS side, * FROM (TABLE snapbuild_fresh EXCEPT ALL TABLE snapbuild_updated) f
    UNION ALL
    SELECT 'updated only', * FROM (TABLE snapbuild_updated EXCEPT ALL TABLE snapbuild_fresh) u
) d ORDER BY object, side;
\x off
-- not vacuous: both have the same, non-zero number of members and functions
-- (types are not counted: 17+ also records a view's row types as members, 14-16 do not)
SELECT count(*) FILTER (WHERE object NOT LIKE 'type %') AS members, count(function) AS functions,
       count(*) = (SELECT count(*) FROM snapbuild_updated) AS same_count
FROM snapbuild_fresh;
