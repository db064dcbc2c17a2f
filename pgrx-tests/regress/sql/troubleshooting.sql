-- The incidents of docs/troubleshooting.md that one session can make happen on a primary,
-- with the page's findings (scripts/troubleshooting.sh makes them all happen, with concurrent
-- sessions and a standby): restart_lsn and catalog_xmin of a consumed slot held by an open
-- transaction (a prepared one: it needs no session of its own), then released; the catalog
-- horizon of a slot nobody consumes. Xids and LSNs vary: the output says what they must
-- equal instead. Needs max_prepared_transactions > 0 (scripts/cluster.sh sets 10).
CREATE TABLE ts_orders (id serial PRIMARY KEY, status text);
SELECT slot_name FROM pg_create_logical_replication_slot('ts_cdc_slot', 'test_decoding');
-- one round of the consumer: a RUNNING_XACTS record (a checkpoint logs one), a committed row
-- (its commit flushes the record), the slot consumed to the end
CREATE FUNCTION pg_temp.consume(slot text) RETURNS bigint
LANGUAGE sql AS $$ SELECT count(*) FROM pg_logical_slot_get_changes(slot, NULL, NULL) $$;
CHECKPOINT;
INSERT INTO ts_orders (status) VALUES ('round');
SELECT pg_temp.consume('ts_cdc_slot') > 0 AS consumed;
CHECKPOINT;
INSERT INTO ts_orders (status) VALUES ('round');
SELECT pg_temp.consume('ts_cdc_slot') > 0 AS consumed;

-- 5. restart_lsn does not move: a long transaction that wrote WAL is still open
BEGIN;
INSERT INTO ts_orders (status) SELECT 'imported' FROM generate_series(1, 1000);
PREPARE TRANSACTION 'ts-batch-import';
CREATE TEMP TABLE ts_holder AS
SELECT transaction AS xid FROM pg_prepared_xacts WHERE gid = 'ts-batch-import';
CHECKPOINT;
INSERT INTO ts_orders (status) VALUES ('round');
SELECT pg_temp.consume('ts_cdc_slot') > 0 AS consumed;
CHECKPOINT;
INSERT INTO ts_orders (status) VALUES ('round');
SELECT pg_temp.consume('ts_cdc_slot') > 0 AS consumed;
CHECKPOINT;
INSERT INTO ts_orders (status) VALUES ('round');
SELECT pg_temp.consume('ts_cdc_slot') > 0 AS consumed;
CREATE TEMP TABLE ts_held AS
SELECT restart_lsn, confirmed_flush_lsn, catalog_xmin
FROM pg_replication_slots WHERE slot_name = 'ts_cdc_slot';
-- the application goes on writing, the consumer keeps up
INSERT INTO ts_orders (status) SELECT 'new' FROM generate_series(1, 5000);
CHECKPOINT;
INSERT INTO ts_orders (status) VALUES ('round');
SELECT pg_temp.consume('ts_cdc_slot') > 0 AS consumed;
SELECT s.restart_lsn = h.restart_lsn AS restart_lsn_stays,
       s.confirmed_flush_lsn > h.confirmed_flush_lsn AS confirmed_flush_moves,
       s.catalog_xmin = h.catalog_xmin AS catalog_xmin_stays
FROM pg_replication_slots s, ts_held h WHERE s.slot_name = 'ts_cdc_slot';
-- the diagnosis: what holds restart_lsn and catalog_xmin, and the forecast; xids and the
-- database named for what they are
\x on
SELECT d.kind, d.xid = h.xid AS names_the_prepared_xid, d.pid, d.gid,
       d.datname = current_database() AS its_database,
       d.finding LIKE '%prepared as gid ''ts-batch-import''%' AS finding_names_gid,
       regexp_replace(replace(d.remedy, current_database(), 'DB'), '[0-9]+', 'N', 'g') AS remedy
