//! The `pg_logical/snapshots/*.snap` file: `SnapBuildOnDisk` (snapbuild_internal.h from
//! 18, snapbuild.c before) and the serialized `SnapBuild`, for every on-disk
//! `SNAPBUILD_VERSION`, written and read as snapbuild.c SnapBuildSerialize and
//! SnapBuildRestoreSnapshot do, and the files' names.
//!
//! Layouts are those of a 64-bit little-endian server (x86_64, aarch64): the file is a
//! raw copy of the C structs, pointers nulled. All offsets below are bytes from the
//! start of the serialized builder, which itself starts 16 bytes into the file.
//!
//! | field                         | v4 (≤15) | v5 (16)    | v6 (17+) |
//! |-------------------------------|----------|------------|----------|
//! | state (int)                   | 0        | 0          | 0       |
//! | xmin, xmax                    | 16, 20   | 16, 20     | 16, 20  |
//! | start_decoding_at             | 24       | 24         | 24      |
//! | two_phase_at                  | 32       | 32         | 32      |
//! | initial_xmin_horizon          | 40       | 40         | 40      |
//! | building_full_snapshot        | 44       | 44         | 44      |
//! | in_slot_creation              | —        | —          | 45      |
//! | last_serialized_snapshot      | 56       | 56         | 56      |
//! | next_phase_at                 | 72       | 72         | 72      |
//! | committed.xcnt / xcnt_space   | 80, 88   | 80, 88     | 80, 88  |
//! | committed.includes_all_…      | 96       | 96         | 96      |
//! | catchange.xcnt                | —        | 112        | 112     |
//! | sizeof(SnapBuild)             | 112      | 128        | 128     |
//!
//! Reading follows snapbuild.c SnapBuildRestoreSnapshot step by step, so a broken file
//! fails with the same defect, in the same order, as on the server.

use crate::include::snapbuild::SnapBuildState;
use crate::include::transam::TransactionId;
use crate::include::xlogdefs::Lsn;

/// `SNAPBUILD_MAGIC`.
pub const SNAPBUILD_MAGIC: u32 = 0x51A1_E001;
/// `offsetof(SnapBuildOnDisk, builder)`: magic, checksum, version, length.
pub const CONSTANT_SIZE: usize = 16;
/// `offsetof(SnapBuildOnDisk, version)`: the bytes not covered by the checksum.
pub const NOT_CHECKSUMMED_SIZE: usize = 8;

/// `sizeof(SnapBuild)` for an on-disk version, or `None` if we do not know it.
pub fn builder_size(version: u32) -> Option<usize> {
    match version {
        4 => Some(112),
        5 | 6 => Some(128),
        _ => None,
    }
}

/// The serialized `SnapBuild` as it sits in a file. Memory-only pointers are not kept.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OnDiskBuilder {
    /// Raw `SnapBuildState` (-1 start, 0 building, 1 full, 2 consistent).
    pub state: i32,
    pub xmin: TransactionId,
    pub xmax: TransactionId,
    pub start_decoding_at: Lsn,
    pub two_phase_at: Lsn,
    pub initial_xmin_horizon: TransactionId,
    pub building_full_snapshot: bool,
    /// Only in version 6 (PostgreSQL 17 and later).
    pub in_slot_creation: Option<bool>,
    pub last_serialized_snapshot: Lsn,
    pub next_phase_at: TransactionId,
    /// `committed.xcnt` as stored (a `size_t`).
    pub committed_xcnt: u64,
    /// `committed.xcnt_space`: allocation size of the writer's array (writer-dependent).
    pub committed_xcnt_space: u64,
    pub includes_all_transactions: bool,
    /// `catchange.xcnt`; only from version 5.
    pub catchange_xcnt: Option<u64>,
}

impl OnDiskBuilder {
    /// The state as an enum, if the raw number is one the server defines.
    pub fn state_enum(&self) -> Option<SnapBuildState> {
        SnapBuildState::from_raw(self.state)
    }
}

/// A whole `.snap` file (`SnapBuildOnDisk` plus the xid arrays that follow it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapBuildOnDisk {
    pub magic: u32,
    /// CRC-32C stored in the file.
    pub checksum: u32,
    pub version: u32,
    /// `length` as written (the server stores the whole file size here).
    pub length: u32,
    pub builder: OnDiskBuilder,
    /// Committed catalog-modifying xids, in the writer's (unsorted) order.
    pub committed_xip: Vec<TransactionId>,
    /// Catalog-modifying xids still running, sorted (empty before version 5).
    pub catchange_xip: Vec<TransactionId>,
}

