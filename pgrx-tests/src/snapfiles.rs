//! The `.snap` files the server wrote in `pg_logical/snapshots`.

use crate::cluster::Env;
use crate::decoding::consume_changes;
use crate::sessions::{create_slot, server_slot};
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

/// Files written into the server's snapshot directory, removed at the end.
pub struct PlantedFiles(pub Vec<std::path::PathBuf>);
impl Drop for PlantedFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

pub fn plant(env: &Env, planted: &mut PlantedFiles, name: &str, bytes: &[u8]) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = env.snapshots_dir();
    let meta = std::fs::metadata(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let p = dir.join(name);
    planted.0.push(p.clone());
    std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    std::os::unix::fs::chown(&p, Some(meta.uid()), Some(meta.gid())).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Creates `slot` and returns a real .snap file the server wrote for it, one the slot
/// still protects from removal, as (name, bytes).
pub fn real_snap_file(env: &Env, c: &mut Client, slot: &str, tab: &str) -> (String, Vec<u8>) {
    c.batch_execute(&format!("CREATE TABLE IF NOT EXISTS {tab} (a int)"))
        .unwrap();
    create_slot(env, slot);
    c.batch_execute(&format!("CREATE TABLE IF NOT EXISTS {tab}_2 (a int)"))
        .unwrap();
    for _ in 0..5 {
        let files = produce_snap_files(env, c, slot, tab);
        let restart = server_slot(c, slot).restart_lsn;
        // a file the slot still protects from removal
        for (name, _) in files.iter().rev() {
            if snap_lsn(name).is_some_and(|l| l >= restart) {
                if let Ok(b) = std::fs::read(env.snapshots_dir().join(name)) {
                    return (name.clone(), b);
                }
            }
        }
    }
    panic!("could not read a .snap file the server wrote");
}
