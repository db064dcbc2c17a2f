//! What the diagnosis says: [`Finding`]s (a sentence, the typed facts behind it and what
//! to do) of a [`FindingKind`] (most important first, with the `kind` column's text), and
//! the names the sentences give the snapshot builder's states and the server's end of WAL.
//!
//! Not a PostgreSQL file; the state names are snapbuild.h's SnapBuildState.

use super::facts::{Backend, Prepared, ServerFacts};
use crate::include::transam::TransactionId;
use crate::include::xlogdefs::Lsn;

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
    /// The server will invalidate the slot (max_slot_wal_keep_size, or on 18
    /// idle_replication_slot_timeout) if restart_lsn stays where it is: where and when.
    WalLossForecast,
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
            FindingKind::WalLossForecast => "wal loss forecast",
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
    pub(super) fn new(kind: FindingKind, finding: String) -> Self {
        Finding {
            kind: Some(kind),
            finding,
            ..Default::default()
        }
    }
}

/// What `flush_lsn` is: the flush position, or on a standby the replay position.
pub(super) fn end_name(server: &ServerFacts) -> &'static str {
    if server.in_recovery {
        "replay position (a standby)"
    } else {
        "flush position"
    }
}

/// What the tests of the diagnosis compare: the kinds of findings, in order.
#[cfg(test)]
pub(super) mod samples {
    use super::*;

    pub fn kinds(f: &[Finding]) -> Vec<&'static str> {
        f.iter().map(|f| f.kind.unwrap().as_str()).collect()
    }
}
