//! Historic MVCC: the catalog snapshot logical decoding hands out, and the rule by which
//! it judges a catalog tuple visible.
//!
//! * [`HistoricSnapshot`] is what snapbuild.c SnapBuildBuildSnapshot builds from the
//!   builder (xmin, xmax, the committed catalog-modifying xids in `xip`), and what
//!   reorderbuffer.c ReorderBufferCopySnap makes of it for one decoding transaction
//!   (its own xids in `subxip`, the command id reached in `curcid`).
//! * [`TupleCidHash`] is the `(relfilelocator, ctid) → (cmin, cmax)` map that
//!   ReorderBufferBuildTupleCidHash builds from the NEW_CID records of the decoding
//!   transaction; [`CidResolver`] looks tuples up in it as ResolveCminCmaxDuringDecoding
//!   does, applying heap-rewrite mapping files (UpdateLogicalMappings) on a miss.
//! * [`satisfies_historic_mvcc`] re-runs heapam_visibility.c
//!   HeapTupleSatisfiesHistoricMVCC and says which branch decided.
//!
//! Everything the server knows and the core cannot (the commit log, multixact members,
//! the files in `pg_logical/mappings`) comes in through [`ServerLookups`].

use std::collections::HashMap;

use crate::include::transam::{self, TransactionId, FROZEN_TRANSACTION_ID};

/// A PostgreSQL `CommandId`.
pub type CommandId = u32;
/// `InvalidCommandId`.
pub const INVALID_COMMAND_ID: CommandId = u32::MAX;
/// `FirstCommandId`.
pub const FIRST_COMMAND_ID: CommandId = 0;

/// `t_infomask` and `t_infomask2` bits (access/htup_details.h).
pub mod infomask {
    pub const HEAP_HASNULL: u16 = 0x0001;
    pub const HEAP_HASVARWIDTH: u16 = 0x0002;
    pub const HEAP_HASEXTERNAL: u16 = 0x0004;
    pub const HEAP_HASOID_OLD: u16 = 0x0008;
    pub const HEAP_XMAX_KEYSHR_LOCK: u16 = 0x0010;
    pub const HEAP_COMBOCID: u16 = 0x0020;
    pub const HEAP_XMAX_EXCL_LOCK: u16 = 0x0040;
    pub const HEAP_XMAX_LOCK_ONLY: u16 = 0x0080;
    pub const HEAP_XMAX_SHR_LOCK: u16 = HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
    pub const HEAP_LOCK_MASK: u16 =
        HEAP_XMAX_SHR_LOCK | HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
    pub const HEAP_XMIN_COMMITTED: u16 = 0x0100;
    pub const HEAP_XMIN_INVALID: u16 = 0x0200;
    pub const HEAP_XMIN_FROZEN: u16 = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID;
    pub const HEAP_XMAX_COMMITTED: u16 = 0x0400;
    pub const HEAP_XMAX_INVALID: u16 = 0x0800;
    pub const HEAP_XMAX_IS_MULTI: u16 = 0x1000;
    pub const HEAP_UPDATED: u16 = 0x2000;
    pub const HEAP_MOVED_OFF: u16 = 0x4000;
    pub const HEAP_MOVED_IN: u16 = 0x8000;
    /// `t_infomask2`.
    pub const HEAP_NATTS_MASK: u16 = 0x07FF;
    pub const HEAP_KEYS_UPDATED: u16 = 0x2000;
    pub const HEAP_HOT_UPDATED: u16 = 0x4000;
    pub const HEAP_ONLY_TUPLE: u16 = 0x8000;

    /// The raw `t_infomask` flag names, in bit order (as contrib pageinspect's
    /// `heap_tuple_infomask_flags` lists them in `raw_flags`).
    pub const INFOMASK_NAMES: [(u16, &str); 16] = [
        (HEAP_HASNULL, "HEAP_HASNULL"),
        (HEAP_HASVARWIDTH, "HEAP_HASVARWIDTH"),
        (HEAP_HASEXTERNAL, "HEAP_HASEXTERNAL"),
        (HEAP_HASOID_OLD, "HEAP_HASOID_OLD"),
        (HEAP_XMAX_KEYSHR_LOCK, "HEAP_XMAX_KEYSHR_LOCK"),
        (HEAP_COMBOCID, "HEAP_COMBOCID"),
        (HEAP_XMAX_EXCL_LOCK, "HEAP_XMAX_EXCL_LOCK"),
        (HEAP_XMAX_LOCK_ONLY, "HEAP_XMAX_LOCK_ONLY"),
        (HEAP_XMIN_COMMITTED, "HEAP_XMIN_COMMITTED"),
        (HEAP_XMIN_INVALID, "HEAP_XMIN_INVALID"),
        (HEAP_XMAX_COMMITTED, "HEAP_XMAX_COMMITTED"),
        (HEAP_XMAX_INVALID, "HEAP_XMAX_INVALID"),
        (HEAP_XMAX_IS_MULTI, "HEAP_XMAX_IS_MULTI"),
        (HEAP_UPDATED, "HEAP_UPDATED"),
        (HEAP_MOVED_OFF, "HEAP_MOVED_OFF"),
        (HEAP_MOVED_IN, "HEAP_MOVED_IN"),
    ];
    /// The `t_infomask2` flag names, in bit order.
    pub const INFOMASK2_NAMES: [(u16, &str); 3] = [
        (HEAP_KEYS_UPDATED, "HEAP_KEYS_UPDATED"),
        (HEAP_HOT_UPDATED, "HEAP_HOT_UPDATED"),
        (HEAP_ONLY_TUPLE, "HEAP_ONLY_TUPLE"),
    ];
}

use infomask::*;

/// The header fields of a heap tuple the visibility rules read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TupleHeader {
    /// `t_xmin` as stored (HeapTupleHeaderGetRawXmin).
    pub raw_xmin: TransactionId,
    /// `t_xmax` as stored (HeapTupleHeaderGetRawXmax): an xid or a MultiXactId.
    pub raw_xmax: TransactionId,
    /// `t_field3`: the raw command id (or combo CID, or old-style xvac).
    pub raw_cid: CommandId,
    /// `t_ctid`: block and offset.
    pub ctid: (u32, u16),
    pub infomask2: u16,
    pub infomask: u16,
    pub hoff: u8,
}

/// `SizeofHeapTupleHeader`: the fixed part of a heap tuple header.
pub const SIZEOF_HEAP_TUPLE_HEADER: usize = 23;

