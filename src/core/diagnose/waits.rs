//! Which transactions a slot waits for or is held by, and what the server knows of each:
//! the xids a creation waits for ([`waited_xids`], [`builder_waits`]), those holding a
//! created slot's restart_lsn and catalog_xmin ([`holding_xids`]), every xid to look up
//! ([`wanted_xids`]); each one's status (held here, running on the primary, ended), its
//! holder in words, and the row for a transaction waited for.
//!
//! Not a PostgreSQL file. The rules are snapbuild.c's SnapBuildFindSnapshot and
//! SnapBuildWaitSnapshot (which xids each phase waits for), SnapBuildProcessRunningXacts
//! and reorderbuffer.c's ReorderBufferGetOldestTXN / ReorderBufferGetOldestXmin (what
//! holds a created slot back), and procarray.c's TransactionIdIsInProgress (on a
//! standby, from KnownAssignedXids).

use super::facts::{Backend, BuilderFacts, Holder, HolderKind, ServerFacts, SlotFacts};
use super::finding::{Finding, FindingKind};
use super::remedy::{backend_remedy, prepared_remedy, primary_remedy, wal_remedy};
use crate::include::snapbuild::SnapBuildState;
use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;

/// What the server knows of a transaction the diagnosis judges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum XidStatus<'a> {
    /// Held by a session or a prepared transaction of this server (pg_locks).
    Held(&'a HolderKind),
    /// On a standby: the primary's transaction, running as far as this standby has
    /// replayed (its KnownAssignedXids list it); its session is on the primary.
    RunningOnPrimary,
    /// Ended: no holder here, and on a standby not in progress either (its end was
    /// replayed, or a RUNNING_XACTS replayed from the primary no longer lists it).
    Ended,
}

/// [`XidStatus`] of `xid`: a holder in `holders` first; on a standby, whether the
/// server knows it in progress ([`ServerFacts::in_progress`]); else ended. A standby
/// never holds a transaction itself (it assigns no xids), so its pg_locks and
/// pg_stat_activity say nothing about the primary's.
pub(super) fn xid_status<'a>(
    holders: &'a [Holder],
    server: &ServerFacts,
    xid: TransactionId,
) -> XidStatus<'a> {
    match holder_of(holders, xid) {
        Some(h) => XidStatus::Held(&h.kind),
        None if server.in_recovery && server.in_progress.contains(&xid) => {
            XidStatus::RunningOnPrimary
        }
        None => XidStatus::Ended,
    }
}

/// `running on the primary (…)`: how a standby knows a primary transaction runs.
pub(super) fn on_primary(server: &ServerFacts) -> String {
    format!(
        "running on the primary (this standby has replayed no end of it up to {}: its KnownAssignedXids list it; the primary's session is not visible here)",
        server.flush_lsn
    )
}

/// The xids a slot creation still waits for: the top-level xids of the last
/// RUNNING_XACTS before the builder's cutoff (`next_phase_at` in BUILDING_SNAPSHOT and
/// FULL_SNAPSHOT; the initial xmin horizon in START after a record older than it), as
/// SnapBuildWaitSnapshot waits for them. Empty when the slot is not being created.
pub fn waited_xids(slot: &SlotFacts, b: &BuilderFacts) -> Vec<TransactionId> {
    if !slot.in_creation {
        return Vec::new();
    }
    builder_waits(b)
}

/// The xids a builder that is not consistent yet waits for: the top-level xids of the
/// last RUNNING_XACTS before its cutoff (`next_phase_at` in BUILDING_SNAPSHOT and
/// FULL_SNAPSHOT; the initial xmin horizon in START after a record older than it), as
/// SnapBuildWaitSnapshot waits for them while a slot is created.
pub fn builder_waits(b: &BuilderFacts) -> Vec<TransactionId> {
    let Some((_, running)) = &b.last_running else {
        return Vec::new();
    };
    let cutoff = match b.state {
        Some(SnapBuildState::BuildingSnapshot | SnapBuildState::FullSnapshot) => b.next_phase_at,
        Some(SnapBuildState::Start) if horizon_too_low(b) => b.initial_xmin_horizon,
        _ => return Vec::new(),
    };
    let mut v: Vec<TransactionId> = running.xids[..(running.xcnt as usize).min(running.xids.len())]
        .iter()
        .copied()
        .filter(|x| transam::is_normal(*x) && transam::precedes(*x, cutoff))
        .collect();
    v.sort_by(|a, b| transam::precedes_order(*a, *b));
    v.dedup();
    v
}

