//! The trace's rows: one [`TraceRow`] per record fed, what the replayed builder did on it;
//! decode.c's verdict on a transaction end ([`DecodeVerdict`]: its SQL label and the
//! output plugin callbacks it ran); how a commit row shows snapbuild.c's [`CommitVerdict`]
//! (with SnapBuildCommitTxn's DEBUG1 lines, [`subtransaction_messages`]); and the notes
//! on rows that run into a known PostgreSQL behaviour.

use crate::include::snapbuild::SnapBuildState;
use crate::include::transam::TransactionId;
use crate::include::xlogdefs::Lsn;
use crate::replication::snapbuild::{Branch, CommitVerdict, Level, SerializeContext};
use crate::replication::snapbuild_ondisk::SnapBuildOnDisk;

/// One row of `snapbuild_trace`: what the replayed builder did on one record.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TraceRow {
    pub lsn: Lsn,
    pub end_lsn: Lsn,
    /// The record's name: `RecordKind::name` (static), or pg_waldump's `rmgr/TYPE` when the
    /// reader names every record (`all_records`).
    pub record: &'static str,
    pub xid: Option<TransactionId>,
    pub branch: Option<&'static str>,
    pub state_before: SnapBuildState,
    pub state: SnapBuildState,
    pub xmin: TransactionId,
    pub xmax: TransactionId,
    pub next_phase_at: TransactionId,
    pub start_decoding_at: Lsn,
    pub running_xids: Option<Vec<TransactionId>>,
    pub wait_xids: Option<Vec<TransactionId>>,
    pub level: Option<&'static str>,
    pub message: Option<String>,
    pub detail: Option<String>,
    /// The file SnapBuildSerialize writes at this LSN (serialize rows).
    pub serialized: Option<Box<SnapBuildOnDisk>>,
    /// What the serialized xmin rests on (serialize rows).
    pub serialize_context: Option<SerializeContext>,
    /// Where a restored snapshot came from (branch b).
    pub restored_from: Option<Lsn>,
    /// SnapBuildCommitTxn's verdict, on commit rows.
    pub commit: Option<CommitVerdict>,
    /// What decode.c did with a commit, on commit rows.
    pub decode: Option<DecodeVerdict>,
    /// LogicalIncreaseXminForSlot's arguments, on RUNNING_XACTS rows.
    pub candidate_xmin: Option<(Lsn, TransactionId)>,
    /// LogicalIncreaseRestartDecodingForSlot's arguments, on RUNNING_XACTS rows.
    pub candidate_restart: Option<(Lsn, Lsn)>,
    /// Whether the default trace shows this row (RUNNING_XACTS, serialization points,
    /// commits, and anything that changed the builder's state or tracked sets).
    pub interesting: bool,
    /// A known PostgreSQL behaviour this row runs into (the replay does what the server
    /// does; the note says why that may surprise): see [`NOTE_CATALOG_CHANGE_BEFORE_FULL`].
    pub note: Option<String>,
}

impl TraceRow {
    /// Fills the row of a commit of `x` (the builder was `before` when it was fed) with
    /// its verdicts: SnapBuildCommitTxn's `v` and decode.c's `d`, and the note or DEBUG1
    /// lines they call for. `has_invals` is `XACT_XINFO_HAS_INVALS`.
    pub(super) fn set_commit(
        &mut self,
        x: TransactionId,
        has_invals: bool,
        before: SnapBuildState,
        v: CommitVerdict,
        d: DecodeVerdict,
    ) {
        self.branch = Some(Branch::Commit.label());
        self.xid = Some(x);
        if has_invals
            && before == SnapBuildState::FullSnapshot
            && v == CommitVerdict::NotCatalogChanging
        {
            self.note = Some(NOTE_CATALOG_CHANGE_BEFORE_FULL.to_owned());
        }
        if let CommitVerdict::Timetravel {
            catalog_subxacts, ..
        } = &v
        {
            if !catalog_subxacts.is_empty() {
                self.level = Some(Level::Debug1.as_str());
                self.message = Some(subtransaction_messages(x, catalog_subxacts));
            }
        }
        self.commit = Some(v);
        self.decode = Some(d);
        self.interesting = d != DecodeVerdict::NotSeenBeforeFull;
    }
}

/// The note on a row where the output plugin would be called while the slot is being
/// created: only a ROLLBACK PREPARED can get there (two-phase slot, builder in
/// FULL_SNAPSHOT; commits in FULL_SNAPSHOT move start_decoding_at past themselves, aborts do
/// not). pg_create_logical_replication_slot gives the plugin no writer, and its
/// rollback_prepared callback crashes the backend (SIGSEGV, the postmaster restarts every
/// session). Observed on 14.22, 15.19, 16.15, 17.11 and 18.6 with test_decoding (pgrx-tests
/// `scenarios`, `g_rollback_prepared_during_two_phase_creation`, opt-in).
pub const NOTE_CALLBACK_DURING_CREATION: &str = "postgres-behaviour: output plugin called during slot creation; \
     pg_create_logical_replication_slot has no writer for it and the server process crashes (SIGSEGV)";