impl TupleHeader {
    /// Reads the fixed header from the first bytes of a tuple (native byte order, as the
    /// server stores it). `None` when fewer than [`SIZEOF_HEAP_TUPLE_HEADER`] bytes.
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.len() < SIZEOF_HEAP_TUPLE_HEADER {
            return None;
        }
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u16_at = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
        Some(TupleHeader {
            raw_xmin: u32_at(0),
            raw_xmax: u32_at(4),
            raw_cid: u32_at(8),
            ctid: (((u16_at(12) as u32) << 16) | u16_at(14) as u32, u16_at(16)),
            infomask2: u16_at(18),
            infomask: u16_at(20),
            hoff: b[22],
        })
    }

    /// A header with only what a what-if needs.
    pub fn with(raw_xmin: TransactionId, raw_xmax: TransactionId, infomask: u16) -> Self {
        TupleHeader {
            raw_xmin,
            raw_xmax,
            infomask,
            ..TupleHeader::default()
        }
    }

    /// Re-runs htup_details.h HeapTupleHeaderXminCommitted.
    pub fn xmin_committed(&self) -> bool {
        self.infomask & HEAP_XMIN_COMMITTED != 0
    }

    /// Re-runs htup_details.h HeapTupleHeaderXminInvalid: the invalid hint alone (a
    /// frozen tuple carries both hints and is not invalid).
    pub fn xmin_invalid(&self) -> bool {
        self.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_INVALID
    }

    /// Re-runs htup_details.h HeapTupleHeaderXminFrozen.
    pub fn xmin_frozen(&self) -> bool {
        self.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN
    }

    /// Re-runs htup_details.h HeapTupleHeaderGetXmin: FrozenTransactionId for a frozen
    /// tuple, the stored xmin otherwise.
    pub fn xmin(&self) -> TransactionId {
        if self.xmin_frozen() {
            FROZEN_TRANSACTION_ID
        } else {
            self.raw_xmin
        }
    }

    /// Re-runs htup_details.h HEAP_XMAX_IS_LOCKED_ONLY on this tuple's infomask.
    pub fn xmax_is_locked_only(&self) -> bool {
        xmax_is_locked_only(self.infomask)
    }

    /// `HEAP_XMAX_IS_MULTI`.
    pub fn xmax_is_multi(&self) -> bool {
        self.infomask & HEAP_XMAX_IS_MULTI != 0
    }

    /// Whether the server would ask for the update xid of a multixact xmax here
    /// (HeapTupleSatisfiesHistoricMVCC does once the xmax is neither invalid nor a
    /// mere lock).
    pub fn has_multi_updater(&self) -> bool {
        self.infomask & HEAP_XMAX_INVALID == 0
            && !self.xmax_is_locked_only()
            && self.xmax_is_multi()
    }

    /// The set flags of `t_infomask` and `t_infomask2` by name.
    pub fn flag_names(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = INFOMASK_NAMES
            .iter()
            .filter(|(bit, _)| self.infomask & bit != 0)
            .map(|(_, n)| *n)
            .collect();
        v.extend(
            INFOMASK2_NAMES
                .iter()
                .filter(|(bit, _)| self.infomask2 & bit != 0)
                .map(|(_, n)| *n),
        );
        v
    }
}

/// Re-runs htup_details.h HEAP_XMAX_IS_LOCKED_ONLY: the xmax only locks the tuple (the
/// lock-only bit, or an exclusive lock that is not a multixact).
pub fn xmax_is_locked_only(mask: u16) -> bool {
    mask & HEAP_XMAX_LOCK_ONLY != 0
        || mask & (HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK) == HEAP_XMAX_EXCL_LOCK
}

/// A catalog snapshot of logical decoding (`SNAPSHOT_HISTORIC_MVCC`).
///
/// `xip` holds the xids to treat as committed between xmin and xmax (the builder's
/// committed catalog-modifying transactions), `subxip` the decoding transaction's own
/// xids (top level and subtransactions). Both are kept sorted with xidComparator so
/// that membership tests behave as the server's bsearch does.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HistoricSnapshot {
    pub xmin: TransactionId,
    pub xmax: TransactionId,
    pub xip: Vec<TransactionId>,
    pub subxip: Vec<TransactionId>,
    pub curcid: CommandId,
    /// Whether ReorderBufferCopySnap made this a private copy for one transaction.
    pub copied: bool,
}

fn sorted(v: &[TransactionId]) -> Vec<TransactionId> {
    let mut v = v.to_vec();
    v.sort_by(transam::xid_comparator);
    v
}

impl HistoricSnapshot {
    /// Re-runs snapbuild.c SnapBuildBuildSnapshot: the builder's xmin and xmax, its
    /// committed xids sorted for bsearch, no own xids, and `curcid` FirstCommandId.
    pub fn build(xmin: TransactionId, xmax: TransactionId, committed: &[TransactionId]) -> Self {
        HistoricSnapshot {
            xmin,
            xmax,
            xip: sorted(committed),
            subxip: Vec::new(),
            curcid: FIRST_COMMAND_ID,
            copied: false,
        }
    }

    /// A snapshot from explicit fields (a what-if); both arrays get sorted the way the
    /// server sorts them before it searches them.
    pub fn from_parts(
        xmin: TransactionId,
        xmax: TransactionId,
        xip: &[TransactionId],
        subxip: &[TransactionId],
        curcid: CommandId,
    ) -> Self {
        HistoricSnapshot {
            xmin,
            xmax,
            xip: sorted(xip),
            subxip: sorted(subxip),
            curcid,
            copied: !subxip.is_empty(),
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferCopySnap: a private copy for the decoding
    /// transaction `top` whose `subxip` lists `top` and its (not aborted)
    /// subtransactions, sorted, and whose `curcid` is `cid`.
    pub fn copy_for(&self, top: TransactionId, subxacts: &[TransactionId], cid: CommandId) -> Self {
        let mut sub = Vec::with_capacity(subxacts.len() + 1);
        sub.push(top);
        sub.extend_from_slice(subxacts);
        HistoricSnapshot {
            xmin: self.xmin,
            xmax: self.xmax,
            xip: self.xip.clone(),
            subxip: sorted(&sub),
            curcid: cid,
            copied: true,
        }
    }

    /// heapam_visibility.c TransactionIdInArray over `xip`.
    pub fn in_xip(&self, x: TransactionId) -> bool {
        in_array(x, &self.xip)
    }

    /// heapam_visibility.c TransactionIdInArray over `subxip`.
    pub fn in_subxip(&self, x: TransactionId) -> bool {
        in_array(x, &self.subxip)
    }
}

/// Binary search in an array sorted with xidComparator (plain unsigned order).
fn in_array(x: TransactionId, sorted: &[TransactionId]) -> bool {
    !sorted.is_empty() && sorted.binary_search(&x).is_ok()
}

/// A `RelFileLocator` (`RelFileNode` up to 15): tablespace, database, relfilenumber.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RelFileLocator {
    pub spc_oid: u32,
    pub db_oid: u32,
    pub rel_number: u32,
}

/// The key of the tuple-cid map: where the tuple lives (reorderbuffer.c
/// ReorderBufferTupleCidKey).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct TupleCidKey {
    pub locator: RelFileLocator,
    pub block: u32,
    pub offset: u16,
}

