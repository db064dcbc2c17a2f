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

impl<'de> serde::Deserialize<'de> for Lsn {
    /// From `pg_lsn` text (`%X/%X`), as [`Lsn`]'s Serialize writes it.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let bad = || serde::de::Error::custom(format!("invalid LSN \"{text}\""));
        let (hi, lo) = text.split_once('/').ok_or_else(bad)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| bad())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| bad())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
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

/// The segment-number part of a WAL file name (xlog_internal.h XLogFileName without the
/// timeline): the 16 hex digits after the 8 of the timeline, for the segment holding
/// `lsn` with segments of `seg_size` bytes (a power of two, 1 MB to 1 GB).
pub fn xlog_file_name_segment(lsn: Lsn, seg_size: u64) -> String {
    let seg_size = seg_size.max(1);
    let segno = lsn.0 / seg_size;
    let per_id = (0x1_0000_0000u64 / seg_size).max(1);
    format!("{:08X}{:08X}", segno / per_id, segno % per_id)
}

impl fmt::Display for Lsn {
    /// `%X/%X`, the way PostgreSQL up to 18 prints LSNs in messages and `pg_lsn`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.hi(), self.lo())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_file_names() {
        // 16 MB segments: 0/3000028 is in segment 3; 1/A000000 in 0x10A (256 per id).
        assert_eq!(
            xlog_file_name_segment(Lsn(0x3000028), 16 << 20),
            "0000000000000003"
        );
        assert_eq!(
            xlog_file_name_segment(Lsn(0x1_0A00_0000), 16 << 20),
            "000000010000000A"
        );
        // 1 GB segments: four per id.
        assert_eq!(
            xlog_file_name_segment(Lsn(0x2_C000_0000), 1 << 30),
            "0000000200000003"
        );
    }
}
