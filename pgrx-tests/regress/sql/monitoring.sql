-- The monitoring kit (monitoring/queries.yaml, docs/monitoring.md): every query of
-- queries.yaml, verbatim, as a temporary view named after its namespace (postgres_exporter
-- names a metric <namespace>_<column>); their columns and types; then the series each query
-- gives for slots in four states: invalidated (its WAL removed past max_slot_wal_keep_size),
-- being created while a session holds a transaction (a second and third session through
-- dblink), consistent and consumed, and restart_lsn held by a prepared transaction. A series a
-- query leaves out is shown as "absent"; no query returns a NULL (postgres_exporter would turn
-- it into a NaN sample). Values vary: the output says what they must be. The monitoring check
-- of pgrx-tests (tests/monitoring.rs) requires each query of queries.yaml here verbatim and
-- reads the column list below from the expected output. Needs max_prepared_transactions > 0
-- and dblink; sets max_slot_wal_keep_size for a while and resets it.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
CREATE TABLE mon_orders (id serial PRIMARY KEY, status text) WITH (autovacuum_enabled = off);
CREATE FUNCTION pg_temp.consume(slot text) RETURNS bigint
LANGUAGE sql AS $$ SELECT count(*) FROM pg_logical_slot_get_changes(slot, NULL, NULL) $$;

-- the queries of monitoring/queries.yaml
CREATE TEMP VIEW snapbuild_slot AS
SELECT slot_name::text AS slot_name,
       in_creation,
       waiting_xids,
       oldest_blocking_pid IS NOT NULL AS blocking_backend
FROM snapbuild_slot_health;
CREATE TEMP VIEW snapbuild_slot_state AS
SELECT slot_name::text AS slot_name,
       state = 'start' AS start,
       state = 'building' AS building,
       state = 'full' AS full,
       state = 'consistent' AS consistent,
       state = 'invalidated' AS invalidated,
       state = 'sync pending' AS sync_pending
FROM snapbuild_slot_health
WHERE state IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_restart_lsn AS
SELECT slot_name::text AS slot_name,
       restart_lsn_lag_bytes AS lag_bytes
FROM snapbuild_slot_health
WHERE restart_lsn_lag_bytes IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_confirmed_flush AS
SELECT slot_name::text AS slot_name,
       confirmed_flush_lag_bytes AS lag_bytes
FROM snapbuild_slot_health
WHERE confirmed_flush_lag_bytes IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_catalog_xmin AS
SELECT slot_name::text AS slot_name,
       catalog_xmin_age AS age
FROM snapbuild_slot_health
WHERE catalog_xmin_age IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_wal_since_running_xacts AS
SELECT slot_name::text AS slot_name,
       wal_since_running_xacts_bytes AS bytes
FROM snapbuild_slot_health
WHERE wal_since_running_xacts_bytes IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_running_xacts_age AS
SELECT slot_name::text AS slot_name,
       running_xacts_age_s AS seconds
FROM snapbuild_slot_health
WHERE running_xacts_age_s IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_releasable AS
SELECT slot_name::text AS slot_name,
       releasable_bytes AS bytes
FROM snapbuild_slot_health
WHERE releasable_bytes IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_wal_status AS
SELECT slot_name::text AS slot_name,
       wal_status = 'reserved' AS reserved,
       wal_status = 'extended' AS extended,
       wal_status = 'unreserved' AS unreserved,
       wal_status = 'lost' AS lost
FROM pg_replication_slots
WHERE slot_type = 'logical' AND wal_status IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_safe_wal AS
SELECT slot_name::text AS slot_name,
       safe_wal_size AS size_bytes
FROM pg_replication_slots
WHERE slot_type = 'logical' AND safe_wal_size IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_consumer AS
SELECT slot_name::text AS slot_name,
       active AS attached
FROM pg_replication_slots AS s
WHERE slot_type = 'logical'
  AND NOT (pg_is_in_recovery() AND coalesce((to_jsonb(s) ->> 'synced')::boolean, false));