/// One entry of the tuple-cid map (reorderbuffer.c ReorderBufferTupleCidEnt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TupleCidEnt {
    pub cmin: CommandId,
    pub cmax: CommandId,
    pub combocid: CommandId,
}

/// One NEW_CID record's contribution to its top-level transaction's tuple-cid list
/// (reorderbuffer.c ReorderBufferAddNewTupleCids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TupleCid {
    pub lsn: crate::include::xlogdefs::Lsn,
    pub key: TupleCidKey,
    pub cmin: CommandId,
    pub cmax: CommandId,
    pub combocid: CommandId,
}

/// The tuple-cid map of one decoding transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TupleCidHash {
    map: HashMap<TupleCidKey, TupleCidEnt>,
}

impl TupleCidHash {
    /// Re-runs reorderbuffer.c ReorderBufferBuildTupleCidHash over the transaction's
    /// tuple-cid list, in list order: the first entry of a tuple gives cmin, later ones
    /// only replace cmax.
    pub fn build(entries: &[TupleCid]) -> Self {
        let mut map: HashMap<TupleCidKey, TupleCidEnt> = HashMap::with_capacity(entries.len());
        for e in entries {
            map.entry(e.key)
                .and_modify(|ent| ent.cmax = e.cmax)
                .or_insert(TupleCidEnt {
                    cmin: e.cmin,
                    cmax: e.cmax,
                    combocid: e.combocid,
                });
        }
        TupleCidHash { map }
    }

    /// One entry for one key (a what-if).
    pub fn single(key: TupleCidKey, ent: TupleCidEnt) -> Self {
        let mut map = HashMap::new();
        map.insert(key, ent);
        TupleCidHash { map }
    }

    pub fn get(&self, key: &TupleCidKey) -> Option<TupleCidEnt> {
        self.map.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Re-runs reorderbuffer.c ApplyLogicalMappingFile for one file's records: a tuple
    /// the map knows at its old place is also known at its new place (an entry already
    /// at the new place is kept).
    pub fn apply_mappings(&mut self, records: &[RewriteMapping]) {
        for m in records {
            if let Some(ent) = self.map.get(&m.old).copied() {
                self.map.entry(m.new).or_insert(ent);
            }
        }
    }
}

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
    pub lsn: crate::include::xlogdefs::Lsn,
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
        lsn: crate::include::xlogdefs::Lsn(((nums[2] as u64) << 32) | nums[3] as u64),
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

/// A failed server lookup (a mapping file that cannot be listed, read or parsed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// Could not open, list or read: the server's `errcode_for_file_access` texts.
    Io(String),
    /// A name or a length the server refuses.
    Corrupt(String),
}

impl LookupError {
    pub fn message(&self) -> &str {
        match self {
            LookupError::Io(m) | LookupError::Corrupt(m) => m,
        }
    }
}

/// What the visibility rules ask of the server: commit-log status, multixact members,
/// and the heap-rewrite mapping files.
pub trait ServerLookups {
    /// transam.c TransactionIdDidCommit.
    fn did_commit(&mut self, xid: TransactionId) -> bool;
    /// heapam.c HeapTupleGetUpdateXid: the updating member of a multixact xmax.
    fn update_xid(&mut self, multi: TransactionId, infomask: u16) -> TransactionId;
    /// The entries of `pg_logical/mappings` (every name, in directory order).
    fn mapping_file_names(&mut self) -> Result<Vec<String>, LookupError>;
    /// The bytes of one mapping file.
    fn mapping_file(&mut self, name: &str) -> Result<Vec<u8>, LookupError>;
}

/// The tuple-cid lookups of one scan: the decoding transaction's map (None when
/// ReorderBufferBuildTupleCidHash leaves it unset) and the relation being scanned.
#[derive(Clone, Debug, Default)]
pub struct CidResolver {
    pub hash: Option<TupleCidHash>,
    /// `t_tableOid`: the mapping files are per relation.
    pub rel_oid: u32,
    /// MyDatabaseId, or 0 for a shared catalog (UpdateLogicalMappings's `dboid`).
    pub db_oid: u32,
    /// Mapping files applied so far (for the report).
    pub applied_files: Vec<String>,
}

impl CidResolver {
    /// Re-runs reorderbuffer.c ResolveCminCmaxDuringDecoding for the tuple at `key`:
    /// no map at all is "unresolved"; a miss applies the relation's rewrite mappings
    /// (UpdateLogicalMappings) once and looks again.
    pub fn resolve(
        &mut self,
        key: &TupleCidKey,
        snapshot: &HistoricSnapshot,
        lookups: &mut dyn ServerLookups,
    ) -> Result<Option<TupleCidEnt>, LookupError> {
        if self.hash.is_none() {
            return Ok(None);
        }
        if let Some(e) = self.hash.as_ref().and_then(|h| h.get(key)) {
            return Ok(Some(e));
        }
        self.update_logical_mappings(snapshot, lookups)?;
        Ok(self.hash.as_ref().and_then(|h| h.get(key)))
    }

    /// The entry the map holds for `key` now, without touching the mapping files.
    pub fn peek(&self, key: &TupleCidKey) -> Option<TupleCidEnt> {
        self.hash.as_ref().and_then(|h| h.get(key))
    }

