//! rmgrdesc/xactdesc.c: ParseCommitRecord, ParseAbortRecord and ParsePrepareRecord, with
//! every length checked against the record's data.
//!
//! The server trusts a CRC-valid record's own counts. These parsers take the main data
//! of a commit, abort or prepare record as untrusted bytes: a count that points past the
//! data is an error, never an out-of-bounds read or an allocation larger than the data.
//! Layouts by major: `xl_xact_stats_item` is 12 bytes on 15–17 and 16 on 18 (64-bit
//! object ids), and absent on 14, as is `xl_xact_prepare`'s pair of stats counts.

use crate::include::transam::TransactionId;
use crate::include::version::PgVersion;

/// `XLOG_XACT_HAS_INFO`: an `xl_xact_xinfo` follows the fixed part.
pub const XLOG_XACT_HAS_INFO: u8 = 0x80;
pub const XACT_XINFO_HAS_DBINFO: u32 = 1 << 0;
pub const XACT_XINFO_HAS_SUBXACTS: u32 = 1 << 1;
pub const XACT_XINFO_HAS_RELFILELOCATORS: u32 = 1 << 2;
pub const XACT_XINFO_HAS_INVALS: u32 = 1 << 3;
pub const XACT_XINFO_HAS_TWOPHASE: u32 = 1 << 4;
pub const XACT_XINFO_HAS_ORIGIN: u32 = 1 << 5;
pub const XACT_XINFO_HAS_GID: u32 = 1 << 7;
pub const XACT_XINFO_HAS_DROPPED_STATS: u32 = 1 << 8;
/// `GIDSIZE`: the longest gid plus its terminator.
pub const GIDSIZE: usize = 200;

/// What the replay needs of a commit, abort or prepare record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedXact {
    /// `xinfo` (0 without XLOG_XACT_HAS_INFO; for PREPARE, HAS_INVALS when it has any).
    pub xinfo: u32,
    /// The database (0 when the record has none).
    pub db_id: u32,
    pub subxacts: Vec<TransactionId>,
    /// The prepared transaction's xid (COMMIT/ABORT PREPARED, PREPARE), else 0.
    pub twophase_xid: TransactionId,
    /// The gid (empty when the record has none), cut like strlcpy into GIDSIZE.
    pub gid: String,
    /// Bytes of the main data the parts cover (a commit or abort record has no more).
    pub parsed_len: usize,
}

impl ParsedXact {
    /// `XACT_XINFO_HAS_INVALS`.
    pub fn has_invals(&self) -> bool {
        self.xinfo & XACT_XINFO_HAS_INVALS != 0
    }
}

/// Why a record's main data is not a well-formed commit, abort or prepare record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XactRecordError {
    /// The part named needs `need` bytes at offset `at`, and the data has `len`.
    Short {
        what: &'static str,
        at: usize,
        need: usize,
        len: usize,
    },
    /// A count is negative.
    NegativeCount { what: &'static str, count: i32 },
}

impl core::fmt::Display for XactRecordError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            XactRecordError::Short {
                what,
                at,
                need,
                len,
            } => write!(
                f,
                "{what} needs {need} bytes at offset {at} but the record has {len}"
            ),
            XactRecordError::NegativeCount { what, count } => write!(f, "{what} count is {count}"),
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], XactRecordError> {
        let short = XactRecordError::Short {
            what,
            at: self.pos,
            need: n,
            len: self.data.len(),
        };
        let end = self.pos.checked_add(n).ok_or(short.clone())?;
        let s = self.data.get(self.pos..end).ok_or(short)?;
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, XactRecordError> {
        let b = self.take(what, 4)?;
        Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn count(&mut self, what: &'static str) -> Result<usize, XactRecordError> {
        let n = self.u32(what)? as i32;
        usize::try_from(n).map_err(|_| XactRecordError::NegativeCount { what, count: n })
    }
    /// `n` items of `size` bytes, checked before anything is allocated.
    fn array(
        &mut self,
        what: &'static str,
        n: usize,
        size: usize,
    ) -> Result<&'a [u8], XactRecordError> {
        let bytes = n.checked_mul(size).ok_or(XactRecordError::Short {
            what,
            at: self.pos,
            need: usize::MAX,
            len: self.data.len(),
        })?;
        self.take(what, bytes)
    }
}

