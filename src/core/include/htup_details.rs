//! The heap tuple header as access/htup_details.h describes it: `t_infomask` /
//! `t_infomask2` bits and the macros over them that the visibility rules use.

use crate::include::snapshot::CommandId;
use crate::include::transam::{TransactionId, FROZEN_TRANSACTION_ID};

/// `t_infomask` and `t_infomask2` bits (access/htup_details.h).
pub mod infomask {
    pub const HEAP_HASNULL: u16 = 0x0001;
    pub const HEAP_HASVARWIDTH: u16 = 0x0002;
    pub const HEAP_HASEXTERNAL: u16 = 0x0004;
    pub const HEAP_HASOID_OLD: u16 = 0x0008;
    pub const HEAP_XMAX_KEYSHR_LOCK: u16 = 0x0010;
    pub const HEAP_COMBOCID: u16 = 0x0020;
    pub const HEAP_XMAX_EXCL_LOCK: u16 = 0x0040;
    pub const HEAP_XMAX_LOCK_ONLY: u16 = 0x0080;
    pub const HEAP_XMAX_SHR_LOCK: u16 = HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
    pub const HEAP_LOCK_MASK: u16 =
        HEAP_XMAX_SHR_LOCK | HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
    pub const HEAP_XMIN_COMMITTED: u16 = 0x0100;
    pub const HEAP_XMIN_INVALID: u16 = 0x0200;
    pub const HEAP_XMIN_FROZEN: u16 = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID;
    pub const HEAP_XMAX_COMMITTED: u16 = 0x0400;
    pub const HEAP_XMAX_INVALID: u16 = 0x0800;
    pub const HEAP_XMAX_IS_MULTI: u16 = 0x1000;
    pub const HEAP_UPDATED: u16 = 0x2000;
    pub const HEAP_MOVED_OFF: u16 = 0x4000;
    pub const HEAP_MOVED_IN: u16 = 0x8000;
    /// `t_infomask2`.
    pub const HEAP_NATTS_MASK: u16 = 0x07FF;
    pub const HEAP_KEYS_UPDATED: u16 = 0x2000;
    pub const HEAP_HOT_UPDATED: u16 = 0x4000;
    pub const HEAP_ONLY_TUPLE: u16 = 0x8000;

    /// The raw `t_infomask` flag names, in bit order (as contrib pageinspect's
    /// `heap_tuple_infomask_flags` lists them in `raw_flags`).
    pub const INFOMASK_NAMES: [(u16, &str); 16] = [
        (HEAP_HASNULL, "HEAP_HASNULL"),
        (HEAP_HASVARWIDTH, "HEAP_HASVARWIDTH"),
        (HEAP_HASEXTERNAL, "HEAP_HASEXTERNAL"),
        (HEAP_HASOID_OLD, "HEAP_HASOID_OLD"),
        (HEAP_XMAX_KEYSHR_LOCK, "HEAP_XMAX_KEYSHR_LOCK"),
        (HEAP_COMBOCID, "HEAP_COMBOCID"),
        (HEAP_XMAX_EXCL_LOCK, "HEAP_XMAX_EXCL_LOCK"),
        (HEAP_XMAX_LOCK_ONLY, "HEAP_XMAX_LOCK_ONLY"),
        (HEAP_XMIN_COMMITTED, "HEAP_XMIN_COMMITTED"),
        (HEAP_XMIN_INVALID, "HEAP_XMIN_INVALID"),
        (HEAP_XMAX_COMMITTED, "HEAP_XMAX_COMMITTED"),
        (HEAP_XMAX_INVALID, "HEAP_XMAX_INVALID"),
        (HEAP_XMAX_IS_MULTI, "HEAP_XMAX_IS_MULTI"),
        (HEAP_UPDATED, "HEAP_UPDATED"),
        (HEAP_MOVED_OFF, "HEAP_MOVED_OFF"),
        (HEAP_MOVED_IN, "HEAP_MOVED_IN"),
    ];
    /// The `t_infomask2` flag names, in bit order.
    pub const INFOMASK2_NAMES: [(u16, &str); 3] = [
        (HEAP_KEYS_UPDATED, "HEAP_KEYS_UPDATED"),
        (HEAP_HOT_UPDATED, "HEAP_HOT_UPDATED"),
        (HEAP_ONLY_TUPLE, "HEAP_ONLY_TUPLE"),
    ];
}

use infomask::*;

/// The header fields of a heap tuple the visibility rules read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TupleHeader {
    /// `t_xmin` as stored (HeapTupleHeaderGetRawXmin).
    pub raw_xmin: TransactionId,
    /// `t_xmax` as stored (HeapTupleHeaderGetRawXmax): an xid or a MultiXactId.
    pub raw_xmax: TransactionId,
    /// `t_field3`: the raw command id (or combo CID, or old-style xvac).
    pub raw_cid: CommandId,
    /// `t_ctid`: block and offset.
    pub ctid: (u32, u16),
    pub infomask2: u16,
    pub infomask: u16,
    pub hoff: u8,
}