    /// Re-runs reorderbuffer.c UpdateLogicalMappings: every `map-` file of this
    /// database and relation whose rewriting transaction committed and whose mapped
    /// xid is one of the decoding transaction's, applied in LSN order.
    pub fn update_logical_mappings(
        &mut self,
        snapshot: &HistoricSnapshot,
        lookups: &mut dyn ServerLookups,
    ) -> Result<(), LookupError> {
        let mut files = Vec::new();
        for name in lookups.mapping_file_names()? {
            if name == "." || name == ".." || !name.starts_with("map-") {
                continue;
            }
            let f = parse_mapping_file_name(&name).ok_or_else(|| {
                LookupError::Corrupt(format!("could not parse filename \"{name}\""))
            })?;
            if f.db_oid != self.db_oid || f.rel_oid != self.rel_oid {
                continue;
            }
            if !lookups.did_commit(f.create_xid) {
                continue;
            }
            if !snapshot.in_subxip(f.mapped_xid) {
                continue;
            }
            files.push(f);
        }
        files.sort_by_key(|f| f.lsn);
        for f in files {
            let bytes = lookups.mapping_file(&f.name)?;
            let (records, partial) = parse_mapping_records(&bytes);
            if let Some(h) = self.hash.as_mut() {
                h.apply_mappings(&records);
            }
            if let Some(n) = partial {
                return Err(LookupError::Io(format!(
                    "could not read from file \"pg_logical/mappings/{}\": read {n} instead of {REWRITE_MAPPING_SIZE} bytes",
                    f.name
                )));
            }
            self.applied_files.push(f.name);
        }
        Ok(())
    }
}

/// Which test decided the inserting side of HeapTupleSatisfiesHistoricMVCC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum XminBranch {
    /// The xmin-invalid hint: the inserter aborted. Invisible.
    Invalid,
    /// One of the decoding transaction's xids, but the tuple-cid map has no entry.
    /// Invisible.
    OursUnresolved,
    /// Ours, inserted at or after `curcid`. Invisible.
    OursCminAtOrAfterCurcid,
    /// Ours, inserted before `curcid`. Go on to xmax.
    OursCminBeforeCurcid,
    /// Before the snapshot's xmin and hinted committed. Go on to xmax.
    BeforeXminHintCommitted,
    /// Before the snapshot's xmin, no hint, the commit log says committed. Go on.
    BeforeXminClogCommitted,
    /// Before the snapshot's xmin and not committed. Invisible.
    BeforeXminNotCommitted,
    /// At or after the snapshot's xmax. Invisible.
    AtOrAfterXmax,
    /// In [xmin, xmax) and a committed catalog-modifying xid (`xip`). Go on.
    InXip,
    /// In [xmin, xmax) but not in `xip`. Invisible.
    InRangeNotInXip,
}

impl XminBranch {
    pub const ALL: [XminBranch; 10] = [
        XminBranch::Invalid,
        XminBranch::OursUnresolved,
        XminBranch::OursCminAtOrAfterCurcid,
        XminBranch::OursCminBeforeCurcid,
        XminBranch::BeforeXminHintCommitted,
        XminBranch::BeforeXminClogCommitted,
        XminBranch::BeforeXminNotCommitted,
        XminBranch::AtOrAfterXmax,
        XminBranch::InXip,
        XminBranch::InRangeNotInXip,
    ];

    /// The position in [`Self::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn label(self) -> &'static str {
        match self {
            XminBranch::Invalid => "xmin invalid",
            XminBranch::OursUnresolved => "xmin ours, unresolved",
            XminBranch::OursCminAtOrAfterCurcid => "xmin ours, cmin >= curcid",
            XminBranch::OursCminBeforeCurcid => "xmin ours, cmin < curcid",
            XminBranch::BeforeXminHintCommitted => "xmin < snapshot xmin, committed hint",
            XminBranch::BeforeXminClogCommitted => "xmin < snapshot xmin, clog committed",
            XminBranch::BeforeXminNotCommitted => "xmin < snapshot xmin, not committed",
            XminBranch::AtOrAfterXmax => "xmin >= snapshot xmax",
            XminBranch::InXip => "xmin in xip",
            XminBranch::InRangeNotInXip => "xmin in [xmin, xmax), not in xip",
        }
    }
}

/// Which test decided the deleting side (reached only when the xmin side let the
/// tuple through).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum XmaxBranch {
    /// The xmax-invalid hint: nobody (still) deletes it. Visible.
    Invalid,
    /// The xmax only locks the tuple. Visible.
    LockedOnly,
    /// One of the decoding transaction's xids, the map has no entry. Visible.
    OursUnresolved,
    /// Ours, the map entry has no cmax. Visible.
    OursNoCmax,
    /// Ours, deleted at or after `curcid`. Visible.
    OursCmaxAtOrAfterCurcid,
    /// Ours, deleted before `curcid`. Invisible.
    OursCmaxBeforeCurcid,
    /// Before the snapshot's xmin and hinted committed. Invisible.
    BeforeXminHintCommitted,
    /// Before the snapshot's xmin, the commit log says committed. Invisible.
    BeforeXminClogCommitted,
    /// Before the snapshot's xmin and not committed. Visible.
    BeforeXminNotCommitted,
    /// At or after the snapshot's xmax. Visible.
    AtOrAfterXmax,
    /// In [xmin, xmax) and in `xip`. Invisible.
    InXip,
    /// In [xmin, xmax) and not in `xip`. Visible.
    InRangeNotInXip,
}

impl XmaxBranch {
    pub const ALL: [XmaxBranch; 12] = [
        XmaxBranch::Invalid,
        XmaxBranch::LockedOnly,
        XmaxBranch::OursUnresolved,
        XmaxBranch::OursNoCmax,
        XmaxBranch::OursCmaxAtOrAfterCurcid,
        XmaxBranch::OursCmaxBeforeCurcid,
        XmaxBranch::BeforeXminHintCommitted,
        XmaxBranch::BeforeXminClogCommitted,
        XmaxBranch::BeforeXminNotCommitted,
        XmaxBranch::AtOrAfterXmax,
        XmaxBranch::InXip,
        XmaxBranch::InRangeNotInXip,
    ];

