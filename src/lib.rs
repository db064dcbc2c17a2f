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
REVOKE ALL ON FUNCTION snapbuild_trace(name, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_trace_json(name, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_trace_range(pg_lsn, pg_lsn, xid, bool, bool, pg_lsn, bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION snapbuild_slots() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snapbuild_snapshot_info(text) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_snapshot_files() TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_trace(name, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_trace_json(name, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_trace_range(pg_lsn, pg_lsn, xid, bool, bool, pg_lsn, bool) TO pg_read_server_files;
GRANT EXECUTE ON FUNCTION snapbuild_slots() TO pg_monitor;
"#,
    name = "privileges",
    finalize
);

/// In-server checks (`cargo pgrx test`): run inside a backend of a throw-away cluster.
#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {

    use pgrx::prelude::*;

    /// Runs `sql` and returns the SQLSTATE and message of the ERROR it raised.
    fn error_of(sql: &str) -> Option<(PgSqlErrorCode, String)> {
        PgTryBuilder::new(|| {
            Spi::run(sql).unwrap();
            None
        })
        .catch_others(|e| match e {
            pg_sys::panic::CaughtError::PostgresError(ref er)
            | pg_sys::panic::CaughtError::ErrorReport(ref er) => {
                Some((er.sql_error_code(), er.message().to_owned()))
            }
            other => panic!("unexpected failure: {other:?}"),
        })
        .execute()
    }

    #[pg_test]
    fn info_rejects_paths_and_bad_names() {
        for bad in [
            "../x.snap",
            "0-174c2c8.snap",
            "00-1.snap",
            "0-1.snap.tmp",
            "/tmp/0-1.snap",
        ] {
            let got = error_of(&format!("SELECT * FROM snapbuild_snapshot_info('{bad}')"));
            assert_eq!(
                got,
                Some((
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("invalid snapshot file name \"{bad}\"")
                ))
            );
        }
    }

    #[pg_test]
    fn info_missing_file_is_undefined_file() {
        let (code, msg) =
            error_of("SELECT * FROM snapbuild_snapshot_info('FFFFFFFF-1.snap')").unwrap();
        assert_eq!(code, PgSqlErrorCode::ERRCODE_UNDEFINED_FILE);
        assert!(
            msg.starts_with("could not open file \"pg_logical/snapshots/FFFFFFFF-1.snap\""),
            "{msg}"
        );
    }

    #[pg_test]
    fn trace_unknown_slot_is_undefined_object() {
        let (code, msg) = error_of("SELECT * FROM snapbuild_trace('no_such_slot')").unwrap();
        assert_eq!(code, PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT);
        assert_eq!(msg, "replication slot \"no_such_slot\" does not exist");
    }

    #[pg_test]
    fn slots_match_pg_replication_slots() {
        Spi::run("SELECT pg_create_physical_replication_slot('pgt_phys', true)").unwrap();
        let same = Spi::get_one::<bool>(
            "SELECT s.restart_lsn = r.restart_lsn AND s.slot_type = r.slot_type AND s.persistency = 'persistent'
               AND NOT s.in_creation
               FROM snapbuild_slots() s JOIN pg_replication_slots r USING (slot_name)
              WHERE slot_name = 'pgt_phys'",
        )
        .unwrap();
        assert_eq!(same, Some(true));
        Spi::run("SELECT pg_drop_replication_slot('pgt_phys')").unwrap();
    }

    #[pg_test(error = "replication slot \"pgt_phys2\" is not a logical slot")]
    fn trace_physical_slot_is_refused() {
        Spi::run("SELECT pg_create_physical_replication_slot('pgt_phys2', true)").unwrap();
        Spi::run("SELECT * FROM snapbuild_trace('pgt_phys2')").unwrap();
    }

    #[pg_test]
    fn snapshot_files_lists_without_error() {
        // The directory exists in every cluster; an empty or populated listing both succeed
        // and every row either decodes or carries an error text.
        let bad = Spi::get_one::<i64>(
            "SELECT count(*) FROM snapbuild_snapshot_files() WHERE (error IS NULL) = (state IS NULL)",
        )
        .unwrap();
        assert_eq!(bad, Some(0));
    }
}

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
