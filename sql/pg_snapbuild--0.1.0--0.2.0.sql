-- pg_snapbuild 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_snapbuild UPDATE TO '0.2.0').
--
-- 0.2.0 adds snapbuild_diagnose(name), snapbuild_slot_health() and the view
-- snapbuild_slot_health (with their REVOKE/GRANT pairs). Otherwise it only moved the
-- REVOKE/GRANT block from src/lib.rs to sql/privileges.sql and started versioned install
-- scripts. The install scripts that `cargo pgrx schema` generates for 0.1.0 (frozen as
-- sql/pg_snapbuild--0.1.0.sql) and for 0.2.0 differ otherwise in comments only: the same 11
-- functions with the same signatures, defaults, result columns, attributes, C symbols and
-- privileges. pgrx-tests/regress/sql/upgrade.sql checks that an updated 0.1.0 equals a fresh
-- 0.2.0 install.
\echo Use "ALTER EXTENSION pg_snapbuild UPDATE TO '0.2.0'" to load this file. \quit

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
	"remedy" TEXT
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
	"replayed_bytes" bigint
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'snapbuild_slot_health_wrapper';
CREATE VIEW snapbuild_slot_health AS SELECT * FROM snapbuild_slot_health();
REVOKE ALL ON FUNCTION snapbuild_slot_health() FROM PUBLIC;
REVOKE ALL ON snapbuild_slot_health FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapbuild_slot_health() TO pg_read_server_files;
GRANT SELECT ON snapbuild_slot_health TO pg_read_server_files;