    /// The position in [`Self::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn label(self) -> &'static str {
        match self {
            XmaxBranch::Invalid => "xmax invalid",
            XmaxBranch::LockedOnly => "xmax locked only",
            XmaxBranch::OursUnresolved => "xmax ours, unresolved",
            XmaxBranch::OursNoCmax => "xmax ours, no cmax",
            XmaxBranch::OursCmaxAtOrAfterCurcid => "xmax ours, cmax >= curcid",
            XmaxBranch::OursCmaxBeforeCurcid => "xmax ours, cmax < curcid",
            XmaxBranch::BeforeXminHintCommitted => "xmax < snapshot xmin, committed hint",
            XmaxBranch::BeforeXminClogCommitted => "xmax < snapshot xmin, clog committed",
            XmaxBranch::BeforeXminNotCommitted => "xmax < snapshot xmin, not committed",
            XmaxBranch::AtOrAfterXmax => "xmax >= snapshot xmax",
            XmaxBranch::InXip => "xmax in xip",
            XmaxBranch::InRangeNotInXip => "xmax in [xmin, xmax), not in xip",
        }
    }
}

/// HeapTupleSatisfiesHistoricMVCC's answer for one tuple and how it got there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HistoricVerdict {
    pub visible: bool,
    pub xmin_branch: XminBranch,
    /// None when the xmin side already decided.
    pub xmax_branch: Option<XmaxBranch>,
    /// The updating xid of a multixact xmax, when it was looked up.
    pub update_xid: Option<TransactionId>,
    /// The (cmin, cmax) the map resolved on the path taken, if it was consulted.
    pub resolved: Option<TupleCidEnt>,
}

impl HistoricVerdict {
    /// "xmin branch" or "xmin branch; xmax branch".
    pub fn branch_text(&self) -> String {
        self.branch_str().to_owned()
    }

    /// [`Self::branch_text`] without an allocation per call: the 10 × 13 texts are
    /// formatted once, on first use, and kept for the life of the process.
    pub fn branch_str(&self) -> &'static str {
        const XMAX_SLOTS: usize = XmaxBranch::ALL.len() + 1;
        static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let texts = TEXTS.get_or_init(|| {
            let mut v = Vec::with_capacity(XminBranch::ALL.len() * XMAX_SLOTS);
            for m in XminBranch::ALL {
                v.push(m.label().to_owned());
                for x in XmaxBranch::ALL {
                    v.push(format!("{}; {}", m.label(), x.label()));
                }
            }
            v
        });
        let xmax = self.xmax_branch.map_or(0, |x| x.index() + 1);
        &texts[self.xmin_branch.index() * XMAX_SLOTS + xmax]
    }
}

