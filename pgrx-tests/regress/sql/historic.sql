-- Historic MVCC: HeapTupleSatisfiesHistoricMVCC as a what-if (snapbuild_historic_visible),
-- argument errors, and a small live case where every tuple is judged twice, by pg_snapbuild
-- and by the server's own HeapTupleSatisfiesVisibility (snapbuild_visibility).
-- Outputs do not depend on xids or LSNs: what-ifs use made-up xids and an explicit commit
-- log (committed => ...), live rows are named by the transaction that wrote them.
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE q;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9A-F]+/[0-9A-F]+', 'X/X', 'g');
END $$;

-- the SQL surface: arguments and defaults (snapbuild_visibility's verdicts: 'both' or
-- 'server'); the new signature is executable by pg_read_server_files, not by PUBLIC
SELECT proname, pg_get_function_arguments(oid) AS arguments, proisstrict, proretset
FROM pg_proc
WHERE proname IN ('snapbuild_historic_snapshot', 'snapbuild_historic_snapshot_from_file',
                  'snapbuild_visibility', 'snapbuild_historic_visible')
ORDER BY 1;
SELECT has_function_privilege('pg_read_server_files',
         'snapbuild_visibility(regclass, name, pg_lsn, xid, text)', 'EXECUTE') AS readers,
       has_function_privilege('public',
         'snapbuild_visibility(regclass, name, pg_lsn, xid, text)', 'EXECUTE') AS public;

-- ---- what-ifs ----------------------------------------------------------------------------
-- One snapshot for all: xmin 1000, xmax 2000, committed catalog xids in [xmin, xmax) xip =
-- {1500, 1510}; the decoding transaction is 1700 with subtransaction 1710 (subxip), at
-- command 5 (curcid). The commit log knows 900, 950 and 4294967000 as committed (and 1, 2,
-- the bootstrap and frozen xids); 800 and 960 aborted. `cid` is the tuple-cid map's entry
-- (its cmin; its cmax too unless cmax is given; NULL: no entry).
-- infomask bits: 0x0010 XMAX_KEYSHR_LOCK, 0x0040 XMAX_EXCL_LOCK, 0x0080 XMAX_LOCK_ONLY,
-- 0x0100 XMIN_COMMITTED, 0x0200 XMIN_INVALID, 0x0300 XMIN_FROZEN, 0x0400 XMAX_COMMITTED,
-- 0x0800 XMAX_INVALID, 0x1000 XMAX_IS_MULTI.
CREATE TEMP TABLE whatif (n int, what text, t_xmin xid, t_xmax xid, infomask int,
                          map_cid int, map_cmax int, update_xid xid, curcid int);
