//! "Why is my slot stuck?": turns what a replay of a slot learnt (the snapshot builder's
//! state, the last RUNNING_XACTS record, the reorder buffer's oldest transaction), the
//! slot's own fields and the sessions holding transactions into findings a DBA acts on.
//!
//! Not a PostgreSQL file. The rules it explains are snapbuild.c's SnapBuildFindSnapshot
//! (which xids a slot creation waits for in each phase, and that only a newer
//! RUNNING_XACTS record moves it on), logical.c's LogicalIncreaseXminForSlot /
//! LogicalIncreaseRestartDecodingForSlot / LogicalConfirmReceivedLocation (what holds
//! catalog_xmin and restart_lsn back), and slot.c's invalidation causes.
//!
//! Everything here is plain values: the adapter fetches them, [`diagnose`] orders the
//! findings, most important first.

use crate::include::snapbuild::SnapBuildState;
use crate::include::standbydefs::RunningXacts;
use crate::include::transam::{self, TransactionId};
use crate::include::version::PgVersion;
use crate::include::xlogdefs::Lsn;

pub mod forecast;
pub mod slotsync;
pub mod watch;
pub use forecast::{forecast, Forecast, ForecastLsn, ForecastXid};
pub use slotsync::{SyncSkip, SyncSkipReason, SyncedCopy};

/// What a replay of the slot from its restart_lsn to the flush position reached.
#[derive(Clone, Debug, Default)]
pub struct BuilderFacts {
    /// The builder's state after the last record read.
    pub state: Option<SnapBuildState>,
    /// `next_phase_at`: in BUILDING_SNAPSHOT / FULL_SNAPSHOT, every xid before it must
    /// have ended (and a RUNNING_XACTS say so) before the next phase.
    pub next_phase_at: TransactionId,
    /// The slot's initial xmin horizon (its catalog_xmin while being created).
    pub initial_xmin_horizon: TransactionId,
    /// Where the builder entered its current state (the record that moved it), if it
    /// moved during the replay.
    pub phase_since: Option<Lsn>,
    /// The last RUNNING_XACTS record read: (start LSN, record).
    pub last_running: Option<(Lsn, RunningXacts)>,
    /// The reorder buffer's oldest top-level transaction after the replay
    /// (ReorderBufferGetOldestTXN): its xid and restart_decoding_lsn.
    pub oldest_txn: Option<(TransactionId, Lsn)>,
    /// The transaction holding the reorder buffer's oldest base snapshot
    /// (ReorderBufferGetOldestXmin, which a consistent decoder proposes as catalog_xmin in
    /// place of the oldest running xid): its xid and the snapshot's xmin.
    pub oldest_base_snapshot: Option<(TransactionId, TransactionId)>,
    /// The end of the last record read (the slot's restart_lsn when none was).
    pub replayed_to: Lsn,
    /// The last RUNNING_XACTS record was written no later than this (the modification
    /// time of the WAL segment holding it), microseconds since 2000-01-01 UTC.
    pub last_running_written_by: Option<i64>,
    /// What the end of the transactions holding restart_lsn and catalog_xmin would do
    /// ([`forecast()`]), the restart_lsn holder's first.
    pub forecasts: Vec<Forecast>,
}

/// The slot, as shared memory and `pg_replication_slots` show it.
#[derive(Clone, Debug, Default)]
pub struct SlotFacts {
    pub name: String,
    /// Still being created (confirmed_flush not set yet).
    pub in_creation: bool,
    /// The process using the slot (the creating backend or walsender, or the consumer).
    pub active_pid: Option<i32>,
    pub restart_lsn: Lsn,
    /// `None` while the slot is created, and for a synced copy the slot synchronization
    /// has not advanced yet (the server shows NULL for both).
    pub confirmed_flush: Option<Lsn>,
    pub catalog_xmin: TransactionId,
    pub candidate_restart_valid: Lsn,
    pub candidate_restart_lsn: Lsn,
    pub candidate_catalog_xmin: TransactionId,
    pub candidate_xmin_lsn: Lsn,
    /// slot.c's cause name (`wal_removed`, `rows_removed`, `wal_level_insufficient`,
    /// `idle_timeout`), if the slot is invalidated.
    pub invalidation_reason: Option<String>,
    /// The record whose redo invalidated the slot on a standby, as the replay found it
    /// (`replication::slot_invalidation`): its start and `RMGR/TYPE`.
    pub invalidated_at: Option<(Lsn, String)>,
    /// `pg_replication_slots.wal_status` (`lost`: the WAL it needs is gone).
    pub wal_status: Option<String>,
    /// `pg_replication_slots.conflicting` (16+).
    pub conflicting: Option<bool>,
    /// `pg_replication_slots.inactive_since` (17+), microseconds since 2000-01-01 UTC.
    pub inactive_since: Option<i64>,
    /// The transaction the slot's active process waits for in `pg_locks` (an ungranted
    /// ShareLock on a transactionid: SnapBuildWaitSnapshot's XactLockTableWait).
    pub creator_waits_on: Option<TransactionId>,
    /// On a standby (17+): the slot is a copy that the slot synchronization keeps of
    /// the primary's failover slot (`synced`). `None` elsewhere, and on a promoted
    /// server, where a copy is an ordinary slot.
    pub synced: Option<SyncedCopy>,
}

/// Another holder of an xmin horizon in the cluster: a slot's xmin or catalog_xmin, a
/// backend's xmin or xid, a prepared transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Horizon {
    pub xid: TransactionId,
    /// In words: `slot "s" (catalog_xmin)`, `pid 123 (client backend, xmin)`, `prepared
    /// transaction 'g'`.
    pub what: String,
}

/// The server around the slot.
#[derive(Clone, Debug)]
pub struct ServerFacts {
    pub version: PgVersion,
    /// pg_current_wal_flush_lsn (on a standby: the replay position, pg_last_wal_replay_lsn).
    pub flush_lsn: Lsn,
    /// The next xid to be assigned (32-bit), for ages.
    pub next_xid: TransactionId,
    /// A standby: RUNNING_XACTS records come from the primary.
    pub in_recovery: bool,
    /// Now, microseconds since 2000-01-01 UTC.
    pub now: i64,
    /// Every other xmin horizon of the cluster (other slots, backends but the caller,
    /// prepared transactions).
    pub horizons: Vec<Horizon>,
    /// The xids running now: on a primary the top-level ones (pg_current_snapshot's
    /// xip); on a standby the primary's as far as replayed here (KnownAssignedXids, the
    /// standby snapshot's subxip: top-level and subtransaction xids alike).
    pub running: Vec<TransactionId>,
    /// Among the xids the diagnosis asks about ([`wanted_xids`]), those the server knows
    /// to be in progress (procarray.c TransactionIdIsInProgress: on a standby from
    /// KnownAssignedXids, i.e. the primary's transactions whose end has not been
    /// replayed here).
    pub in_progress: Vec<TransactionId>,
}

/// A live backend holding a transaction (pg_stat_activity's columns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backend {
    pub pid: i32,
    pub backend_type: Option<String>,
    pub datname: Option<String>,
    pub usename: Option<String>,
    pub application_name: Option<String>,
    pub client_addr: Option<String>,
    pub state: Option<String>,
    /// Microseconds since 2000-01-01 UTC.
    pub xact_start: Option<i64>,
    /// `wait_event_type:wait_event`.
    pub wait_event: Option<String>,
    pub query: Option<String>,
}