/// The note on a commit, seen in FULL_SNAPSHOT, of a transaction whose catalog changes
/// were written before the builder reached FULL_SNAPSHOT (its commit record carries
/// invalidations, yet nothing marked it catalog-changing: decode.c hands those records to
/// the builder only from FULL_SNAPSHOT on). SnapBuildCommitTxn then does not add it to
/// `committed`, and until the builder's xmin passes it every historic snapshot treats it as
/// running: changes decoded meanwhile use the catalog without its DDL. Observed on 14.22,
/// 15.19, 16.15, 17.11 and 18.6 (pgrx-tests `scenarios`, e); discussed on pgsql-hackers in
/// November 2025 as "Fix logical decoding not track transaction during
/// SNAPBUILD_BUILDING_SNAPSHOT".
pub const NOTE_CATALOG_CHANGE_BEFORE_FULL: &str =
    "postgres-behaviour: catalog change made before FULL_SNAPSHOT, committed in FULL_SNAPSHOT: \
     not time-travel; historic snapshots treat the transaction as running until xmin passes it";

/// The DEBUG1 lines snapbuild.c SnapBuildCommitTxn logs for the catalog-changing
/// subtransactions `subs` of committing `top`, one per line in the commit record's order
/// (`found subtransaction X:S with catalog changes`).
pub fn subtransaction_messages(top: TransactionId, subs: &[TransactionId]) -> String {
    subs.iter()
        .map(|s| format!("found subtransaction {top}:{s} with catalog changes"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What decode.c did with a commit, an abort or a PREPARE of a prepared transaction, and
/// so which output plugin callbacks ran ([`DecodeVerdict::sends`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DecodeVerdict {
    /// xact_decode bails out before FULL_SNAPSHOT.
    NotSeenBeforeFull,
    /// DecodeTXNNeedSkip: the record lies before start_decoding_at.
    SkippedBeforeStartDecodingAt,
    /// DecodeTXNNeedSkip: the transaction belongs to another database.
    SkippedOtherDatabase,
    /// ReorderBufferCommit / ReorderBufferRememberPrepareInfo /
    /// ReorderBufferFinishPrepared: the reorder buffer never saw the transaction.
    UnknownTransaction,
    /// ReorderBufferReplay: no base snapshot, no change decoded — nothing to send.
    NoChanges,
    /// Sent to the output plugin (BEGIN … COMMIT).
    Decoded,
    /// Two-phase decoding, PREPARE: the plugin's filter_prepare callback filtered the gid;
    /// the transaction is sent as a plain one at COMMIT PREPARED.
    PrepareFiltered,
    /// Two-phase decoding, PREPARE before the builder is CONSISTENT
    /// (ReorderBufferSkipPrepare): sent whole at COMMIT PREPARED if that comes after
    /// `two_phase_at`.
    PrepareSkippedNotConsistent,
    /// Two-phase decoding, PREPARE replayed: BEGIN PREPARE … PREPARE TRANSACTION.
    Prepared,
    /// Two-phase decoding, COMMIT PREPARED of a transaction whose PREPARE was decoded:
    /// ReorderBufferFinishPrepared sends COMMIT PREPARED. (A transaction without changes
    /// gets it only on some releases, see [`PgVersion::finishes_prepared_without_changes`].)
    ///
    /// [`PgVersion::finishes_prepared_without_changes`]: crate::include::version::PgVersion::finishes_prepared_without_changes
    CommitPrepared,
    /// Two-phase decoding, COMMIT PREPARED of a transaction prepared before `two_phase_at`:
    /// ReorderBufferFinishPrepared replays it as a prepared transaction first
    /// (BEGIN PREPARE … PREPARE TRANSACTION), then sends COMMIT PREPARED.
    PreparedAndCommitPrepared,
    /// Two-phase decoding, ROLLBACK PREPARED of a known transaction.
    RollbackPrepared,
}

impl DecodeVerdict {
    /// Short text for the SQL `verdict` column.
    pub fn label(self) -> &'static str {
        match self {
            DecodeVerdict::NotSeenBeforeFull => "skipped: before FULL_SNAPSHOT",
            DecodeVerdict::SkippedBeforeStartDecodingAt => "skipped: before start_decoding_at",
            DecodeVerdict::SkippedOtherDatabase => "skipped: other database",
            DecodeVerdict::UnknownTransaction => "skipped: unknown transaction",
            DecodeVerdict::NoChanges => "skipped: no decoded changes",
            DecodeVerdict::Decoded => "decoded",
            DecodeVerdict::PrepareFiltered => "prepare filtered: decoded at COMMIT PREPARED",
            DecodeVerdict::PrepareSkippedNotConsistent => "prepare skipped: not yet consistent",
            DecodeVerdict::Prepared => "prepared",
            DecodeVerdict::CommitPrepared => "commit prepared",
            DecodeVerdict::PreparedAndCommitPrepared => "prepared and commit prepared",
            DecodeVerdict::RollbackPrepared => "rollback prepared",
        }
    }

    /// The transaction-ending callbacks of the output plugin this record ran, in order:
    /// `commit`, `prepare`, `commit_prepared`, `rollback_prepared` (the names of
    /// OutputPluginCallbacks' `*_cb` members without `_cb`).
    pub fn sends(self) -> &'static [&'static str] {
        match self {
            DecodeVerdict::Decoded => &["commit"],
            DecodeVerdict::Prepared => &["prepare"],
            DecodeVerdict::CommitPrepared => &["commit_prepared"],
            DecodeVerdict::PreparedAndCommitPrepared => &["prepare", "commit_prepared"],
            DecodeVerdict::RollbackPrepared => &["rollback_prepared"],
            _ => &[],
        }
    }

    /// Whether the output plugin was called for the transaction at this record.
    pub fn decoded(self) -> bool {
        !self.sends().is_empty()
    }
}
