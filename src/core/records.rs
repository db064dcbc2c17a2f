//! WAL record identities the snapshot builder reacts to (rmgrlist.h ids and each
//! rmgr's info codes), and decode.c's dispatch of them.

/// `RM_XLOG_ID`.
pub const RM_XLOG_ID: u8 = 0;
/// `RM_XACT_ID`.
pub const RM_XACT_ID: u8 = 1;
/// `RM_STANDBY_ID`.
pub const RM_STANDBY_ID: u8 = 8;
/// `RM_HEAP2_ID`.
pub const RM_HEAP2_ID: u8 = 9;
/// `RM_HEAP_ID`.
pub const RM_HEAP_ID: u8 = 10;
/// `RM_LOGICALMSG_ID`.
pub const RM_LOGICALMSG_ID: u8 = 21;

/// `XLR_INFO_MASK`: low bits of xl_info reserved for the WAL machinery.
pub const XLR_INFO_MASK: u8 = 0x0F;
/// `XLOG_XACT_OPMASK`.
pub const XLOG_XACT_OPMASK: u8 = 0x70;
/// `XLOG_HEAP_OPMASK`.
pub const XLOG_HEAP_OPMASK: u8 = 0x70;

/// The records decode.c passes on to snapbuild.c or the reorder-buffer bookkeeping it
/// depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
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