/// A prepared transaction (pg_prepared_xacts' columns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prepared {
    pub gid: String,
    pub owner: Option<String>,
    pub database: Option<String>,
    /// Microseconds since 2000-01-01 UTC.
    pub prepared: Option<i64>,
}

/// What holds a transaction open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HolderKind {
    Backend(Backend),
    Prepared(Prepared),
}

/// The holder of xid `xid` (a top-level xid or one of its subtransactions' xids): who
/// holds its ExclusiveLock on the transactionid in pg_locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub xid: TransactionId,
    pub kind: HolderKind,
}

/// The kinds of finding, most important first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FindingKind {
    /// The slot was invalidated (or its WAL is lost): it cannot be used any more.
    Invalidated,
    /// The slot is being created: the phase its snapshot builder is in.
    CreationWaiting,
    /// The creation waits for a transaction of a live backend.
    WaitingForTransaction,
    /// The creation waits for a prepared transaction.
    WaitingForPreparedTransaction,
    /// On a standby: a waited-for transaction of the primary (no holder is visible here;
    /// the primary's sessions hold it, or it has ended there).
    WaitingForPrimaryTransaction,
    /// A waited-for transaction has ended; the builder learns it from the next RUNNING_XACTS.
    WaitingForEndedTransaction,
    /// Nothing left to wait for but a newer RUNNING_XACTS record.
    WaitingForWal,
    /// On a standby (17+): a copy of the primary's failover slot that the slot
    /// synchronization keeps temporary (not sync-ready), why, and what keeps it so.
    SyncPending,
    /// On a standby (17+): a copy of the primary's failover slot, persistent
    /// (sync-ready); its positions follow the primary's slot.
    Synchronized,
    /// restart_lsn cannot pass the restart point of the oldest running transaction.
    RestartLsnHeld,
    /// catalog_xmin cannot pass the oldest running transaction.
    CatalogXminHeld,
    /// Where restart_lsn and catalog_xmin go when their holder ends.
    Forecast,
    /// Whether the slot's catalog_xmin is the cluster's oldest horizon (VACUUM of
    /// catalogs stops there) or something else holds an older one. Informational.
    CatalogHorizon,
    /// A restart_lsn candidate waits for the consumer to confirm past it.
    PendingRestartCandidate,
    /// No process uses the slot.
    NoConsumer,
    /// confirmed_flush behind the flush position.
    ConsumerLag,
    /// WAL kept for the slot (flush position minus restart_lsn).
    RetainedWal,
    /// Nothing above applies.
    Healthy,
}

impl FindingKind {
    /// The `kind` column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::Invalidated => "invalidated",
            FindingKind::CreationWaiting => "creation waiting",
            FindingKind::WaitingForTransaction => "waiting for transaction",
            FindingKind::WaitingForPreparedTransaction => "waiting for prepared transaction",
            FindingKind::WaitingForPrimaryTransaction => "waiting for primary transaction",
            FindingKind::WaitingForEndedTransaction => "waiting for ended transaction",
            FindingKind::WaitingForWal => "waiting for WAL",
            FindingKind::SyncPending => "sync pending",
            FindingKind::Synchronized => "synchronized",
            FindingKind::RestartLsnHeld => "restart_lsn held",
            FindingKind::CatalogXminHeld => "catalog_xmin held",
            FindingKind::Forecast => "forecast",
            FindingKind::CatalogHorizon => "catalog horizon",
            FindingKind::PendingRestartCandidate => "pending restart candidate",
            FindingKind::NoConsumer => "no consumer",
            FindingKind::ConsumerLag => "consumer lag",
            FindingKind::RetainedWal => "retained WAL",
            FindingKind::Healthy => "healthy",
        }
    }
}

/// One finding: a sentence, the facts behind it as typed values, and what to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finding {
    pub kind: Option<FindingKind>,
    pub finding: String,
    pub xid: Option<TransactionId>,
    /// Backend columns (pid, datname, … query) when a backend is involved.
    pub backend: Option<Backend>,
    /// Prepared transaction columns when one is involved.
    pub prepared: Option<Prepared>,
    pub lsn: Option<Lsn>,
    pub bytes: Option<i64>,
    /// Microseconds since 2000-01-01 UTC: since when the condition holds, if known.
    pub since: Option<i64>,
    pub remedy: Option<String>,
    /// On a `forecast`: catalog_xmin afterwards, when it is a known xid.
    pub forecast_catalog_xmin: Option<TransactionId>,
}

impl Finding {
    fn new(kind: FindingKind, finding: String) -> Self {
        Finding {
            kind: Some(kind),
            finding,
            ..Default::default()
        }
    }
}

fn state_name(s: SnapBuildState) -> &'static str {
    match s {
        SnapBuildState::Start => "START",
        SnapBuildState::BuildingSnapshot => "BUILDING_SNAPSHOT",
        SnapBuildState::FullSnapshot => "FULL_SNAPSHOT",
        SnapBuildState::Consistent => "CONSISTENT",
    }
}

/// How to get a newer RUNNING_XACTS record on this major.
fn wal_remedy(server: &ServerFacts) -> String {
    let on = if server.in_recovery {
        " on the primary"
    } else {
        ""
    };
    if server.version.major >= 16 {
        format!("SELECT pg_log_standby_snapshot(){on} (logs a RUNNING_XACTS record now; the background writer logs one every 15 s while WAL is written)")
    } else {
        format!("CHECKPOINT{on} (logs a RUNNING_XACTS record; the background writer logs one every 15 s while WAL is written)")
    }
}

/// On a standby: how to find the primary's holder of `xid` (its pid, application and
/// state) and end it there, then log a RUNNING_XACTS there, then `then` (what else must
/// happen, e.g. a consumer confirming; empty for nothing).
fn primary_remedy(xid: TransactionId, server: &ServerFacts, then: &str) -> String {
    format!(
        "on the primary, find its holder: SELECT l.pid, a.application_name, a.usename, a.datname, a.state, a.xact_start, a.query, p.gid FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid LEFT JOIN pg_prepared_xacts p ON p.transaction = l.transactionid WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.transactionid = '{xid}'::xid; end it there (COMMIT or ROLLBACK in that session, pg_terminate_backend(pid), or COMMIT/ROLLBACK PREPARED 'gid'); then {}{then}",
        wal_remedy(server)
    )
}

/// What the server knows of a transaction the diagnosis judges.
#[derive(Clone, Debug, PartialEq, Eq)]
enum XidStatus<'a> {
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
fn xid_status<'a>(
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
fn on_primary(server: &ServerFacts) -> String {
    format!(
        "running on the primary (this standby has replayed no end of it up to {}: its KnownAssignedXids list it; the primary's session is not visible here)",
        server.flush_lsn
    )
}

/// What `flush_lsn` is: the flush position, or on a standby the replay position.
fn end_name(server: &ServerFacts) -> &'static str {
    if server.in_recovery {
        "replay position (a standby)"
    } else {
        "flush position"
    }
}

