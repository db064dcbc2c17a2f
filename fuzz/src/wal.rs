//! A small reader of WAL segment files (access/xlogrecord.h, xlog_internal.h), only far
//! enough to cut real records' main data out of them for the corpus: page headers
//! (short and long), records split across pages, block headers, CRC-32C. It stops at
//! the first record whose length or CRC does not check (the end of valid WAL).

/// One record: resource manager, `xl_info`, and its main data.
pub struct Record {
    /// Where it starts (for debugging the reader).
    #[allow(dead_code)]
    pub lsn: u64,
    pub rmid: u8,
    pub info: u8,
    /// `xl_xid`.
    pub xid: u32,
    /// The top-level xid of a subtransaction's first record (XLR_BLOCK_ID_TOPLEVEL_XID),
    /// else 0.
    pub top_xid: u32,
    pub main_data: Vec<u8>,
    /// Block 0's data and its tablespace, database and relfilenumber (for heap records).
    pub block0: Option<Block0>,
}

/// A record's block 0: its data (None without BKPBLOCK_HAS_DATA) and relation.
pub struct Block0 {
    pub data: Option<Vec<u8>>,
    pub spc: u32,
    pub db: u32,
    pub rel: u32,
}

const PAGE: usize = 8192;
const SHORT_HDR: usize = 24;
const LONG_HDR: usize = 40;
const XLP_LONG_HEADER: u16 = 0x0002;
const XLP_FIRST_IS_CONTRECORD: u16 = 0x0001;
const RECORD_HDR: usize = 24;

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
fn maxalign(n: usize) -> usize {
    n.div_ceil(8) * 8
}

struct Seg<'a> {
    bytes: &'a [u8],
}

impl Seg<'_> {
    /// `n` bytes of record data from `pos`, skipping page headers; None past the end.
    fn read(&self, mut pos: usize, n: usize) -> Option<(Vec<u8>, usize)> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            if pos.is_multiple_of(PAGE) {
                pos += if pos == 0 { LONG_HDR } else { SHORT_HDR };
            }
            let page_end = (pos / PAGE + 1) * PAGE;
            let take = (n - out.len()).min(page_end - pos);
            out.extend_from_slice(self.bytes.get(pos..pos + take)?);
            pos += take;
        }
        Some((out, pos))
    }
}

/// What the block headers say: the main data's length and where block 0's data is.
struct Layout {
    main_len: usize,
    /// Block 0: (offset of its data in the record, its length, has data, spc, db, rel).
    block0: Option<(usize, usize, bool, [u32; 3])>,
}

/// The block headers walked as xlogreader.c DecodeXLogRecord walks them (`major` picks
/// the block-image flag bits, which changed in 15): the main data's length and block 0.
fn layout(rec: &[u8], major: u32, top_xid: &mut u32) -> Option<Layout> {
    let mut p = RECORD_HDR;
    let get = |p: usize, n: usize| rec.get(p..p + n);
    // per block: (id, image length, data length, has data, relation)
    let mut blocks: Vec<(u8, usize, usize, bool, [u32; 3])> = Vec::new();
    let mut last_rel = [0u32; 3];
    let (main_len, headers_end) = loop {
        let id = *rec.get(p)?;
        p += 1;
        match id {
            255 => break (*rec.get(p)? as usize, p + 1),
            254 => break (u32_at(get(p, 4)?, 0) as usize, p + 4),
            253 => p += 2,
            252 => {
                *top_xid = u32_at(get(p, 4)?, 0);
                p += 4
            }
            0..=32 => {
                let fork_flags = *rec.get(p)?;
                let data_len = u16_at(get(p + 1, 2)?, 0) as usize;
                p += 3; // fork_flags, data_length
                let mut image_len = 0;
                if fork_flags & 0x10 != 0 {
                    image_len = u16_at(get(p, 2)?, 0) as usize;
                    let bimg_info = *rec.get(p + 4)?;
                    p += 5;
                    let compressed = if major >= 15 {
                        bimg_info & 0x1c != 0
                    } else {
                        bimg_info & 0x02 != 0
                    };
                    if bimg_info & 0x01 != 0 && compressed {
                        p += 2;
                    }
                }
                if fork_flags & 0x80 == 0 {
                    let r = get(p, 12)?;
                    last_rel = [u32_at(r, 0), u32_at(r, 4), u32_at(r, 8)];
                    p += 12;
                }
                p += 4;
                blocks.push((id, image_len, data_len, fork_flags & 0x20 != 0, last_rel));
            }
            _ => return None,
        }
        if p > rec.len() {
            return None;
        }
    };
    // the blocks' images and data follow the headers, in order
    let mut at = headers_end;
    let mut block0 = None;
    for (id, image_len, data_len, has_data, rel) in blocks {
        at += image_len;
        if id == 0 {
            block0 = Some((at, data_len, has_data, rel));
        }
        at += data_len;
    }
    Some(Layout { main_len, block0 })
}

/// The valid records of one segment file (`seg_lsn`: its start LSN).
pub fn records(bytes: &[u8], seg_lsn: u64, major: u32) -> Vec<Record> {
    let mut out = Vec::new();
    if bytes.len() < LONG_HDR || u16_at(bytes, 2) & XLP_LONG_HEADER == 0 {
        return out;
    }
    let seg = Seg { bytes };
    let mut pos = LONG_HDR;
    if u16_at(bytes, 2) & XLP_FIRST_IS_CONTRECORD != 0 {
        // The tail of a record begun in the previous segment.
        let rem = u32_at(bytes, 16) as usize;
        match seg.read(0, rem) {
            Some((_, p)) => pos = maxalign(p),
            None => return out,
        }
    }
    while let Some((hdr, _)) = seg.read(pos, RECORD_HDR) {
        let tot_len = u32_at(&hdr, 0) as usize;
        if !(RECORD_HDR..1 << 30).contains(&tot_len) {
            break;
        }
        let Some((rec, end)) = seg.read(pos, tot_len) else {
            break;
        };
        let crc = crc32c::crc32c_append(crc32c::crc32c(&rec[RECORD_HDR..]), &rec[..20]);
        if crc != u32_at(&rec, 20) {
            break;
        }
        let (info, rmid) = (rec[16], rec[17]);
        let _prev = u64_at(&rec, 8);
        let mut top_xid = 0;
        if let Some(l) = layout(&rec, major, &mut top_xid) {
            let n = l.main_len;
            if n <= rec.len() {
                let block0 = l.block0.and_then(|(at, len, has_data, [spc, db, rel])| {
                    Some(Block0 {
                        data: if has_data {
                            Some(rec.get(at..at + len)?.to_vec())
                        } else {
                            None
                        },
                        spc,
                        db,
                        rel,
                    })
                });
                out.push(Record {
                    lsn: seg_lsn + pos as u64,
                    rmid,
                    info,
                    xid: u32_at(&rec, 4),
                    top_xid,
                    main_data: rec[rec.len() - n..].to_vec(),
                    block0,
                });
            }
        }
        // XLOG_SWITCH: the rest of the segment is unused.
        if rmid == 0 && info & 0xf0 == 0x40 {
            break;
        }
        pos = maxalign(end);
    }
    out
}
