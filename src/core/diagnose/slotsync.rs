//! A standby's copy of a primary's failover slot (PostgreSQL 17+): whether the server
//! keeps it temporary, why, and what ends that.
//!
//! Not a PostgreSQL file. The rules it explains are slotsync.c's synchronize_one_slot,
//! reserve_wal_for_local_slot, update_local_synced_slot and
//! update_and_persist_local_synced_slot, and procarray.c GetOldestSafeDecodingTransactionId:
//!
//! - A new copy is created temporary. Its restart_lsn is the remote slot's, or the
//!   oldest WAL the standby still keeps when that is later; its catalog_xmin is the
//!   oldest xid safe for decoding on the standby, which in recovery is the next xid (or an
//!   older slot's catalog_xmin): not the primary's oldest running transaction.
//! - While the remote restart_lsn is before the copy's, or the remote catalog_xmin older
//!   than the copy's, each synchronization leaves the copy alone (its confirmed_flush
//!   stays invalid) and logs `could not synchronize replication slot` with both pairs.
//! - Once the remote slot has caught up, the copy takes its positions: directly when a
//!   serialized snapshot exists at the remote restart_lsn, else through a fast-forward
//!   decoder run up to the remote confirmed_flush. It is persisted (sync-ready) only when
//!   that decoder is consistent there; otherwise it stays temporary, logging that no
//!   consistent snapshot could be built.
//!
//! The remote catalog_xmin passes the copy's only after every transaction older than the
//! copy's catalog_xmin has ended on the primary and the slot's consumer there has
//! confirmed past a RUNNING_XACTS record logged after that.

use super::facts::{
    BuilderFacts, Holder, ServerFacts, SlotFacts, SyncSkip, SyncSkipReason, SyncedCopy,
};
use super::finding::{Finding, FindingKind};
use super::remedy::{primary_remedy, wal_remedy};
use super::waits::{builder_waits, older_running, on_primary, wait_finding, xid_status, XidStatus};
use crate::include::snapbuild::SnapBuildState;
use crate::include::transam::{self, TransactionId};

fn quote(s: &str) -> String {
    s.replace('\'', "''")
}

/// The query to run on the primary for the remote slot's positions.
fn remote_query(slot: &SlotFacts) -> String {
    format!(
        "SELECT restart_lsn, catalog_xmin, confirmed_flush_lsn, active_pid FROM pg_replication_slots WHERE slot_name = '{}'",
        quote(&slot.name)
    )
}

/// What a consumer confirming on the primary adds to a remedy.
const CONFIRM_ON_PRIMARY: &str =
    ", then let the slot's consumer on the primary confirm past that record (the next synchronization takes the positions)";

/// How many of the rows below name one transaction each, at most.
const MAX_ROWS: usize = 10;

