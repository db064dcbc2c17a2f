//! pg_snapbuild: PostgreSQL's logical decoding snapshot builder (snapbuild.c),
//! re-run in Rust on the server's own inputs, beside the server's own verdicts.
//!
//! Layout: `snapbuild_core` (src/core, pure Rust, no FFI) holds the logic;
//! [`adapter`] fetches WAL, slots and `.snap` files from the running server;
//! [`sql`] exposes set-returning functions.

::pgrx::pg_module_magic!(name, version);

pub mod adapter;
pub mod sql;

pgrx::extension_sql!(
    r#"
REVOKE ALL ON FUNCTION snapbuild_snapshot_info(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_snapshot_files() FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_trace(name) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_slots() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapbuild_snapshot_info(text) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_snapshot_files() TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_trace(name) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_slots() TO pg_monitor;
"#,
    name = "privileges",
    finalize
);

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![
            "wal_level = 'logical'",
            "max_replication_slots = 20",
            "max_wal_senders = 20",
        ]
    }
}