INSERT INTO whatif VALUES
  -- the inserting side
  ( 1, 'xmin aborted (invalid hint), even if in xip',  '1500', '0', x'0A00'::int, NULL, NULL, NULL, 5),
  ( 2, 'xmin frozen (both hint bits)',                 '900',  '0', x'0B00'::int, NULL, NULL, NULL, 5),
  ( 3, 'xmin before xmin, committed hint',             '900',  '0', x'0900'::int, NULL, NULL, NULL, 5),
  ( 4, 'xmin before xmin, committed in clog',          '900',  '0', x'0800'::int, NULL, NULL, NULL, 5),
  ( 5, 'xmin before xmin, aborted in clog',            '800',  '0', x'0800'::int, NULL, NULL, NULL, 5),
  ( 6, 'xmin FrozenTransactionId, no hint',            '2',    '0', x'0800'::int, NULL, NULL, NULL, 5),
  ( 7, 'xmin before xmin across wraparound',           '4294967000', '0', x'0800'::int, NULL, NULL, NULL, 5),
  ( 8, 'xmin in xip',                                  '1510', '0', x'0800'::int, NULL, NULL, NULL, 5),
  ( 9, 'xmin in [xmin, xmax), not in xip (running)',   '1600', '0', x'0800'::int, NULL, NULL, NULL, 5),
  (10, 'xmin in [xmin, xmax), not in xip, hinted',     '1600', '0', x'0900'::int, NULL, NULL, NULL, 5),
  (11, 'xmin = snapshot xmax',                         '2000', '0', x'0800'::int, NULL, NULL, NULL, 5),
  (12, 'xmin after snapshot xmax, hinted',             '2500', '0', x'0900'::int, NULL, NULL, NULL, 5),
  (13, 'xmin own, no map entry',                       '1700', '0', x'0800'::int, NULL, NULL, NULL, 5),
  (14, 'xmin own, cmin = curcid',                      '1700', '0', x'0800'::int, 5,    NULL, NULL, 5),
  (15, 'xmin own, cmin above curcid',                  '1700', '0', x'0800'::int, 9,    NULL, NULL, 5),
  (16, 'xmin own, cmin below curcid',                  '1700', '0', x'0800'::int, 4,    NULL, NULL, 5),
  (17, 'xmin own subtransaction, cmin below curcid',   '1710', '0', x'0800'::int, 0,    NULL, NULL, 5),
  (18, 'xmin own, cmin below curcid 0: never',         '1700', '0', x'0800'::int, 0,    NULL, NULL, 0),
  -- the deleting side (xmin committed before the snapshot)
  (20, 'xmax invalid (hint)',                          '900', '1500', x'0900'::int, NULL, NULL, NULL, 5),
  (21, 'xmax lock only (LOCK_ONLY bit)',               '900', '1500', x'0180'::int, NULL, NULL, NULL, 5),
  (22, 'xmax exclusive lock, not a multi',             '900', '1500', x'0140'::int, NULL, NULL, NULL, 5),
  (23, 'xmax key-share lock without LOCK_ONLY',        '900', '1500', x'0110'::int, NULL, NULL, NULL, 5),
  (24, 'xmax multi, lock only',                        '900', '77',   x'1190'::int, NULL, NULL, NULL, 5),
  (25, 'xmax multi, updater in xip',                   '900', '77',   x'1100'::int, NULL, NULL, '1500', 5),
  (26, 'xmax multi, updater running',                  '900', '77',   x'1100'::int, NULL, NULL, '1600', 5),
  (27, 'xmax multi, updater is us, before curcid',     '900', '77',   x'1100'::int, -1,   2,    '1700', 5),
  (28, 'xmax own, no map entry',                       '900', '1700', x'0100'::int, NULL, NULL, NULL, 5),
  (29, 'xmax own, map entry without cmax',             '900', '1700', x'0100'::int, -1,   -1,   NULL, 5),
  (30, 'xmax own, cmax = curcid',                      '900', '1700', x'0100'::int, -1,   5,    NULL, 5),
  (31, 'xmax own, cmax below curcid',                  '900', '1700', x'0100'::int, -1,   4,    NULL, 5),
  (32, 'xmax own subtransaction, cmax below curcid',   '900', '1710', x'0100'::int, -1,   1,    NULL, 5),
  (33, 'xmax before xmin, committed hint',             '900', '950',  x'0500'::int, NULL, NULL, NULL, 5),
  (34, 'xmax before xmin, committed in clog',          '900', '950',  x'0100'::int, NULL, NULL, NULL, 5),
  (35, 'xmax before xmin, aborted in clog',            '900', '960',  x'0100'::int, NULL, NULL, NULL, 5),
  (36, 'xmax in xip',                                  '900', '1510', x'0100'::int, NULL, NULL, NULL, 5),
  (37, 'xmax in [xmin, xmax), not in xip (running)',   '900', '1600', x'0100'::int, NULL, NULL, NULL, 5),
  (38, 'xmax in [xmin, xmax), not in xip, hinted',     '900', '1600', x'0500'::int, NULL, NULL, NULL, 5),
  (39, 'xmax = snapshot xmax',                         '900', '2000', x'0100'::int, NULL, NULL, NULL, 5),
  (40, 'xmax after snapshot xmax',                     '900', '3000', x'0500'::int, NULL, NULL, NULL, 5),
  -- both sides ours
  (50, 'inserted and deleted by us, both before curcid', '1700', '1710', x'0020'::int, 2, 4,  NULL, 5),
  (51, 'inserted by us before, deleted at curcid',     '1700', '1710', x'0020'::int, 2,    5,    NULL, 5),
  (52, 'inserted and deleted by us, both at curcid',   '1700', '1700', x'0020'::int, 5,    5,    NULL, 5),
  (53, 'inserted in xip, deleted by us, no entry',     '1510', '1700', x'0000'::int, NULL, NULL, NULL, 5),
  (54, 'inserted in xip, deleted by a running xact',   '1510', '1600', x'0000'::int, NULL, NULL, NULL, 5);
