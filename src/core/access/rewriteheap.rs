//! Logical rewrite mapping files: access/rewriteheap.h's `LogicalRewriteMappingData`
//! and `LOGICAL_REWRITE_FORMAT` file names, read the way reorderbuffer.c
//! UpdateLogicalMappings and ApplyLogicalMappingFile read what access/heap/rewriteheap.c
//! writes.

use crate::include::relfilelocator::RelFileLocator;
use crate::include::reorderbuffer::TupleCidKey;
use crate::include::transam::TransactionId;
use crate::include::xlogdefs::Lsn;

/// One record of a logical rewrite mapping file (access/rewriteheap.h
/// LogicalRewriteMappingData): a tuple's place before and after a heap rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RewriteMapping {
    pub old: TupleCidKey,
    pub new: TupleCidKey,
}

/// `sizeof(LogicalRewriteMappingData)`: two locators and two item pointers.
pub const REWRITE_MAPPING_SIZE: usize = 36;

/// A mapping file's name fields (rewriteheap.h LOGICAL_REWRITE_FORMAT
/// `map-%x-%x-%X_%X-%x-%x`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MappingFileName {
    pub name: String,
    pub db_oid: u32,
    pub rel_oid: u32,
    pub lsn: Lsn,
    /// The xid the mappings are for (a tuple's xmin or xmax).
    pub mapped_xid: TransactionId,
    /// The xid of the transaction that rewrote the heap.
    pub create_xid: TransactionId,
}

/// Parses a mapping file name the way reorderbuffer.c UpdateLogicalMappings scans it
/// (six hexadecimal numbers after `map-`, separated by `-`, `-`, `_`, `-`, `-`;
/// anything after the sixth is ignored, as sscanf ignores it). `None` if it does not
/// scan.
pub fn parse_mapping_file_name(name: &str) -> Option<MappingFileName> {
    let mut rest = name.strip_prefix("map-")?.as_bytes();
    let mut nums = [0u32; 6];
    let seps = [b'-', b'-', b'_', b'-', b'-'];
    for (i, n) in nums.iter_mut().enumerate() {
        let digits = rest.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if digits == 0 {
            return None;
        }
        let text = std::str::from_utf8(&rest[..digits]).ok()?;
        // sscanf's %x wraps like strtoul on overflow; real names never overflow.
        *n = u64::from_str_radix(text.get(text.len().saturating_sub(16)..)?, 16).ok()? as u32;
        rest = &rest[digits..];
        if i < 5 {
            if rest.first() != Some(&seps[i]) {
                return None;
            }
            rest = &rest[1..];
        }
    }
    Some(MappingFileName {
        name: name.to_owned(),
        db_oid: nums[0],
        rel_oid: nums[1],
        lsn: Lsn(((nums[2] as u64) << 32) | nums[3] as u64),
        mapped_xid: nums[4],
        create_xid: nums[5],
    })
}

/// Decodes a mapping file's contents: consecutive LogicalRewriteMappingData records in
/// native byte order. A trailing partial record is the error the server raises
/// ("read N instead of 36 bytes"), reported after the whole records (which the server
/// has applied by then).
pub fn parse_mapping_records(bytes: &[u8]) -> (Vec<RewriteMapping>, Option<usize>) {
    let u32_at = |b: &[u8], o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u16_at = |b: &[u8], o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
    let loc = |b: &[u8], o: usize| RelFileLocator {
        spc_oid: u32_at(b, o),
        db_oid: u32_at(b, o + 4),
        rel_number: u32_at(b, o + 8),
    };
    let tid = |b: &[u8], o: usize| {
        (
            ((u16_at(b, o) as u32) << 16) | u16_at(b, o + 2) as u32,
            u16_at(b, o + 4),
        )
    };
    let chunks = bytes.chunks_exact(REWRITE_MAPPING_SIZE);
    let partial = (!chunks.remainder().is_empty()).then_some(chunks.remainder().len());
    let v = chunks
        .map(|b| {
            let (ob, oo) = tid(b, 24);
            let (nb, no) = tid(b, 30);
            RewriteMapping {
                old: TupleCidKey {
                    locator: loc(b, 0),
                    block: ob,
                    offset: oo,
                },
                new: TupleCidKey {
                    locator: loc(b, 12),
                    block: nb,
                    offset: no,
                },
            }
        })
        .collect();
    (v, partial)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_file_names_scan_like_sscanf() {
        let f = parse_mapping_file_name("map-5-4f9-0_1A2B3C8-a0-a4").unwrap();
        assert_eq!(
            (f.db_oid, f.rel_oid, f.lsn, f.mapped_xid, f.create_xid),
            (5, 0x4f9, Lsn(0x1A2B3C8), 0xa0, 0xa4)
        );
        assert!(parse_mapping_file_name("map-5-4f9-0-1A2B3C8-a0-a4").is_none());
        assert!(parse_mapping_file_name("map-5-4f9-0_1A2B3C8-a0").is_none());
        assert!(parse_mapping_file_name("mapx-5").is_none());
        assert!(parse_mapping_file_name("map-5-4f9-0_1A2B3C8-a0-a4.tmp").is_some());
    }
}
