-- Privileges, run last (`finalize`) in the install script pgrx generates
-- (pgrx::extension_sql_file! in src/lib.rs). Every function is revoked from PUBLIC;
-- the ones that read files or WAL are granted to pg_read_server_files, the slot
-- listing to pg_monitor. A new function needs its REVOKE/GRANT pair here, and an
-- upgrade script (sql/pg_snapbuild--A--B.sql) must repeat the pair for it.
REVOKE ALL ON FUNCTION snapbuild_snapshot_info(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_snapshot_files() FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_trace(name, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_trace_json(name, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_trace_range(pg_lsn, pg_lsn, xid, bool, bool, pg_lsn, bool, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_slots() FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_historic_snapshot(name, pg_lsn, xid) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_historic_snapshot_from_file(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_visibility(regclass, name, pg_lsn, xid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_historic_visible(xid, xid, integer, integer, xid, xid, xid[], xid[], integer, integer, xid, xid[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_slot_prediction(name, pg_lsn, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_diagnose(name) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_slot_health() FROM PUBLIC;
REVOKE ALL ON snapbuild_slot_health FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_backlog(name, pg_lsn, integer, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_decoding_cost(name, pg_lsn, integer, bool) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapbuild_snapshot_info(text) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_snapshot_files() TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_trace(name, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_trace_json(name, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_trace_range(pg_lsn, pg_lsn, xid, bool, bool, pg_lsn, bool, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_slots() TO pg_monitor;
GRANT EXECUTE ON FUNCTION snapbuild_historic_snapshot(name, pg_lsn, xid) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_historic_snapshot_from_file(text) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_visibility(regclass, name, pg_lsn, xid, text) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_historic_visible(xid, xid, integer, integer, xid, xid, xid[], xid[], integer, integer, xid, xid[]) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_slot_prediction(name, pg_lsn, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_diagnose(name) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_slot_health() TO pg_read_server_files;
GRANT SELECT ON snapbuild_slot_health TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_backlog(name, pg_lsn, integer, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_decoding_cost(name, pg_lsn, integer, bool) TO pg_read_server_files;
