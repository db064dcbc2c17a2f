//! The fuzz targets: one per parser of untrusted bytes in snapbuild-core, each also
//! driving what consumes the parsed value (a restored `.snap` goes through the
//! builder's restore; a page's tuple headers through the historic visibility rule; a
//! mapping file through UpdateLogicalMappings), and checking the parser's own promises
//! (counts equal array lengths, nothing read past the data).

use crate::mutate::{Field, Rng};
use snapbuild_core::access::heapam_visibility::satisfies_historic_mvcc;
use snapbuild_core::access::rewriteheap::{
    parse_mapping_file_name, parse_mapping_records, REWRITE_MAPPING_SIZE,
};
use snapbuild_core::access::xactdesc;
use snapbuild_core::include::heapam_xlog::NewCid;
use snapbuild_core::include::htup_details::TupleHeader;
use snapbuild_core::include::relfilelocator::RelFileLocator;
use snapbuild_core::include::reorderbuffer::{TupleCid, TupleCidKey};
use snapbuild_core::include::server_lookups::{LookupError, ServerLookups};
use snapbuild_core::include::snapshot::HistoricSnapshot;
use snapbuild_core::include::transam::TransactionId;
use snapbuild_core::replication::decode::{
    Payload, RecordHead, RecordKind, Replay, TwoPhaseDecoding,
};
use snapbuild_core::replication::message::LogicalMessage;
use snapbuild_core::replication::reorder_memory::{
    toast::{toast_replace_growth, AttLayout},
    ChangeRecord, MemoryRules, ReorderMemory, StructSizes, XidStatus,
};
use snapbuild_core::replication::reorderbuffer::{CidResolver, TupleCidHash};
use snapbuild_core::replication::snapbuild_ondisk::{
    parse_snap_file_name, snap_file_name, SnapBuildOnDisk, CONSTANT_SIZE, NOT_CHECKSUMMED_SIZE,
};
use snapbuild_core::storage::bufpage::{heap_items, page_line_pointers};
use snapbuild_core::{BuilderParams, Lsn, PgVersion, RunningXacts, SnapBuild};

pub struct Target {
    pub name: &'static str,
    /// What the target parses, for the report.
    pub about: &'static str,
    /// Runs the parser (and its consumers); true when the input was accepted.
    pub run: fn(&[u8]) -> bool,
    /// The layout's count / length fields for this input.
    pub fields: fn(&[u8]) -> Vec<Field>,
    /// An edit applied after some mutations (e.g. a `.snap` file's CRC recomputed, so
    /// that mutations get past the checksum).
    pub fixup: Option<fn(&mut [u8], &mut Rng)>,
    pub max_len: usize,
}

fn f(at: usize, width: usize, elem: usize) -> Field {
    Field { at, width, elem }
}

