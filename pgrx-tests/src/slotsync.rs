//! Failover slots synchronized to a hot standby (PostgreSQL 17+): the start of such a test
//! ([`start_synced`]), and the primary's slot brought where a sync can persist its copy
//! ([`settle`]) or made to restart on a RUNNING_XACTS that runs an open transaction
//! ([`restart_while_k_runs`]).

use crate::cluster::{start, Env, Serial};
use crate::decoding::consume_changes;
use crate::sessions::{server_slot, OpenXact};
use crate::standby::{keep_xids_off_subtrans_page_boundary, Standby};
use crate::wal::wal_running_xacts_at;
use postgres::Client;

/// The start of a test of failover slots synchronized to the standby: as
/// [`start_on_standby`](crate::standby::start_on_standby), and `None` (printed as skipped) before PostgreSQL 17, which has
/// neither failover slots nor the slot sync worker.
pub fn start_synced(test: &str) -> Option<(Serial, Env, Client, Standby, Client)> {
    let (g, env, mut pc) = start()?;
    if env.major < 17 {
        println!(
            "SKIPPED: {test}: failover slots are synchronized to standbys from PostgreSQL 17 on"
        );
        return None;
    }
    keep_xids_off_subtrans_page_boundary(&mut pc);
    let sb = env.standby();
    let sc = sb.connect(&format!("pgsnap-{test}"));
    Some((g, env, pc, sb, sc))
}

/// Three rounds of a RUNNING_XACTS, flushed by a non-transactional logical message (no xid
/// is assigned after it), and `pg_logical_slot_get_changes`: the primary's slot's
/// catalog_xmin reaches the next xid, which is what the standby reserves when nothing runs.
pub fn settle(env: &Env, pc: &mut Client, slot: &str) {
    for _ in 0..3 {
        env.log_standby_snapshot(pc);
        pc.batch_execute("SELECT pg_logical_emit_message(false, 'pgsnap', 'flush', true)")
            .unwrap();
        consume_changes(pc, slot);
    }
}

/// Consumes `slot` once, opens transaction k (application_name `name`) and consumes the
/// slot again (at most six rounds) until its restart_lsn moves, so that it lands on a
/// RUNNING_XACTS logged while k runs: (k, whether restart_lsn moved, whether the
/// RUNNING_XACTS at the new restart_lsn lists k, read from the WAL).
pub fn restart_while_k_runs(
    env: &Env,
    pc: &mut Client,
    slot: &str,
    name: &str,
) -> (OpenXact, bool, bool) {
    settle(env, pc, slot);
    let xk = OpenXact::begin(env, name);
    let before = server_slot(pc, slot).restart_lsn;
    let mut moved = false;
    for _ in 0..6 {
        settle(env, pc, slot);
        if server_slot(pc, slot).restart_lsn != before {
            moved = true;
            break;
        }
    }
    let restart = server_slot(pc, slot).restart_lsn;
    let runs_k = wal_running_xacts_at(pc, restart).is_some_and(|w| w.xacts.contains(&xk.xid));
    (xk, moved, runs_k)
}
