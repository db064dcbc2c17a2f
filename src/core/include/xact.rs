//! access/xact.h: the XACT rmgr's operation mask (the record types themselves are
//! classified in `replication::decode`, as decode.c's xact_decode switches on them).

/// `XLOG_XACT_OPMASK`.
pub const XLOG_XACT_OPMASK: u8 = 0x70;
