//! The changes decode.c queues into the reorder buffer, as the memory accounting sees
//! them: each change's action and its size as reorderbuffer.c ReorderBufferChangeSize
//! counts it, and the body of the heap records they come from ([`ChangeRecord`], parsed
//! from the record's main data and block 0 as DecodeInsert, DecodeUpdate, DecodeDelete,
//! DecodeTruncate, DecodeMultiInsert and DecodeSpecConfirm read them).

use crate::include::heapam_xlog::XLOG_HEAP_OPMASK;
use crate::include::htup_details::infomask::HEAP_HASEXTERNAL;
use crate::include::rmgrlist::{RM_HEAP2_ID, RM_HEAP_ID};

/// The sizes of the server's structs that ReorderBufferChangeSize adds up, in bytes (the
/// adapter reads them from the server's own headers: `sizeof(ReorderBufferChange)` differs
/// between majors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StructSizes {
    /// `sizeof(ReorderBufferChange)`.
    pub change: u64,
    /// `sizeof(HeapTupleData)`, added per tuple.
    pub heap_tuple: u64,
    /// `sizeof(SnapshotData)`, added per snapshot change.
    pub snapshot: u64,
    /// `sizeof(SharedInvalidationMessage)`.
    pub inval_message: u64,
}

impl StructSizes {
    /// x86-64 sizes of PostgreSQL `major` (for tests without a server; the adapter uses
    /// the server's own).
    pub fn x86_64(major: u32) -> Self {
        StructSizes {
            change: if major >= 17 { 104 } else { 112 },
            heap_tuple: 24,
            snapshot: if major >= 17 { 112 } else { 120 },
            inval_message: 16,
        }
    }
}

/// `ReorderBufferChangeType`: the kinds of change the reorder buffer holds (TUPLECID is
/// kept on a list of its own and never counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChangeAction {
    Insert,
    Update,
    Delete,
    Message,
    Invalidation,
    Snapshot,
    CommandId,
    SpecInsert,
    SpecConfirm,
    SpecAbort,
    Truncate,
}

impl ChangeAction {
    /// reorderbuffer.c ReorderBufferQueueChange: the changes that are sent downstream
    /// make their top-level transaction streamable.
    pub fn streamable(self) -> bool {
        matches!(
            self,
            ChangeAction::Insert
                | ChangeAction::Update
                | ChangeAction::Delete
                | ChangeAction::SpecInsert
                | ChangeAction::Truncate
                | ChangeAction::Message
        )
    }

    /// The column a change is counted in by `snapbuild_backlog`.
    pub fn kind(self) -> ChangeKind {
        match self {
            ChangeAction::Insert | ChangeAction::SpecInsert => ChangeKind::Insert,
            ChangeAction::Update => ChangeKind::Update,
            ChangeAction::Delete => ChangeKind::Delete,
            ChangeAction::Truncate => ChangeKind::Truncate,
            ChangeAction::Message => ChangeKind::Message,
            ChangeAction::Invalidation => ChangeKind::Invalidation,
            _ => ChangeKind::Other,
        }
    }
}

/// The change kinds `snapbuild_backlog` counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
    Truncate,
    Message,
    Invalidation,
    Other,
}

/// One change as the reorder buffer holds it: its action, its size
/// (ReorderBufferChangeSize), and what ReorderBufferProcessTXN does with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    pub action: ChangeAction,
    pub size: u64,
    /// An INSERT into a TOAST relation (`XLH_INSERT_ON_TOAST_RELATION`): a chunk kept
    /// aside until the main row's change (ReorderBufferToastAppendChunk).
    pub toast_chunk: bool,
    /// A change of a TOAST relation that is not an insert (a chunk deleted): ignored.
    pub toast_other: bool,
    /// `clear_toast_afterwards`.
    pub clear_toast: bool,
    /// A tuple-less change (a catalog row updated or deleted): skipped before the
    /// TOAST steps.
    pub tupleless: bool,
    /// What ReorderBufferToastReplace adds to the change's size when it rebuilds the
    /// row with its TOAST values (0 when nothing is replaced).
    pub toast_growth: i64,
}