SELECT n, what, v.visible, v.branch
FROM whatif w,
     LATERAL snapbuild_historic_visible(w.t_xmin, w.t_xmax, w.infomask, w.map_cid,
                                        '1000', '2000', '{1510,1500}', '{1710,1700}',
                                        curcid => w.curcid, cmax => w.map_cmax,
                                        update_xid => w.update_xid,
                                        committed => '{900,950,4294967000}') v
ORDER BY n;
-- the commit log of this server: the bootstrap and frozen xids are committed
SELECT visible, branch
FROM snapbuild_historic_visible('1', '0', x'0800'::int, NULL, '1000', '2000', '{}');
SELECT visible, branch
FROM snapbuild_historic_visible('2', '0', x'0800'::int, NULL, '1000', '2000', '{}');
-- an empty snapshot [3, 3): every normal xid is at or after xmax
SELECT visible, branch
FROM snapbuild_historic_visible('3', '0', x'0800'::int, NULL, '3', '3', '{}', committed => '{}');

-- ---- argument errors ---------------------------------------------------------------------
-- infomask is 16 bits: invalid_parameter_value
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_visible('900', '0', 65536, NULL, '1000', '2000', '{}', committed => '{}')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_visible('900', '0', -1, NULL, '1000', '2000', '{}', committed => '{}')$$);
-- NULL inside an xid array: null_value_not_allowed
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_visible('900', '0', 2048, NULL, '1000', '2000', '{1500,NULL}', committed => '{}')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_visible('900', '0', 2048, NULL, '1000', '2000', '{}', '{NULL}', committed => '{}')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_visible('900', '0', 2048, NULL, '1000', '2000', '{}', committed => '{NULL}')$$);
-- a multixact xmax that updates needs its updater: invalid_parameter_value
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_visible('900', '77', x'1100'::int, NULL, '1000', '2000', '{}', committed => '{900}')$$);
-- no such slot: undefined_object
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_snapshot('snapbuild_regress_no_such_slot')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_visibility('pg_class', 'snapbuild_regress_no_such_slot')$$);
-- verdicts is 'both' or 'server': invalid_parameter_value (checked before anything else)
SELECT pg_temp.err($$SELECT * FROM snapbuild_visibility('pg_class', 'snapbuild_regress_no_such_slot', verdicts => 'rust')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_visibility('pg_class', 'snapbuild_regress_no_such_slot', verdicts => NULL)$$);
-- .snap file names and missing files, as snapbuild_snapshot_info
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_snapshot_from_file('../0-1.snap')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_snapshot_from_file('FFFFFFFF-FFFFFFFF.snap')$$);
-- NULL relation or slot: no row (snapbuild_historic_snapshot_from_file is STRICT)
SELECT count(*) FROM snapbuild_historic_snapshot(NULL);
SELECT count(*) FROM snapbuild_visibility(NULL, 'snapbuild_regress_no_such_slot');
SELECT count(*) FROM snapbuild_visibility('pg_class', NULL);
SELECT count(*) FROM snapbuild_historic_snapshot_from_file(NULL);
-- a physical slot has no snapshot builder: object_not_in_prerequisite_state
SELECT 'created' FROM pg_create_physical_replication_slot('snapbuild_regress_hist_phys');
SELECT pg_temp.err($$SELECT * FROM snapbuild_historic_snapshot('snapbuild_regress_hist_phys')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_visibility('pg_class', 'snapbuild_regress_hist_phys')$$);
SELECT pg_drop_replication_slot('snapbuild_regress_hist_phys');

