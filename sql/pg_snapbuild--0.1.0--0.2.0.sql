-- pg_snapbuild 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_snapbuild UPDATE TO '0.2.0').
--
-- 0.2.0 moved the REVOKE/GRANT block from src/lib.rs to sql/privileges.sql, started versioned
-- install scripts, and:
-- - snapbuild_slot_prediction gains `by_advance bool DEFAULT false` (predict
--   pg_replication_slot_advance instead of pg_logical_slot_get_changes): dropped and created
--   again with the signature `cargo pgrx schema` generates for 0.2.0;
-- - adds snapbuild_diagnose(name), snapbuild_slot_health() and the view snapbuild_slot_health,
--   snapbuild_backlog(name, pg_lsn, integer, bool) and snapbuild_decoding_cost(name, pg_lsn, integer, bool).
-- Privileges as in sql/privileges.sql. Every other function is unchanged (same signature,
-- defaults, result columns, attributes, C symbol and privileges).
-- pgrx-tests/regress/sql/upgrade.sql checks that an updated 0.1.0 equals a fresh 0.2.0 install.
\echo Use "ALTER EXTENSION pg_snapbuild UPDATE TO '0.2.0'" to load this file. \quit

DROP FUNCTION snapbuild_slot_prediction(name, pg_lsn);
CREATE FUNCTION "snapbuild_slot_prediction"(
	"slot_name" name,
	"upto_lsn" pg_lsn DEFAULT NULL,
	"by_advance" bool DEFAULT false
) RETURNS TABLE (
	"decoded_to" pg_lsn,
	"records" bigint,
	"current_catalog_xmin" xid,
	"current_restart_lsn" pg_lsn,
	"current_confirmed_flush" pg_lsn,
	"predicted_catalog_xmin" xid,
	"predicted_restart_lsn" pg_lsn,
	"predicted_confirmed_flush" pg_lsn,
	"predicted_candidate_catalog_xmin" xid,
	"predicted_candidate_xmin_lsn" pg_lsn,
	"predicted_candidate_restart_valid" pg_lsn,
	"predicted_candidate_restart_lsn" pg_lsn
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'snapbuild_slot_prediction_wrapper';
REVOKE ALL ON FUNCTION snapbuild_slot_prediction(name, pg_lsn, bool) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapbuild_slot_prediction(name, pg_lsn, bool) TO pg_read_server_files;

CREATE FUNCTION "snapbuild_diagnose"(
	"slot_name" name
) RETURNS TABLE (
	"kind" TEXT,
	"finding" TEXT,
	"xid" xid,
	"pid" INT,
	"datname" TEXT,
	"usename" TEXT,
	"application_name" TEXT,
	"client_addr" TEXT,
	"state" TEXT,
	"xact_start" timestamp with time zone,
	"wait_event" TEXT,
	"query" TEXT,
	"gid" TEXT,
	"lsn" pg_lsn,
	"bytes" bigint,
	"since" timestamp with time zone,
	"remedy" TEXT,
	"forecast_catalog_xmin" xid
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'snapbuild_diagnose_wrapper';
REVOKE ALL ON FUNCTION snapbuild_diagnose(name) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapbuild_diagnose(name) TO pg_read_server_files;

CREATE FUNCTION "snapbuild_slot_health"() RETURNS TABLE (
	"slot_name" name,
	"state" TEXT,
	"in_creation" bool,
	"waiting_xids" INT,
	"oldest_blocking_pid" INT,
	"restart_lsn_lag_bytes" bigint,
	"confirmed_flush_lag_bytes" bigint,
	"catalog_xmin_age" INT,
	"last_running_xacts" pg_lsn,
	"wal_since_running_xacts_bytes" bigint,
	"replayed_bytes" bigint,
	"running_xacts_age_s" double precision,
	"releasable_bytes" bigint,
	"replay_state" TEXT,
	"consumer_attached" bool,
	"wal_loss_lsn" pg_lsn,
	"wal_loss_at" timestamp with time zone,
	"wal_loss_in_s" double precision,
	"wal_loss_cause" TEXT
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'snapbuild_slot_health_wrapper';
CREATE VIEW snapbuild_slot_health AS SELECT * FROM snapbuild_slot_health();
REVOKE ALL ON FUNCTION snapbuild_slot_health() FROM PUBLIC;
REVOKE ALL ON snapbuild_slot_health FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapbuild_slot_health() TO pg_read_server_files;
GRANT SELECT ON snapbuild_slot_health TO pg_read_server_files;

CREATE FUNCTION "snapbuild_backlog"(
	"slot_name" name,
	"upto" pg_lsn DEFAULT NULL,
	"work_mem_kb" INT DEFAULT NULL,
	"streaming" bool DEFAULT NULL
) RETURNS TABLE (
	"xid" xid,
	"first_lsn" pg_lsn,
	"end_lsn" pg_lsn,
	"outcome" TEXT,
	"pid" INT,
	"gid" TEXT,
	"database" oid,
	"subxacts" INT,
	"inserts" bigint,
	"updates" bigint,
	"deletes" bigint,
	"truncates" bigint,
	"messages" bigint,
	"invalidations" bigint,
	"other" bigint,
	"wal_bytes" bigint,
	"queued_bytes" bigint,
	"total_bytes" bigint,
	"decoder" TEXT,
	"spill_count" bigint,
	"spill_bytes" bigint,
	"spilled" bool,
	"stream_count" bigint,
	"stream_bytes" bigint
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'snapbuild_backlog_wrapper';

-- src/sql/backlog.rs:167
CREATE FUNCTION "snapbuild_decoding_cost"(
	"slot_name" name,
	"upto" pg_lsn DEFAULT NULL,
	"work_mem_kb" INT DEFAULT NULL,
	"streaming" bool DEFAULT NULL
) RETURNS TABLE (
	"decoded_from" pg_lsn,
	"decoded_to" pg_lsn,
	"records" bigint,
	"wal_bytes" bigint,
	"work_mem_kb" INT,
	"streaming" bool,
	"total_txns" bigint,
	"total_bytes" bigint,
	"spill_txns" bigint,
	"spill_count" bigint,
	"spill_bytes" bigint,
	"stream_txns" bigint,
	"stream_count" bigint,
	"stream_bytes" bigint,
	"sent_txns" bigint,
	"sent_wal_bytes" bigint,
	"skipped_before_start_txns" bigint,
	"skipped_before_start_wal_bytes" bigint,
	"skipped_aborted_txns" bigint,
	"skipped_aborted_wal_bytes" bigint,
	"skipped_other_db_txns" bigint,
	"skipped_other_db_wal_bytes" bigint,
	"pending_txns" bigint,
	"pending_wal_bytes" bigint,
	"largest_xid" xid,
	"largest_bytes" bigint,
	"peak_memory_bytes" bigint,
	"undecided" TEXT
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'snapbuild_decoding_cost_wrapper';
REVOKE ALL ON FUNCTION snapbuild_backlog(name, pg_lsn, integer, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_decoding_cost(name, pg_lsn, integer, bool) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapbuild_backlog(name, pg_lsn, integer, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_decoding_cost(name, pg_lsn, integer, bool) TO pg_read_server_files;