fn bytes_between(from: Lsn, to: Lsn) -> i64 {
    to.0.saturating_sub(from.0) as i64
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
fn catalog_xmin_holder(b: &BuilderFacts) -> Option<(TransactionId, TransactionId)> {
    b.oldest_base_snapshot
        .or_else(|| oldest_running(b).map(|(_, x)| (x, x)))
}

/// The xids holding a created slot back: the reorder buffer's oldest transaction
/// (restart_lsn) first, then the catalog_xmin holder ([`catalog_xmin_holder`]) if
/// another; what [`forecast()`] is asked about.
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
        v.extend(slotsync::older_running(slot, server, usize::MAX));
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
fn describe_backend(b: &Backend) -> String {
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

/// What to do about a backend holding a transaction.
fn backend_remedy(b: &Backend) -> String {
    match b.backend_type.as_deref() {
        Some("autovacuum worker") => format!(
            "SELECT pg_cancel_backend({}) (an autovacuum worker; it is started again later)",
            b.pid
        ),
        Some("walsender") => format!(
            "end the replication client's transaction, or SELECT pg_terminate_backend({}) (a walsender)",
            b.pid
        ),
        _ => format!(
            "COMMIT or ROLLBACK in that session, or SELECT pg_terminate_backend({})",
            b.pid
        ),
    }
}

fn prepared_remedy(p: &Prepared) -> String {
    let db = p
        .database
        .as_ref()
        .map(|d| format!(" (connected to database {d})"))
        .unwrap_or_default();
    format!(
        "COMMIT PREPARED '{}' or ROLLBACK PREPARED '{}'{db}",
        p.gid.replace('\'', "''"),
        p.gid.replace('\'', "''")
    )
}

/// The findings for one slot, most important first.
///
/// `builder` is the replay of the slot from its restart_lsn to the flush position (None
/// when it could not run, e.g. an invalidated slot); `holders` the live holders of
/// [`wanted_xids`] (an xid without a holder has ended).
pub fn diagnose(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let lost = slot.wal_status.as_deref() == Some("lost");
    if slot.invalidation_reason.is_some() || lost {
        let reason = slot
            .invalidation_reason
            .clone()
            .unwrap_or_else(|| "wal_removed".into());
        let means = match reason.as_str() {
            "wal_removed" => "WAL the slot still needed was removed (max_slot_wal_keep_size or a lost segment)",
            "rows_removed" => "catalog rows the slot still needed were removed by VACUUM (on a standby: the primary's, e.g. without hot_standby_feedback)",
            "wal_level_insufficient" => "wal_level on the primary was lowered below logical",
            "idle_timeout" => "the slot stayed unused longer than idle_replication_slot_timeout",
            _ => "the server gave up on the slot",
        };
        let conflicting = if slot.conflicting == Some(true) {
            " (conflicting)"
        } else {
            ""
        };
        let at = match &slot.invalidated_at {
            Some((lsn, name)) => {
                format!("; the standby invalidated it while redoing the record at {lsn} ({name})")
            }
            None => String::new(),
        };
        let mut f = Finding::new(
            FindingKind::Invalidated,
            format!(
                "slot \"{}\" is invalidated{conflicting}: {reason}: {means}{at}; no consumer can decode from it any more",
                slot.name
            ),
        );
        f.lsn = match &slot.invalidated_at {
            Some((lsn, _)) => Some(*lsn),
            None => slot.restart_lsn.is_valid().then_some(slot.restart_lsn),
        };
        f.since = slot.inactive_since;
        f.remedy = Some(format!(
            "SELECT pg_drop_replication_slot('{}'), create it again and let the consumer copy its tables anew (changes since it was invalidated are lost to it)",
            slot.name.replace('\'', "''")
        ));
        out.push(f);
        return out;
    }
    if slot.in_creation {
        creation_findings(slot, builder, server, holders, &mut out);
        return out;
    }
    created_findings(slot, builder, server, holders, &mut out);
    out
}

fn creation_findings(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
    out: &mut Vec<Finding>,
) {
    let Some(b) = builder else {
        out.push(Finding::new(
            FindingKind::CreationWaiting,
            format!(
                "slot \"{}\" is being created; its WAL could not be replayed",
                slot.name
            ),
        ));
        return;
    };
    let last = b.last_running.as_ref();
    let last_lsn = last.map(|(l, _)| *l);
    let waited = waited_xids(slot, b);
    let state = b.state.unwrap_or(SnapBuildState::Start);
    let by = slot
        .active_pid
        .map(|p| format!(" by pid {p}"))
        .unwrap_or_default();
    let creator_wait = slot
        .creator_waits_on
        .map(|x| format!("; the creating process waits for xid {x} now"))
        .unwrap_or_default();
    let summary = match (state, last) {
        (SnapBuildState::Start, None) => format!(
            "slot \"{}\" is being created{by}: no RUNNING_XACTS record has been read since restart_lsn {}; the snapshot builder stays in START until one is",
            slot.name, slot.restart_lsn
        ),
        (SnapBuildState::Start, Some((l, r))) => format!(
            "slot \"{}\" is being created{by}: the snapshot builder is in START: the last RUNNING_XACTS ({l}) has oldest running xid {}, older than the slot's xmin horizon {}; it waits for {} transaction(s) older than {} to end and a newer RUNNING_XACTS{creator_wait}",
            slot.name, r.oldest_running_xid, b.initial_xmin_horizon, waited.len(), b.initial_xmin_horizon
        ),
        (s @ (SnapBuildState::BuildingSnapshot | SnapBuildState::FullSnapshot), _) => {
            let next = if s == SnapBuildState::BuildingSnapshot {
                "FULL_SNAPSHOT"
            } else {
                "CONSISTENT"
            };
            let since = b
                .phase_since
                .map(|l| format!(" since {l}"))
                .unwrap_or_default();
            let at = last_lsn.map(|l| format!(" at the last RUNNING_XACTS ({l})")).unwrap_or_default();
            format!(
                "slot \"{}\" is being created{by}: the snapshot builder is in {}{since}; to reach {next} every transaction older than {} must end and a newer RUNNING_XACTS show it: {} of them were running{at}{creator_wait}",
                slot.name,
                state_name(s),
                b.next_phase_at,
                waited.len()
            )
        }
        (SnapBuildState::Consistent, _) => format!(
            "slot \"{}\" is being created{by}: the replay to the flush position is CONSISTENT already; the creating process is finishing",
            slot.name
        ),
    };
    let mut f = Finding::new(FindingKind::CreationWaiting, summary);
    f.lsn = last_lsn.or(Some(slot.restart_lsn));
    f.xid = transam::is_valid(b.next_phase_at).then_some(b.next_phase_at);
    out.push(f);
    if state == SnapBuildState::Consistent {
        return;
    }
    let mut live = 0;
    for x in &waited {
        let (f, running) = wait_finding(
            "the creation",
            *x,
            holders,
            server,
            last_lsn,
            slot.restart_lsn,
            "",
        );
        live += usize::from(running);
        out.push(f);
    }
    if live == 0 {
        let why = match last {
            None => "no RUNNING_XACTS record has been read yet".to_string(),
            Some((l, _)) if waited.is_empty() => format!(
                "no transaction it waits for was running at the last RUNNING_XACTS ({l}); it needs a newer one"
            ),
            Some((l, _)) => format!(
                "every transaction it waits for has ended, but the last RUNNING_XACTS ({l}) still lists them; it needs a newer one"
            ),
        };
        let age = match (last, b.last_running_written_by) {
            (Some(_), Some(t)) => format!(
                "; the last RUNNING_XACTS was written at least {:.1} s ago",
                (server.now - t).max(0) as f64 / 1e6
            ),
            _ => String::new(),
        };
        let standby = if server.in_recovery {
            format!(
                "; this server is a standby: RUNNING_XACTS records come only from the primary (replayed up to {}, {} bytes after the last one read)",
                server.flush_lsn,
                bytes_between(last_lsn.unwrap_or(slot.restart_lsn), server.flush_lsn)
            )
        } else {
            String::new()
        };
        let mut f = Finding::new(
            FindingKind::WaitingForWal,
            format!("the creation waits for WAL: {why}{age}{standby}"),
        );
        f.since = last.and(b.last_running_written_by);
        f.lsn = last_lsn.or(Some(slot.restart_lsn));
        f.bytes = Some(bytes_between(b.replayed_to, server.flush_lsn));
        f.remedy = Some(wal_remedy(server));
        out.push(f);
    }
}

/// The row for xid `x` that `who` (`the creation`, or a synced copy's decoder) waits for
/// (a top-level xid of the last RUNNING_XACTS, at `last_lsn`, before the builder's
/// cutoff), and whether it still runs: held by a session or a prepared transaction here,
/// running on the primary (a standby), or ended (then only a newer RUNNING_XACTS is
/// missing). `then` ends the remedy of a primary's transaction.
fn wait_finding(
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

fn created_findings(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
    out: &mut Vec<Finding>,
) {
    let mut problems = 0;
    let copy = slot.synced.as_ref();
    if let Some(c) = copy {
        problems += slotsync::copy_findings(slot, c, builder, server, holders, out);
    }
    // A temporary copy does not move by decoding: its rows above say what moves it.
    let pending = copy.is_some_and(|c| c.temporary);
    // Who moves the positions once a transaction ended: this slot's consumer, or for a
    // copy the primary slot's consumer and then the synchronization.
    let then = if copy.is_some() {
        CONFIRM_ON_PRIMARY_COPY
    } else {
        ", and let the slot's consumer here confirm past that record"
    };
    if let Some(b) = builder.filter(|_| !pending) {
        if let Some((x, restart_point)) = b.oldest_txn {
            // A transaction first seen before the decoder had a restart point proposes
            // none: restart_lsn then stays where it is.
            let restart = if restart_point.is_valid() {
                restart_point.max(slot.restart_lsn)
            } else {
                slot.restart_lsn
            };
            let how = if restart_point.is_valid() {
                "decoding must restart there to see"
            } else {
                "no restart point is proposed (it began before the decoder had one) while"
            };
            problems += 1;
            let status = xid_status(holders, server, x);
            let who = match &status {
                XidStatus::Held(HolderKind::Backend(be)) => {
                    format!("held by {}", describe_backend(be))
                }
                XidStatus::Held(HolderKind::Prepared(p)) => format!("prepared as gid '{}'", p.gid),
                XidStatus::RunningOnPrimary => on_primary(server),
                XidStatus::Ended => format!(
                    "no longer running{} (its end lies after the WAL read, or it ended without a commit or abort record, e.g. a crash); the next RUNNING_XACTS clears it",
                    if server.in_recovery { " on the primary as far as this standby knows" } else { "" }
                ),
            };
            let mut f = Finding::new(
                FindingKind::RestartLsnHeld,
                format!(
                    "restart_lsn cannot move past {restart}: {how} xid {x}, the oldest transaction with WAL that has not ended up to {}; it is {who}",
                    b.replayed_to
                ),
            );
            f.xid = Some(x);
            f.lsn = Some(restart);
            f.bytes = Some(bytes_between(restart, server.flush_lsn));
            set_holder(&mut f, &status, x, server, then);
            out.push(f);
        }
        if let Some((x, xmin)) = catalog_xmin_holder(b) {
            let status = xid_status(holders, server, x);
            if status != XidStatus::Ended {
                problems += 1;
                let age = age_text(server, slot.catalog_xmin);
                let who = match &status {
                    XidStatus::Held(HolderKind::Backend(be)) => {
                        format!("held by {}", describe_backend(be))
                    }
                    XidStatus::Held(HolderKind::Prepared(p)) => {
                        format!("prepared as gid '{}'", p.gid)
                    }
                    _ => on_primary(server),
                };
                let what = if xmin == x {
                    format!("xid {x} is the oldest transaction running")
                } else {
                    format!("xid {x} decodes with a catalog snapshot of xmin {xmin}")
                };
                let mut f = Finding::new(
                    FindingKind::CatalogXminHeld,
                    format!(
                        "catalog_xmin {}{age} is held at {xmin}: {what} and has not ended, {who}; VACUUM cannot remove catalog rows deleted after catalog_xmin",
                        slot.catalog_xmin
                    ),
                );
                f.xid = Some(x);
                f.lsn = b.last_running.as_ref().map(|(l, _)| *l);
                set_holder(&mut f, &status, x, server, then);
                out.push(f);
            }
        }
        if copy.is_none() {
            for fc in &b.forecasts {
                out.push(forecast_finding(slot, server, fc));
            }
        }
    }
    if !pending
        && slot.candidate_restart_valid.is_valid()
        && slot.candidate_restart_lsn.is_valid()
        && slot
            .confirmed_flush
            .is_none_or(|c| c < slot.candidate_restart_valid)
    {
        problems += 1;
        let confirmed = slot
            .confirmed_flush
            .map(|c| format!("confirmed_flush is {c}"))
            .unwrap_or_else(|| "confirmed_flush is not set".into());
        let mut f = Finding::new(
            FindingKind::PendingRestartCandidate,
            format!(
                "restart_lsn moves to {} only once the consumer confirms {} ({confirmed}); until then newer candidates are not taken",
                slot.candidate_restart_lsn, slot.candidate_restart_valid
            ),
        );
        f.lsn = Some(slot.candidate_restart_valid);
        f.bytes = Some(bytes_between(slot.restart_lsn, slot.candidate_restart_lsn));
        f.remedy = Some(if copy.is_some() {
            "let the slot's consumer on the primary confirm (acknowledge) what it has received; the synchronization follows".into()
        } else {
            "let the consumer confirm (acknowledge) what it has received".into()
        });
        out.push(f);
    }
    // A copy is never consumed on the standby: no consumer is expected there.
    if slot.active_pid.is_none() && copy.is_none() {
        problems += 1;
        let mut f = Finding::new(
            FindingKind::NoConsumer,
            format!(
                "no process is using slot \"{}\": restart_lsn and catalog_xmin move only when a consumer decodes and confirms",
                slot.name
            ),
        );
        f.since = slot.inactive_since;
        f.lsn = slot.confirmed_flush;
        f.remedy = Some(format!(
            "start the consumer, or SELECT pg_drop_replication_slot('{}') if it is abandoned",
            slot.name.replace('\'', "''")
        ));
        out.push(f);
    }
    if let Some(f) = horizon_finding(slot, server) {
        out.push(f);
    }
    // No confirmed_flush (a copy the synchronization has not advanced): no lag to give.
    if let Some(confirmed) = slot.confirmed_flush {
        let lag = bytes_between(confirmed, server.flush_lsn);
        let whose = if copy.is_some() {
            " (the primary slot's, as last synchronized)"
        } else {
            ""
        };
        let mut f = Finding::new(
            FindingKind::ConsumerLag,
            format!(
                "confirmed_flush {confirmed}{whose} is {lag} bytes behind the {} {}",
                end_name(server),
                server.flush_lsn
            ),
        );
        f.lsn = Some(confirmed);
        f.bytes = Some(lag);
        f.since = slot.inactive_since;
        out.push(f);
    }
    let kept = bytes_between(slot.restart_lsn, server.flush_lsn);
    let mut f = Finding::new(
        FindingKind::RetainedWal,
        format!(
            "the slot keeps {kept} bytes of WAL, from restart_lsn {} to the {} {}",
            slot.restart_lsn,
            end_name(server),
            server.flush_lsn
        ),
    );
    f.lsn = Some(slot.restart_lsn);
    f.bytes = Some(kept);
    out.push(f);
    if problems == 0 {
        let consumer = if copy.is_some() {
            "synchronized"
        } else {
            "in use"
        };
        out.push(Finding::new(
            FindingKind::Healthy,
            format!(
                "slot \"{}\" is consistent, {consumer}, and nothing holds it back",
                slot.name
            ),
        ));
    }
}

/// What a copy's remedies add: the primary slot's consumer confirms, the
/// synchronization copies.
const CONFIRM_ON_PRIMARY_COPY: &str =
    ", then let the slot's consumer on the primary confirm past that record (the synchronization then copies its positions here)";

/// Fills `f`'s holder columns and remedy from `status` (a session or prepared
/// transaction here, a transaction of the primary, or ended).
fn set_holder(
    f: &mut Finding,
    status: &XidStatus,
    x: TransactionId,
    server: &ServerFacts,
    then: &str,
) {
    match status {
        XidStatus::Held(HolderKind::Backend(be)) => {
            f.since = be.xact_start;
            f.remedy = Some(backend_remedy(be));
            f.backend = Some(be.clone());
        }
        XidStatus::Held(HolderKind::Prepared(p)) => {
            f.since = p.prepared;
            f.remedy = Some(prepared_remedy(p));
            f.prepared = Some(p.clone());
        }
        XidStatus::RunningOnPrimary => f.remedy = Some(primary_remedy(x, server, then)),
        XidStatus::Ended => f.remedy = Some(wal_remedy(server)),
    }
}

/// A `forecast` row: the sentence, the ending xid, restart_lsn afterwards (`lsn`, when
/// known), the WAL bytes it releases (`bytes`, when known) and catalog_xmin afterwards.
fn forecast_finding(slot: &SlotFacts, server: &ServerFacts, fc: &Forecast) -> Finding {
    let mut f = Finding::new(
        FindingKind::Forecast,
        fc.sentence(slot.restart_lsn, slot.catalog_xmin, server.flush_lsn),
    );
    f.xid = Some(fc.ending);
    f.lsn = match fc.restart_lsn {
        ForecastLsn::At(l) | ForecastLsn::Stays(l) => Some(l),
        ForecastLsn::AtNextRunningXacts => None,
    };
    f.bytes = fc.released_bytes(slot.restart_lsn);
    f.forecast_catalog_xmin = match fc.catalog_xmin {
        ForecastXid::At(x) | ForecastXid::Stays(x) => Some(x),
        ForecastXid::AtNextXid(_) => None,
    };
    if !fc.ended && server.in_recovery {
        f.remedy = Some(format!(
            "end xid {} on the primary (the rows above give the query that finds its session there), then {} and let the consumer here confirm",
            fc.ending,
            wal_remedy(server)
        ));
    } else if !fc.ended {
        f.remedy = Some(format!(
            "end xid {} (see the rows above for its session), then let the consumer confirm",
            fc.ending
        ));
    } else {
        f.remedy = Some(wal_remedy(server));
    }
    f
}

/// The `catalog horizon` row: whether the slot's catalog_xmin is older than every other
/// xmin horizon of the cluster (procarray.c ComputeXidHorizons takes the slots'
/// catalog_xmin for catalog tables: VACUUM keeps catalog rows deleted from there on),
/// or what holds an older one.
/// " (age N xids)" for a catalog_xmin, or nothing where its age is not known here
/// ([`transam::age`]).
fn age_text(server: &ServerFacts, xid: TransactionId) -> String {
    transam::age(server.next_xid, xid)
        .map(|a| format!(" (age {a} xids)"))
        .unwrap_or_default()
}

fn horizon_finding(slot: &SlotFacts, server: &ServerFacts) -> Option<Finding> {
    let c = slot.catalog_xmin;
    if !transam::is_normal(c) {
        return None;
    }
    let age = age_text(server, c);
    let oldest_other = server
        .horizons
        .iter()
        .filter(|h| transam::is_normal(h.xid))
        .min_by(|a, b| transam::precedes_order(a.xid, b.xid));
    let mut f = match oldest_other {
        Some(h) if transam::precedes(h.xid, c) => {
            let mut f = Finding::new(
                FindingKind::CatalogHorizon,
                format!(
                    "catalog_xmin {c}{age} is not the cluster's oldest horizon: {} holds {}, older; VACUUM of catalogs is held there first",
                    h.what, h.xid
                ),
            );
            f.xid = Some(h.xid);
            f
        }
        other => {
            let next = other
                .map(|h| format!("the next oldest is {} at {}", h.what, h.xid))
                .unwrap_or_else(|| "nothing else holds one".into());
            let mut f = Finding::new(
                FindingKind::CatalogHorizon,
                format!(
                    "catalog_xmin {c}{age} is the cluster's oldest xmin horizon: VACUUM cannot remove catalog rows deleted by xid {c} or later, in any database; {next}"
                ),
            );
            f.xid = Some(c);
            f
        }
    };
    if server.in_recovery {
        f.finding.push_str("; this server is a standby: VACUUM runs on the primary, where this catalog_xmin holds it only through hot_standby_feedback (without it the primary removes the rows and the slot is invalidated here, rows_removed)");
    }
    f.since = slot.inactive_since;
    Some(f)
}

/// A slot's health in numbers (`snapbuild_slot_health`), for monitoring.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Health {
    /// The builder's state after the replay (None: not replayed, e.g. invalidated).
    pub state: Option<SnapBuildState>,
    pub invalidated: bool,
    /// On a standby: a copy of the primary's failover slot that the slot synchronization
    /// keeps temporary (the `sync pending` rows of the diagnosis).
    pub sync_pending: bool,
    pub in_creation: bool,
    /// How many xids the creation waits for (live or ended); for a copy kept temporary,
    /// the primary's transactions that keep it so; 0 otherwise.
    pub waiting_xids: i32,
    /// The backend the first problem finding names (a creation's first live blocker, or
    /// the holder of restart_lsn / catalog_xmin).
    pub oldest_blocking_pid: Option<i32>,
    /// Flush position minus restart_lsn.
    pub restart_lsn_lag_bytes: Option<i64>,
    /// Flush position minus confirmed_flush (None while being created).
    pub confirmed_flush_lag_bytes: Option<i64>,
    /// Next xid minus catalog_xmin.
    pub catalog_xmin_age: Option<i32>,
    /// The last RUNNING_XACTS record the replay read, and the WAL flushed after it.
    pub last_running_xacts: Option<Lsn>,
    pub wal_since_running_xacts_bytes: Option<i64>,
    /// Seconds since the last RUNNING_XACTS was written, at least (now minus the
    /// modification time of its WAL segment).
    pub running_xacts_age_s: Option<f64>,
    /// WAL bytes restart_lsn releases when its holder ends ([`Forecast`]); at least the
    /// WAL up to the flush position when the target is the next RUNNING_XACTS; 0 when
    /// it would not move.
    pub releasable_bytes: Option<i64>,
}

/// [`Health`] from the same inputs as [`diagnose`].
pub fn health(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
) -> Health {
    let findings = diagnose(slot, builder, server, holders);
    let blocking = findings.iter().find_map(|f| match f.kind {
        Some(
            FindingKind::WaitingForTransaction
            | FindingKind::RestartLsnHeld
            | FindingKind::CatalogXminHeld,
        ) => f.backend.as_ref().map(|b| b.pid),
        _ => None,
    });
    let last = builder.and_then(|b| b.last_running.as_ref().map(|(l, _)| *l));
    Health {
        state: builder.and_then(|b| b.state),
        invalidated: findings
            .first()
            .is_some_and(|f| f.kind == Some(FindingKind::Invalidated)),
        sync_pending: findings
            .iter()
            .any(|f| f.kind == Some(FindingKind::SyncPending)),
        in_creation: slot.in_creation,
        waiting_xids: match slot.synced.as_ref() {
            Some(c) if c.temporary => slotsync::copy_waits(slot, c, builder, server).len() as i32,
            _ => builder.map_or(0, |b| waited_xids(slot, b).len() as i32),
        },
        oldest_blocking_pid: blocking,
        restart_lsn_lag_bytes: slot
            .restart_lsn
            .is_valid()
            .then(|| bytes_between(slot.restart_lsn, server.flush_lsn)),
        confirmed_flush_lag_bytes: slot
            .confirmed_flush
            .map(|c| bytes_between(c, server.flush_lsn)),
        catalog_xmin_age: transam::age(server.next_xid, slot.catalog_xmin),
        last_running_xacts: last,
        wal_since_running_xacts_bytes: last.map(|l| bytes_between(l, server.flush_lsn)),
        running_xacts_age_s: last
            .and(builder.and_then(|b| b.last_running_written_by))
            .map(|t| (server.now - t).max(0) as f64 / 1e6),
        releasable_bytes: builder
            .filter(|_| slot.synced.is_none())
            .and_then(|b| b.forecasts.first())
            .map(|fc| match fc.restart_lsn {
                ForecastLsn::AtNextRunningXacts => {
                    bytes_between(slot.restart_lsn, server.flush_lsn)
                }
                _ => fc.released_bytes(slot.restart_lsn).unwrap_or(0),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(major: u32) -> ServerFacts {
        ServerFacts {
            version: PgVersion::newest(major),
            flush_lsn: Lsn(0x2000),
            next_xid: 1000,
            in_recovery: false,
            now: 0,
            horizons: Vec::new(),
            running: Vec::new(),
            in_progress: Vec::new(),
        }
    }

    fn running(next: u32, top: &[u32], sub: &[u32]) -> RunningXacts {
        let mut xids = top.to_vec();
        xids.extend_from_slice(sub);
        RunningXacts {
            xcnt: top.len() as u32,
            subxcnt: sub.len() as u32,
            subxid_overflow: false,
            next_xid: next,
            oldest_running_xid: top.iter().copied().min().unwrap_or(next),
            latest_completed_xid: next - 1,
            xids,
        }
    }

    fn creating() -> SlotFacts {
        SlotFacts {
            name: "s".into(),
            in_creation: true,
            active_pid: Some(77),
            restart_lsn: Lsn(0x1000),
            catalog_xmin: 700,
            ..Default::default()
        }
    }

    fn backend(pid: i32) -> Backend {
        Backend {
            pid,
            backend_type: Some("client backend".into()),
            datname: Some("other".into()),
            state: Some("idle in transaction".into()),
            ..Default::default()
        }
    }

    fn kinds(f: &[Finding]) -> Vec<&'static str> {
        f.iter().map(|f| f.kind.unwrap().as_str()).collect()
    }

    #[test]
    fn building_waits_for_top_level_xids_before_next_phase_at() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::BuildingSnapshot),
            next_phase_at: 800,
            initial_xmin_horizon: 700,
            last_running: Some((Lsn(0x1800), running(805, &[750, 790, 801], &[760]))),
            replayed_to: Lsn(0x1900),
            ..Default::default()
        };
        // 801 began after next_phase_at; 760 is a subxid (its top level is waited for).
        assert_eq!(waited_xids(&creating(), &b), vec![750, 790]);
        let holders = [
            Holder {
                xid: 750,
                kind: HolderKind::Backend(backend(42)),
            },
            Holder {
                xid: 790,
                kind: HolderKind::Prepared(Prepared {
                    gid: "g'1".into(),
                    ..Default::default()
                }),
            },
        ];
        let f = diagnose(&creating(), Some(&b), &server(18), &holders);
        assert_eq!(
            kinds(&f),
            vec![
                "creation waiting",
                "waiting for transaction",
                "waiting for prepared transaction"
            ]
        );
        assert!(
            f[0].finding.contains("BUILDING_SNAPSHOT"),
            "{}",
            f[0].finding
        );
        assert!(f[0].finding.contains("to reach FULL_SNAPSHOT"));
        assert_eq!(f[1].backend.as_ref().unwrap().pid, 42);
        assert_eq!(f[1].xid, Some(750));
        assert!(f[1]
            .remedy
            .as_ref()
            .unwrap()
            .contains("pg_terminate_backend(42)"));
        assert_eq!(
            f[2].remedy.as_deref(),
            Some("COMMIT PREPARED 'g''1' or ROLLBACK PREPARED 'g''1'")
        );
    }

    #[test]
    fn on_a_standby_unheld_xids_are_the_primarys() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::BuildingSnapshot),
            next_phase_at: 900,
            last_running: Some((Lsn(0x1800), running(905, &[850], &[]))),
            replayed_to: Lsn(0x1900),
            ..Default::default()
        };
        // The standby knows 850 in progress (KnownAssignedXids): the primary's.
        let standby = ServerFacts {
            in_recovery: true,
            in_progress: vec![850],
            ..server(16)
        };
        let f = diagnose(&creating(), Some(&b), &standby, &[]);
        assert_eq!(
            kinds(&f),
            vec!["creation waiting", "waiting for primary transaction"]
        );
        assert_eq!(f[1].xid, Some(850));
        assert!(
            f[1].finding.contains("running on the primary"),
            "{}",
            f[1].finding
        );
        let remedy = f[1].remedy.as_deref().unwrap();
        assert!(remedy.contains("a.application_name"), "{remedy}");
        assert!(remedy.contains("'850'::xid"), "{remedy}");
        assert!(
            remedy.contains("SELECT pg_log_standby_snapshot() on the primary"),
            "{remedy}"
        );
        // Its end replayed here: ended, and only a newer RUNNING_XACTS is missing.
        let ended = ServerFacts {
            in_progress: vec![],
            ..standby.clone()
        };
        let f = diagnose(&creating(), Some(&b), &ended, &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "creation waiting",
                "waiting for ended transaction",
                "waiting for WAL"
            ]
        );
        assert!(
            f[1].finding.contains("has ended on the primary"),
            "{}",
            f[1].finding
        );
        // Nothing to wait for but the primary's next RUNNING_XACTS.
        let b = BuilderFacts {
            state: Some(SnapBuildState::Start),
            last_running: None,
            replayed_to: Lsn(0x1000),
            ..Default::default()
        };
        let f = diagnose(&creating(), Some(&b), &standby, &[]);
        assert_eq!(kinds(&f), vec!["creation waiting", "waiting for WAL"]);
        assert!(
            f[1].finding.contains("this server is a standby"),
            "{}",
            f[1].finding
        );
        assert!(f[1]
            .remedy
            .as_deref()
            .unwrap()
            .starts_with("SELECT pg_log_standby_snapshot() on the primary"));
    }

    #[test]
    fn ended_xids_mean_waiting_for_wal_with_the_majors_remedy() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::FullSnapshot),
            next_phase_at: 900,
            last_running: Some((Lsn(0x1800), running(905, &[850], &[]))),
            replayed_to: Lsn(0x1900),
            ..Default::default()
        };
        let f = diagnose(&creating(), Some(&b), &server(15), &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "creation waiting",
                "waiting for ended transaction",
                "waiting for WAL"
            ]
        );
        assert!(f[0].finding.contains("to reach CONSISTENT"));
        assert!(f[2].remedy.as_ref().unwrap().starts_with("CHECKPOINT"));
        assert_eq!(f[2].bytes, Some(0x2000 - 0x1900));
        let f = diagnose(&creating(), Some(&b), &server(16), &[]);
        assert!(f[2]
            .remedy
            .as_ref()
            .unwrap()
            .starts_with("SELECT pg_log_standby_snapshot()"));
    }

    #[test]
    fn start_without_running_xacts_waits_for_wal() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::Start),
            replayed_to: Lsn(0x1000),
            ..Default::default()
        };
        let f = diagnose(&creating(), Some(&b), &server(17), &[]);
        assert_eq!(kinds(&f), vec!["creation waiting", "waiting for WAL"]);
        assert!(f[0]
            .finding
            .contains("no RUNNING_XACTS record has been read"));
    }

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

    #[test]
    fn invalidated_slot_is_the_only_finding() {
        let mut s = creating();
        s.in_creation = false;
        s.wal_status = Some("lost".into());
        let f = diagnose(&s, None, &server(14), &[]);
        assert_eq!(kinds(&f), vec!["invalidated"]);
        assert!(f[0].finding.contains("wal_removed"));
        s.invalidation_reason = Some("rows_removed".into());
        s.conflicting = Some(true);
        let f = diagnose(&s, None, &server(17), &[]);
        assert!(f[0]
            .finding
            .contains("invalidated (conflicting): rows_removed"));
    }

    #[test]
    fn created_slot_holders_candidates_and_health() {
        let mut s = creating();
        s.in_creation = false;
        s.confirmed_flush = Some(Lsn(0x1800));
        s.catalog_xmin = 600;
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[650], &[]))),
            oldest_txn: Some((650, Lsn(0x1100))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        assert_eq!(wanted_xids(&s, Some(&b), &server(18)), vec![650]);
        let holders = [Holder {
            xid: 650,
            kind: HolderKind::Backend(backend(9)),
        }];
        let f = diagnose(&s, Some(&b), &server(18), &holders);
        assert_eq!(
            kinds(&f),
            vec![
                "restart_lsn held",
                "catalog_xmin held",
                "catalog horizon",
                "consumer lag",
                "retained WAL"
            ]
        );
        assert_eq!(f[0].lsn, Some(Lsn(0x1100)));
        assert!(f[1].finding.contains("age 400 xids"), "{}", f[1].finding);
        assert!(
            f[2].finding
                .contains("is the cluster's oldest xmin horizon")
                && f[2].finding.contains("nothing else holds one"),
            "{}",
            f[2].finding
        );
        assert_eq!(f[3].bytes, Some(0x800));
        assert_eq!(f[4].bytes, Some(0x1000));
        // A backend's older xmin holds the catalog horizon first.
        let mut srv = server(18);
        srv.horizons.push(Horizon {
            xid: 590,
            what: "pid 4 (client backend, xmin)".into(),
        });
        let f = diagnose(&s, Some(&b), &srv, &holders);
        assert_eq!(f[2].xid, Some(590));
        assert!(f[2]
            .finding
            .contains("is not the cluster's oldest horizon: pid 4"));
        // Nothing running, the consumer gone, a candidate waiting for confirmation.
        s.active_pid = None;
        s.candidate_restart_valid = Lsn(0x1c80);
        s.candidate_restart_lsn = Lsn(0x1c00);
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[], &[]))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        let f = diagnose(&s, Some(&b), &server(18), &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "pending restart candidate",
                "no consumer",
                "catalog horizon",
                "consumer lag",
                "retained WAL"
            ]
        );
        assert_eq!(f[0].bytes, Some(0xc00));
        s.active_pid = Some(5);
        s.candidate_restart_valid = Lsn(0);
        let f = diagnose(&s, Some(&b), &server(18), &[]);
        assert_eq!(kinds(&f).last(), Some(&"healthy"));
    }

    #[test]
    fn health_counts_waits_and_names_the_first_live_blocker() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::BuildingSnapshot),
            next_phase_at: 800,
            last_running: Some((Lsn(0x1800), running(805, &[750, 790], &[]))),
            replayed_to: Lsn(0x1900),
            ..Default::default()
        };
        let holders = [Holder {
            xid: 790,
            kind: HolderKind::Backend(backend(42)),
        }];
        let h = health(&creating(), Some(&b), &server(18), &holders);
        assert_eq!(h.state, Some(SnapBuildState::BuildingSnapshot));
        assert!(h.in_creation && !h.invalidated);
        assert_eq!(h.waiting_xids, 2);
        assert_eq!(h.oldest_blocking_pid, Some(42));
        assert_eq!(h.restart_lsn_lag_bytes, Some(0x1000));
        assert_eq!(h.confirmed_flush_lag_bytes, None);
        assert_eq!(h.catalog_xmin_age, Some(300));
        assert_eq!(h.last_running_xacts, Some(Lsn(0x1800)));
        assert_eq!(h.wal_since_running_xacts_bytes, Some(0x800));
    }

    fn standby_server() -> ServerFacts {
        ServerFacts {
            in_recovery: true,
            ..server(18)
        }
    }

    /// Every LSN a finding prints or carries: none may be 0/0 (a value the server does
    /// not have is absent).
    fn assert_no_zero_lsn(f: &[Finding]) {
        for x in f {
            assert!(!x.finding.contains(" 0/0"), "{}", x.finding);
            assert_ne!(x.lsn, Some(Lsn(0)), "{x:?}");
        }
    }

    #[test]
    fn a_standby_judges_the_primarys_transactions_by_what_it_replayed() {
        let mut s = creating();
        s.in_creation = false;
        s.confirmed_flush = Some(Lsn(0x1800));
        s.catalog_xmin = 640;
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[650], &[]))),
            oldest_txn: Some((650, Lsn(0x1100))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        // No holder in the standby's pg_locks; its KnownAssignedXids list 650.
        let srv = ServerFacts {
            in_progress: vec![650],
            running: vec![650],
            ..standby_server()
        };
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "restart_lsn held",
                "catalog_xmin held",
                "catalog horizon",
                "consumer lag",
                "retained WAL"
            ]
        );
        for r in &f[..2] {
            assert!(
                r.finding.contains("running on the primary"),
                "{}",
                r.finding
            );
            assert!(!r.finding.contains("no longer running"), "{}", r.finding);
            let remedy = r.remedy.as_deref().unwrap();
            assert!(
                remedy.starts_with(
                    "on the primary, find its holder: SELECT l.pid, a.application_name"
                ),
                "{remedy}"
            );
            assert!(remedy.contains("'650'::xid"), "{remedy}");
            assert!(remedy.contains("confirm past that record"), "{remedy}");
            assert!(r.backend.is_none());
        }
        let h = health(&s, Some(&b), &srv, &[]);
        assert_eq!(h.oldest_blocking_pid, None);
        // Its end replayed: ended as far as the standby knows, no catalog_xmin row.
        let srv = ServerFacts {
            in_progress: vec![],
            running: vec![],
            ..standby_server()
        };
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(kinds(&f)[..2], ["restart_lsn held", "catalog horizon"]);
        assert!(
            f[0].finding
                .contains("no longer running on the primary as far as this standby knows"),
            "{}",
            f[0].finding
        );
        assert!(f[0]
            .remedy
            .as_deref()
            .unwrap()
            .starts_with("SELECT pg_log_standby_snapshot() on the primary"));
    }

    fn temporary_copy(last_skip: Option<SyncSkip>) -> SlotFacts {
        SlotFacts {
            name: "f".into(),
            in_creation: false,
            active_pid: None,
            restart_lsn: Lsn(0x1000),
            confirmed_flush: None,
            catalog_xmin: 760,
            synced: Some(SyncedCopy {
                temporary: true,
                last_skip,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_copy_kept_temporary_says_why_in_the_servers_terms() {
        let skip = SyncSkip {
            at: 0,
            reason: SyncSkipReason::RemoteBehind {
                remote_restart_lsn: Lsn(0x1000),
                remote_catalog_xmin: 754,
                local_restart_lsn: Lsn(0x1000),
                local_catalog_xmin: 760,
            },
        };
        let s = temporary_copy(Some(skip));
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(761, &[754], &[]))),
            oldest_txn: Some((754, Lsn(0x1100))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        // 754 runs on the primary (and a subtransaction of it, 755); 762 began later.
        let srv = ServerFacts {
            running: vec![762, 754, 755],
            in_progress: vec![754, 755, 762],
            ..standby_server()
        };
        assert_eq!(wanted_xids(&s, Some(&b), &srv), vec![754, 755]);
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "sync pending",
                "sync pending",
                "sync pending",
                "catalog horizon",
                "retained WAL"
            ]
        );
        assert_no_zero_lsn(&f);
        assert!(
            f[0].finding.contains(
                "the remote slot needs WAL at LSN 0/1000 and catalog xmin 754, but the standby has LSN 0/1000 and catalog xmin 760 (its catalog_xmin 754 is older than 760)"
            ),
            "{}",
            f[0].finding
        );
        assert_eq!((f[0].lsn, f[0].xid), (Some(Lsn(0x1000)), Some(760)));
        assert!(f[0]
            .remedy
            .as_deref()
            .unwrap()
            .contains("WHERE slot_name = 'f'"));
        assert_eq!(f[1].xid, Some(754));
        assert!(
            f[1].finding.contains("running on the primary"),
            "{}",
            f[1].finding
        );
        assert!(f[1].remedy.as_deref().unwrap().contains("'754'::xid"));
        let h = health(&s, Some(&b), &srv, &[]);
        assert!(h.sync_pending);
        assert_eq!(h.waiting_xids, 2);
        assert_eq!(h.confirmed_flush_lag_bytes, None);
        assert_eq!(h.releasable_bytes, None);
        // 754 has ended here (the consumer on the primary has not confirmed yet): still
        // pending, never healthy.
        let srv = ServerFacts {
            running: vec![762],
            in_progress: vec![762],
            ..standby_server()
        };
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(
            kinds(&f),
            vec!["sync pending", "catalog horizon", "retained WAL"]
        );
        // Without the log line: the reserved positions, and that the remote ones are on
        // the primary.
        let f = diagnose(&temporary_copy(None), Some(&b), &srv, &[]);
        assert!(f[0]
            .finding
            .contains("at least 0/1000 and its catalog_xmin at least 760"));
        assert!(f[0]
            .finding
            .contains("the remote positions are on the primary"));
    }

    #[test]
    fn a_copy_advanced_without_a_consistent_snapshot_names_what_its_decoder_waits_for() {
        let mut s = temporary_copy(Some(SyncSkip {
            at: 0,
            reason: SyncSkipReason::NoConsistentSnapshot {
                restart_lsn: Lsn(0x1000),
            },
        }));
        s.confirmed_flush = Some(Lsn(0x1900));
        let b = BuilderFacts {
            state: Some(SnapBuildState::BuildingSnapshot),
            next_phase_at: 800,
            last_running: Some((Lsn(0x1800), running(801, &[790], &[]))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        let srv = ServerFacts {
            running: vec![790],
            in_progress: vec![790],
            ..standby_server()
        };
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "sync pending",
                "waiting for primary transaction",
                "catalog horizon",
                "consumer lag",
                "retained WAL"
            ]
        );
        assert!(f[0]
            .finding
            .contains("could not build a consistent snapshot to decode WAL at LSN 0/1000"));
        assert!(
            f[0].finding.contains("in BUILDING_SNAPSHOT"),
            "{}",
            f[0].finding
        );
        assert!(
            f[1].finding
                .starts_with("the copy's decoder waits for xid 790"),
            "{}",
            f[1].finding
        );
        assert_eq!(health(&s, Some(&b), &srv, &[]).waiting_xids, 1);
    }

    #[test]
    fn a_persistent_copy_is_synchronized_and_has_no_consumer_here() {
        let mut s = temporary_copy(None);
        s.synced = Some(SyncedCopy {
            temporary: false,
            last_skip: None,
        });
        s.confirmed_flush = Some(Lsn(0x1800));
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[], &[]))),
            replayed_to: Lsn(0x2000),
            forecasts: vec![],
            ..Default::default()
        };
        let f = diagnose(&s, Some(&b), &standby_server(), &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "synchronized",
                "catalog horizon",
                "consumer lag",
                "retained WAL",
                "healthy"
            ]
        );
        assert!(f[2]
            .finding
            .contains("the primary slot's, as last synchronized"));
        assert!(!health(&s, Some(&b), &standby_server(), &[]).sync_pending);
    }

    #[test]
    fn a_slot_without_confirmed_flush_shows_no_lag_and_no_0_0() {
        let mut s = creating();
        s.in_creation = false;
        s.confirmed_flush = None;
        s.active_pid = None;
        s.candidate_restart_valid = Lsn(0x1c80);
        s.candidate_restart_lsn = Lsn(0x1c00);
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[], &[]))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        let f = diagnose(&s, Some(&b), &server(18), &[]);
        assert!(!kinds(&f).contains(&"consumer lag"), "{:?}", kinds(&f));
        assert_no_zero_lsn(&f);
        assert_eq!(
            health(&s, Some(&b), &server(18), &[]).confirmed_flush_lag_bytes,
            None
        );
    }
}