/// `SizeofHeapTupleHeader`: the fixed part of a heap tuple header.
pub const SIZEOF_HEAP_TUPLE_HEADER: usize = 23;

impl TupleHeader {
    /// Reads the fixed header from the first bytes of a tuple (native byte order, as the
    /// server stores it). `None` when fewer than [`SIZEOF_HEAP_TUPLE_HEADER`] bytes.
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < SIZEOF_HEAP_TUPLE_HEADER {
            return None;
        }
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u16_at = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
        Some(TupleHeader {
            raw_xmin: u32_at(0),
            raw_xmax: u32_at(4),
            raw_cid: u32_at(8),
            ctid: (((u16_at(12) as u32) << 16) | u16_at(14) as u32, u16_at(16)),
            infomask2: u16_at(18),
            infomask: u16_at(20),
            hoff: b[22],
        })
    }

    /// A header with only what a what-if needs.
    pub fn with(raw_xmin: TransactionId, raw_xmax: TransactionId, infomask: u16) -> Self {
        TupleHeader {
            raw_xmin,
            raw_xmax,
            infomask,
            ..TupleHeader::default()
        }
    }

    /// Re-runs htup_details.h HeapTupleHeaderXminCommitted.
    pub fn xmin_committed(&self) -> bool {
        self.infomask & HEAP_XMIN_COMMITTED != 0
    }

    /// Re-runs htup_details.h HeapTupleHeaderXminInvalid: the invalid hint alone (a
    /// frozen tuple carries both hints and is not invalid).
    pub fn xmin_invalid(&self) -> bool {
        self.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_INVALID
    }

    /// Re-runs htup_details.h HeapTupleHeaderXminFrozen.
    pub fn xmin_frozen(&self) -> bool {
        self.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN
    }

    /// Re-runs htup_details.h HeapTupleHeaderGetXmin: FrozenTransactionId for a frozen
    /// tuple, the stored xmin otherwise.
    pub fn xmin(&self) -> TransactionId {
        if self.xmin_frozen() {
            FROZEN_TRANSACTION_ID
        } else {
            self.raw_xmin
        }
    }

    /// Re-runs htup_details.h HEAP_XMAX_IS_LOCKED_ONLY on this tuple's infomask.
    pub fn xmax_is_locked_only(&self) -> bool {
        xmax_is_locked_only(self.infomask)
    }

    /// `HEAP_XMAX_IS_MULTI`.
    pub fn xmax_is_multi(&self) -> bool {
        self.infomask & HEAP_XMAX_IS_MULTI != 0
    }

    /// Whether the server would ask for the update xid of a multixact xmax here
    /// (HeapTupleSatisfiesHistoricMVCC does once the xmax is neither invalid nor a
    /// mere lock).
    pub fn has_multi_updater(&self) -> bool {
        self.infomask & HEAP_XMAX_INVALID == 0
            && !self.xmax_is_locked_only()
            && self.xmax_is_multi()
    }

    /// The set flags of `t_infomask` and `t_infomask2` by name.
    pub fn flag_names(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = INFOMASK_NAMES
            .iter()
            .filter(|(bit, _)| self.infomask & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        v.extend(
            INFOMASK2_NAMES
                .iter()
                .filter(|(bit, _)| self.infomask2 & bit != 0)
                .map(|(_, n)| *n),
        );
        v
    }
}

/// Re-runs htup_details.h HEAP_XMAX_IS_LOCKED_ONLY: the xmax only locks the tuple (the
/// lock-only bit, or an exclusive lock that is not a multixact).
pub fn xmax_is_locked_only(mask: u16) -> bool {
    mask & HEAP_XMAX_LOCK_ONLY != 0
        || mask & (HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK) == HEAP_XMAX_EXCL_LOCK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parse_and_flags() {
        let mut b = vec![0u8; 24];
        b[0..4].copy_from_slice(&700u32.to_ne_bytes());
        b[4..8].copy_from_slice(&701u32.to_ne_bytes());
        b[8..12].copy_from_slice(&3u32.to_ne_bytes());
        b[12..14].copy_from_slice(&1u16.to_ne_bytes());
        b[14..16].copy_from_slice(&2u16.to_ne_bytes());
        b[16..18].copy_from_slice(&5u16.to_ne_bytes());
        b[18..20].copy_from_slice(&(HEAP_HOT_UPDATED | 4).to_ne_bytes());
        b[20..22].copy_from_slice(&(HEAP_XMIN_COMMITTED | HEAP_COMBOCID).to_ne_bytes());
        b[22] = 24;
        let t = TupleHeader::parse(&b).unwrap();
        assert_eq!(
            (t.raw_xmin, t.raw_xmax, t.raw_cid, t.ctid, t.hoff),
            (700, 701, 3, (65538, 5), 24)
        );
        assert_eq!(
            t.flag_names(),
            vec!["HEAP_COMBOCID", "HEAP_XMIN_COMMITTED", "HEAP_HOT_UPDATED"]
        );
        assert!(TupleHeader::parse(&b[..22]).is_none());
    }
}