/// The last RUNNING_XACTS was older than the initial xmin horizon ("xmin horizon too
/// low"): the builder stays in START.
fn horizon_too_low(b: &BuilderFacts) -> bool {
    match &b.last_running {
        Some((_, r)) => {
            transam::is_normal(b.initial_xmin_horizon)
                && transam::precedes(r.oldest_running_xid, b.initial_xmin_horizon)
        }
        None => false,
    }
}

/// The oldest xid running at the last RUNNING_XACTS, if any was.
fn oldest_running(b: &BuilderFacts) -> Option<(Lsn, TransactionId)> {
    let (lsn, r) = b.last_running.as_ref()?;
    (r.oldest_running_xid != r.next_xid && transam::is_normal(r.oldest_running_xid))
        .then_some((*lsn, r.oldest_running_xid))
}

/// What a consistent decoder proposes as catalog_xmin at each RUNNING_XACTS
/// (snapbuild.c SnapBuildProcessRunningXacts): the oldest base snapshot's xmin, held by
/// that transaction, or else the record's oldest running xid. As (the xid whose end
/// lets it advance, the proposed xmin).
pub(super) fn catalog_xmin_holder(b: &BuilderFacts) -> Option<(TransactionId, TransactionId)> {
    b.oldest_base_snapshot
        .or_else(|| oldest_running(b).map(|(_, x)| (x, x)))
}