fn xids(b: &[u8]) -> Vec<TransactionId> {
    b.chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A NUL-terminated gid at the start of `b` (strlcpy into GIDSIZE: at most 199 bytes
/// kept); `None` when no NUL is there.
fn c_string(b: &[u8]) -> Option<(String, usize)> {
    let n = b.iter().position(|c| *c == 0)?;
    let kept = &b[..n.min(GIDSIZE - 1)];
    Some((String::from_utf8_lossy(kept).into_owned(), n + 1))
}

/// `sizeof(xl_xact_stats_item)` on `major` (none before 15).
fn stats_item_size(version: PgVersion) -> usize {
    if version.major >= 18 {
        16
    } else {
        12
    }
}

/// Re-runs xactdesc.c ParseCommitRecord / ParseAbortRecord (they share a layout) on a
/// record's `info` byte and main data, with bounds checks.
///
/// Errors: [`XactRecordError`] when a part lies past the data or a count is negative.
pub fn parse_commit_or_abort(
    version: PgVersion,
    info: u8,
    data: &[u8],
) -> Result<ParsedXact, XactRecordError> {
    let mut r = Reader { data, pos: 0 };
    r.take("xact_time", 8)?;
    let mut p = ParsedXact::default();
    if info & XLOG_XACT_HAS_INFO != 0 {
        p.xinfo = r.u32("xinfo")?;
    }
    if p.xinfo & XACT_XINFO_HAS_DBINFO != 0 {
        p.db_id = r.u32("dbinfo")?;
        r.u32("dbinfo")?;
    }
    if p.xinfo & XACT_XINFO_HAS_SUBXACTS != 0 {
        let n = r.count("subxacts")?;
        p.subxacts = xids(r.array("subxacts", n, 4)?);
    }
    if p.xinfo & XACT_XINFO_HAS_RELFILELOCATORS != 0 {
        let n = r.count("relfilelocators")?;
        r.array("relfilelocators", n, 12)?;
    }
    if p.xinfo & XACT_XINFO_HAS_DROPPED_STATS != 0 && version.major >= 15 {
        let n = r.count("dropped stats")?;
        r.array("dropped stats", n, stats_item_size(version))?;
    }
    if p.xinfo & XACT_XINFO_HAS_INVALS != 0 {
        let n = r.count("invalidations")?;
        r.array("invalidations", n, 16)?;
    }
    if p.xinfo & XACT_XINFO_HAS_TWOPHASE != 0 {
        p.twophase_xid = r.u32("twophase xid")?;
        if p.xinfo & XACT_XINFO_HAS_GID != 0 {
            let rest = &data[r.pos..];
            let (gid, used) = c_string(rest).ok_or(XactRecordError::Short {
                what: "gid",
                at: r.pos,
                need: rest.len() + 1,
                len: data.len(),
            })?;
            p.gid = gid;
            r.pos += used;
        }
    }
    if p.xinfo & XACT_XINFO_HAS_ORIGIN != 0 {
        r.take("origin", 16)?;
    }
    p.parsed_len = r.pos;
    Ok(p)
}

/// MAXALIGN (8 on the 64-bit platforms the server binaries are built for).
fn maxalign(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Re-runs xactdesc.c ParsePrepareRecord on a PREPARE record's main data
/// (`xl_xact_prepare`, then MAXALIGNed gid and subxact array), with bounds checks.
///
/// Errors: [`XactRecordError`] when the header, gid or subxacts lie past the data or a
/// count is negative.
pub fn parse_prepare(version: PgVersion, data: &[u8]) -> Result<ParsedXact, XactRecordError> {
    // Offsets in xl_xact_prepare: magic 0, total_len 4, xid 8, database 12, prepared_at 16,
    // owner 24, nsubxacts 28, ncommitrels 32, nabortrels 36, then (15+) ncommitstats 40,
    // nabortstats 44; ninvalmsgs, initfileinval, gidlen (uint16), origin_lsn and
    // origin_timestamp follow.
    let (ninval_at, gidlen_at, size) = if version.major >= 15 {
        (48, 54, 72)
    } else {
        (40, 46, 64)
    };
    let mut r = Reader { data, pos: 0 };
    let head = r.take("xl_xact_prepare", size)?;
    let u32_at = |o: usize| u32::from_ne_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]);
    let nsub = u32_at(28) as i32;
    let nsub = usize::try_from(nsub).map_err(|_| XactRecordError::NegativeCount {
        what: "subxacts",
        count: nsub,
    })?;
    let gidlen = u16::from_ne_bytes([head[gidlen_at], head[gidlen_at + 1]]) as usize;
    let mut p = ParsedXact {
        xinfo: if u32_at(ninval_at) as i32 > 0 {
            XACT_XINFO_HAS_INVALS
        } else {
            0
        },
        db_id: u32_at(12),
        twophase_xid: u32_at(8),
        ..ParsedXact::default()
    };
    r.pos = maxalign(size);
    let gid = r.take("gid", maxalign(gidlen))?;
    // strncpy(gid, buf, gidlen): the gid ends at its NUL or after gidlen bytes.
    let g = &gid[..gidlen];
    let end = g
        .iter()
        .position(|c| *c == 0)
        .unwrap_or(g.len())
        .min(GIDSIZE - 1);
    p.gid = String::from_utf8_lossy(&g[..end]).into_owned();
    p.subxacts = xids(r.array("subxacts", nsub, 4)?);
    p.parsed_len = r.pos;
    Ok(p)
}

/// `sizeof(SharedInvalidationMessage)` (storage/sinval.h): a union of 16 bytes.
pub const SIZE_OF_SHARED_INVALIDATION_MESSAGE: usize = 16;

/// The main data of an `XLOG_XACT_ASSIGNMENT` record (`xl_xact_assignment`): a
/// top-level xid and the subtransactions assigned to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedAssignment {
    pub xtop: TransactionId,
    pub xsub: Vec<TransactionId>,
}

