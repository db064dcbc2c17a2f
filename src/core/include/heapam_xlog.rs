//! access/heapam_xlog.h: the HEAP / HEAP2 operation mask and `xl_heap_new_cid`, the
//! NEW_CID record's main data.

use crate::include::relfilelocator::RelFileLocator;
use crate::include::reorderbuffer::TupleCidKey;
use crate::include::snapshot::CommandId;
use crate::include::transam::TransactionId;

/// `XLOG_HEAP_OPMASK`.
pub const XLOG_HEAP_OPMASK: u8 = 0x70;

/// `SizeOfHeapNewCid`: top_xid, cmin, cmax, combocid, the target's locator and tid.
pub const SIZE_OF_HEAP_NEW_CID: usize = 34;

/// The main data of HEAP2 `XLOG_HEAP2_NEW_CID` (heapam_xlog.h `xl_heap_new_cid`): which
/// catalog tuple a transaction touched and with which command ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NewCid {
    /// The top-level xid (the tuple-cid list lives there).
    pub top_xid: TransactionId,
    pub cmin: CommandId,
    pub cmax: CommandId,
    pub combocid: CommandId,
    /// `target_locator` and `target_tid`.
    pub target: TupleCidKey,
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
            target: TupleCidKey {
                locator: RelFileLocator {
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
    pub fn command_id(&self) -> Option<CommandId> {
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
