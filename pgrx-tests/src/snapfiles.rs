//! The `.snap` files the server wrote in `pg_logical/snapshots`.

use crate::cluster::Env;
use crate::decoding::consume_changes;
use postgres::Client;
use std::collections::BTreeMap;

/// The server's `.snap` file name for an LSN.
pub fn snap_name(l: u64) -> String {
    format!("{:X}-{:X}.snap", l >> 32, l & 0xffff_ffff)
}

/// The files in the server's `pg_logical/snapshots` (as pg_ls_logicalsnapdir() lists them): name → size.
pub fn server_snap_files(c: &mut Client) -> BTreeMap<String, i64> {
    // pg_ls_logicalsnapdir() exists from 15; pg_ls_dir + pg_stat_file work everywhere.
    c.query("SELECT name, (pg_stat_file('pg_logical/snapshots/' || name)).size FROM pg_ls_dir('pg_logical/snapshots') AS name", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .filter(|(n, _)| n.ends_with(".snap"))
        .collect()
}

/// LSN named by a `%X-%X.snap` file name.
pub fn snap_lsn(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".snap")?;
    let (hi, lo) = stem.split_once('-')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// Drives a created slot until the server has written at least one `.snap` file for it;
/// returns the files present afterwards. `xact` (if any) stays open meanwhile.
pub fn produce_snap_files(
    env: &Env,
    c: &mut Client,
    slot: &str,
    table: &str,
) -> BTreeMap<String, i64> {
    for _ in 0..10 {
        env.log_standby_snapshot_flushed(c, table, "1");
        consume_changes(c, slot);
        let files = server_snap_files(c);
        if !files.is_empty() {
            return files;
        }
    }
    panic!("the server wrote no .snap file for slot {slot}");
}
