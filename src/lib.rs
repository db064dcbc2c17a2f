//! pg_snapbuild: PostgreSQL's logical decoding snapshot builder (snapbuild.c),
//! re-run in Rust on the server's own inputs, beside the server's own verdicts.
//!
//! Layout, each layer calling only downwards:
//! - [`sql`]: the SQL functions; each validates its arguments through the context, runs
//!   it and maps rows to columns.
//! - [`worker`]: the watcher, an optional background worker that diagnoses every slot at
//!   a steady pace and logs creations that wait and positions held.
//! - [`context`]: the decoding context (logical.c's role): turns a slot or an LSN range
//!   into a running replay with one record loop, and judges rows against the server.
//! - [`adapter`]: fetches the server's inputs (WAL through XLogReader, slots from shared
//!   memory, `.snap` files, heap pages) as plain values.
//! - `snapbuild_core` (src/core, pure Rust, no FFI): the logic, mirroring PostgreSQL's
//!   files.

::pgrx::pg_module_magic!(name, version);

/// Registers the extension's settings when the library is loaded.
#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    adapter::server_log::define_gucs();
    context::group::define_gucs();
    adapter::shared_state::init();
    worker::init();
}

pub mod adapter;
pub mod context;
pub mod sql;
pub mod worker;

// REVOKE/GRANT for every function, last in the install script (see sql/privileges.sql).
pgrx::extension_sql_file!("../sql/privileges.sql", name = "privileges", finalize);

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

    /// `snapbuild_historic_visible` on a case per branch of HeapTupleSatisfiesHistoricMVCC
    /// (commit-log answers given, so nothing depends on this cluster's history).
    #[pg_test]
    fn historic_visible_what_if_covers_every_branch() {
        // snapshot xmin 100, xmax 200, xip {150}; decoding transaction 160 at curcid 3.
        let snap = "'100', '200', '{150}', '{160}', 3";
        #[rustfmt::skip]
        let cases: &[(&str, &str, i32, &str, &str, bool, &str)] = &[
            // t_xmin, t_xmax, infomask, cid, extra arguments, visible, branch
            ("150", "0", 0x0a00, "NULL", "", false, "xmin invalid"),
            ("160", "0", 0x0800, "NULL", "", false, "xmin ours, unresolved"),
            ("160", "0", 0x0800, "3", "", false, "xmin ours, cmin >= curcid"),
            ("160", "0", 0x0800, "2", "", true, "xmin ours, cmin < curcid; xmax invalid"),
            ("90", "0", 0x0900, "NULL", "", true, "xmin < snapshot xmin, committed hint; xmax invalid"),
            ("91", "0", 0x0800, "NULL", "", true, "xmin < snapshot xmin, clog committed; xmax invalid"),
            ("92", "0", 0x0800, "NULL", "", false, "xmin < snapshot xmin, not committed"),
            ("200", "0", 0x0900, "NULL", "", false, "xmin >= snapshot xmax"),
            ("150", "0", 0x0800, "NULL", "", true, "xmin in xip; xmax invalid"),
            ("151", "0", 0x0900, "NULL", "", false, "xmin in [xmin, xmax), not in xip"),
            ("90", "151", 0x0190, "NULL", "", true, "xmin < snapshot xmin, committed hint; xmax locked only"),
            ("90", "7", 0x1110, "NULL", ", update_xid => '150'", false, "xmin < snapshot xmin, committed hint; xmax in xip"),
            ("90", "160", 0x0100, "NULL", "", true, "xmin < snapshot xmin, committed hint; xmax ours, unresolved"),
            ("90", "160", 0x0100, "1", ", cmax => -1", true, "xmin < snapshot xmin, committed hint; xmax ours, no cmax"),
            ("90", "160", 0x0100, "1", ", cmax => 3", true, "xmin < snapshot xmin, committed hint; xmax ours, cmax >= curcid"),
            ("90", "160", 0x0100, "1", ", cmax => 2", false, "xmin < snapshot xmin, committed hint; xmax ours, cmax < curcid"),
            ("90", "95", 0x0500, "NULL", "", false, "xmin < snapshot xmin, committed hint; xmax < snapshot xmin, committed hint"),
            ("90", "96", 0x0100, "NULL", "", false, "xmin < snapshot xmin, committed hint; xmax < snapshot xmin, clog committed"),
            ("90", "97", 0x0100, "NULL", "", true, "xmin < snapshot xmin, committed hint; xmax < snapshot xmin, not committed"),
            ("90", "250", 0x0500, "NULL", "", true, "xmin < snapshot xmin, committed hint; xmax >= snapshot xmax"),
            ("90", "150", 0x0100, "NULL", "", false, "xmin < snapshot xmin, committed hint; xmax in xip"),
            ("90", "151", 0x0500, "NULL", "", true, "xmin < snapshot xmin, committed hint; xmax in [xmin, xmax), not in xip"),
        ];
        for (xmin, xmax, mask, cid, extra, visible, branch) in cases {
            let sql = format!(
                "SELECT row(visible, branch)::text FROM snapbuild_historic_visible('{xmin}', '{xmax}', {mask}, {cid}, {snap}, committed => '{{91,96}}'{extra})"
            );
            let got = Spi::get_one::<String>(&sql).unwrap().unwrap();
            let want = format!("({},\"{branch}\")", if *visible { "t" } else { "f" });
            assert_eq!(got, want, "{sql}");
        }
        // Across the wrap: xmin 4294967290, xmax 10; 5 is in xip, 4294967280 is older.
        let wrap = "'4294967290', '10', '{5}'";
        let v = Spi::get_one::<String>(&format!(
            "SELECT branch FROM snapbuild_historic_visible('5', '0', 2048, NULL, {wrap})"
        ))
        .unwrap();
        assert_eq!(v.as_deref(), Some("xmin in xip; xmax invalid"));
        let v = Spi::get_one::<String>(&format!(
            "SELECT branch FROM snapbuild_historic_visible('4294967280', '0', 2304, NULL, {wrap})"
        ))
        .unwrap();
        assert_eq!(
            v.as_deref(),
            Some("xmin < snapshot xmin, committed hint; xmax invalid")
        );
    }

    #[pg_test]
    fn historic_visible_refuses_bad_input() {
        let (code, _) = error_of(
            "SELECT * FROM snapbuild_historic_visible('90', '7', 4352, NULL, '100', '200', '{}', committed => '{}')",
        )
        .unwrap();
        assert_eq!(code, PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE); // multixact, no update_xid
        let (code, _) = error_of(
            "SELECT * FROM snapbuild_historic_visible('90', '0', 70000, NULL, '100', '200', '{}')",
        )
        .unwrap();
        assert_eq!(code, PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE);
        let (code, _) = error_of(
            "SELECT * FROM snapbuild_historic_visible('90', '0', 0, NULL, '100', '200', '{1,NULL}')",
        )
        .unwrap();
        assert_eq!(code, PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED);
    }

    #[pg_test]
    fn historic_functions_null_arguments_and_file_errors() {
        let rows =
            Spi::get_one::<i64>("SELECT count(*) FROM snapbuild_visibility(NULL, 'x')").unwrap();
        assert_eq!(rows, Some(0));
        let rows =
            Spi::get_one::<i64>("SELECT count(*) FROM snapbuild_historic_snapshot(NULL)").unwrap();
        assert_eq!(rows, Some(0));
        let (code, msg) =
            error_of("SELECT * FROM snapbuild_historic_snapshot_from_file('0-1.snap.tmp')")
                .unwrap();
        assert_eq!(
            code,
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "{msg}"
        );
        let (code, _) =
            error_of("SELECT * FROM snapbuild_historic_snapshot_from_file('FFFFFFFF-1.snap')")
                .unwrap();
        assert_eq!(code, PgSqlErrorCode::ERRCODE_UNDEFINED_FILE);
    }

    /// What one backend can check: slots that give no historic snapshot. (A logical slot
    /// cannot be created inside the test's transaction, which has an xid; the historic
    /// functions on logical slots are checked by pgrx-tests/tests/historic_visibility_*.rs.)
    #[pg_test]
    fn historic_functions_refuse_slots_without_a_decoder() {
        for sql in [
            "SELECT * FROM snapbuild_historic_snapshot('pgt_no_slot')",
            "SELECT * FROM snapbuild_visibility('pg_class', 'pgt_no_slot')",
        ] {
            let (code, msg) = error_of(sql).unwrap();
            assert_eq!(code, PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT, "{sql}");
            assert_eq!(msg, "replication slot \"pgt_no_slot\" does not exist");
        }
        Spi::run("SELECT pg_create_physical_replication_slot('pgt_hv_phys', true)").unwrap();
        for sql in [
            "SELECT * FROM snapbuild_historic_snapshot('pgt_hv_phys')",
            "SELECT * FROM snapbuild_visibility('pg_class', 'pgt_hv_phys', NULL, '1')",
        ] {
            let (code, msg) = error_of(sql).unwrap();
            assert_eq!(
                code,
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "{sql}"
            );
            assert_eq!(
                msg,
                "replication slot \"pgt_hv_phys\" is not a logical slot"
            );
        }
        Spi::run("SELECT pg_drop_replication_slot('pgt_hv_phys')").unwrap();
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

    /// The core's bounds-checked xact record parsers read every commit, abort and
    /// prepare record of the cluster's WAL (initdb's included: invalidations, dropped
    /// relations, database info) exactly as xactdesc.c's ParseCommitRecord /
    /// ParseAbortRecord / ParsePrepareRecord do.
    #[pg_test]
    fn xact_records_parse_like_xactdesc() {
        let first: String =
            Spi::get_one("SELECT min(name) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'")
                .unwrap()
                .unwrap();
        let log = u64::from_str_radix(&first[8..16], 16).unwrap();
        let seg = u64::from_str_radix(&first[16..24], 16).unwrap();
        let seg_size = unsafe { pg_sys::wal_segment_size } as u64;
        let start = (log << 32) + seg * seg_size + pg_sys::XLOG_BLCKSZ as u64;
        // 14's reader cannot look for the first record after a position: start at the
        // last checkpoint record there (fewer records follow it).
        let major = crate::adapter::server_version().major;
        let start_sql = if major == 14 {
            "(SELECT checkpoint_lsn FROM pg_control_checkpoint())".to_string()
        } else {
            format!("'{:X}/{:X}'::pg_lsn", start >> 32, start & 0xffff_ffff)
        };
        let rows = Spi::get_one::<i64>(&format!(
            "SELECT count(*) FROM snapbuild_trace_range({start_sql}, in_slot_creation => false)"
        ))
        .unwrap()
        .unwrap();
        assert!(rows > 0);
        let (seen, diffs) = crate::adapter::wal::xact_check::SEEN.with(|s| s.borrow().clone());
        let want = if major == 14 { 1 } else { 20 };
        assert!(seen >= want, "only {seen} xact records read");
        assert!(
            diffs.is_empty(),
            "{} of {seen} differ: {diffs:#?}",
            diffs.len()
        );
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
