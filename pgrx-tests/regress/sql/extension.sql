-- The extension installs, with the four functions of its SQL surface.
CREATE EXTENSION pg_snapbuild;
SELECT extname, extversion, extrelocatable FROM pg_extension WHERE extname = 'pg_snapbuild';
\df snapbuild_slots
\df snapbuild_snapshot_files
\df snapbuild_snapshot_info
\df snapbuild_trace
-- result columns of the four, name and type, in order
SELECT p.proname, row_number() OVER (PARTITION BY p.proname ORDER BY a.ord) AS n,
       a.name, format_type(a.typ, NULL) AS type
FROM pg_proc p,
     LATERAL unnest(p.proargnames, p.proallargtypes, p.proargmodes)
             WITH ORDINALITY AS a(name, typ, mode, ord)
WHERE p.proname IN ('snapbuild_slots', 'snapbuild_snapshot_files',
                    'snapbuild_snapshot_info', 'snapbuild_trace')
  AND a.mode IN ('t', 'o')
ORDER BY 1, 2;
-- the four are STRICT set-returning functions
SELECT proname, proisstrict, proretset FROM pg_proc
WHERE proname IN ('snapbuild_slots', 'snapbuild_snapshot_files',
                  'snapbuild_snapshot_info', 'snapbuild_trace')
ORDER BY 1;
-- no function of the extension is executable by PUBLIC
SELECT count(*) >= 4 AS has_functions,
       bool_or(has_function_privilege('public', p.oid, 'EXECUTE')) AS any_public
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_snapbuild';