/// The xids holding a created slot back: the reorder buffer's oldest transaction
/// (restart_lsn) first, then the catalog_xmin holder ([`catalog_xmin_holder`]) if
/// another; what [`forecast()`] is asked about.
///
/// [`forecast()`]: super::forecast::forecast
pub fn holding_xids(b: &BuilderFacts) -> Vec<TransactionId> {
    let mut v = Vec::new();
    if let Some((x, _)) = b.oldest_txn {
        v.push(x);
    }
    if let Some((x, _)) = catalog_xmin_holder(b) {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// Every xid the diagnosis judges: look up their holders in pg_locks, and whether the
/// server knows them in progress ([`ServerFacts::in_progress`]).
pub fn wanted_xids(
    slot: &SlotFacts,
    b: Option<&BuilderFacts>,
    server: &ServerFacts,
) -> Vec<TransactionId> {
    let mut v = Vec::new();
    if slot.synced.as_ref().is_some_and(|c| c.temporary) {
        v.extend(older_running(slot, server, usize::MAX));
        if slot.confirmed_flush.is_some() {
            v.extend(b.map(builder_waits).unwrap_or_default());
        }
    }
    if let Some(b) = b {
        v.extend(waited_xids(slot, b));
        if !slot.in_creation {
            if let Some((x, _)) = catalog_xmin_holder(b) {
                v.push(x);
            }
            if let Some((x, _)) = b.oldest_txn {
                v.push(x);
            }
        }
    }
    v.extend(slot.creator_waits_on);
    v.sort_unstable();
    v.dedup();
    v
}

fn holder_of(holders: &[Holder], xid: TransactionId) -> Option<&Holder> {
    holders.iter().find(|h| h.xid == xid)
}

/// A few words on a backend: `pid P (client backend, database D, user U, idle in transaction)`.
pub(super) fn describe_backend(b: &Backend) -> String {
    let mut parts = vec![b.backend_type.clone().unwrap_or_else(|| "backend".into())];
    if let Some(d) = &b.datname {
        parts.push(format!("database {d}"));
    }
    if let Some(u) = &b.usename {
        parts.push(format!("user {u}"));
    }
    if let Some(a) = b.application_name.as_ref().filter(|a| !a.is_empty()) {
        parts.push(format!("application {a}"));
    }
    if let Some(s) = &b.state {
        parts.push(s.clone());
    }
    format!("pid {} ({})", b.pid, parts.join(", "))
}

/// The row for xid `x` that `who` (`the creation`, or a synced copy's decoder) waits for
/// (a top-level xid of the last RUNNING_XACTS, at `last_lsn`, before the builder's
/// cutoff), and whether it still runs: held by a session or a prepared transaction here,
/// running on the primary (a standby), or ended (then only a newer RUNNING_XACTS is
/// missing). `then` ends the remedy of a primary's transaction.
pub(super) fn wait_finding(
    who: &str,
    x: TransactionId,
    holders: &[Holder],
    server: &ServerFacts,
    last_lsn: Option<Lsn>,
    restart_lsn: Lsn,
    then: &str,
) -> (Finding, bool) {
    let at = last_lsn.unwrap_or(restart_lsn);
    let mut f = match xid_status(holders, server, x) {
        XidStatus::Held(HolderKind::Backend(be)) => {
            let mut f = Finding::new(
                FindingKind::WaitingForTransaction,
                format!("{who} waits for xid {x}, held by {}", describe_backend(be)),
            );
            f.backend = Some(be.clone());
            f.since = be.xact_start;
            f.remedy = Some(backend_remedy(be));
            f
        }
        XidStatus::Held(HolderKind::Prepared(p)) => {
            let mut f = Finding::new(
                FindingKind::WaitingForPreparedTransaction,
                format!(
                    "{who} waits for xid {x}, a prepared transaction: gid '{}'{}{}",
                    p.gid,
                    p.owner
                        .as_ref()
                        .map(|o| format!(", owner {o}"))
                        .unwrap_or_default(),
                    p.database
                        .as_ref()
                        .map(|d| format!(", database {d}"))
                        .unwrap_or_default()
                ),
            );
            f.prepared = Some(p.clone());
            f.since = p.prepared;
            f.remedy = Some(prepared_remedy(p));
            f
        }
        XidStatus::RunningOnPrimary => {
            let mut f = Finding::new(
                FindingKind::WaitingForPrimaryTransaction,
                format!(
                    "{who} waits for xid {x}, a transaction of the primary listed by the RUNNING_XACTS replayed at {at} and still {}; the snapshot builder learns that it ended from the primary's next RUNNING_XACTS",
                    on_primary(server)
                ),
            );
            f.remedy = Some(primary_remedy(x, server, then));
            f
        }
        XidStatus::Ended => {
            let on = if server.in_recovery {
                " on the primary (its end was replayed here)"
            } else {
                ""
            };
            let mut f = Finding::new(
                FindingKind::WaitingForEndedTransaction,
                format!(
                    "xid {x} has ended{on} since the RUNNING_XACTS at {at}; the snapshot builder learns it from the next RUNNING_XACTS"
                ),
            );
            f.remedy = Some(wal_remedy(server));
            f
        }
    };
    let running = f.kind != Some(FindingKind::WaitingForEndedTransaction);
    f.xid = Some(x);
    f.lsn = last_lsn;
    (f, running)
}

/// The xids of the primary running as far as this standby knows that are older than
/// the copy's catalog_xmin: while any runs, the remote catalog_xmin cannot reach the
/// copy's. Oldest first; at most `limit`.
pub fn older_running(slot: &SlotFacts, server: &ServerFacts, limit: usize) -> Vec<TransactionId> {
    let c = slot.catalog_xmin;
    if !transam::is_normal(c) {
        return Vec::new();
    }
    let mut v: Vec<TransactionId> = server
        .running
        .iter()
        .copied()
        .filter(|x| transam::is_normal(*x) && transam::precedes(*x, c))
        .collect();
    v.sort_by(|a, b| transam::precedes_order(*a, *b));
    v.dedup();
    v.truncate(limit);
    v
}

#[cfg(test)]
mod tests {
    use super::super::facts::samples::{creating, running};
    use super::*;

    #[test]
    fn start_below_horizon_waits_for_xids_before_the_horizon() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::Start),
            initial_xmin_horizon: 700,
            last_running: Some((Lsn(0x1800), running(720, &[690, 710], &[]))),
            ..Default::default()
        };
        assert_eq!(waited_xids(&creating(), &b), vec![690]);
    }
}