/// A defect found while reading a `.snap` file; each maps to the server's own ERROR.
/// All are SQLSTATE `data_corrupted` (XX001).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OnDiskError {
    /// A read came up short: `read N of M` (the server reads the constant part, the
    /// builder, the committed xids and the catchange xids in turn).
    ShortRead { read: usize, wanted: usize },
    /// `magic` is not `SNAPBUILD_MAGIC`.
    WrongMagic { found: u32 },
    /// `version` is not the one the running server writes.
    UnsupportedVersion { found: u32, expected: u32 },
    /// A version this code has no layout for.
    UnknownLayout { version: u32 },
    /// Stored and computed CRC-32C differ.
    ChecksumMismatch { computed: u32, stored: u32 },
    /// A count whose array (`4 × count` bytes, wrapping as the server's `size_t` does)
    /// exceeds MaxAllocSize: the server's palloc fails before it reads the array.
    AllocTooLarge { size: u64 },
}

/// mcxt.c's MaxAllocSize (1 GB - 1).
pub const MAX_ALLOC_SIZE: u64 = 0x3fff_ffff;

impl OnDiskError {
    /// The server's message text for this defect, naming `path`.
    pub fn message(&self, path: &str) -> String {
        match self {
            OnDiskError::ShortRead { read, wanted } => {
                format!("could not read file \"{path}\": read {read} of {wanted}")
            }
            OnDiskError::WrongMagic { found } => format!(
                "snapbuild state file \"{path}\" has wrong magic number: {found} instead of {SNAPBUILD_MAGIC}"
            ),
            OnDiskError::UnsupportedVersion { found, expected } => format!(
                "snapbuild state file \"{path}\" has unsupported version: {found} instead of {expected}"
            ),
            OnDiskError::UnknownLayout { version } => {
                format!("snapbuild state file \"{path}\" has version {version}, whose layout is unknown")
            }
            OnDiskError::ChecksumMismatch { computed, stored } => format!(
                "checksum mismatch for snapbuild state file \"{path}\": is {computed}, should be {stored}"
            ),
            OnDiskError::AllocTooLarge { size } => format!("invalid memory alloc request size {size}"),
        }
    }