-- ---- live ----------------------------------------------------------------------------------
-- A logical slot (its creation waits until the transactions running at its start end).
SELECT 'created' FROM pg_create_logical_replication_slot('snapbuild_regress_hist', 'test_decoding');
-- at restart_lsn the builder has only started: no historic snapshot yet
-- (object_not_in_prerequisite_state); before it: invalid_parameter_value
SELECT restart_lsn AS restart_lsn FROM pg_replication_slots
WHERE slot_name = 'snapbuild_regress_hist' \gset
SELECT pg_temp.err(format('SELECT * FROM snapbuild_historic_snapshot(%L, %L)',
                          'snapbuild_regress_hist', :'restart_lsn'));
SELECT pg_temp.err(format('SELECT * FROM snapbuild_visibility(%L, %L, %L)',
                          'pg_class', 'snapbuild_regress_hist', :'restart_lsn'));
SELECT pg_temp.err(format('SELECT * FROM snapbuild_historic_snapshot(%L, %L)',
                          'snapbuild_regress_hist', :'restart_lsn'::pg_lsn - 1));
-- relations without heap pages to judge
CREATE TEMP TABLE hist_temp (a int);
SELECT pg_temp.err($$SELECT * FROM snapbuild_visibility('hist_temp', 'snapbuild_regress_hist')$$);
SELECT pg_temp.err($$SELECT * FROM snapbuild_visibility('pg_class_oid_index', 'snapbuild_regress_hist')$$);
DROP TABLE hist_temp;

-- C: a table created in one transaction; A: a column added in the next.
BEGIN;
CREATE TABLE hist_t (a int);
SELECT pg_current_xact_id()::text::xid AS x_create \gset
COMMIT;
SELECT pg_current_wal_lsn() AS lsn_c \gset
BEGIN;
ALTER TABLE hist_t ADD COLUMN b int;
SELECT pg_current_xact_id()::text::xid AS x_alter \gset
COMMIT;
SELECT pg_current_wal_lsn() AS lsn_a \gset
-- the snapshot after C: C's xid committed in [xmin, xmax), A's not yet assigned
SELECT :'x_create'::xid = ANY (xip) AS c_in_xip,
       xmax::text::bigint > :'x_create'::text::bigint AS xmax_after_c,
       xmax::text::bigint <= :'x_alter'::text::bigint AS xmax_not_after_a,
       subxip = '{}' AS no_subxip, curcid, builder_state