pub fn all() -> Vec<Target> {
    vec![
        Target {
            name: "snap",
            about: ".snap files, SnapBuildOnDisk::decode for versions 4, 5, 6 (and 7: unknown), then restored into a builder",
            run: snap,
            fields: |_| {
                let b = CONSTANT_SIZE;
                vec![f(12, 4, 1), f(8, 4, 0), f(b + 80, 8, 4), f(b + 88, 8, 4), f(b + 112, 8, 4), f(b, 4, 0), f(b + 16, 4, 0), f(b + 20, 4, 0), f(b + 72, 4, 0)]
            },
            fixup: Some(snap_fixup),
            max_len: 1 << 16,
        },
        Target {
            name: "running_xacts",
            about: "STANDBY RUNNING_XACTS main data, RunningXacts::parse, then two SnapBuildProcessRunningXacts",
            run: running_xacts,
            fields: |_| vec![f(0, 4, 4), f(4, 4, 4), f(12, 4, 0), f(16, 4, 0), f(20, 4, 0)],
            fixup: None,
            max_len: 1 << 16,
        },
        Target {
            name: "xact_commit",
            about: "COMMIT / ABORT / COMMIT PREPARED / ABORT PREPARED main data (byte 0: major, byte 1: xl_info), parse_commit_or_abort",
            run: xact_commit,
            fields: commit_fields,
            fixup: None,
            max_len: 1 << 16,
        },
        Target {
            name: "xact_prepare",
            about: "PREPARE main data (byte 0: major), parse_prepare",
            run: xact_prepare,
            fields: |_| {
                // after the major byte: nsubxacts 28, ncommitrels 32, nabortrels 36,
                // counts and gidlen of 14 (40.., 46) and 15+ (48.., 54)
                [28, 32, 36, 40, 44, 48].iter().map(|o| f(1 + o, 4, 4)).chain([f(47, 2, 1), f(55, 2, 1)]).collect()
            },
            fixup: None,
            max_len: 1 << 16,
        },
        Target {
            name: "xact_assignment",
            about: "ASSIGNMENT main data, parse_assignment",
            run: |d| {
                let r = xactdesc::parse_assignment(d);
                if let Err(e) = &r {
                    let _ = e.to_string();
                }
                r.map(|a| assert!(8 + 4 * a.xsub.len() <= d.len())).is_ok()
            },
            fields: |_| vec![f(4, 4, 4)],
            fixup: None,
            max_len: 1 << 16,
        },
        Target {
            name: "xact_invalidations",
            about: "INVALIDATIONS main data, parse_invalidations",
            run: |d| {
                let r = xactdesc::parse_invalidations(d);
                if let Err(e) = &r {
                    let _ = e.to_string();
                }
                r.map(|m| assert!(m.len() % 16 == 0 && 4 + m.len() <= d.len())).is_ok()
            },
            fields: |_| vec![f(0, 4, 16)],
            fixup: None,
            max_len: 1 << 16,
        },
        Target {
            name: "new_cid",
            about: "HEAP2 NEW_CID main data, NewCid::parse and command_id",
            run: |d| match NewCid::parse(d) {
                Ok(n) => {
                    let _ = n.command_id();
                    true
                }
                Err(e) => {
                    assert!(!e.is_empty());
                    false
                }
            },
            fields: |_| vec![f(4, 4, 0), f(8, 4, 0), f(12, 4, 0)],
            fixup: None,
            max_len: 4096,
        },
        Target {
            name: "logical_message",
            about: "LOGICALMSG MESSAGE main data, LogicalMessage::parse",
            run: |d| match LogicalMessage::parse(d) {
                Ok(m) => {
                    assert!(24 + m.prefix.len() + m.content.len() <= d.len());
                    true
                }
                Err(e) => {
                    let _ = e.to_string();
                    false
                }
            },
            fields: |_| vec![f(8, 8, 1), f(16, 8, 1)],
            fixup: None,
            max_len: 1 << 16,
        },
        Target {
            name: "heap_change",
            about: "HEAP / HEAP2 change records (main data and block 0's data), ChangeRecord::parse, each change's ReorderBufferChangeSize per major, ReorderBufferToastReplace's growth of its rows",
            run: heap_change,
            fields: |d| {
                let b0 = d.get(4..6).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]) as usize);
                vec![f(4, 2, 1), f(6, 2, 0), f(6 + b0, 2, 0), f(6 + b0 + 2, 2, 0), f(6 + b0 + 7, 1, 0)]
            },
            fixup: None,
            max_len: 1 << 15,
        },
        Target {
            name: "heap_page",
            about: "heap pages: page_line_pointers, heap_items, each tuple header through HeapTupleSatisfiesHistoricMVCC",
            run: heap_page,
            fields: |d| {
                let mut v = vec![f(12, 2, 0), f(14, 2, 0), f(16, 2, 0)];
                // line pointers: offset and length bits
                for i in 0..8usize {
                    if 24 + 4 * i + 4 <= d.len() {
                        v.push(f(24 + 4 * i, 4, 0));
                    }
                }
                v
            },
            fixup: None,
            max_len: 8192 + 64,
        },
        Target {
            name: "tuple_header",
            about: "heap tuple headers: TupleHeader::parse, flag names, HeapTupleSatisfiesHistoricMVCC under three snapshots",
            run: tuple_header,
            fields: |_| vec![f(0, 4, 0), f(4, 4, 0), f(8, 4, 0), f(18, 2, 0), f(20, 2, 0)],
            fixup: None,
            max_len: 4096,
        },
        Target {
            name: "rewrite_mapping",
            about: "rewrite mapping files: parse_mapping_records, then UpdateLogicalMappings / ApplyLogicalMappingFile",
            run: rewrite_mapping,
            fields: |_| vec![],
            fixup: None,
            max_len: 1 << 16,
        },
        Target {
            name: "replay",
            about: "sequences of WAL records (header fields + main data) through the parsers and Replay::feed (decode.c dispatch, snapbuild.c state machine, reorder-buffer model)",
            run: replay,
            fields: |d| {
                // the first records' xids and lengths
                let mut v = vec![];
                let mut at = 2;
                while at + 12 <= d.len() && v.len() < 24 {
                    v.extend([f(at + 2, 4, 0), f(at + 6, 4, 0), f(at + 10, 2, 1)]);
                    at += 12 + u16::from_le_bytes([d[at + 10], d[at + 11]]) as usize;
                }
                v
            },
            fixup: None,
            max_len: 1 << 16,
        },
        Target {
            name: "server_log",
            about: "server log text (stderr, csvlog and jsonlog parsers over every line), then decoders, writers_of and the lines_for family over the events",
            run: server_log,
            fields: |_| vec![],
            fixup: None,
            max_len: 1 << 14,
        },
        Target {
            name: "file_names",
            about: "pg_logical file names: parse_snap_file_name, parse_mapping_file_name",
            run: file_names,
            fields: |_| vec![],
            fixup: None,
            max_len: 256,
        },
    ]
}