    /// Whether the server reports this as an internal error (palloc's elog, SQLSTATE
    /// XX000) rather than `data_corrupted` (XX001).
    pub fn is_internal_error(&self) -> bool {
        matches!(self, OnDiskError::AllocTooLarge { .. })
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

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Takes `n` bytes, or reports how many there were, like the server's read().
    fn take(&mut self, n: usize) -> Result<&'a [u8], OnDiskError> {
        let avail = self.data.len() - self.pos;
        if avail < n {
            self.pos = self.data.len();
            return Err(OnDiskError::ShortRead {
                read: avail,
                wanted: n,
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

fn xids_from(b: &[u8]) -> Vec<TransactionId> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl SnapBuildOnDisk {
    /// Re-runs snapbuild.c SnapBuildRestoreSnapshot on the bytes of a file: constant
    /// part, magic, version (must equal `expected_version`, the running server's
    /// `SNAPBUILD_VERSION`), builder, committed xids, catchange xids, checksum — in that
    /// order. Trailing bytes are ignored, as the server ignores them.
    ///
    /// Errors: [`OnDiskError`], all `data_corrupted`.
    pub fn decode(data: &[u8], expected_version: u32) -> Result<Self, OnDiskError> {
        let mut cur = Cursor { data, pos: 0 };
        let head = cur.take(CONSTANT_SIZE)?;
        let magic = u32_at(head, 0);
        let checksum = u32_at(head, 4);
        let version = u32_at(head, 8);
        let length = u32_at(head, 12);
        if magic != SNAPBUILD_MAGIC {
            return Err(OnDiskError::WrongMagic { found: magic });
        }
        if version != expected_version {
            return Err(OnDiskError::UnsupportedVersion {
                found: version,
                expected: expected_version,
            });
        }
        let size = builder_size(version).ok_or(OnDiskError::UnknownLayout { version })?;
        let b = cur.take(size)?;
        let builder = OnDiskBuilder {
            state: u32_at(b, 0) as i32,
            xmin: u32_at(b, 16),
            xmax: u32_at(b, 20),
            start_decoding_at: Lsn(u64_at(b, 24)),
            two_phase_at: Lsn(u64_at(b, 32)),
            initial_xmin_horizon: u32_at(b, 40),
            building_full_snapshot: b[44] != 0,
            in_slot_creation: (version >= 6).then(|| b[45] != 0),
            last_serialized_snapshot: Lsn(u64_at(b, 56)),
            next_phase_at: u32_at(b, 72),
            committed_xcnt: u64_at(b, 80),
            committed_xcnt_space: u64_at(b, 88),
            includes_all_transactions: b[96] != 0,
            catchange_xcnt: (version >= 5).then(|| u64_at(b, 112)),
        };
        // MemoryContextAllocZero(sizeof(TransactionId) * xcnt) before each array is read.
        let arr_bytes = |n: u64| -> Result<usize, OnDiskError> {
            let size = n.wrapping_mul(4);
            if size > MAX_ALLOC_SIZE {
                return Err(OnDiskError::AllocTooLarge { size });
            }
            Ok(size as usize)
        };
        let mut committed_xip = Vec::new();
        if builder.committed_xcnt > 0 {
            committed_xip = xids_from(cur.take(arr_bytes(builder.committed_xcnt)?)?);
        }
        let mut catchange_xip = Vec::new();
        if let Some(n) = builder.catchange_xcnt.filter(|n| *n > 0) {
            catchange_xip = xids_from(cur.take(arr_bytes(n)?)?);
        }
        let computed = crc32c::crc32c(&data[NOT_CHECKSUMMED_SIZE..cur.pos]);
        if computed != checksum {
            return Err(OnDiskError::ChecksumMismatch {
                computed,
                stored: checksum,
            });
        }
        Ok(SnapBuildOnDisk {
            magic,
            checksum,
            version,
            length,
            builder,
            committed_xip,
            catchange_xip,
        })
    }

    /// Re-runs the byte layout of snapbuild.c SnapBuildSerialize: the exact bytes the
    /// server writes for this content (pointers and padding zero, `length` the whole
    /// size, CRC-32C over everything after the checksum). `version` picks the layout.
    ///
    /// Panics never; returns `None` for a version without a known layout.
    pub fn encode(&self) -> Option<Vec<u8>> {
        let size = builder_size(self.version)?;
        let total =
            CONSTANT_SIZE + size + 4 * (self.committed_xip.len() + self.catchange_xip.len());
        let mut out = vec![0u8; total];
        out[0..4].copy_from_slice(&SNAPBUILD_MAGIC.to_le_bytes());
        out[8..12].copy_from_slice(&self.version.to_le_bytes());
        out[12..16].copy_from_slice(&(total as u32).to_le_bytes());
        let b = &mut out[CONSTANT_SIZE..CONSTANT_SIZE + size];
        let bd = &self.builder;
        b[0..4].copy_from_slice(&bd.state.to_le_bytes());
        b[16..20].copy_from_slice(&bd.xmin.to_le_bytes());
        b[20..24].copy_from_slice(&bd.xmax.to_le_bytes());
        b[24..32].copy_from_slice(&bd.start_decoding_at.0.to_le_bytes());
        b[32..40].copy_from_slice(&bd.two_phase_at.0.to_le_bytes());
        b[40..44].copy_from_slice(&bd.initial_xmin_horizon.to_le_bytes());
        b[44] = bd.building_full_snapshot as u8;
        if self.version >= 6 {
            b[45] = bd.in_slot_creation.unwrap_or(false) as u8;
        }
        b[56..64].copy_from_slice(&bd.last_serialized_snapshot.0.to_le_bytes());
        b[72..76].copy_from_slice(&bd.next_phase_at.to_le_bytes());
        b[80..88].copy_from_slice(&(self.committed_xip.len() as u64).to_le_bytes());
        b[88..96].copy_from_slice(&bd.committed_xcnt_space.to_le_bytes());
        b[96] = bd.includes_all_transactions as u8;
        if self.version >= 5 {
            b[112..120].copy_from_slice(&(self.catchange_xip.len() as u64).to_le_bytes());
        }
        let mut off = CONSTANT_SIZE + size;
        for x in self.committed_xip.iter().chain(self.catchange_xip.iter()) {
            out[off..off + 4].copy_from_slice(&x.to_le_bytes());
            off += 4;
        }
        let crc = crc32c::crc32c(&out[NOT_CHECKSUMMED_SIZE..]);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(version: u32) -> SnapBuildOnDisk {
        SnapBuildOnDisk {
            magic: SNAPBUILD_MAGIC,
            checksum: 0,
            version,
            length: 0,
            builder: OnDiskBuilder {
                state: 2,
                xmin: 757,
                xmax: 757,
                start_decoding_at: Lsn(0x174C2C9),
                two_phase_at: Lsn(0),
                initial_xmin_horizon: 0,
                building_full_snapshot: false,
                in_slot_creation: (version >= 6).then_some(false),
                last_serialized_snapshot: Lsn(0),
                next_phase_at: 0,
                committed_xcnt: 2,
                committed_xcnt_space: 128,
                includes_all_transactions: true,
                catchange_xcnt: (version >= 5).then_some(1),
            },
            committed_xip: vec![760, 758],
            catchange_xip: if version >= 5 { vec![761] } else { vec![] },
        }
    }

    #[test]
    fn roundtrip_every_version() {
        for v in [4, 5, 6] {
            let s = sample(v);
            let bytes = s.encode().unwrap();
            let d = SnapBuildOnDisk::decode(&bytes, v).unwrap();
            assert_eq!(d.builder, s.builder);
            assert_eq!(d.committed_xip, s.committed_xip);
            assert_eq!(d.catchange_xip, s.catchange_xip);
            assert_eq!(d.length as usize, bytes.len());
            assert_eq!(d.encode().unwrap(), bytes);
        }
        // A v4 file with no committed xids is 128 bytes, as PostgreSQL 15 writes it.
        let mut s = sample(4);
        s.committed_xip.clear();
        assert_eq!(s.encode().unwrap().len(), 128);
    }

    #[test]
    fn defects_in_server_order() {
        let good = sample(6).encode().unwrap();
        assert_eq!(
            SnapBuildOnDisk::decode(&good[..10], 6),
            Err(OnDiskError::ShortRead {
                read: 10,
                wanted: 16
            })
        );
        let mut magic = good.clone();
        magic[0] ^= 1;
        assert!(matches!(
            SnapBuildOnDisk::decode(&magic, 6),
            Err(OnDiskError::WrongMagic { .. })
        ));
        assert_eq!(
            SnapBuildOnDisk::decode(&good, 5),
            Err(OnDiskError::UnsupportedVersion {
                found: 6,
                expected: 5
            })
        );
        assert_eq!(
            SnapBuildOnDisk::decode(&good[..100], 6),
            Err(OnDiskError::ShortRead {
                read: 84,
                wanted: 128
            })
        );
        assert_eq!(
            SnapBuildOnDisk::decode(&good[..good.len() - 2], 6),
            Err(OnDiskError::ShortRead { read: 2, wanted: 4 })
        );
        let mut flip = good.clone();
        flip[16 + 16] ^= 0x10; // xmin
        assert!(matches!(
            SnapBuildOnDisk::decode(&flip, 6),
            Err(OnDiskError::ChecksumMismatch { .. })
        ));
        // A count whose array the server cannot palloc: its error, before any read.
        let mut huge = good.clone();
        huge[16 + 80..16 + 88].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = SnapBuildOnDisk::decode(&huge, 6).unwrap_err();
        assert_eq!(
            e,
            OnDiskError::AllocTooLarge {
                size: u64::MAX.wrapping_mul(4)
            }
        );
        assert_eq!(
            e.message("x"),
            "invalid memory alloc request size 18446744073709551612"
        );
        assert!(e.is_internal_error());
        let mut over = good.clone();
        over[16 + 80..16 + 88].copy_from_slice(&(MAX_ALLOC_SIZE / 4 + 1).to_le_bytes());
        assert_eq!(
            SnapBuildOnDisk::decode(&over, 6),
            Err(OnDiskError::AllocTooLarge { size: 0x4000_0000 })
        );
        // Within MaxAllocSize but longer than the file: a short read.
        let mut long = good;
        long[16 + 80..16 + 88].copy_from_slice(&(MAX_ALLOC_SIZE / 4).to_le_bytes());
        assert!(matches!(
            SnapBuildOnDisk::decode(&long, 6),
            Err(OnDiskError::ShortRead { .. })
        ));
    }

    #[test]
    fn messages_match_server_text() {
        let p = "pg_logical/snapshots/0-1.snap";
        assert_eq!(
            OnDiskError::ChecksumMismatch { computed: 1, stored: 2 }.message(p),
            "checksum mismatch for snapbuild state file \"pg_logical/snapshots/0-1.snap\": is 1, should be 2"
        );
        assert_eq!(
            OnDiskError::WrongMagic { found: 7 }.message(p),
            "snapbuild state file \"pg_logical/snapshots/0-1.snap\" has wrong magic number: 7 instead of 1369563137"
        );
    }

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