CREATE TEMP VIEW snapbuild_slot_blocker AS
SELECT slot_name::text AS slot_name,
       oldest_blocking_pid AS pid
FROM snapbuild_slot_health
WHERE oldest_blocking_pid IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_wal_loss AS
SELECT slot_name::text AS slot_name,
       wal_loss_cause AS cause,
       wal_loss_in_s AS in_seconds
FROM snapbuild_slot_health
WHERE wal_loss_in_s IS NOT NULL;
CREATE TEMP VIEW snapbuild_slot_wal_loss_lsn AS
SELECT slot_name, cause, ahead_bytes
FROM (SELECT slot_name::text AS slot_name,
             wal_loss_cause AS cause,
             pg_wal_lsn_diff(wal_loss_lsn,
                             CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                                  ELSE pg_current_wal_lsn() END) AS ahead_bytes
      FROM snapbuild_slot_health
      WHERE wal_loss_lsn IS NOT NULL) AS loss
WHERE ahead_bytes IS NOT NULL;

-- each query's columns: text ones become labels, boolean and numeric ones gauges (a pg_lsn or
-- an xid would not parse as a number)
SELECT c.relname AS namespace, a.attname AS column_name,
       format_type(a.atttypid, a.atttypmod) AS column_type
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = pg_my_temp_schema() AND c.relkind = 'v'
  AND c.relname LIKE 'snapbuild\_slot%'
ORDER BY c.relname, a.attnum;

-- what a scrape gives for one slot: a row per slot, a column per metric ("absent": the query
-- has no row for the slot, so the exporter has no series); and how many rows of all queries
-- carry a NULL (must be 0)
CREATE TEMP VIEW mon_series AS
SELECT s.slot_name, s.in_creation, s.waiting_xids > 0 AS waits_for_xids, s.blocking_backend,
       CASE WHEN st.start THEN 'start' WHEN st.building THEN 'building' WHEN st.full THEN 'full'
            WHEN st.consistent THEN 'consistent' WHEN st.invalidated THEN 'invalidated'
            WHEN st.sync_pending THEN 'sync pending' END AS state,
       st.start::int + st.building::int + st.full::int + st.consistent::int
         + st.invalidated::int + st.sync_pending::int AS state_gauges_at_1,
       rl.lag_bytes > 0 AS restart_lsn_lag_bytes_positive,
       cf.lag_bytes >= 0 AS confirmed_flush_lag_bytes_counted,
       cx.age >= 0 AS catalog_xmin_age_counted,
       ws.bytes >= 0 AS wal_since_running_xacts_bytes_counted,
       ra.seconds >= 0 AS running_xacts_age_seconds_counted,
       rb.bytes > 0 AS releasable_bytes_positive,
       CASE WHEN w.reserved THEN 'reserved' WHEN w.extended THEN 'extended'
            WHEN w.unreserved THEN 'unreserved' WHEN w.lost THEN 'lost' END AS wal_status,
       sw.size_bytes > 0 AS safe_wal_size_bytes_positive,
       co.attached AS consumer_attached,
       bl.pid > 0 AS blocker_pid_positive,
       wl.in_seconds >= 0 AS wal_loss_in_seconds_counted,
       wl.cause AS wal_loss_cause,
       ll.ahead_bytes IS NOT NULL AS wal_loss_lsn_ahead_bytes_counted
