//! In-server checks (`cargo pgrx test`): run inside a backend of a throw-away cluster.

use pgrx::prelude::*;

#[pg_test]
fn info_rejects_paths_and_bad_names() {
    for bad in ["../x.snap", "0-174c2c8.snap", "00-1.snap", "0-1.snap.tmp"] {
        let r = PgTryBuilder::new(|| {
            Spi::get_one::<i32>(&format!(
                "SELECT version FROM snapbuild_snapshot_info('{bad}')"
            ))
            .map(|_| None::<String>)
        })
        .catch_others(|e| match e {
            pg_sys::panic::CaughtError::PostgresError(ref er) => Ok(Some(er.message().to_owned())),
            _ => Ok(Some("other".into())),
        })
        .execute();
        assert_eq!(
            r.unwrap(),
            Some(format!("invalid snapshot file name \"{bad}\""))
        );
    }
}

#[pg_test(
    error = "could not open file \"pg_logical/snapshots/FFFFFFFF-1.snap\": No such file or directory (os error 2)"
)]
fn info_missing_file_is_an_error() {
    Spi::run("SELECT * FROM snapbuild_snapshot_info('FFFFFFFF-1.snap')").unwrap();
}

#[pg_test(error = "replication slot \"no_such_slot\" does not exist")]
fn trace_unknown_slot() {
    Spi::run("SELECT * FROM snapbuild_trace('no_such_slot')").unwrap();
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