FROM snapbuild_historic_snapshot('snapbuild_regress_hist', :'lsn_c');
-- hist_t's pg_class row: C's version (updated by A) and A's; after C, C's version is
-- visible (xmin in xip; A's xmax is at or after xmax) and A's is not (xmin at or after xmax)
SELECT CASE t_xmin WHEN :'x_create' THEN 'C' WHEN :'x_alter' THEN 'A' END AS inserted_by,
       CASE t_xmax WHEN :'x_alter' THEN 'A' WHEN '0' THEN '-' END AS deleted_by,
       rust_branch, rust_visible, server_visible, agrees
FROM snapbuild_visibility('pg_class', 'snapbuild_regress_hist', :'lsn_c')
WHERE t_xmin IN (:'x_create', :'x_alter')
ORDER BY 1 DESC;
-- after A, the other way round (branches depend on RUNNING_XACTS timing: not shown)
SELECT CASE t_xmin WHEN :'x_create' THEN 'C' WHEN :'x_alter' THEN 'A' END AS inserted_by,
       rust_visible, server_visible, agrees
FROM snapbuild_visibility('pg_class', 'snapbuild_regress_hist', :'lsn_a')
WHERE t_xmin IN (:'x_create', :'x_alter')
ORDER BY 1 DESC;
-- hist_t's columns (pg_attribute rows live now), after C and after A: b appears with A
SELECT a.attname, v1.server_visible AS after_c, v1.agrees AS after_c_agrees,
       v2.server_visible AS after_a, v2.agrees AS after_a_agrees
FROM pg_attribute a
JOIN snapbuild_visibility('pg_attribute', 'snapbuild_regress_hist', :'lsn_c') v1 ON v1.ctid = a.ctid
JOIN snapbuild_visibility('pg_attribute', 'snapbuild_regress_hist', :'lsn_a') v2 ON v2.ctid = a.ctid
WHERE a.attrelid = 'hist_t'::regclass
ORDER BY a.attnum;
-- whole catalogs, after C and after A: every tuple judged alike by both
SELECT r.rel::text AS catalog, p.at,
       count(*) > 0 AS has_tuples,
       count(*) FILTER (WHERE v.agrees) = count(*) AS all_agree,
       count(*) FILTER (WHERE v.rust_visible IS NULL OR v.agrees IS NULL) AS null_verdicts
FROM (VALUES ('pg_class'::regclass), ('pg_attribute'), ('pg_type'), ('pg_namespace')) AS r(rel)
CROSS JOIN (VALUES ('C', :'lsn_c'::pg_lsn), ('A', :'lsn_a')) AS p(at, lsn)
CROSS JOIN LATERAL snapbuild_visibility(r.rel, 'snapbuild_regress_hist', p.lsn) v
GROUP BY 1, 2 ORDER BY 1, 2 DESC;

-- A user catalog table (decoding reads it with the historic snapshot too): rows inserted
-- by I, then locked (FOR SHARE), deleted, updated and inserted by an aborted transaction,
-- each in its own transaction. Rows are named by what happened to them; the xmin branches
-- depend on where RUNNING_XACTS records fell, so only the lock's xmax branch is shown.
CREATE TABLE hist_uc (id int PRIMARY KEY, note text)
  WITH (user_catalog_table = true, autovacuum_enabled = false);
BEGIN;
INSERT INTO hist_uc VALUES (1, 'untouched'), (2, 'locked'), (3, 'deleted'), (4, 'updated');
SELECT pg_current_xact_id()::text::xid AS x_ins \gset
COMMIT;
BEGIN;
SELECT id FROM hist_uc WHERE id = 2 FOR SHARE;
SELECT pg_current_xact_id()::text::xid AS x_lock \gset
COMMIT;
BEGIN;
DELETE FROM hist_uc WHERE id = 3;
SELECT pg_current_xact_id()::text::xid AS x_del \gset
COMMIT;
BEGIN;
UPDATE hist_uc SET note = 'updated, new' WHERE id = 4;
SELECT pg_current_xact_id()::text::xid AS x_upd \gset
COMMIT;
BEGIN;
INSERT INTO hist_uc VALUES (5, 'aborted');
SELECT pg_current_xact_id()::text::xid AS x_abort \gset
ROLLBACK;
SELECT CASE WHEN t_xmin = :'x_abort' THEN 'inserted, aborted'
            WHEN t_xmin = :'x_upd' THEN 'update: new version'
            WHEN t_xmin <> :'x_ins' THEN '?'
            WHEN t_xmax = :'x_lock' THEN 'locked (FOR SHARE)'
            WHEN t_xmax = :'x_del' THEN 'deleted'
            WHEN t_xmax = :'x_upd' THEN 'update: old version'
            WHEN t_xmax = '0' THEN 'untouched' ELSE '?' END AS tuple,
       'HEAP_XMAX_LOCK_ONLY' = ANY (infomask) AS lock_only,
       CASE WHEN t_xmax = :'x_lock' THEN xmax_branch END AS lock_xmax_branch,
       rust_visible, server_visible, agrees
FROM snapbuild_visibility('hist_uc', 'snapbuild_regress_hist')
ORDER BY 1;

-- D: one transaction, three commands (create, add a column, drop a column), judged as its
-- own decoding transaction (xid => D) after the first command and at its end.
BEGIN;
CREATE TABLE hist_d (a int, b int);
SELECT pg_current_xact_id()::text::xid AS x_d \gset
SELECT pg_current_wal_insert_lsn() AS lsn_d1 \gset
ALTER TABLE hist_d ADD COLUMN c int;
ALTER TABLE hist_d DROP COLUMN a;
COMMIT;
SELECT pg_current_wal_lsn() AS lsn_d \gset
SELECT subxip = ARRAY[:'x_d'::xid] AS subxip_is_d,
       regexp_replace(decoding_status, '[0-9A-F]+/[0-9A-F]+', 'X/X') AS decoding_status,
       tuplecids > 0 AS has_tuplecids
FROM snapbuild_historic_snapshot('snapbuild_regress_hist', :'lsn_d', :'x_d');
SELECT (SELECT curcid FROM snapbuild_historic_snapshot('snapbuild_regress_hist', :'lsn_d1', :'x_d'))
     < (SELECT curcid FROM snapbuild_historic_snapshot('snapbuild_regress_hist', :'lsn_d', :'x_d'))
       AS curcid_grows;
-- D's own pg_attribute rows: judged through the tuple-cid map (cid_resolved)
SELECT p.at, v.xmin_branch, v.xmax_branch, v.server_visible, v.agrees, v.cid_resolved, count(*)
FROM (VALUES ('first command', :'lsn_d1'::pg_lsn), ('end', :'lsn_d')) AS p(at, lsn)
CROSS JOIN LATERAL snapbuild_visibility('pg_attribute', 'snapbuild_regress_hist', p.lsn, :'x_d') v
WHERE v.t_xmin = :'x_d'
GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1 DESC, 2, 3, 4;
-- every catalog tuple, as D's decoder sees them at its end: all agree
SELECT count(*) > 0 AS has_tuples, count(*) FILTER (WHERE agrees) = count(*) AS all_agree
FROM snapbuild_visibility('pg_attribute', 'snapbuild_regress_hist', :'lsn_d', :'x_d');

-- the server-only scan: same tuples, same server verdicts, no verdict of ours
SELECT count(*) = (SELECT count(*) FROM snapbuild_visibility('pg_class', 'snapbuild_regress_hist')) AS same_tuples,
       count(*) FILTER (WHERE server_visible) =
         (SELECT count(*) FILTER (WHERE server_visible)
          FROM snapbuild_visibility('pg_class', 'snapbuild_regress_hist')) AS same_server_verdicts,
       count(rust_visible) AS rust_visible, count(agrees) AS agrees, count(rust_branch) AS rust_branch,
       count(xmin_branch) AS xmin_branch, count(xmax_branch) AS xmax_branch
FROM snapbuild_visibility('pg_class', 'snapbuild_regress_hist', verdicts => 'server');
SELECT count(*) FILTER (WHERE b.cid_resolved IS DISTINCT FROM s.cid_resolved
                           OR b.cmin IS DISTINCT FROM s.cmin OR b.cmax IS DISTINCT FROM s.cmax
                           OR b.server_visible IS DISTINCT FROM s.server_visible) AS differing
FROM snapbuild_visibility('pg_attribute', 'snapbuild_regress_hist', :'lsn_d', :'x_d') b
JOIN snapbuild_visibility('pg_attribute', 'snapbuild_regress_hist', :'lsn_d', :'x_d', 'server') s USING (ctid);

DROP TABLE hist_t, hist_d, hist_uc;
SELECT pg_drop_replication_slot('snapbuild_regress_hist');