FROM snapbuild_slot s
LEFT JOIN snapbuild_slot_state st USING (slot_name)
LEFT JOIN snapbuild_slot_restart_lsn rl USING (slot_name)
LEFT JOIN snapbuild_slot_confirmed_flush cf USING (slot_name)
LEFT JOIN snapbuild_slot_catalog_xmin cx USING (slot_name)
LEFT JOIN snapbuild_slot_wal_since_running_xacts ws USING (slot_name)
LEFT JOIN snapbuild_slot_running_xacts_age ra USING (slot_name)
LEFT JOIN snapbuild_slot_releasable rb USING (slot_name)
LEFT JOIN snapbuild_slot_wal_status w USING (slot_name)
LEFT JOIN snapbuild_slot_safe_wal sw USING (slot_name)
LEFT JOIN snapbuild_slot_consumer co USING (slot_name)
LEFT JOIN snapbuild_slot_blocker bl USING (slot_name)
LEFT JOIN snapbuild_slot_wal_loss wl USING (slot_name)
LEFT JOIN snapbuild_slot_wal_loss_lsn ll USING (slot_name)
WHERE s.slot_name LIKE 'mon\_%';
CREATE TEMP VIEW mon_nulls AS
SELECT count(*) AS queries, sum(n) AS rows_with_a_null FROM (
  SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_state q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_restart_lsn q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_confirmed_flush q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_catalog_xmin q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_wal_since_running_xacts q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_running_xacts_age q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_releasable q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_wal_status q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_safe_wal q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_consumer q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_blocker q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_wal_loss q
  UNION ALL SELECT count(*) FILTER (WHERE NOT (q IS NOT NULL)) FROM snapbuild_slot_wal_loss_lsn q
) AS per_query(n);

-- 1. an invalidated slot: max_slot_wal_keep_size lets a checkpoint remove the WAL it needs
SELECT slot_name FROM pg_create_logical_replication_slot('mon_lost', 'test_decoding');
ALTER SYSTEM SET max_slot_wal_keep_size = '1MB';
SELECT pg_reload_conf();
DO $$ BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN (SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'mon_lost') = 'lost';
    PERFORM pg_switch_wal();
    INSERT INTO mon_orders (status) VALUES ('filler');
    CHECKPOINT;
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'mon_lost';
-- a limit the slots below stay far from, so that safe_wal_size is known
ALTER SYSTEM SET max_slot_wal_keep_size = '1GB';
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SHOW max_slot_wal_keep_size;
\pset null absent
\x on
-- (confirmed_flush and catalog_xmin of an invalidated slot are left out: they are what the
-- server kept)
SELECT slot_name, in_creation, waits_for_xids, blocking_backend, state, state_gauges_at_1,
       restart_lsn_lag_bytes_positive, wal_since_running_xacts_bytes_counted,
       running_xacts_age_seconds_counted, releasable_bytes_positive, wal_status,
       safe_wal_size_bytes_positive, consumer_attached, blocker_pid_positive,
       wal_loss_in_seconds_counted, wal_loss_lsn_ahead_bytes_counted
FROM mon_series WHERE slot_name = 'mon_lost';
\x off
\pset null ''
SELECT * FROM mon_nulls;

-- 2. a slot being created while a session holds a transaction open (incident 1 of
-- docs/troubleshooting.md)
SELECT dblink_connect('mon_holder', format('host=127.0.0.1 port=%s dbname=%s user=%s',
       current_setting('port'), current_database(), current_user));
SELECT dblink_exec('mon_holder', 'BEGIN');
SELECT dblink_exec('mon_holder', $$INSERT INTO mon_orders (status) VALUES ('open')$$);
SELECT dblink_connect('mon_creator', format('host=127.0.0.1 port=%s dbname=%s user=%s',
       current_setting('port'), current_database(), current_user));
CREATE TEMP TABLE mon_creator AS
SELECT pid FROM dblink('mon_creator', 'SELECT pg_backend_pid()') AS t(pid integer);
SELECT dblink_send_query('mon_creator',
       $$SELECT slot_name FROM pg_create_logical_replication_slot('mon_cdc', 'test_decoding')$$);
DO $$ BEGIN
  FOR i IN 1..600 LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM pg_locks l JOIN mon_creator c USING (pid)
                      WHERE l.locktype = 'transactionid' AND NOT l.granted);
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN mon_creator c USING (pid)
               WHERE l.locktype = 'transactionid' AND NOT l.granted) AS creation_waits;