/// The rows of a synced copy on a standby, pushed first among a created slot's; returns
/// how many of them hold the copy back (a temporary copy is never healthy).
pub(super) fn copy_findings(
    slot: &SlotFacts,
    copy: &SyncedCopy,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
    out: &mut Vec<Finding>,
) -> usize {
    let what = format!(
        "slot \"{}\" is this standby's copy of the primary's failover slot",
        slot.name
    );
    if !copy.temporary {
        let mut f = Finding::new(
            FindingKind::Synchronized,
            format!(
                "{what}, persistent (sync-ready): the slot synchronization moves its restart_lsn, catalog_xmin and confirmed_flush to the primary slot's as that slot's consumer confirms; no consumer can use it here before a promotion; the rows below name what holds the primary's slot as far as this standby's WAL shows (no forecast is made for a copy: its positions come from the primary)"
            ),
        );
        f.lsn = slot.confirmed_flush;
        f.remedy = Some(format!("on the primary: {}", remote_query(slot)));
        out.push(f);
        return 0;
    }
    let skip = copy.last_skip.as_ref();
    let logged = |s: &SyncSkip| {
        format!(
            " (logged at {} s before now)",
            (server.now - s.at).max(0) / 1_000_000
        )
    };
    match slot.confirmed_flush {
        None => {
            let (l, y) = (slot.restart_lsn, slot.catalog_xmin);
            let remote = match skip.map(|s| (s, s.reason)) {
                Some((
                    s,
                    SyncSkipReason::RemoteBehind {
                        remote_restart_lsn: a,
                        remote_catalog_xmin: x,
                        local_restart_lsn,
                        local_catalog_xmin,
                    },
                )) if local_restart_lsn == l && local_catalog_xmin == y => {
                    let mut behind = Vec::new();
                    if a < l {
                        behind.push(format!("its restart_lsn {a} is before {l}"));
                    }
                    if transam::precedes(x, y) {
                        behind.push(format!("its catalog_xmin {x} is older than {y}"));
                    }
                    format!(
                        "; the synchronization last said{}: the remote slot needs WAL at LSN {a} and catalog xmin {x}, but the standby has LSN {l} and catalog xmin {y}{}",
                        logged(s),
                        if behind.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", behind.join(", "))
                        }
                    )
                }
                _ => "; no `could not synchronize` line naming these positions was found in the server log (the synchronization may not have run since, or the log is not readable): the remote positions are on the primary".to_owned(),
            };
            let mut f = Finding::new(
                FindingKind::SyncPending,
                format!(
                    "{what}, kept temporary (not sync-ready: it is not kept over a promotion): the slot synchronization takes the remote slot's positions only once the remote restart_lsn is at least {l} and its catalog_xmin at least {y}, what this standby reserved for the copy{remote}"
                ),
            );
            f.lsn = Some(l);
            f.xid = Some(y);
            f.since = skip.map(|s| s.at);
            f.remedy = Some(format!(
                "on the primary, see the slot: {}; its catalog_xmin reaches {y} once every transaction older than {y} has ended there and the slot's consumer has confirmed past a RUNNING_XACTS logged after that ({}); then the next synchronization persists the copy (here: SELECT pg_sync_replication_slots() when no slot sync worker runs)",
                remote_query(slot),
                wal_remedy(server)
            ));
            out.push(f);
            let catalog_behind = !matches!(
                skip.map(|s| s.reason),
                Some(SyncSkipReason::RemoteBehind {
                    remote_catalog_xmin: x,
                    local_catalog_xmin,
                    ..
                }) if local_catalog_xmin == y && !transam::precedes(x, y)
            );
            if catalog_behind {
                for x in older_running(slot, server, MAX_ROWS) {
                    if xid_status(holders, server, x) != XidStatus::RunningOnPrimary {
                        continue;
                    }
                    let mut f = Finding::new(
                        FindingKind::SyncPending,
                        format!(
                            "xid {x} is {}, and older than the copy's catalog_xmin {y}: the primary slot's catalog_xmin cannot reach {y} before it ends",
                            on_primary(server)
                        ),
                    );
                    f.xid = Some(x);
                    f.remedy = Some(primary_remedy(x, server, CONFIRM_ON_PRIMARY));
                    out.push(f);
                }
            }
        }
        Some(c) => {
            let at = match skip.map(|s| (s, s.reason)) {
                Some((s, SyncSkipReason::NoConsistentSnapshot { restart_lsn }))
                    if restart_lsn == slot.restart_lsn =>
                {
                    format!(
                        "; the synchronization last said{}: the standby could not build a consistent snapshot to decode WAL at LSN {restart_lsn}",
                        logged(s)
                    )
                }
                _ => String::new(),
            };
            let now = match builder {
                Some(b) if b.state == Some(SnapBuildState::Consistent) => {
                    let p = b
                        .phase_since
                        .map(|p| format!(" at the record at {p}"))
                        .unwrap_or_else(|| format!(" at {}", slot.restart_lsn));
                    format!(
                        "; a decoder started at {} is consistent{p} (replayed to {}): the next synchronization after the remote confirmed_flush passes it persists the copy",
                        slot.restart_lsn, b.replayed_to
                    )
                }
                Some(b) => format!(
                    "; a decoder started at {} is in {} after the replay to {}, waiting for {} transaction(s) older than {} and a newer RUNNING_XACTS",
                    slot.restart_lsn,
                    b.state.unwrap_or(SnapBuildState::Start).c_name(),
                    b.replayed_to,
                    builder_waits(b).len(),
                    b.next_phase_at
                ),
                None => String::new(),
            };
            let mut f = Finding::new(
                FindingKind::SyncPending,
                format!(
                    "{what}, kept temporary (not sync-ready: it is not kept over a promotion): the slot synchronization advanced it to the remote confirmed_flush {c} with a fast-forward decoder from restart_lsn {}, which was not consistent before {c}{at}{now}",
                    slot.restart_lsn
                ),
            );
            f.lsn = Some(c);
            f.since = skip.map(|s| s.at);
            f.remedy = Some(format!(
                "let the transactions below end on the primary and the slot's consumer there confirm past a later RUNNING_XACTS ({}); on the primary: {}",
                wal_remedy(server),
                remote_query(slot)
            ));
            out.push(f);
            if let Some(b) = builder.filter(|b| b.state != Some(SnapBuildState::Consistent)) {
                let last = b.last_running.as_ref().map(|(l, _)| *l);
                for x in builder_waits(b).into_iter().take(MAX_ROWS) {
                    let (f, _) = wait_finding(
                        "the copy's decoder",
                        x,
                        holders,
                        server,
                        last,
                        slot.restart_lsn,
                        CONFIRM_ON_PRIMARY,
                    );
                    out.push(f);
                }
            }
        }
    }
    1
}

/// The xids a temporary copy waits for ([`older_running`] or, once advanced, its
/// decoder's waits), for `snapbuild_slot_health.waiting_xids` and the holder lookup.
pub fn copy_waits(
    slot: &SlotFacts,
    copy: &SyncedCopy,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
) -> Vec<TransactionId> {
    if !copy.temporary {
        return Vec::new();
    }
    match slot.confirmed_flush {
        None => older_running(slot, server, usize::MAX)
            .into_iter()
            .filter(|x| server.in_progress.contains(x))
            .collect(),
        Some(_) => builder
            .filter(|b| b.state != Some(SnapBuildState::Consistent))
            .map(builder_waits)
            .unwrap_or_default(),
    }
}