/// Re-runs heapam_visibility.c HeapTupleSatisfiesHistoricMVCC for the tuple with
/// header `t` at `key`, under `snapshot`.
///
/// The inserting xid is judged first: an invalid hint hides the tuple; one of the
/// decoding transaction's own xids needs the tuple-cid map and a cmin below `curcid`;
/// an xid older than the snapshot's xmin must have committed (hint bit first, then the
/// commit log); one at or after xmax is hidden; one in between must be in `xip`. Then
/// the deleting xid: an invalid hint or a mere lock leaves the tuple visible; a
/// multixact is replaced by its updating member; the same four tests follow, with the
/// opposite outcomes, and an own deletion counts only before `curcid`. No hint bit is
/// set here, as the server sets none on this path.
pub fn satisfies_historic_mvcc(
    t: &TupleHeader,
    key: &TupleCidKey,
    snapshot: &HistoricSnapshot,
    cids: &mut CidResolver,
    lookups: &mut dyn ServerLookups,
) -> Result<HistoricVerdict, LookupError> {
    let xmin = t.xmin();
    let mut v = HistoricVerdict {
        visible: false,
        xmin_branch: XminBranch::Invalid,
        xmax_branch: None,
        update_xid: None,
        resolved: None,
    };
    // The inserting side.
    let go_on = if t.xmin_invalid() {
        v.xmin_branch = XminBranch::Invalid;
        false
    } else if snapshot.in_subxip(xmin) {
        match cids.resolve(key, snapshot, lookups)? {
            None => {
                v.xmin_branch = XminBranch::OursUnresolved;
                false
            }
            Some(ent) => {
                v.resolved = Some(ent);
                if ent.cmin >= snapshot.curcid {
                    v.xmin_branch = XminBranch::OursCminAtOrAfterCurcid;
                    false
                } else {
                    v.xmin_branch = XminBranch::OursCminBeforeCurcid;
                    true
                }
            }
        }
    } else if transam::precedes(xmin, snapshot.xmin) {
        if t.xmin_committed() {
            v.xmin_branch = XminBranch::BeforeXminHintCommitted;
            true
        } else if lookups.did_commit(xmin) {
            v.xmin_branch = XminBranch::BeforeXminClogCommitted;
            true
        } else {
            v.xmin_branch = XminBranch::BeforeXminNotCommitted;
            false
        }
    } else if transam::follows_or_equals(xmin, snapshot.xmax) {
        v.xmin_branch = XminBranch::AtOrAfterXmax;
        false
    } else if snapshot.in_xip(xmin) {
        v.xmin_branch = XminBranch::InXip;
        true
    } else {
        v.xmin_branch = XminBranch::InRangeNotInXip;
        false
    };
    if !go_on {
        return Ok(v);
    }

    // The deleting side.
    let (visible, branch) = if t.infomask & HEAP_XMAX_INVALID != 0 {
        (true, XmaxBranch::Invalid)
    } else if t.xmax_is_locked_only() {
        (true, XmaxBranch::LockedOnly)
    } else {
        let xmax = if t.xmax_is_multi() {
            let u = lookups.update_xid(t.raw_xmax, t.infomask);
            v.update_xid = Some(u);
            u
        } else {
            t.raw_xmax
        };
        if snapshot.in_subxip(xmax) {
            match cids.resolve(key, snapshot, lookups)? {
                None => (true, XmaxBranch::OursUnresolved),
                Some(ent) => {
                    v.resolved = Some(ent);
                    if ent.cmax == INVALID_COMMAND_ID {
                        (true, XmaxBranch::OursNoCmax)
                    } else if ent.cmax >= snapshot.curcid {
                        (true, XmaxBranch::OursCmaxAtOrAfterCurcid)
                    } else {
                        (false, XmaxBranch::OursCmaxBeforeCurcid)
                    }
                }
            }
        } else if transam::precedes(xmax, snapshot.xmin) {
            if t.infomask & HEAP_XMAX_COMMITTED != 0 {
                (false, XmaxBranch::BeforeXminHintCommitted)
            } else if lookups.did_commit(xmax) {
                (false, XmaxBranch::BeforeXminClogCommitted)
            } else {
                (true, XmaxBranch::BeforeXminNotCommitted)
            }
        } else if transam::follows_or_equals(xmax, snapshot.xmax) {
            (true, XmaxBranch::AtOrAfterXmax)
        } else if snapshot.in_xip(xmax) {
            (false, XmaxBranch::InXip)
        } else {
            (true, XmaxBranch::InRangeNotInXip)
        }
    };
    v.visible = visible;
    v.xmax_branch = Some(branch);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::xlogdefs::Lsn;
    use std::collections::{BTreeMap, BTreeSet};

    /// Server lookups from plain tables.
    #[derive(Default)]
    struct Fake {
        committed: BTreeSet<TransactionId>,
        updaters: BTreeMap<TransactionId, TransactionId>,
        files: Vec<(String, Vec<u8>)>,
        did_commit_calls: Vec<TransactionId>,
    }

    impl ServerLookups for Fake {
        fn did_commit(&mut self, x: TransactionId) -> bool {
            self.did_commit_calls.push(x);
            // transam.c: the bootstrap and frozen xids count as committed.
            x == 1 || x == 2 || self.committed.contains(&x)
        }
        fn update_xid(&mut self, multi: TransactionId, _: u16) -> TransactionId {
            self.updaters.get(&multi).copied().unwrap_or(0)
        }
        fn mapping_file_names(&mut self) -> Result<Vec<String>, LookupError> {
            Ok(self.files.iter().map(|f| f.0.clone()).collect())
        }
        fn mapping_file(&mut self, name: &str) -> Result<Vec<u8>, LookupError> {
            self.files
                .iter()
                .find(|f| f.0 == name)
                .map(|f| f.1.clone())
                .ok_or_else(|| LookupError::Io(format!("could not open file \"{name}\"")))
        }
    }

    const LOC: RelFileLocator = RelFileLocator {
        spc_oid: 1663,
        db_oid: 5,
        rel_number: 1249,
    };

    fn key(block: u32, offset: u16) -> TupleCidKey {
        TupleCidKey {
            locator: LOC,
            block,
            offset,
        }
    }

    fn cid(k: TupleCidKey, cmin: u32, cmax: u32) -> TupleCid {
        TupleCid {
            lsn: Lsn(1),
            key: k,
            cmin,
            cmax,
            combocid: INVALID_COMMAND_ID,
        }
    }

    /// xmin 100, xmax 200, 150 committed in between; decoding transaction 160 with
    /// subtransaction 165 at curcid 3.
    fn snap() -> HistoricSnapshot {
        HistoricSnapshot::build(100, 200, &[170, 150]).copy_for(160, &[165], 3)
    }

    fn resolver(entries: &[TupleCid]) -> CidResolver {
        CidResolver {
            hash: Some(TupleCidHash::build(entries)),
            rel_oid: 1249,
            db_oid: 5,
            applied_files: vec![],
        }
    }

    fn judge(t: TupleHeader, entries: &[TupleCid], fake: &mut Fake) -> HistoricVerdict {
        satisfies_historic_mvcc(&t, &key(0, 1), &snap(), &mut resolver(entries), fake).unwrap()
    }

    fn live(xmin: u32, mask: u16) -> TupleHeader {
        TupleHeader::with(xmin, 0, mask | HEAP_XMAX_INVALID)
    }

    #[test]
    fn branch_str_is_every_combination() {
        for (i, m) in XminBranch::ALL.into_iter().enumerate() {
            assert_eq!(m.index(), i);
            let mut v = HistoricVerdict {
                visible: false,
                xmin_branch: m,
                xmax_branch: None,
                update_xid: None,
                resolved: None,
            };
            assert_eq!(v.branch_str(), m.label());
            for (j, x) in XmaxBranch::ALL.into_iter().enumerate() {
                assert_eq!(x.index(), j);
                v.xmax_branch = Some(x);
                assert_eq!(v.branch_str(), format!("{}; {}", m.label(), x.label()));
                assert_eq!(v.branch_text(), v.branch_str());
            }
        }
    }

    #[test]
    fn build_and_copy_sort_like_the_server() {
        let s = HistoricSnapshot::build(100, 200, &[170, 150, 4_000_000_000]);
        assert_eq!(s.xip, vec![150, 170, 4_000_000_000]);
        assert_eq!(s.curcid, FIRST_COMMAND_ID);
        assert!(s.subxip.is_empty() && !s.copied);
        let c = s.copy_for(160, &[190, 165], 7);
        assert_eq!(c.subxip, vec![160, 165, 190]);
        assert_eq!((c.curcid, c.copied), (7, true));
        assert_eq!(c.xip, s.xip);
    }

    #[test]
    fn xmin_invalid() {
        let v = judge(live(150, HEAP_XMIN_INVALID), &[], &mut Fake::default());
        assert_eq!((v.visible, v.xmin_branch), (false, XminBranch::Invalid));
        // Frozen carries the invalid bit too but is not invalid.
        let v = judge(live(150, HEAP_XMIN_FROZEN), &[], &mut Fake::default());
        assert_eq!(v.xmin_branch, XminBranch::BeforeXminHintCommitted);
        assert!(v.visible);
    }

    #[test]
    fn xmin_ours() {
        let k = key(0, 1);
        let v = judge(live(160, 0), &[], &mut Fake::default());
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::OursUnresolved)
        );
        let v = judge(
            live(165, 0),
            &[cid(k, 3, INVALID_COMMAND_ID)],
            &mut Fake::default(),
        );
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::OursCminAtOrAfterCurcid)
        );
        let v = judge(
            live(165, 0),
            &[cid(k, 2, INVALID_COMMAND_ID)],
            &mut Fake::default(),
        );
        assert_eq!(
            (v.visible, v.xmin_branch, v.xmax_branch),
            (
                true,
                XminBranch::OursCminBeforeCurcid,
                Some(XmaxBranch::Invalid)
            )
        );
        // No map at all: unresolved, whatever the raw command id says.
        let mut t = live(160, 0);
        t.raw_cid = 0;
        let v = satisfies_historic_mvcc(
            &t,
            &k,
            &snap(),
            &mut CidResolver::default(),
            &mut Fake::default(),
        )
        .unwrap();
        assert_eq!(v.xmin_branch, XminBranch::OursUnresolved);
    }

    #[test]
    fn xmin_before_snapshot_xmin() {
        let mut f = Fake::default();
        let v = judge(live(90, HEAP_XMIN_COMMITTED), &[], &mut f);
        assert_eq!(v.xmin_branch, XminBranch::BeforeXminHintCommitted);
        assert!(
            f.did_commit_calls.is_empty(),
            "the hint spares the clog lookup"
        );
        f.committed.insert(91);
        let v = judge(live(91, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (true, XminBranch::BeforeXminClogCommitted)
        );
        let v = judge(live(92, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::BeforeXminNotCommitted)
        );
        assert_eq!(f.did_commit_calls, vec![91, 92]);
        // Bootstrap tuples (xmin 1) count as committed before any normal xmin.
        let v = judge(live(1, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (true, XminBranch::BeforeXminClogCommitted)
        );
    }

    #[test]
    fn xmin_horizons() {
        let mut f = Fake::default();
        // A committed hint does not help a tuple from after xmax.
        let v = judge(live(200, HEAP_XMIN_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::AtOrAfterXmax)
        );
        let v = judge(live(150, 0), &[], &mut f);
        assert_eq!((v.visible, v.xmin_branch), (true, XminBranch::InXip));
        // Committed in the clog, but not a catalog change the builder counted.
        f.committed.insert(151);
        let v = judge(live(151, HEAP_XMIN_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::InRangeNotInXip)
        );
        assert!(f.did_commit_calls.is_empty());
    }

    fn dead(xmax: u32, mask: u16) -> TupleHeader {
        TupleHeader::with(90, xmax, mask | HEAP_XMIN_COMMITTED)
    }

    #[test]
    fn xmax_invalid_and_locks() {
        let mut f = Fake::default();
        let v = judge(
            dead(150, HEAP_XMAX_INVALID | HEAP_XMAX_COMMITTED),
            &[],
            &mut f,
        );
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::Invalid))
        );
        let v = judge(
            dead(150, HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_KEYSHR_LOCK),
            &[],
            &mut f,
        );
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::LockedOnly))
        );
        // An exclusive lock that is not a multixact is a lock even without LOCK_ONLY.
        let v = judge(dead(150, HEAP_XMAX_EXCL_LOCK), &[], &mut f);
        assert_eq!(v.xmax_branch, Some(XmaxBranch::LockedOnly));
        // A multixact of lockers only.
        let v = judge(
            dead(
                7,
                HEAP_XMAX_IS_MULTI | HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_SHR_LOCK,
            ),
            &[],
            &mut f,
        );
        assert_eq!(v.xmax_branch, Some(XmaxBranch::LockedOnly));
        assert_eq!(v.update_xid, None);
    }

    #[test]
    fn xmax_multi_uses_the_updater() {
        let mut f = Fake::default();
        f.updaters.insert(7, 150);
        let v = judge(
            dead(7, HEAP_XMAX_IS_MULTI | HEAP_XMAX_KEYSHR_LOCK),
            &[],
            &mut f,
        );
        assert_eq!(v.update_xid, Some(150));
        assert_eq!((v.visible, v.xmax_branch), (false, Some(XmaxBranch::InXip)));
        // The same multi id read as a plain xid would be "before xmin, not committed".
        let v = judge(dead(7, 0), &[], &mut f);
        assert_eq!(v.xmax_branch, Some(XmaxBranch::BeforeXminNotCommitted));
    }

    #[test]
    fn xmax_ours() {
        let k = key(0, 1);
        let mut f = Fake::default();
        let v = judge(dead(160, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::OursUnresolved))
        );
        let v = judge(
            dead(165, 0),
            &[cid(k, INVALID_COMMAND_ID, INVALID_COMMAND_ID)],
            &mut f,
        );
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::OursNoCmax))
        );
        let v = judge(dead(160, 0), &[cid(k, INVALID_COMMAND_ID, 3)], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::OursCmaxAtOrAfterCurcid))
        );
        let v = judge(dead(160, 0), &[cid(k, INVALID_COMMAND_ID, 2)], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (false, Some(XmaxBranch::OursCmaxBeforeCurcid))
        );
        // Inserted and deleted by us (a combo CID on disk): cmin from the first NEW_CID,
        // cmax from the later one.
        let entries = [cid(k, 0, INVALID_COMMAND_ID), cid(k, 0, 1)];
        let v = judge(TupleHeader::with(160, 160, HEAP_COMBOCID), &entries, &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch, v.xmax_branch),
            (
                false,
                XminBranch::OursCminBeforeCurcid,
                Some(XmaxBranch::OursCmaxBeforeCurcid)
            )
        );
        assert_eq!(v.resolved.map(|e| (e.cmin, e.cmax)), Some((0, 1)));
    }

    #[test]
    fn xmax_horizons() {
        let mut f = Fake::default();
        let v = judge(dead(95, HEAP_XMAX_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (false, Some(XmaxBranch::BeforeXminHintCommitted))
        );
        f.committed.insert(96);
        let v = judge(dead(96, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (false, Some(XmaxBranch::BeforeXminClogCommitted))
        );
        let v = judge(dead(97, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::BeforeXminNotCommitted))
        );
        let v = judge(dead(250, HEAP_XMAX_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::AtOrAfterXmax))
        );
        let v = judge(dead(170, 0), &[], &mut f);
        assert_eq!((v.visible, v.xmax_branch), (false, Some(XmaxBranch::InXip)));
        let v = judge(dead(171, HEAP_XMAX_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::InRangeNotInXip))
        );
    }

    #[test]
    fn wraparound() {
        // xmin just before the wrap, xmax just after it; 4294967290 committed.
        let s = HistoricSnapshot::build(u32::MAX - 10, 20, &[u32::MAX - 5, 10]);
        let mut f = Fake::default();
        let mut r = CidResolver::default();
        let k = key(0, 1);
        let mut check =
            |t: TupleHeader| satisfies_historic_mvcc(&t, &k, &s, &mut r, &mut f).unwrap();
        // 10 follows xmin across the wrap and is in xip.
        let v = check(live(10, 0));
        assert_eq!((v.visible, v.xmin_branch), (true, XminBranch::InXip));
        // u32::MAX - 20 precedes xmin.
        let v = check(live(u32::MAX - 20, HEAP_XMIN_COMMITTED));
        assert_eq!(v.xmin_branch, XminBranch::BeforeXminHintCommitted);
        // 25 is past xmax; 3 (the first normal xid after the wrap) is in range, not in xip.
        assert_eq!(
            check(live(25, HEAP_XMIN_COMMITTED)).xmin_branch,
            XminBranch::AtOrAfterXmax
        );
        assert_eq!(check(live(3, 0)).xmin_branch, XminBranch::InRangeNotInXip);
        // xmax u32::MAX - 5 is in xip even though it is numerically above xmax.
        let v = check(TupleHeader::with(10, u32::MAX - 5, 0));
        assert_eq!((v.visible, v.xmax_branch), (false, Some(XmaxBranch::InXip)));
        let v = check(TupleHeader::with(10, 21, 0));
        assert_eq!(v.xmax_branch, Some(XmaxBranch::AtOrAfterXmax));
        // Frozen xmin (2) precedes any normal xmin, wrapped or not.
        let v = check(TupleHeader::with(
            u32::MAX - 1,
            0,
            HEAP_XMIN_FROZEN | HEAP_XMAX_INVALID,
        ));
        assert_eq!(
            (v.visible, v.xmin_branch),
            (true, XminBranch::BeforeXminHintCommitted)
        );
    }

    fn mapping_bytes(old: TupleCidKey, new: TupleCidKey) -> Vec<u8> {
        let mut b = Vec::new();
        for l in [old.locator, new.locator] {
            b.extend(l.spc_oid.to_ne_bytes());
            b.extend(l.db_oid.to_ne_bytes());
            b.extend(l.rel_number.to_ne_bytes());
        }
        for k in [old, new] {
            b.extend(((k.block >> 16) as u16).to_ne_bytes());
            b.extend((k.block as u16).to_ne_bytes());
            b.extend(k.offset.to_ne_bytes());
        }
        b
    }

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

    #[test]
    fn rewritten_tuples_resolve_through_mapping_files() {
        let old = key(3, 7);
        let moved = TupleCidKey {
            locator: RelFileLocator {
                rel_number: 99999,
                ..LOC
            },
            block: 0,
            offset: 2,
        };
        let mut f = Fake::default();
        f.committed.insert(180); // the VACUUM FULL that rewrote the heap
        f.files = vec![
            ("map-5-4e1-0_100-a0-b4".into(), mapping_bytes(old, moved)), // mapped 160, by 180
            ("map-5-4e1-0_90-a0-b5".into(), mapping_bytes(moved, old)),  // by 181: aborted
            ("map-5-4e0-0_100-a0-b4".into(), mapping_bytes(old, moved)), // another relation
            ("other".into(), vec![]),
        ];
        let s = snap();
        let mut r = resolver(&[cid(old, 1, INVALID_COMMAND_ID)]);
        let t = TupleHeader::with(160, 0, HEAP_XMAX_INVALID);
        let v = satisfies_historic_mvcc(&t, &moved, &s, &mut r, &mut f).unwrap();
        assert_eq!(v.xmin_branch, XminBranch::OursCminBeforeCurcid);
        assert_eq!(r.applied_files, vec!["map-5-4e1-0_100-a0-b4".to_owned()]);
        assert_eq!(f.did_commit_calls, vec![180, 181]);
        // Another decoding transaction does not get the mapping.
        let other = HistoricSnapshot::build(100, 200, &[]).copy_for(161, &[], 3);
        let mut r = resolver(&[cid(old, 1, INVALID_COMMAND_ID)]);
        let t = TupleHeader::with(161, 0, HEAP_XMAX_INVALID);
        let v = satisfies_historic_mvcc(&t, &moved, &other, &mut r, &mut f).unwrap();
        assert_eq!(v.xmin_branch, XminBranch::OursUnresolved);
        // A truncated file is the server's read error, after the whole records.
        let t = TupleHeader::with(160, 0, HEAP_XMAX_INVALID);
        let mut bytes = mapping_bytes(old, moved);
        bytes.extend([0u8; 5]);
        f.files = vec![("map-5-4e1-0_100-a0-b4".into(), bytes)];
        let mut r = resolver(&[cid(old, 1, INVALID_COMMAND_ID)]);
        let e = satisfies_historic_mvcc(&t, &moved, &s, &mut r, &mut f).unwrap_err();
        assert!(e.message().contains("read 5 instead of 36 bytes"), "{e:?}");
        assert!(r.peek(&moved).is_some());
        // An unparsable map- name is an error as on the server.
        f.files = vec![("map-zz".into(), vec![])];
        let mut r = resolver(&[cid(old, 1, INVALID_COMMAND_ID)]);
        let e = satisfies_historic_mvcc(&t, &moved, &s, &mut r, &mut f).unwrap_err();
        assert_eq!(
            e,
            LookupError::Corrupt("could not parse filename \"map-zz\"".into())
        );
    }

    #[test]
    fn tuple_cid_hash_keeps_first_cmin_and_last_cmax() {
        let k = key(1, 1);
        let h = TupleCidHash::build(&[cid(k, 0, INVALID_COMMAND_ID), cid(k, 0, 2), cid(k, 0, 4)]);
        assert_eq!(h.get(&k).map(|e| (e.cmin, e.cmax)), Some((0, 4)));
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn header_parse_and_flags() {
        let mut b = vec![0u8; 24];
        b[0..4].copy_from_slice(&700u32.to_ne_bytes());
        b[4..8].copy_from_slice(&701u32.to_ne_bytes());
        b[8..12].copy_from_slice(&3u32.to_ne_bytes());
        b[12..14].copy_from_slice(&1u16.to_ne_bytes());
        b[14..16].copy_from_slice(&2u16.to_ne_bytes());
        b[16..18].copy_from_slice(&5u16.to_ne_bytes());
        b[18..20].copy_from_slice(&(HEAP_HOT_UPDATED | 4).to_ne_bytes());
        b[20..22].copy_from_slice(&(HEAP_XMIN_COMMITTED | HEAP_COMBOCID).to_ne_bytes());
        b[22] = 24;
        let t = TupleHeader::parse(&b).unwrap();
        assert_eq!(
            (t.raw_xmin, t.raw_xmax, t.raw_cid, t.ctid, t.hoff),
            (700, 701, 3, (65538, 5), 24)
        );
        assert_eq!(
            t.flag_names(),
            vec!["HEAP_COMBOCID", "HEAP_XMIN_COMMITTED", "HEAP_HOT_UPDATED"]
        );
        assert!(TupleHeader::parse(&b[..22]).is_none());
    }
}
