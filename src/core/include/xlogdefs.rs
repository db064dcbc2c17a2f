//! Write-ahead-log positions (`XLogRecPtr`) and the `.snap` file naming.

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

/// The file name the server gives the snapshot serialized at `lsn`: `%X-%X.snap`
/// (snapbuild.c SnapBuildSerialize).
pub fn snap_file_name(lsn: Lsn) -> String {
    format!("{:X}-{:X}.snap", lsn.hi(), lsn.lo())
}

/// Parses a `.snap` file name strictly, the way contrib pg_logicalinspect's
/// `parse_snapshot_filename` does: two upper-case hex numbers without leading
/// zeros or a path, formatted back to exactly the same text. `None` otherwise.
pub fn parse_snap_file_name(name: &str) -> Option<Lsn> {
    let stem = name.strip_suffix(".snap")?;
    let (hi, lo) = stem.split_once('-')?;
    let ok = |s: &str| !s.is_empty() && s.len() <= 8 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !ok(hi) || !ok(lo) {
        return None;
    }
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    let lsn = Lsn(((hi as u64) << 32) | lo as u64);
    (snap_file_name(lsn) == name).then_some(lsn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_server() {
        assert_eq!(Lsn(0x174C180).to_string(), "0/174C180");
        assert_eq!(Lsn(0x1_0000_00A0).to_string(), "1/A0");
        assert_eq!(snap_file_name(Lsn(0x174C2C8)), "0-174C2C8.snap");
    }

    #[test]
    fn parses_strictly() {
        assert_eq!(parse_snap_file_name("0-174C2C8.snap"), Some(Lsn(0x174C2C8)));
        assert_eq!(parse_snap_file_name("1-A0.snap"), Some(Lsn(0x1_0000_00A0)));
        for bad in [
            "0-174c2c8.snap",
            "00-174C2C8.snap",
            "0-174C2C8",
            "../0-1.snap",
            "0-1.snap.tmp",
            "0-.snap",
            "-1.snap",
            "0-123456789.snap",
            "0-1-2.snap",
            "x-1.snap",
        ] {
            assert_eq!(parse_snap_file_name(bad), None, "{bad}");
        }
    }
}
