//! The records decode.c's dispatch reads, as the replay is fed them: each WAL record's
//! head ([`RecordHead`]) with its [`RecordKind`], classified from the resource manager id
//! and `xl_info` as decode.c's rmgr decode routines tell records apart; the parsed body of
//! the records whose body matters ([`Payload`]); and how the decoding context treats
//! prepared transactions ([`TwoPhaseDecoding`]: logical.c's `ctx->twophase`, decode.c's
//! FilterPrepare).

use crate::include::heapam_xlog::{NewCid, XLOG_HEAP_OPMASK};
use crate::include::rmgrlist::{
    RM_HEAP2_ID, RM_HEAP_ID, RM_LOGICALMSG_ID, RM_STANDBY_ID, RM_XACT_ID, RM_XLOG_ID,
};
use crate::include::standbydefs::RunningXacts;
use crate::include::transam::TransactionId;
use crate::include::xact::XLOG_XACT_OPMASK;
use crate::include::xlogdefs::Lsn;
use crate::include::xlogrecord::XLR_INFO_MASK;

/// The records decode.c passes on to snapbuild.c or the reorder-buffer bookkeeping it
/// depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RecordKind {
    /// STANDBY `XLOG_RUNNING_XACTS` (0x10).
    RunningXacts,
    /// XLOG `XLOG_CHECKPOINT_SHUTDOWN` (0x00).
    CheckpointShutdown,
    /// XLOG `XLOG_END_OF_RECOVERY` (0x90).
    EndOfRecovery,
    /// XACT `XLOG_XACT_COMMIT` (0x00).
    Commit,
    /// XACT `XLOG_XACT_PREPARE` (0x10).
    Prepare,
    /// XACT `XLOG_XACT_ABORT` (0x20).
    Abort,
    /// XACT `XLOG_XACT_COMMIT_PREPARED` (0x30).
    CommitPrepared,
    /// XACT `XLOG_XACT_ABORT_PREPARED` (0x40).
    AbortPrepared,
    /// XACT `XLOG_XACT_ASSIGNMENT` (0x50).
    Assignment,
    /// XACT `XLOG_XACT_INVALIDATIONS` (0x60).
    Invalidations,
    /// HEAP2 `XLOG_HEAP2_NEW_CID` (0x70).
    NewCid,
    /// A data change that goes through SnapBuildProcessChange: HEAP INSERT (0x00),
    /// DELETE (0x10), UPDATE (0x20), TRUNCATE (0x30), HOT_UPDATE (0x40), CONFIRM (0x50);
    /// HEAP2 MULTI_INSERT (0x50).
    Change,
    /// LOGICALMSG `XLOG_LOGICAL_MESSAGE` (only transactional ones count as changes).
    LogicalMessage,
    /// Anything else (only its xid matters: ReorderBufferProcessXid).
    Other,
}

impl RecordKind {
    /// Classifies a record by resource manager id and `xl_info`.
    pub fn classify(rmid: u8, info: u8) -> Self {
        match rmid {
            RM_XLOG_ID => match info & !XLR_INFO_MASK {
                0x00 => RecordKind::CheckpointShutdown,
                0x90 => RecordKind::EndOfRecovery,
                _ => RecordKind::Other,
            },
            RM_XACT_ID => match info & XLOG_XACT_OPMASK {
                0x00 => RecordKind::Commit,
                0x10 => RecordKind::Prepare,
                0x20 => RecordKind::Abort,
                0x30 => RecordKind::CommitPrepared,
                0x40 => RecordKind::AbortPrepared,
                0x50 => RecordKind::Assignment,
                0x60 => RecordKind::Invalidations,
                _ => RecordKind::Other,
            },
            RM_STANDBY_ID if info & !XLR_INFO_MASK == 0x10 => RecordKind::RunningXacts,
            RM_HEAP2_ID => match info & XLOG_HEAP_OPMASK {
                0x70 => RecordKind::NewCid,
                0x50 => RecordKind::Change,
                _ => RecordKind::Other,
            },
            RM_HEAP_ID => match info & XLOG_HEAP_OPMASK {
                0x00 | 0x10 | 0x20 | 0x30 | 0x40 | 0x50 => RecordKind::Change,
                _ => RecordKind::Other,
            },
            RM_LOGICALMSG_ID if info & !XLR_INFO_MASK == 0x00 => RecordKind::LogicalMessage,
            _ => RecordKind::Other,
        }
    }

