//! access/xlogdefs.h: write-ahead-log positions (`XLogRecPtr`).

use core::fmt;

/// A PostgreSQL `XLogRecPtr`: a byte position in the WAL stream; 0 is invalid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl serde::Serialize for Lsn {
    /// As `pg_lsn` text (`%X/%X`), the form tools and psql use.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `InvalidXLogRecPtr`.
pub const INVALID_LSN: Lsn = Lsn(0);

impl Lsn {
    /// `XLogRecPtrIsInvalid` negated.
    pub fn is_valid(self) -> bool {
        self.0 != 0
    }
    /// High 32 bits, as `LSN_FORMAT_ARGS` prints first.
    pub fn hi(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// Low 32 bits.
    pub fn lo(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Display for Lsn {
    /// `%X/%X`, the way PostgreSQL up to 18 prints LSNs in messages and `pg_lsn`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.hi(), self.lo())
    }
}