FROM snapbuild_diagnose('ts_cdc_slot') d, ts_holder h
WHERE d.kind IN ('restart_lsn held', 'catalog_xmin held', 'forecast');
\x off
-- the server's restart_lsn and catalog_xmin stand where the diagnosis says they are held
SELECT (SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'ts_cdc_slot')
     = (SELECT lsn FROM snapbuild_diagnose('ts_cdc_slot') WHERE kind = 'restart_lsn held')
       AS restart_lsn_held_there,
       (SELECT catalog_xmin::text FROM pg_replication_slots WHERE slot_name = 'ts_cdc_slot')
     = (SELECT substring(finding from 'is held at ([0-9]+)') FROM snapbuild_diagnose('ts_cdc_slot')
        WHERE kind = 'catalog_xmin held') AS catalog_xmin_held_there;
-- the page's kinds, in its order; the monitoring view
SELECT kind FROM snapbuild_diagnose('ts_cdc_slot')
WHERE kind IN ('restart_lsn held', 'catalog_xmin held', 'forecast', 'no consumer',
               'catalog horizon', 'consumer lag', 'retained WAL');
SELECT slot_name, state, in_creation, oldest_blocking_pid,
       restart_lsn_lag_bytes > 0 AS restart_lsn_lags, catalog_xmin_age > 0 AS aged,
       releasable_bytes > 0 AS releasable
FROM snapbuild_slot_health WHERE slot_name = 'ts_cdc_slot';
-- the remedy: the transaction ends, the consumer confirms past the next RUNNING_XACTS
COMMIT PREPARED 'ts-batch-import';
CHECKPOINT;
INSERT INTO ts_orders (status) VALUES ('round');
SELECT pg_temp.consume('ts_cdc_slot') > 0 AS consumed;
SELECT s.restart_lsn > h.restart_lsn AS restart_lsn_moved,
       s.catalog_xmin::text::bigint > (SELECT xid::text::bigint FROM ts_holder) AS catalog_xmin_passed_it
FROM pg_replication_slots s, ts_held h WHERE s.slot_name = 'ts_cdc_slot';
SELECT count(*) AS held_rows FROM snapbuild_diagnose('ts_cdc_slot')
WHERE kind IN ('restart_lsn held', 'catalog_xmin held', 'forecast');
SELECT pg_drop_replication_slot('ts_cdc_slot');

-- 6. catalog_xmin of a slot nobody consumes holds back VACUUM of the catalogs: an
-- application creates and drops temporary tables
SELECT slot_name FROM pg_create_logical_replication_slot('ts_old_slot', 'test_decoding');
DO $$ BEGIN FOR i IN 1..20 LOOP
  EXECUTE 'CREATE TEMP TABLE report_tmp (id int, total numeric)'; EXECUTE 'DROP TABLE report_tmp';
END LOOP; END $$;
\x on
SELECT kind, finding, remedy FROM snapbuild_diagnose('ts_old_slot') WHERE kind = 'no consumer';
\x off
-- (what else holds a horizon varies: an autovacuum worker may; only the slot's part is shown)
SELECT kind,
       finding ~ '^catalog_xmin [0-9]+ \(age [0-9]+ xids\) is the cluster''s oldest xmin horizon: VACUUM cannot remove catalog rows deleted by xid [0-9]+ or later, in any database' AS oldest,
       xid = (SELECT catalog_xmin FROM pg_replication_slots WHERE slot_name = 'ts_old_slot')
         AS names_catalog_xmin
FROM snapbuild_diagnose('ts_old_slot') WHERE kind = 'catalog horizon';
-- the remedy for an abandoned slot
SELECT pg_drop_replication_slot('ts_old_slot');
SELECT count(*) AS slots_left FROM pg_replication_slots WHERE slot_name LIKE 'ts\_%';
SELECT count(*) AS prepared_left FROM pg_prepared_xacts WHERE gid LIKE 'ts-%';
DROP TABLE ts_orders;