\pset null absent
\x on
SELECT * FROM mon_series WHERE slot_name = 'mon_cdc';
\x off
\pset null ''
SELECT * FROM mon_nulls;
-- the value of snapbuild_slot_blocker_pid, which the alerts' text names, is the holding session
SELECT b.pid = h.pid AS blocker_pid_is_the_holder
FROM snapbuild_slot_blocker b,
     dblink('mon_holder', 'SELECT pg_backend_pid()') AS h(pid integer)
WHERE b.slot_name = 'mon_cdc';
-- the role the exporter needs: pg_read_server_files reads the view and sees the same
DROP ROLE IF EXISTS snapbuild_regress_exporter;
CREATE ROLE snapbuild_regress_exporter;
GRANT pg_monitor TO snapbuild_regress_exporter;
SET ROLE snapbuild_regress_exporter;
SELECT count(*) FROM snapbuild_slot_health;
SELECT count(*) > 0 AS lists_slots FROM pg_replication_slots WHERE slot_type = 'logical';
RESET ROLE;
GRANT pg_read_server_files TO snapbuild_regress_exporter;
REVOKE pg_monitor FROM snapbuild_regress_exporter;
SET ROLE snapbuild_regress_exporter;
SELECT slot_name, in_creation, waiting_xids > 0 AS waits_for_xids,
       oldest_blocking_pid IS NOT NULL AS blocking_backend, state
FROM snapbuild_slot_health WHERE slot_name = 'mon_cdc';
RESET ROLE;
DROP ROLE snapbuild_regress_exporter;
-- the session ends its transaction: the creation returns
SELECT dblink_exec('mon_holder', 'COMMIT');
SELECT * FROM dblink_get_result('mon_creator') AS t(slot_name name);
SELECT dblink_disconnect('mon_creator');

-- 3. consistent and consumed
CHECKPOINT;
INSERT INTO mon_orders (status) VALUES ('round');
SELECT pg_temp.consume('mon_cdc') > 0 AS consumed;
CHECKPOINT;
INSERT INTO mon_orders (status) VALUES ('round');
SELECT pg_temp.consume('mon_cdc') > 0 AS consumed;
\pset null absent
\x on
SELECT * FROM mon_series WHERE slot_name = 'mon_cdc';
\x off
\pset null ''
SELECT * FROM mon_nulls;

-- 4. restart_lsn and catalog_xmin held by a prepared transaction (incident 5): it has no
-- backend, and releasable_bytes says how much WAL its end frees
BEGIN;
INSERT INTO mon_orders (status) SELECT 'imported' FROM generate_series(1, 1000);
PREPARE TRANSACTION 'mon-batch-import';
CHECKPOINT;
INSERT INTO mon_orders (status) VALUES ('round');
SELECT pg_temp.consume('mon_cdc') > 0 AS consumed;
CHECKPOINT;
INSERT INTO mon_orders (status) VALUES ('round');
SELECT pg_temp.consume('mon_cdc') > 0 AS consumed;
CHECKPOINT;
INSERT INTO mon_orders (status) VALUES ('round');
SELECT pg_temp.consume('mon_cdc') > 0 AS consumed;
\pset null absent
\x on
SELECT * FROM mon_series WHERE slot_name = 'mon_cdc';
\x off
\pset null ''
SELECT * FROM mon_nulls;
COMMIT PREPARED 'mon-batch-import';

-- clean up
SELECT dblink_disconnect('mon_holder');
SELECT pg_drop_replication_slot('mon_cdc');
SELECT pg_drop_replication_slot('mon_lost');
ALTER SYSTEM RESET max_slot_wal_keep_size;
SELECT pg_reload_conf();
DROP TABLE mon_orders;
DROP EXTENSION dblink;
SELECT count(*) AS slots_left FROM pg_replication_slots WHERE slot_name LIKE 'mon\_%';
SELECT count(*) AS prepared_left FROM pg_prepared_xacts WHERE gid LIKE 'mon-%';
