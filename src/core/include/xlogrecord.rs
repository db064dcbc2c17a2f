//! access/xlogrecord.h: the bits of `xl_info` the WAL machinery keeps for itself.

/// `XLR_INFO_MASK`: low bits of xl_info reserved for the WAL machinery.
pub const XLR_INFO_MASK: u8 = 0x0F;
