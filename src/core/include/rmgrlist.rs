//! Resource manager ids of access/rmgrlist.h (the `RM_*_ID` values of rmgr.h's enum)
//! for the rmgrs whose records decode.c looks at, and those whose redo can invalidate a
//! logical slot on a standby.

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
/// `RM_BTREE_ID`.
pub const RM_BTREE_ID: u8 = 11;
/// `RM_HASH_ID`.
pub const RM_HASH_ID: u8 = 12;
/// `RM_GIST_ID`.
pub const RM_GIST_ID: u8 = 14;
/// `RM_SPGIST_ID`.
pub const RM_SPGIST_ID: u8 = 16;