    /// The record's name as pg_waldump prints it.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::RunningXacts => "RUNNING_XACTS",
            RecordKind::CheckpointShutdown => "CHECKPOINT_SHUTDOWN",
            RecordKind::EndOfRecovery => "END_OF_RECOVERY",
            RecordKind::Commit => "COMMIT",
            RecordKind::Prepare => "PREPARE",
            RecordKind::Abort => "ABORT",
            RecordKind::CommitPrepared => "COMMIT_PREPARED",
            RecordKind::AbortPrepared => "ABORT_PREPARED",
            RecordKind::Assignment => "ASSIGNMENT",
            RecordKind::Invalidations => "INVALIDATION",
            RecordKind::NewCid => "NEW_CID",
            RecordKind::Change => "CHANGE",
            RecordKind::LogicalMessage => "MESSAGE",
            RecordKind::Other => "OTHER",
        }
    }

    /// Whether the adapter must parse the commit/abort body (subxacts, xinfo).
    pub fn needs_xact_parse(self) -> bool {
        matches!(
            self,
            RecordKind::Commit
                | RecordKind::CommitPrepared
                | RecordKind::Abort
                | RecordKind::AbortPrepared
        )
    }
}

/// The header facts of one WAL record the replay needs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RecordHead {
    /// Start of the record (`ReadRecPtr`, decode.c's `origptr`).
    pub lsn: Lsn,
    /// End of the record (`EndRecPtr`).
    pub end_lsn: Lsn,
    /// `XLogRecGetXid`.
    pub xid: TransactionId,
    /// `XLogRecGetTopXid` (valid only on the first record of a subtransaction).
    pub top_xid: TransactionId,
    /// `XLogRecGetRmid`.
    pub rmid: u8,
    pub kind: RecordKind,
    /// pg_waldump's `rmgr/TYPE` name, when the adapter supplies it (the adapter keeps one
    /// copy per distinct name for the backend's life, so a row per record costs no string).
    pub name: Option<&'static str>,
}

/// The parsed body of the records whose body matters.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Payload {
    None,
    RunningXacts(RunningXacts),
    /// Commit / commit prepared: the xid (the 2PC xid when prepared), subxacts, whether
    /// xinfo has `XACT_XINFO_HAS_INVALS`, the database (0 when not recorded) and the gid
    /// of a prepared transaction (empty otherwise).
    Commit {
        xid: TransactionId,
        subxacts: Vec<TransactionId>,
        has_invals: bool,
        db_id: u32,
        gid: String,
    },
    /// Abort / abort prepared: likewise.
    Abort {
        xid: TransactionId,
        subxacts: Vec<TransactionId>,
        db_id: u32,
        gid: String,
    },
    /// PREPARE TRANSACTION: the prepared xid, its subxacts, database and gid.
    Prepare {
        xid: TransactionId,
        subxacts: Vec<TransactionId>,
        db_id: u32,
        gid: String,
    },
    /// A logical decoding message (`xl_logical_message`): transactional or not, the
    /// database it was emitted in, and the lengths of its prefix (without its NUL) and
    /// content.
    Message {
        transactional: bool,
        db_id: u32,
        prefix_len: u64,
        content_len: u64,
    },
    /// A heap change's body, when the replay counts the reorder buffer's memory.
    Change(crate::replication::reorder_memory::ChangeRecord),
    /// XACT INVALIDATIONS: how many messages (`xl_xact_invals.nmsgs`), when the replay
    /// counts the reorder buffer's memory.
    Invalidations {
        nmsgs: u64,
    },
    /// HEAP2 NEW_CID: the catalog tuple and command ids.
    NewCid(NewCid),
}

