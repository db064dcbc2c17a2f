//! What the decoder did with each top-level transaction ([`TxnAccount`], how it ended:
//! [`TxnOutcome`]), and those accounts added up by what happened to them
//! ([`CostSummary`]).

use crate::include::transam::TransactionId;
use crate::include::xlogdefs::Lsn;

/// How a top-level transaction ended, as the decoder met it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TxnOutcome {
    /// Replayed to the plugin at its commit (or prepare).
    Sent,
    /// Committed before the slot's start point (DecodeTXNNeedSkip).
    SkippedBeforeStart,
    /// Committed in another database.
    SkippedOtherDatabase,
    /// Committed with no change for the decoder (no base snapshot).
    NoChanges,
    /// Aborted (or rolled back prepared).
    Aborted,
    /// Dropped by ReorderBufferAbortOld: it ended without a record (a crash).
    ForgottenAsOld,
    /// Prepared, decoded at PREPARE, not yet finished.
    Prepared,
    /// Still open where the decode stops.
    InProgress,
    /// COMMIT PREPARED of a transaction sent at its PREPARE.
    FinishedPrepared,
}

impl TxnOutcome {
    pub fn label(self) -> &'static str {
        match self {
            TxnOutcome::Sent => "sent",
            TxnOutcome::SkippedBeforeStart => "skipped: committed before the start point",
            TxnOutcome::SkippedOtherDatabase => "skipped: another database",
            TxnOutcome::NoChanges => "skipped: no changes",
            TxnOutcome::Aborted => "skipped: aborted",
            TxnOutcome::ForgottenAsOld => "skipped: ended without a record",
            TxnOutcome::Prepared => "sent at prepare",
            TxnOutcome::InProgress => "pending",
            TxnOutcome::FinishedPrepared => "sent at prepare",
        }
    }
}

/// One top-level transaction as the decoder met it: `snapbuild_backlog`'s row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TxnAccount {
    pub xid: TransactionId,
    /// The first record of it (or of a subtransaction) the decoder read.
    pub first_lsn: Lsn,
    /// The record that ended it (commit, abort, prepare), if read.
    pub end_lsn: Option<Lsn>,
    pub outcome: TxnOutcome,
    /// Subtransactions known to the reorder buffer (assigned or at commit).
    pub subxacts: u32,
    /// The database its ending record names (0 when it names none).
    pub database: u32,
    /// WAL bytes of its records and its subtransactions' (end minus start of each).
    pub wal_bytes: u64,
    /// Changes queued, by kind: insert, update, delete, truncate, message, invalidation,
    /// other (snapshots, command ids, speculative confirm / abort).
    pub changes: [u64; 7],
    /// Bytes of the changes as ReorderBufferChangeSize counts them, when queued.
    pub queued_bytes: u64,
    /// What replaying it added to `total_bytes` (0 unless sent).
    pub total_bytes: u64,
    pub spill_count: u64,
    pub spill_bytes: u64,
    pub stream_count: u64,
    pub stream_bytes: u64,
    /// Whether the transaction (or a subtransaction of it) was spilled / streamed.
    pub spilled: bool,
    pub streamed: bool,
}

impl TxnAccount {
    pub(super) fn new(xid: TransactionId, first_lsn: Lsn) -> Self {
        TxnAccount {
            xid,
            first_lsn,
            end_lsn: None,
            outcome: TxnOutcome::InProgress,
            subxacts: 0,
            database: 0,
            wal_bytes: 0,
            changes: [0; 7],
            queued_bytes: 0,
            total_bytes: 0,
            spill_count: 0,
            spill_bytes: 0,
            stream_count: 0,
            stream_bytes: 0,
            spilled: false,
            streamed: false,
        }
    }
}

/// What a decode's transactions add up to, by what the decoder does with them.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CostSummary {
    pub sent_txns: u64,
    pub sent_wal_bytes: u64,
    pub skipped_before_start_txns: u64,
    pub skipped_before_start_wal_bytes: u64,
    pub skipped_aborted_txns: u64,
    pub skipped_aborted_wal_bytes: u64,
    pub skipped_other_db_txns: u64,
    pub skipped_other_db_wal_bytes: u64,
    pub pending_txns: u64,
    pub pending_wal_bytes: u64,
    /// The transaction with the most bytes queued: (xid, bytes).
    pub largest: Option<(TransactionId, u64)>,
}

impl CostSummary {
    /// Adds one transaction's account.
    pub fn add(&mut self, a: &TxnAccount) {
        let (n, b) = match a.outcome {
            TxnOutcome::Sent | TxnOutcome::Prepared | TxnOutcome::FinishedPrepared => {
                (&mut self.sent_txns, &mut self.sent_wal_bytes)
            }
            TxnOutcome::SkippedBeforeStart => (
                &mut self.skipped_before_start_txns,
                &mut self.skipped_before_start_wal_bytes,
            ),
            TxnOutcome::Aborted | TxnOutcome::ForgottenAsOld => (
                &mut self.skipped_aborted_txns,
                &mut self.skipped_aborted_wal_bytes,
            ),
            TxnOutcome::SkippedOtherDatabase | TxnOutcome::NoChanges => (
                &mut self.skipped_other_db_txns,
                &mut self.skipped_other_db_wal_bytes,
            ),
            TxnOutcome::InProgress => (&mut self.pending_txns, &mut self.pending_wal_bytes),
        };
        *n += 1;
        *b += a.wal_bytes;
        if a.queued_bytes > 0 && self.largest.is_none_or(|(_, l)| a.queued_bytes > l) {
            self.largest = Some((a.xid, a.queued_bytes));
        }
    }
}