/// Reads an ASSIGNMENT record's main data the way xactdesc.c xact_desc_assignment does
/// (`xtop`, `nsubxacts`, then `xsub[nsubxacts]`), with the count checked against the
/// data before anything is allocated.
///
/// Errors: [`XactRecordError`] when the header or the array lies past the data or the
/// count is negative.
pub fn parse_assignment(data: &[u8]) -> Result<ParsedAssignment, XactRecordError> {
    let mut r = Reader { data, pos: 0 };
    let xtop = r.u32("xtop")?;
    let n = r.count("subxacts")?;
    Ok(ParsedAssignment {
        xtop,
        xsub: xids(r.array("subxacts", n, 4)?),
    })
}

/// Reads an `XLOG_XACT_INVALIDATIONS` record's main data (`xl_xact_invals`: `nmsgs`,
/// then `msgs[nmsgs]`) the way xactdesc.c xact_desc_invalidations does, with the count
/// checked against the data: the messages' bytes (16 each), borrowed, nothing allocated.
///
/// Errors: [`XactRecordError`] when the array lies past the data or the count is
/// negative.
pub fn parse_invalidations(data: &[u8]) -> Result<&[u8], XactRecordError> {
    let mut r = Reader { data, pos: 0 };
    let n = r.count("invalidations")?;
    r.array("invalidations", n, SIZE_OF_SHARED_INVALIDATION_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit_bytes(xinfo: u32, parts: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![0u8; 8];
        v.extend_from_slice(&xinfo.to_ne_bytes());
        for p in parts {
            v.extend_from_slice(p);
        }
        v
    }
    fn n(x: i32) -> [u8; 4] {
        x.to_ne_bytes()
    }

    #[test]
    fn commit_with_every_part() {
        let xinfo = XACT_XINFO_HAS_DBINFO
            | XACT_XINFO_HAS_SUBXACTS
            | XACT_XINFO_HAS_RELFILELOCATORS
            | XACT_XINFO_HAS_DROPPED_STATS
            | XACT_XINFO_HAS_INVALS
            | XACT_XINFO_HAS_TWOPHASE
            | XACT_XINFO_HAS_GID
            | XACT_XINFO_HAS_ORIGIN;
        for (major, stat) in [(15u32, 12usize), (18, 16)] {
            let data = commit_bytes(
                xinfo,
                &[
                    &5u32.to_ne_bytes(),
                    &1663u32.to_ne_bytes(),
                    &n(2),
                    &700u32.to_ne_bytes(),
                    &701u32.to_ne_bytes(),
                    &n(1),
                    &[0u8; 12],
                    &n(1),
                    &vec![0u8; stat],
                    &n(2),
                    &[0u8; 32],
                    &699u32.to_ne_bytes(),
                    b"g1\0",
                    &[0u8; 16],
                ],
            );
            let p =
                parse_commit_or_abort(PgVersion::newest(major), XLOG_XACT_HAS_INFO, &data).unwrap();
            assert_eq!(p.db_id, 5);
            assert_eq!(p.subxacts, vec![700, 701]);
            assert_eq!(p.parsed_len, data.len());
            assert!(p.has_invals());
            assert_eq!((p.twophase_xid, p.gid.as_str()), (699, "g1"));
            // One byte less anywhere: an error, never a read past the end.
            for cut in 0..data.len() {
                assert!(parse_commit_or_abort(
                    PgVersion::newest(major),
                    XLOG_XACT_HAS_INFO,
                    &data[..cut]
                )
                .is_err());
            }
        }
        // No xinfo: only the timestamp.
        assert_eq!(
            parse_commit_or_abort(PgVersion::newest(18), 0, &[0u8; 8]).unwrap(),
            ParsedXact {
                parsed_len: 8,
                ..ParsedXact::default()
            }
        );
    }

    #[test]
    fn hostile_counts_are_errors() {
        let huge = commit_bytes(XACT_XINFO_HAS_SUBXACTS, &[&n(i32::MAX)]);
        assert!(matches!(
            parse_commit_or_abort(PgVersion::newest(18), XLOG_XACT_HAS_INFO, &huge),
            Err(XactRecordError::Short {
                what: "subxacts",
                ..
            })
        ));
        let neg = commit_bytes(XACT_XINFO_HAS_INVALS, &[&n(-1)]);
        assert_eq!(
            parse_commit_or_abort(PgVersion::newest(18), XLOG_XACT_HAS_INFO, &neg),
            Err(XactRecordError::NegativeCount {
                what: "invalidations",
                count: -1
            })
        );
        let no_nul = commit_bytes(
            XACT_XINFO_HAS_TWOPHASE | XACT_XINFO_HAS_GID,
            &[&7u32.to_ne_bytes(), b"abc"],
        );
        assert!(parse_commit_or_abort(PgVersion::newest(18), XLOG_XACT_HAS_INFO, &no_nul).is_err());
    }

    #[test]
    fn prepare_layouts() {
        for (major, size, gidlen_at) in [(14u32, 64usize, 46usize), (18, 72, 54)] {
            let mut h = vec![0u8; size];
            h[8..12].copy_from_slice(&800u32.to_ne_bytes());
            h[12..16].copy_from_slice(&5u32.to_ne_bytes());
            h[28..32].copy_from_slice(&n(1));
            h[gidlen_at..gidlen_at + 2].copy_from_slice(&4u16.to_ne_bytes());
            h.extend_from_slice(b"gid\0\0\0\0\0");
            h.extend_from_slice(&801u32.to_ne_bytes());
            let p = parse_prepare(PgVersion::newest(major), &h).unwrap();
            assert_eq!((p.twophase_xid, p.db_id, p.gid.as_str()), (800, 5, "gid"));
            assert_eq!(p.subxacts, vec![801]);
            assert!(parse_prepare(PgVersion::newest(major), &h[..h.len() - 1]).is_err());
            let mut bad = h.clone();
            bad[28..32].copy_from_slice(&n(1 << 28));
            assert!(parse_prepare(PgVersion::newest(major), &bad).is_err());
        }
    }

    #[test]
    fn assignment_and_invalidations() {
        let mut a = 900u32.to_ne_bytes().to_vec();
        a.extend(n(2));
        a.extend(901u32.to_ne_bytes());
        a.extend(902u32.to_ne_bytes());
        assert_eq!(
            parse_assignment(&a).unwrap(),
            ParsedAssignment {
                xtop: 900,
                xsub: vec![901, 902]
            }
        );
        for cut in 0..a.len() {
            assert!(parse_assignment(&a[..cut]).is_err());
        }
        a[4..8].copy_from_slice(&n(-3));
        assert!(parse_assignment(&a).is_err());
        let mut i = n(2).to_vec();
        i.extend([7u8; 32]);
        assert_eq!(parse_invalidations(&i).unwrap().len(), 32);
        assert!(parse_invalidations(&i[..35]).is_err());
        i[0..4].copy_from_slice(&n(i32::MAX));
        assert!(parse_invalidations(&i).is_err());
    }
}