impl Change {
    /// A change with nothing but an action and a size.
    pub fn plain(action: ChangeAction, size: u64) -> Self {
        Change {
            action,
            size,
            toast_chunk: false,
            toast_other: false,
            clear_toast: false,
            tupleless: false,
            toast_growth: 0,
        }
    }
}

/// What one heap record queues (before the database and origin filters): DecodeInsert,
/// DecodeUpdate, DecodeDelete, DecodeTruncate, DecodeMultiInsert, DecodeSpecConfirm.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChangeRecord {
    /// The database of the changed relation (block 0's locator, TRUNCATE's `dbId`).
    pub db_oid: u32,
    /// The relfilenumber of block 0 (0 for TRUNCATE).
    pub relfilenumber: u32,
    /// The tablespace of block 0.
    pub spc_oid: u32,
    /// The replication origin the record came from (`XLogRecGetOrigin`; 0: this node).
    pub origin: u16,
    /// The changes it queues, in order; empty when the decoder queues nothing (a catalog
    /// insert, a heap operation decode.c ignores).
    pub changes: Vec<RecordChange>,
    /// `XLH_INSERT_ON_TOAST_RELATION` of an INSERT: ReorderBufferQueueChange's
    /// `toast_insert`.
    pub toast_insert: bool,
}

/// A new tuple as the WAL carries it, kept when it may hold a TOAST pointer
/// (ReorderBufferToastReplace rebuilds it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TupleBytes {
    /// `t_infomask2` (its low 11 bits: the number of attributes).
    pub infomask2: u16,
    /// `t_infomask` (`HEAP_HASNULL` = 1).
    pub infomask: u16,
    pub t_hoff: u8,
    /// The tuple from `t_bits` on: the null bitmap, padding, the attributes.
    pub data: Vec<u8>,
}

/// A varlena's 1-byte header of an external (TOAST) pointer followed by the on-disk tag:
/// a tuple without these two bytes in a row holds no TOAST pointer.
const EXTERNAL_ONDISK: [u8; 2] = [0x01, 18];

impl TupleBytes {
    /// The tuple behind an `xl_heap_header` (or a multi-insert tuple's header fields),
    /// kept only when it may hold an on-disk TOAST pointer: heaptuple.c heap_fill_tuple
    /// sets `HEAP_HASEXTERNAL` in every row it forms with an external value.
    fn keep_if_toasted(infomask2: u16, infomask: u16, t_hoff: u8, data: &[u8]) -> Option<Self> {
        (infomask & HEAP_HASEXTERNAL != 0 && data.windows(2).any(|w| w == EXTERNAL_ONDISK)).then(
            || TupleBytes {
                infomask2,
                infomask,
                t_hoff,
                data: data.to_vec(),
            },
        )
    }
}

/// One change of a [`ChangeRecord`], sized by tuple lengths (`t_len`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordChange {
    pub action: ChangeAction,
    /// The new tuple, when it may hold TOAST pointers.
    pub tuple: Option<TupleBytes>,
    /// An insert into a TOAST relation: its `chunk_id` (the value the chunk belongs to).
    pub toast_chunk_id: Option<u32>,
    /// `t_len` of the new tuple, if the change carries one.
    pub new_len: Option<u64>,
    /// `t_len` of the old tuple (or key), if the change carries one.
    pub old_len: Option<u64>,
    /// TRUNCATE's `nrelids`.
    pub nrelids: u64,
    pub clear_toast: bool,
}