/// Byte 0 of a framed input: the major (14..18; other values map onto them).
fn major_of(b: u8) -> PgVersion {
    let m = if (14..=18).contains(&b) {
        b as u32
    } else {
        14 + (b % 5) as u32
    };
    PgVersion::newest(m)
}

fn params(major: u32, creating: bool) -> BuilderParams {
    BuilderParams::plain(PgVersion::newest(major), creating)
}

fn snap(d: &[u8]) -> bool {
    let mut ok = false;
    for v in [4u32, 5, 6, 7] {
        match SnapBuildOnDisk::decode(d, v) {
            Ok(file) => {
                ok = true;
                let b = &file.builder;
                // The arrays hold what `4 × count` allocates on the server: a size_t
                // product that wraps (2^62 + 3 xids allocate 12 bytes), as the reader
                // documents.
                let held = |n: u64| n.wrapping_mul(4) / 4;
                assert_eq!(file.committed_xip.len() as u64, held(b.committed_xcnt));
                assert_eq!(
                    file.catchange_xip.len() as u64,
                    held(b.catchange_xcnt.unwrap_or(0))
                );
                assert!(4 * (file.committed_xip.len() + file.catchange_xip.len()) <= d.len());
                let _ = b.state_enum();
                let again = file.encode().expect("a decoded version has a layout");
                assert_eq!(
                    SnapBuildOnDisk::decode(&again, v).map(|g| (g.builder.xmin, g.committed_xip)),
                    Ok((b.xmin, file.committed_xip.clone()))
                );
                // The builder restores it (snapbuild.c SnapBuildRestore) at the next
                // RUNNING_XACTS, and hands out its historic snapshot.
                let major = match v {
                    4 => 15,
                    5 => 16,
                    _ => 18,
                };
                for creating in [false, true] {
                    let mut sb = SnapBuild::new(&params(major, creating));
                    let running = RunningXacts::new(b.xmin, b.xmax, &[b.xmin]);
                    let mut restore = |_: Lsn| Ok(Some(file.clone()));
                    let _ = sb.process_running_xacts(Lsn(0x1000), &running, &mut restore);
                    let _ = sb.historic_snapshot();
                }
                let _ = HistoricSnapshot::build(b.xmin, b.xmax, &file.committed_xip);
            }
            Err(e) => {
                assert!(!e.message("pg_logical/snapshots/0-1.snap").is_empty());
                let _ = e.is_internal_error();
            }
        }
    }
    ok
}

/// Recomputes the CRC (half the time), so that edits reach the checks after it.
fn snap_fixup(b: &mut [u8], r: &mut Rng) {
    if b.len() >= CONSTANT_SIZE && r.chance(2) {
        let crc = crc32c::crc32c(&b[NOT_CHECKSUMMED_SIZE..]);
        // The CRC covers what the reader consumed, not trailing bytes: cover the
        // builder and the arrays the counts claim when they fit.
        let end = claimed_snap_len(b).filter(|e| *e <= b.len());
        let crc = end.map_or(crc, |e| crc32c::crc32c(&b[NOT_CHECKSUMMED_SIZE..e]));
        b[4..8].copy_from_slice(&crc.to_le_bytes());
    }
}

fn claimed_snap_len(b: &[u8]) -> Option<usize> {
    let v = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?);
    let size = snapbuild_core::replication::snapbuild_ondisk::builder_size(v)?;
    let u64_at =
        |o: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?)) };
    let c = u64_at(CONSTANT_SIZE + 80)?;
    let k = if v >= 5 {
        u64_at(CONSTANT_SIZE + 112)?
    } else {
        0
    };
    let n = c.checked_add(k)?.checked_mul(4)?;
    (CONSTANT_SIZE as u64 + size as u64)
        .checked_add(n)
        .map(|x| x as usize)
}

