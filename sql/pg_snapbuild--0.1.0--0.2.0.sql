-- pg_snapbuild 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_snapbuild UPDATE TO '0.2.0').
--
-- 0.2.0 adds snapbuild_diagnose(name) (with its REVOKE/GRANT pair). Otherwise it only moved the REVOKE/GRANT block from src/lib.rs
-- to sql/privileges.sql and started versioned install scripts. The install scripts that
-- `cargo pgrx schema` generates for 0.1.0 (frozen as sql/pg_snapbuild--0.1.0.sql) and for 0.2.0
-- differ otherwise in comments only: the same 11 functions with the same signatures, defaults, result
-- columns, attributes, C symbols and privileges. pgrx-tests/regress/sql/upgrade.sql checks that
-- an updated 0.1.0 equals a fresh 0.2.0 install.
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
