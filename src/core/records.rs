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

/// `SizeOfHeapNewCid`: top_xid, cmin, cmax, combocid, the target's locator and tid.
pub const SIZE_OF_HEAP_NEW_CID: usize = 34;

/// The main data of HEAP2 `XLOG_HEAP2_NEW_CID` (heapam_xlog.h `xl_heap_new_cid`): which
/// catalog tuple a transaction touched and with which command ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NewCid {
    /// The top-level xid (the tuple-cid list lives there).
    pub top_xid: crate::include::transam::TransactionId,
    pub cmin: crate::include::snapshot::CommandId,
    pub cmax: crate::include::snapshot::CommandId,
    pub combocid: crate::include::snapshot::CommandId,
    /// `target_locator` and `target_tid`.
    pub target: crate::include::reorderbuffer::TupleCidKey,
}

impl NewCid {
    /// Parses the record's main data (native byte order). Shorter than
    /// [`SIZE_OF_HEAP_NEW_CID`] is an error.
    pub fn parse(d: &[u8]) -> Result<Self, String> {
        if d.len() < SIZE_OF_HEAP_NEW_CID {
            return Err(format!(
                "NEW_CID main data has {} bytes, expected {SIZE_OF_HEAP_NEW_CID}",
                d.len()
            ));
        }
        let u32_at = |o: usize| u32::from_ne_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]);
        let u16_at = |o: usize| u16::from_ne_bytes([d[o], d[o + 1]]);
        Ok(NewCid {
            top_xid: u32_at(0),
            cmin: u32_at(4),
            cmax: u32_at(8),
            combocid: u32_at(12),
            target: crate::include::reorderbuffer::TupleCidKey {
                locator: crate::include::relfilelocator::RelFileLocator {
                    spc_oid: u32_at(16),
                    db_oid: u32_at(20),
                    rel_number: u32_at(24),
                },
                block: ((u16_at(28) as u32) << 16) | u16_at(30) as u32,
                offset: u16_at(32),
            },
        })
    }

    /// The command id snapbuild.c SnapBuildProcessNewCid derives from the record (the
    /// larger of cmin and cmax, whichever are valid); `None` when neither is (the server
    /// raises an ERROR there).
    pub fn command_id(&self) -> Option<crate::include::snapshot::CommandId> {
        use crate::include::snapshot::INVALID_COMMAND_ID as INV;
        match (self.cmin != INV, self.cmax != INV) {
            (true, true) => Some(self.cmin.max(self.cmax)),
            (false, true) => Some(self.cmax),
            (true, false) => Some(self.cmin),
            (false, false) => None,
        }
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

    #[test]
    fn new_cid_main_data() {
        let mut d = Vec::new();
        for v in [900u32, 2, u32::MAX, 7, 1663, 5, 1259] {
            d.extend(v.to_ne_bytes());
        }
        d.extend(1u16.to_ne_bytes());
        d.extend(4u16.to_ne_bytes());
        d.extend(12u16.to_ne_bytes());
        let n = NewCid::parse(&d).unwrap();
        assert_eq!(
            (n.top_xid, n.cmin, n.cmax, n.combocid),
            (900, 2, u32::MAX, 7)
        );
        assert_eq!(
            (n.target.locator.rel_number, n.target.block, n.target.offset),
            (1259, 65540, 12)
        );
        assert_eq!(n.command_id(), Some(2));
        assert!(NewCid::parse(&d[..33]).is_err());
        let both = NewCid { cmax: 5, ..n };
        assert_eq!(both.command_id(), Some(5));
        let none = NewCid {
            cmin: u32::MAX,
            ..n
        };
        assert_eq!(none.command_id(), None);
    }
}