fn running_xacts(d: &[u8]) -> bool {
    match RunningXacts::parse(d) {
        Ok(rx) => {
            assert_eq!(rx.xids.len(), rx.xcnt as usize + rx.subxcnt as usize);
            assert!(24 + 4 * rx.xids.len() <= d.len());
            assert_eq!(RunningXacts::parse(&rx.encode()).as_ref(), Ok(&rx));
            let _ = rx.top_xids();
            let _ = SnapBuild::wait_snapshot_xids(&rx, rx.oldest_running_xid);
            for creating in [true, false] {
                let mut sb = SnapBuild::new(&params(18, creating));
                let mut none = |_: Lsn| Ok(None);
                let _ = sb.process_running_xacts(Lsn(0x1000), &rx, &mut none);
                let _ = sb.process_running_xacts(Lsn(0x2000), &rx, &mut none);
                let _ = sb.historic_snapshot();
            }
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}

/// Count fields of a framed commit record, found by walking its xinfo as the parser
/// does (without trusting the counts).
fn commit_fields(d: &[u8]) -> Vec<Field> {
    let mut v = vec![f(10, 4, 0)];
    let xinfo = match d.get(10..14) {
        Some(b) if d.get(1).is_some_and(|i| i & 0x80 != 0) => {
            u32::from_ne_bytes(b.try_into().unwrap())
        }
        _ => return v,
    };
    let mut at = 14;
    if xinfo & xactdesc::XACT_XINFO_HAS_DBINFO != 0 {
        at += 8;
    }
    for (bit, elem) in [
        (xactdesc::XACT_XINFO_HAS_SUBXACTS, 4),
        (xactdesc::XACT_XINFO_HAS_RELFILELOCATORS, 12),
        (xactdesc::XACT_XINFO_HAS_DROPPED_STATS, 16),
        (xactdesc::XACT_XINFO_HAS_INVALS, 16),
    ] {
        if xinfo & bit != 0 {
            v.push(f(at, 4, elem));
            let n = d.get(at..at + 4).map_or(0, |b| {
                i32::from_ne_bytes(b.try_into().unwrap()).max(0) as usize
            });
            at = at.saturating_add(4).saturating_add(n.saturating_mul(elem));
        }
    }
    v
}

fn xact_commit(d: &[u8]) -> bool {
    let (Some(&m), Some(&info)) = (d.first(), d.get(1)) else {
        return false;
    };
    let data = &d[2..];
    match xactdesc::parse_commit_or_abort(major_of(m), info, data) {
        Ok(p) => {
            assert!(p.parsed_len <= data.len());
            assert!(4 * p.subxacts.len() <= data.len());
            assert!(p.gid.len() < 3 * xactdesc::GIDSIZE);
            let _ = p.has_invals();
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}

fn xact_prepare(d: &[u8]) -> bool {
    let Some(&m) = d.first() else {
        return false;
    };
    let data = &d[1..];
    match xactdesc::parse_prepare(major_of(m), data) {
        Ok(p) => {
            assert!(p.parsed_len <= data.len());
            assert!(4 * p.subxacts.len() <= data.len());
            assert!(p.gid.len() < 3 * xactdesc::GIDSIZE);
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}

/// Commit-log and multixact answers from plain rules, and one mapping file.
struct Lookups<'a> {
    file: &'a [u8],
}

impl ServerLookups for Lookups<'_> {
    fn did_commit(&mut self, xid: TransactionId) -> bool {
        !xid.is_multiple_of(3)
    }
    fn update_xid(&mut self, multi: TransactionId, infomask: u16) -> TransactionId {
        multi.wrapping_add(infomask as u32 & 7)
    }
    fn mapping_file_names(&mut self) -> Result<Vec<String>, LookupError> {
        Ok(vec![
            ".".into(),
            "map-5-4f9-0_1A2B3C8-a0-a4".into(),
            "map-5-4f9-0_1A2B3D0-a1-a4".into(),
            "xlog".into(),
        ])
    }
    fn mapping_file(&mut self, _name: &str) -> Result<Vec<u8>, LookupError> {
        Ok(self.file.to_vec())
    }
}

fn snapshots(t: &TupleHeader) -> [HistoricSnapshot; 3] {
    let (a, b) = (t.raw_xmin, t.raw_xmax);
    [
        HistoricSnapshot::from_parts(a.wrapping_sub(5), b.wrapping_add(5), &[a, b], &[], 0),
        HistoricSnapshot::from_parts(b, a, &[a.wrapping_add(1)], &[a, b], t.raw_cid),
        HistoricSnapshot::from_parts(3, 3, &[], &[b], u32::MAX),
    ]
}

fn visibility(t: &TupleHeader, key: TupleCidKey, file: &[u8]) {
    let _ = t.flag_names();
    for s in snapshots(t) {
        for with_hash in [false, true] {
            let mut cids = CidResolver {
                hash: with_hash.then(|| {
                    TupleCidHash::build(&[TupleCid {
                        lsn: Lsn(1),
                        key,
                        cmin: t.raw_cid,
                        cmax: t.raw_cid.wrapping_add(1),
                        combocid: t.raw_cid,
                    }])
                }),
                rel_oid: 0x4f9,
                db_oid: 5,
                applied_files: Vec::new(),
            };
            let mut l = Lookups { file };
            if let Ok(v) = satisfies_historic_mvcc(t, &key, &s, &mut cids, &mut l) {
                let _ = v.branch_text();
            }
        }
    }
}

fn heap_page(d: &[u8]) -> bool {
    let lp = page_line_pointers(d);
    let r = heap_items(d);
    if let (Ok((_, lps)), Ok((_, items))) = (&lp, &r) {
        assert!(items.len() <= lps.len());
    }
    match r {
        Ok((_, items)) => {
            for it in items.iter().take(16) {
                let key = TupleCidKey {
                    locator: RelFileLocator {
                        spc_oid: 1663,
                        db_oid: 5,
                        rel_number: 0x4f9,
                    },
                    block: 0,
                    offset: it.item.offnum,
                };
                visibility(&it.header, key, &[]);
            }
            true
        }
        Err(e) => {
            assert!(!e.text().is_empty());
            false
        }
    }
}

fn tuple_header(d: &[u8]) -> bool {
    match TupleHeader::parse(d) {
        Some(t) => {
            let key = TupleCidKey {
                locator: RelFileLocator {
                    spc_oid: 1663,
                    db_oid: 5,
                    rel_number: 0x4f9,
                },
                block: t.ctid.0,
                offset: t.ctid.1,
            };
            visibility(&t, key, d);
            true
        }
        None => false,
    }
}

fn rewrite_mapping(d: &[u8]) -> bool {
    let (recs, partial) = parse_mapping_records(d);
    assert_eq!(recs.len(), d.len() / REWRITE_MAPPING_SIZE);
    assert_eq!(partial.unwrap_or(0), d.len() % REWRITE_MAPPING_SIZE);
    // UpdateLogicalMappings over two files with these bytes, for a decoding
    // transaction whose own xids include the mapped ones.
    let first = recs.first().map(|m| m.old).unwrap_or_default();
    let mut cids = CidResolver {
        hash: Some(TupleCidHash::build(&[TupleCid {
            lsn: Lsn(1),
            key: first,
            cmin: 1,
            cmax: 2,
            combocid: 0,
        }])),
        rel_oid: 0x4f9,
        db_oid: 5,
        applied_files: Vec::new(),
    };
    let s = HistoricSnapshot::from_parts(0x90, 0xb0, &[], &[0xa0, 0xa1], 3);
    let mut l = Lookups { file: d };
    let r = cids.update_logical_mappings(&s, &mut l);
    if let Err(e) = &r {
        assert!(!e.message().is_empty());
    }
    partial.is_none()
}

fn file_names(d: &[u8]) -> bool {
    let name = String::from_utf8_lossy(d);
    let snap = parse_snap_file_name(&name);
    if let Some(lsn) = snap {
        assert_eq!(snap_file_name(lsn), name);
    }
    let map = parse_mapping_file_name(&name);
    snap.is_some() || map.is_some()
}

/// One record of a `replay` input: rmid, xl_info, xid, top-level xid (u32 LE each for
/// the xids), the main data's length (u16 LE) and the main data (for heap records and
/// invalidations only with `memory`, heap records framed by [`frame_change`]).
pub fn frame_record(
    rmid: u8,
    info: u8,
    xid: u32,
    top_xid: u32,
    data: &[u8],
    memory: bool,
) -> Vec<u8> {
    let kind = RecordKind::classify(rmid, info);
    // Only these kinds' main data is read; the others keep their header only.
    let keep = matches!(
        kind,
        RecordKind::RunningXacts
            | RecordKind::Commit
            | RecordKind::CommitPrepared
            | RecordKind::Abort
            | RecordKind::AbortPrepared
            | RecordKind::Prepare
            | RecordKind::NewCid
            | RecordKind::LogicalMessage
    ) || (memory && matches!(kind, RecordKind::Change | RecordKind::Invalidations));
    let data = if keep {
        &data[..data.len().min(4096)]
    } else {
        &[][..]
    };
    let mut v = vec![rmid, info];
    v.extend(xid.to_le_bytes());
    v.extend(top_xid.to_le_bytes());
    v.extend((data.len() as u16).to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// A heap record as the replay target frames it when the memory accounting is on: block
/// 0's presence (1 byte), tablespace, database and relfilenumber (u32 each), block 0's
/// data length (u16) and data, then the main data.
pub fn frame_change(block0: Option<(&[u8], [u32; 3])>, main: &[u8]) -> Vec<u8> {
    let mut v = vec![block0.is_some() as u8];
    let (data, rel) = block0.unwrap_or((&[], [0; 3]));
    for x in rel {
        v.extend(x.to_le_bytes());
    }
    v.extend((data.len().min(u16::MAX as usize) as u16).to_le_bytes());
    v.extend_from_slice(&data[..data.len().min(u16::MAX as usize)]);
    v.extend_from_slice(main);
    v
}

/// [`frame_change`]'s parts: block 0's data, its (tablespace, database, relfilenumber),
/// the main data.
fn split_change(d: &[u8]) -> Option<(Option<&[u8]>, [u32; 3], &[u8])> {
    let u = |o: usize| Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().unwrap()));
    let has = *d.first()? != 0;
    let rel = [u(1)?, u(5)?, u(9)?];
    let len = u16::from_le_bytes(d.get(13..15)?.try_into().unwrap()) as usize;
    let block = d.get(15..15 + len)?;
    Some((has.then_some(block), rel, &d[15 + len..]))
}

/// A relation's attributes for the fuzzed ReorderBufferToastReplace, by relfilenumber
/// (none for some, as when the catalog has no such relation).
fn fuzz_layout(_spc: u32, _db: u32, rel: u32) -> Option<Vec<AttLayout>> {
    const KINDS: [AttLayout; 6] = [
        (4, b'i'),
        (-1, b'i'),
        (8, b'd'),
        (1, b'c'),
        (-1, b'd'),
        (2, b's'),
    ];
    if rel.is_multiple_of(7) {
        return None;
    }
    let n = 1 + (rel % 5) as usize;
    Some(
        (0..n)
            .map(|i| KINDS[(rel as usize + i * 3) % KINDS.len()])
            .collect(),
    )
}

fn fuzz_xid_status(xid: TransactionId) -> XidStatus {
    [
        XidStatus::InProgress,
        XidStatus::Committed,
        XidStatus::Aborted,
    ][(xid % 3) as usize]
}

/// Byte 0 the major, 1 rmid, 2 info, 3 block 0 present, 4-5 block 0's length, its data,
/// then the main data.
fn heap_change(d: &[u8]) -> bool {
    let (Some(&m), Some(&rmid), Some(&info), Some(&has)) =
        (d.first(), d.get(1), d.get(2), d.get(3))
    else {
        return false;
    };
    let Some(len) = d
        .get(4..6)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    else {
        return false;
    };
    let Some(block) = d.get(6..6 + len) else {
        return false;
    };
    let main = &d[6 + len..];
    let major = major_of(m).major;
    let rec = match ChangeRecord::parse(
        rmid,
        info,
        main,
        (has != 0).then_some(block),
        5,
        16384,
        1663,
    ) {
        Ok(Some(r)) => r,
        Ok(None) => return true,
        Err(e) => {
            let _ = e.len();
            return false;
        }
    };
    let sizes = StructSizes::x86_64(major);
    for c in &rec.changes {
        let size = c.size(&sizes);
        // a tuple's length never exceeds what the record holds plus a tuple header
        for l in [c.new_len, c.old_len].into_iter().flatten() {
            assert!(
                l <= (d.len() + 64) as u64,
                "tuple length {l} from {} bytes",
                d.len()
            );
        }
        assert!(size >= sizes.change);
        if let Some(t) = &c.tuple {
            assert!(t.data.len() <= block.len());
            // the TOAST values the row points to, all waiting
            let waiting: rustc_hash::FxHashSet<u32> = t
                .data
                .windows(14)
                .filter(|w| w[0] == 0x01 && w[1] == 18)
                .map(|w| u32::from_ne_bytes([w[10], w[11], w[12], w[13]]))
                .collect();
            for rel in [1u32, 2, 3, 4, 5, 6, 8, 9, 10, 11] {
                if let Some(layout) = fuzz_layout(0, 0, rel) {
                    if let Ok(g) = toast_replace_growth(t, &layout, &waiting) {
                        // each replaced pointer shrinks by 8; a row the server did not
                        // form may gain alignment padding when it is formed again
                        assert!(g.unsigned_abs() <= 8 * layout.len() as u64);
                    }
                }
            }
        }
    }
    true
}

/// The payload the adapter (src/adapter/wal/reader.rs WalReader::next_record) builds for a
/// record, through the same core parsers; `None` where the adapter raises an ERROR.
#[allow(clippy::too_many_arguments)]
fn payload(
    version: PgVersion,
    kind: RecordKind,
    rmid: u8,
    info: u8,
    xid: u32,
    data: &[u8],
    memory: bool,
) -> Option<Payload> {
    Some(match kind {
        RecordKind::RunningXacts => Payload::RunningXacts(RunningXacts::parse(data).ok()?),
        RecordKind::Commit
        | RecordKind::CommitPrepared
        | RecordKind::Abort
        | RecordKind::AbortPrepared
        | RecordKind::Prepare => {
            let p = if kind == RecordKind::Prepare {
                xactdesc::parse_prepare(version, data).ok()?
            } else {
                xactdesc::parse_commit_or_abort(version, info, data).ok()?
            };
            Payload::from_xact(kind, p, xid)
        }
        RecordKind::NewCid => Payload::NewCid(NewCid::parse(data).ok()?),
        RecordKind::LogicalMessage => {
            let m = LogicalMessage::parse(data).ok()?;
            Payload::Message {
                transactional: m.transactional,
                db_id: m.db_id,
                prefix_len: m.prefix.len() as u64,
                content_len: m.content.len() as u64,
            }
        }
        RecordKind::Change if memory => {
            let (block0, [spc, db, rel], main) = split_change(data)?;
            match ChangeRecord::parse(rmid, info, main, block0, db, rel, spc).ok()? {
                Some(c) => Payload::Change(c),
                None => Payload::None,
            }
        }
        RecordKind::Invalidations if memory => {
            let n = i32::from_ne_bytes(data.get(..4)?.try_into().unwrap());
            Payload::Invalidations {
                nmsgs: u64::try_from(n).ok()?,
            }
        }
        _ => Payload::None,
    })
}

/// A sequence of records through decode.c's dispatch (Replay::feed): byte 0 the major,
/// byte 1 flags (1: in slot creation, 2: two-phase decoding, 4: fast-forward,
/// 8: building a full snapshot, 32: reorderbuffer.c's memory accounting, with heap
/// records framed by [`frame_change`]; 64: with 4 kB of `logical_decoding_work_mem`
/// (below the server's minimum, so that short inputs spill), else 64 kB; 128: streaming), then framed records. A `.snap` restore finds no file,
/// except with flag 16, where it finds the builder's own last serialized file.
fn replay(d: &[u8]) -> bool {
    let (Some(&m), Some(&flags)) = (d.first(), d.get(1)) else {
        return false;
    };
    let version = major_of(m);
    let p = BuilderParams {
        version,
        initial_xmin_horizon: 0,
        start_decoding_at: Lsn(0),
        building_full_snapshot: flags & 8 != 0,
        in_slot_creation: flags & 1 != 0,
        two_phase_at: Lsn(0),
    };
    let mut r = Replay::new(&p, 5);
    r.two_phase = TwoPhaseDecoding::for_slot(flags & 2 != 0, "test_decoding");
    r.fast_forward = flags & 4 != 0;
    let memory = flags & 32 != 0;
    if memory {
        let major = version.major;
        r.builder.reorder.memory = Some(Box::new(ReorderMemory::new(MemoryRules {
            major,
            sizes: StructSizes::x86_64(major),
            work_mem_bytes: if flags & 64 != 0 { 4 << 10 } else { 64 << 10 },
            streaming: flags & 128 != 0,
            immediate: false,
            xid_status: Some(fuzz_xid_status),
            relation_layout: Some(fuzz_layout),
        })));
        // the database of the first heap record's block 0
        let mut at = 2;
        while let Some(h) = d.get(at..at + 12) {
            let len = u16::from_le_bytes([h[10], h[11]]) as usize;
            if RecordKind::classify(h[0], h[1]) == RecordKind::Change {
                if let Some((_, [_, db, _], _)) =
                    d.get(at + 12..at + 12 + len).and_then(split_change)
                {
                    r.slot_db = db;
                    break;
                }
            }
            at += 12 + len;
        }
    }
    let mut last_file: Option<SnapBuildOnDisk> = None;
    let mut rest = &d[2..];
    let mut lsn = 0x0100_0000u64;
    let mut complete = true;
    while rest.len() >= 12 {
        let (rmid, info) = (rest[0], rest[1]);
        let xid = u32::from_le_bytes(rest[2..6].try_into().unwrap());
        let top_xid = u32::from_le_bytes(rest[6..10].try_into().unwrap());
        let len = u16::from_le_bytes([rest[10], rest[11]]) as usize;
        let Some(data) = rest.get(12..12 + len) else {
            break;
        };
        rest = &rest[12 + len..];
        let kind = RecordKind::classify(rmid, info);
        let head = RecordHead {
            lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 24 + len as u64),
            xid,
            top_xid,
            rmid,
            kind,
            name: None,
        };
        lsn += 0x100 + len as u64;
        let Some(pl) = payload(version, kind, rmid, info, xid, data, memory) else {
            complete = false;
            break;
        };
        let file = if flags & 16 != 0 {
            last_file.clone()
        } else {
            None
        };
        let mut restore = |_: Lsn| Ok(file.clone());
        match r.feed(&head, &pl, &mut restore) {
            Ok(row) => {
                if let Some(f) = row.serialized {
                    last_file = Some(*f);
                }
            }
            Err(e) => {
                let _ = e.error.message("x");
                complete = false;
                break;
            }
        }
    }
    if let Some(m) = r.builder.reorder.memory.as_mut() {
        let open = m.open_accounts();
        let ended = std::mem::take(&mut m.ended);
        for a in open.iter().chain(&ended) {
            assert!(a.spill_count == 0 || a.spill_bytes > 0 || a.total_bytes == 0);
        }
        assert!(m.stats.spill_txns <= m.stats.spill_count);
        assert!(m.stats.stream_txns <= m.stats.stream_count);
    }
    let _ = r.builder.historic_snapshot();
    let _ = r.historic_view(None);
    if let Some((x, _)) = r.builder.reorder.oldest_txn() {
        let _ = r.historic_view(Some(x));
    }
    complete
}

/// Log text as the adapter (src/adapter/server_log.rs) reads it: lines, each through the
/// stderr, csvlog and jsonlog parsers (the adapter picks one by file name; all three get
/// every line here), then what the trace asks of the events.
fn server_log(d: &[u8]) -> bool {
    use snapbuild_core::server_log::{
        candidate_lines_for, decoders, leading_timestamp, lines_at, lines_for, message_lsn,
        parse_json_line, parse_start_detail, restart_candidate, same_start_logged_debug_past,
        same_start_logs_debug, serializing, serializing_lines_for, subtransaction,
        subtransaction_lines_for, writers_of, xmin_candidate, Candidates, CsvParser, LineIndex,
        LogEvent, ReplayStart, StderrParser,
    };
    let text = String::from_utf8_lossy(d);
    let (mut stderr, mut csv) = (StderrParser::default(), CsvParser::default());
    let mut events = Vec::new();
    for line in text.split('\n') {
        let line = line.trim_end_matches('\r');
        events.extend(stderr.line(line));
        events.extend(csv.line(line));
        events.extend(parse_json_line(line, &Default::default()));
        let _ = (
            leading_timestamp(line),
            message_lsn(line),
            parse_start_detail(line),
            restart_candidate(line),
            xmin_candidate(line),
            subtransaction(line),
            serializing(line),
        );
    }
    events.extend(stderr.finish());
    let decs = decoders(&events);
    let ix = LineIndex::new(&decs);
    for e in events.iter().take(32) {
        if let LogEvent::Builder(b) = e {
            let at = b.lsn().unwrap_or(Lsn(0));
            for creating in [false, true] {
                let _ = lines_for(
                    &decs,
                    Some(&ix),
                    &b.message,
                    b.detail.as_deref(),
                    ReplayStart::new(Lsn(0x100), b.lsn(), creating),
                );
            }
            let _ = lines_at(
                &decs,
                None,
                at,
                ReplayStart::new(Lsn(0x100), b.lsn(), false),
            );
            let _ = candidate_lines_for(
                &decs,
                Some(&ix),
                Candidates {
                    at,
                    xmin: Some(b.at_ms as u32),
                    restart: b.lsn(),
                },
                ReplayStart::new(Lsn(0x100), b.lsn(), true),
            );
            let _ = same_start_logs_debug(&decs, ReplayStart::new(at, None, false));
            let replay = ReplayStart::new(Lsn(0x100), b.lsn(), false);
            if let Some((top, sub)) = subtransaction(&b.message) {
                let _ = subtransaction_lines_for(&decs, Some(&ix), top, &[sub], replay);
                let _ = subtransaction_lines_for(&decs, None, top, &[], replay);
            }
            let _ = serializing_lines_for(&decs, Some(&ix), at, true, replay);
            let _ = same_start_logged_debug_past(&decs, at, replay);
            let _ = writers_of(&events, at, Lsn(at.0.saturating_sub(0x28)), b.at_ms);
            let _ = writers_of(&events, at, at, i64::MAX);
        }
    }
    !events.is_empty()
}