impl RecordChange {
    fn new(action: ChangeAction) -> Self {
        RecordChange {
            action,
            tuple: None,
            toast_chunk_id: None,
            new_len: None,
            old_len: None,
            nrelids: 0,
            clear_toast: true,
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferChangeSize for this change.
    pub fn size(&self, s: &StructSizes) -> u64 {
        let mut sz = s.change;
        if let Some(l) = self.old_len {
            sz += s.heap_tuple + l;
        }
        if let Some(l) = self.new_len {
            sz += s.heap_tuple + l;
        }
        sz + 4 * self.nrelids
    }
}

/// `SizeOfHeapHeader`.
const SIZE_OF_HEAP_HEADER: u64 = 5;
/// `SizeofHeapTupleHeader`.
const SIZEOF_HEAP_TUPLE_HEADER: u64 = 23;
/// `SizeOfHeapUpdate`.
const SIZE_OF_HEAP_UPDATE: usize = 14;
/// `SizeOfHeapDelete`.
const SIZE_OF_HEAP_DELETE: usize = 8;
/// `SizeOfMultiInsertTuple`.
const SIZE_OF_MULTI_INSERT_TUPLE: usize = 7;

const XLH_INSERT_LAST_IN_MULTI: u8 = 1 << 1;
const XLH_INSERT_IS_SPECULATIVE: u8 = 1 << 2;
const XLH_INSERT_CONTAINS_NEW_TUPLE: u8 = 1 << 3;
const XLH_INSERT_ON_TOAST_RELATION: u8 = 1 << 4;
const XLH_UPDATE_CONTAINS_OLD: u8 = (1 << 2) | (1 << 3);
const XLH_UPDATE_CONTAINS_NEW_TUPLE: u8 = 1 << 4;
const XLH_DELETE_CONTAINS_OLD: u8 = (1 << 1) | (1 << 2);
const XLH_DELETE_IS_SUPER: u8 = 1 << 3;

/// `t_len` of a tuple DecodeXLogTuple rebuilds from `datalen` bytes of WAL (an
/// `xl_heap_header` and the data after the tuple header).
fn xlog_tuple_len(datalen: usize) -> Result<u64, String> {
    let d = datalen as u64;
    if d < SIZE_OF_HEAP_HEADER {
        return Err(format!(
            "tuple data of {d} bytes is shorter than its header"
        ));
    }
    Ok(d - SIZE_OF_HEAP_HEADER + SIZEOF_HEAP_TUPLE_HEADER)
}

/// The new tuple of an `xl_heap_header` and its data, when it may hold TOAST pointers.
fn xlog_tuple(block: &[u8]) -> Option<TupleBytes> {
    if block.len() < SIZE_OF_HEAP_HEADER as usize {
        return None;
    }
    TupleBytes::keep_if_toasted(
        u16::from_ne_bytes([block[0], block[1]]),
        u16::from_ne_bytes([block[2], block[3]]),
        block[4],
        &block[SIZE_OF_HEAP_HEADER as usize..],
    )
}

/// The `chunk_id` of a TOAST chunk inserted (`xl_heap_header`, then the tuple from
/// `t_bits` on): its first attribute, an oid at `t_hoff`.
fn toast_chunk_id(block: &[u8]) -> Result<u32, String> {
    let t_hoff = *block.get(4).ok_or("TOAST chunk without its header")? as usize;
    let at =
        SIZE_OF_HEAP_HEADER as usize + t_hoff.saturating_sub(SIZEOF_HEAP_TUPLE_HEADER as usize);
    block
        .get(at..at + 4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| "TOAST chunk shorter than its chunk_id".to_owned())
}

impl ChangeRecord {
    /// Parses a HEAP or HEAP2 record of `rmid` / `info` that decode.c turns into changes:
    /// `main` is its main data, `block0` block 0's data (None without it), `block0_db` and
    /// `block0_rel` block 0's database and relfilenumber. `Ok(None)` for a record that is
    /// no change (the heap operations decode.c ignores). Errors name what is malformed.
    pub fn parse(
        rmid: u8,
        info: u8,
        main: &[u8],
        block0: Option<&[u8]>,
        block0_db: u32,
        block0_rel: u32,
        block0_spc: u32,
    ) -> Result<Option<ChangeRecord>, String> {
        let op = info & XLOG_HEAP_OPMASK;
        let flags_at = |o: usize| -> Result<u8, String> {
            main.get(o)
                .copied()
                .ok_or_else(|| format!("main data of {} bytes has no flags", main.len()))
        };
        let mut rec = ChangeRecord {
            db_oid: block0_db,
            relfilenumber: block0_rel,
            spc_oid: block0_spc,
            origin: 0,
            changes: Vec::new(),
            toast_insert: false,
        };
        match (rmid, op) {
            (RM_HEAP_ID, 0x00) => {
                // INSERT: xl_heap_insert { offnum, flags }
                let flags = flags_at(2)?;
                if flags & XLH_INSERT_CONTAINS_NEW_TUPLE == 0 {
                    return Ok(Some(rec));
                }
                let action = if flags & XLH_INSERT_IS_SPECULATIVE != 0 {
                    ChangeAction::SpecInsert
                } else {
                    ChangeAction::Insert
                };
                let mut c = RecordChange::new(action);
                let block = block0.unwrap_or(&[]);
                c.new_len = Some(xlog_tuple_len(block.len())?);
                rec.toast_insert = flags & XLH_INSERT_ON_TOAST_RELATION != 0;
                if rec.toast_insert {
                    c.toast_chunk_id = Some(toast_chunk_id(block)?);
                } else {
                    c.tuple = xlog_tuple(block);
                }
                rec.changes.push(c);
            }
            (RM_HEAP_ID, 0x20) | (RM_HEAP_ID, 0x40) => {
                // UPDATE / HOT_UPDATE: xl_heap_update, flags at 7, old tuple after it
                let flags = flags_at(7)?;
                let mut c = RecordChange::new(ChangeAction::Update);
                if flags & XLH_UPDATE_CONTAINS_NEW_TUPLE != 0 {
                    let block = block0.unwrap_or(&[]);
                    c.new_len = Some(xlog_tuple_len(block.len())?);
                    c.tuple = xlog_tuple(block);
                }
                if flags & XLH_UPDATE_CONTAINS_OLD != 0 {
                    let n = main
                        .len()
                        .checked_sub(SIZE_OF_HEAP_UPDATE)
                        .ok_or("short UPDATE")?;
                    c.old_len = Some(xlog_tuple_len(n)?);
                }
                rec.changes.push(c);
            }
            (RM_HEAP_ID, 0x10) => {
                // DELETE: xl_heap_delete, flags at 7, old key after it
                let flags = flags_at(7)?;
                let action = if flags & XLH_DELETE_IS_SUPER != 0 {
                    ChangeAction::SpecAbort
                } else {
                    ChangeAction::Delete
                };
                let mut c = RecordChange::new(action);
                if flags & XLH_DELETE_CONTAINS_OLD != 0 {
                    let n = main
                        .len()
                        .checked_sub(SIZE_OF_HEAP_DELETE)
                        .ok_or("short DELETE")?;
                    c.old_len = Some(xlog_tuple_len(n)?);
                }
                rec.changes.push(c);
            }
            (RM_HEAP_ID, 0x30) => {
                // TRUNCATE: xl_heap_truncate { dbId, nrelids, flags, relids[] }
                if main.len() < 12 {
                    return Err(format!("TRUNCATE main data of {} bytes", main.len()));
                }
                rec.db_oid = u32::from_ne_bytes([main[0], main[1], main[2], main[3]]);
                rec.relfilenumber = 0;
                let mut c = RecordChange::new(ChangeAction::Truncate);
                c.nrelids = u32::from_ne_bytes([main[4], main[5], main[6], main[7]]) as u64;
                c.clear_toast = false;
                rec.changes.push(c);
            }
            (RM_HEAP_ID, 0x50) => {
                rec.changes
                    .push(RecordChange::new(ChangeAction::SpecConfirm));
            }
            (RM_HEAP2_ID, 0x50) => {
                // MULTI_INSERT: xl_heap_multi_insert { flags, ntuples, offsets[] }
                let flags = flags_at(0)?;
                if flags & XLH_INSERT_CONTAINS_NEW_TUPLE == 0 {
                    return Ok(Some(rec));
                }
                if main.len() < 4 {
                    return Err(format!("MULTI_INSERT main data of {} bytes", main.len()));
                }
                let ntuples = u16::from_ne_bytes([main[2], main[3]]) as usize;
                let data = block0.ok_or("MULTI_INSERT without block data")?;
                let mut at = 0usize;
                for i in 0..ntuples {
                    at = (at + 1) & !1; // SHORTALIGN
                    let h = data
                        .get(at..at + SIZE_OF_MULTI_INSERT_TUPLE)
                        .ok_or("MULTI_INSERT tuple header past the block data")?;
                    let datalen = u16::from_ne_bytes([h[0], h[1]]) as usize;
                    let (infomask2, infomask) = (
                        u16::from_ne_bytes([h[2], h[3]]),
                        u16::from_ne_bytes([h[4], h[5]]),
                    );
                    let t_hoff = h[6];
                    at += SIZE_OF_MULTI_INSERT_TUPLE;
                    if at + datalen > data.len() {
                        return Err("MULTI_INSERT tuple past the block data".into());
                    }
                    let tuple = &data[at..at + datalen];
                    at += datalen;
                    let mut c = RecordChange::new(ChangeAction::Insert);
                    c.tuple = TupleBytes::keep_if_toasted(infomask2, infomask, t_hoff, tuple);
                    c.new_len = Some(datalen as u64 + SIZEOF_HEAP_TUPLE_HEADER);
                    c.clear_toast = flags & XLH_INSERT_LAST_IN_MULTI != 0 && i + 1 == ntuples;
                    rec.changes.push(c);
                }
            }
            _ => return Ok(None),
        }
        Ok(Some(rec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_sizes_follow_the_tuple() {
        let main = [1u8, 0, XLH_INSERT_CONTAINS_NEW_TUPLE];
        let block = vec![0u8; 5 + 10];
        let r = ChangeRecord::parse(RM_HEAP_ID, 0x00, &main, Some(&block), 5, 16384, 1663)
            .unwrap()
            .unwrap();
        assert_eq!(r.changes.len(), 1);
        assert_eq!(r.changes[0].new_len, Some(33));
        let s = StructSizes::x86_64(18);
        assert_eq!(r.changes[0].size(&s), 104 + 24 + 33);
    }

    #[test]
    fn catalog_inserts_queue_nothing() {
        let main = [1u8, 0, 0];
        let r = ChangeRecord::parse(RM_HEAP_ID, 0x00, &main, None, 5, 1259, 1663)
            .unwrap()
            .unwrap();
        assert!(r.changes.is_empty());
    }

    #[test]
    fn multi_insert_tuples_are_short_aligned() {
        let main = [
            XLH_INSERT_CONTAINS_NEW_TUPLE | XLH_INSERT_LAST_IN_MULTI,
            0,
            2,
            0,
            1,
            0,
            2,
            0,
        ];
        // tuple 1: 7-byte header + 3 bytes (ends at 10), tuple 2 at 10: header + 4
        let mut block = vec![3u8, 0, 0, 0, 0, 0, 24, 1, 2, 3];
        block.extend_from_slice(&[4u8, 0, 0, 0, 0, 0, 24, 1, 2, 3, 4]);
        let r = ChangeRecord::parse(RM_HEAP2_ID, 0x50, &main, Some(&block), 5, 1, 1663)
            .unwrap()
            .unwrap();
        assert_eq!(r.changes.len(), 2);
        assert_eq!(r.changes[0].new_len, Some(26));
        assert_eq!(r.changes[1].new_len, Some(27));
        assert!(!r.changes[0].clear_toast && r.changes[1].clear_toast);
    }

    #[test]
    fn malformed_bodies_are_errors() {
        assert!(ChangeRecord::parse(RM_HEAP_ID, 0x20, &[0u8; 3], None, 5, 1, 1663).is_err());
        let main = [XLH_INSERT_CONTAINS_NEW_TUPLE, 0, 9, 0];
        assert!(ChangeRecord::parse(RM_HEAP2_ID, 0x50, &main, Some(&[1, 2]), 5, 1, 1663).is_err());
    }
}
