-- A slot created while no transaction runs: the replay becomes consistent on branch a at
-- the first RUNNING_XACTS, and that record's end is the LSN the server returned
-- (= the slot's confirmed_flush).
SELECT lsn AS created_lsn
FROM pg_create_logical_replication_slot('snapbuild_regress_basic', 'test_decoding') \gset
SELECT record, branch, state_before, state, level, detail,
       message = 'logical decoding found consistent point at ' || lsn AS message_names_lsn,
       end_lsn = :'created_lsn'::pg_lsn AS end_is_returned_lsn,
       end_lsn = (SELECT confirmed_flush_lsn FROM pg_replication_slots
                  WHERE slot_name = 'snapbuild_regress_basic') AS end_is_confirmed_flush,
       lsn = (SELECT restart_lsn FROM pg_replication_slots
              WHERE slot_name = 'snapbuild_regress_basic') AS at_restart_lsn,
       agrees IS NOT FALSE AS not_disagreeing
FROM snapbuild_trace('snapbuild_regress_basic')
WHERE state = 'consistent' AND state_before IS DISTINCT FROM 'consistent'
  AND record <> 'REPLAY START'
ORDER BY lsn LIMIT 1;
-- the replay starts as restarted decoding would
SELECT in_slot_creation,
       lsn = s.restart_lsn AS at_restart_lsn,
       start_decoding_at = s.confirmed_flush_lsn AS start_decoding_at_is_confirmed_flush
FROM snapbuild_trace('snapbuild_regress_basic') t, pg_replication_slots s
WHERE t.record = 'REPLAY START' AND s.slot_name = 'snapbuild_regress_basic';
-- no row of the replay disagrees with the server
SELECT count(*) FILTER (WHERE agrees = false) AS disagreeing
FROM snapbuild_trace('snapbuild_regress_basic');
-- the consistent row (at the replay's start, so not judged by confirmed_flush) agrees from the
-- creating backend's own LOG line; with pg_snapbuild.server_log_max_mb = 0 the log is not read
SELECT agrees, server_source LIKE 'server log: pid % at %' AS from_log
FROM snapbuild_trace('snapbuild_regress_basic')
WHERE branch = 'a' AND state_before IS DISTINCT FROM 'consistent';
SET pg_snapbuild.server_log_max_mb = 0;
SHOW pg_snapbuild.server_log_max_mb;
SELECT agrees, server_source
FROM snapbuild_trace('snapbuild_regress_basic')
WHERE branch = 'a' AND state_before IS DISTINCT FROM 'consistent';
RESET pg_snapbuild.server_log_max_mb;
SHOW pg_snapbuild.server_log_max_mb;
-- snapbuild_slots() beside pg_replication_slots
SELECT o.in_creation, o.slot_type, o.plugin,
       o.restart_lsn = p.restart_lsn AS restart_lsn,
       o.confirmed_flush = p.confirmed_flush_lsn AS confirmed_flush,
       o.catalog_xmin = p.catalog_xmin AS catalog_xmin,
       o.datoid = p.datoid AS datoid
FROM snapbuild_slots() o JOIN pg_replication_slots p USING (slot_name)
WHERE slot_name = 'snapbuild_regress_basic';
SELECT pg_drop_replication_slot('snapbuild_regress_basic');