impl Payload {
    /// The payload of a parsed commit, commit prepared, abort, abort prepared or prepare
    /// record of kind `kind` (xact_decode's view of it): its xid is the two-phase xid of
    /// a prepared transaction, else `record_xid` (the record header's).
    pub fn from_xact(
        kind: RecordKind,
        p: crate::access::xactdesc::ParsedXact,
        record_xid: TransactionId,
    ) -> Payload {
        let xid = if p.twophase_xid != 0 {
            p.twophase_xid
        } else {
            record_xid
        };
        match kind {
            RecordKind::Commit | RecordKind::CommitPrepared => Payload::Commit {
                xid,
                has_invals: p.has_invals(),
                subxacts: p.subxacts,
                db_id: p.db_id,
                gid: p.gid,
            },
            RecordKind::Prepare => Payload::Prepare {
                xid,
                subxacts: p.subxacts,
                db_id: p.db_id,
                gid: p.gid,
            },
            _ => Payload::Abort {
                xid,
                subxacts: p.subxacts,
                db_id: p.db_id,
                gid: p.gid,
            },
        }
    }
}

/// How the decoding context treats prepared transactions: logical.c's `ctx->twophase`
/// (the slot has `two_phase` and the output plugin has the two-phase callbacks) and the
/// plugin's filter_prepare callback.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TwoPhaseDecoding {
    /// `ctx->twophase`: PREPARE is decoded on its own.
    pub enabled: bool,
    /// filter_prepare: gids containing this text are filtered at PREPARE (test_decoding
    /// filters `_nodecode`); `None` when the plugin has no filter.
    pub filter_gid_containing: Option<String>,
}

impl TwoPhaseDecoding {
    /// As logical.c sets it up for a slot with `two_phase` decoded by `plugin`: the
    /// in-core plugins test_decoding and pgoutput have the two-phase callbacks;
    /// test_decoding's filter_prepare filters gids containing `_nodecode`. Other plugins
    /// are assumed to have the callbacks and no filter.
    pub fn for_slot(slot_two_phase: bool, plugin: &str) -> Self {
        TwoPhaseDecoding {
            enabled: slot_two_phase,
            filter_gid_containing: (slot_two_phase && plugin == "test_decoding")
                .then(|| "_nodecode".to_owned()),
        }
    }

    /// Re-runs decode.c FilterPrepare: true when the transaction is decoded as a plain one
    /// at COMMIT PREPARED instead of at PREPARE.
    pub fn filter_prepare(&self, gid: &str) -> bool {
        !self.enabled
            || self
                .filter_gid_containing
                .as_deref()
                .is_some_and(|f| gid.contains(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(
            RecordKind::classify(RM_STANDBY_ID, 0x10),
            RecordKind::RunningXacts
        );
        assert_eq!(RecordKind::classify(RM_STANDBY_ID, 0x00), RecordKind::Other); // STANDBY_LOCK
        assert_eq!(
            RecordKind::classify(RM_XLOG_ID, 0x00),
            RecordKind::CheckpointShutdown
        );
        assert_eq!(RecordKind::classify(RM_XLOG_ID, 0x10), RecordKind::Other); // ONLINE
        assert_eq!(RecordKind::classify(RM_XACT_ID, 0x80), RecordKind::Commit); // HAS_INFO bit
        assert_eq!(RecordKind::classify(RM_XACT_ID, 0x20), RecordKind::Abort);
        assert_eq!(RecordKind::classify(RM_HEAP2_ID, 0x70), RecordKind::NewCid);
        assert_eq!(RecordKind::classify(RM_HEAP2_ID, 0x00), RecordKind::Other);
        assert_eq!(RecordKind::classify(RM_HEAP2_ID, 0x50), RecordKind::Change);
        assert_eq!(RecordKind::classify(RM_HEAP_ID, 0x80), RecordKind::Change); // INIT_PAGE insert
        assert_eq!(RecordKind::classify(RM_HEAP_ID, 0x60), RecordKind::Other); // LOCK
        assert_eq!(RecordKind::classify(RM_HEAP_ID, 0x70), RecordKind::Other); // INPLACE
    }
}
