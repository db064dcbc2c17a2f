//! Reads a relation's heap pages through the buffer manager, one page at a time, pinned
//! and share-locked, and judges every tuple twice under the same historic snapshot:
//! with the core's re-run of HeapTupleSatisfiesHistoricMVCC, and with the server's own
//! HeapTupleSatisfiesVisibility given a `SNAPSHOT_HISTORIC_MVCC` snapshot and tuple-cid
//! hash, installed with SetupHistoricSnapshot and removed with TeardownHistoricSnapshot
//! as the decoder does (also when an ERROR unwinds).
//!
//! Nothing is written. The server's historic routine sets no hint bits (unlike the
//! plain MVCC one it never calls SetHintBits; its header comment says so, and the 18.3
//! source has no call on that path); the commit-log and multixact lookups it makes only
//! read. Pages are read with RBM_NORMAL and released unmodified, never marked dirty.

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode as C;
use snapbuild_core::access::heapam_visibility::{satisfies_historic_mvcc, HistoricVerdict};
use snapbuild_core::include::htup_details::TupleHeader;
use snapbuild_core::include::relfilelocator::RelFileLocator;
use snapbuild_core::include::reorderbuffer::{TupleCid, TupleCidEnt, TupleCidKey};
use snapbuild_core::include::server_lookups::{LookupError, ServerLookups};
use snapbuild_core::include::snapshot::HistoricSnapshot;
use snapbuild_core::replication::reorderbuffer::{CidResolver, TupleCidHash};
use snapbuild_core::storage::bufpage::heap_items;

use crate::adapter::raise;

/// `PG_LOGICAL_MAPPINGS_DIR`, relative to the data directory.
pub const MAPPINGS_DIR: &str = "pg_logical/mappings";

/// One tuple with both verdicts.
#[derive(Clone, Debug)]
pub struct JudgedTuple {
    pub block: u32,
    pub offset: u16,
    pub lp_len: u16,
    pub header: TupleHeader,
    /// HeapTupleGetUpdateXid of a multixact xmax that updates (not just locks).
    pub update_xid: Option<u32>,
    /// Our verdict; `None` when the scan asked for the server's only.
    pub rust: Option<HistoricVerdict>,
    /// The tuple-cid map's entry for this tuple after the verdicts (no lookup of mapping
    /// files of its own): our map's with our verdict, else the server's hash's.
    pub cids: Option<TupleCidEnt>,
    pub server_visible: bool,
}

/// The result of judging one relation.
pub struct Scan {
    pub rel_name: String,
    pub blocks: u32,
    pub tuples: Vec<JudgedTuple>,
    /// Rewrite mapping files applied to the tuple-cid map (UpdateLogicalMappings).
    pub applied_mapping_files: Vec<String>,
}

/// The server's answers to the core's questions.
pub struct Server;

impl ServerLookups for Server {
    fn did_commit(&mut self, xid: u32) -> bool {
        unsafe { pg_sys::TransactionIdDidCommit(pg_sys::TransactionId::from_inner(xid)) }
    }

    fn update_xid(&mut self, multi: u32, infomask: u16) -> u32 {
        // HeapTupleGetUpdateXid reads only the raw xmax and the infomask of the header.
        unsafe {
            let mut h: pg_sys::HeapTupleHeaderData = std::mem::zeroed();
            h.t_choice.t_heap.t_xmax = pg_sys::TransactionId::from_inner(multi);
            h.t_infomask = infomask;
            pg_sys::HeapTupleGetUpdateXid(&raw mut h).into_inner()
        }
    }

    fn mapping_file_names(&mut self) -> Result<Vec<String>, LookupError> {
        let dir = std::fs::read_dir(MAPPINGS_DIR).map_err(|e| {
            LookupError::Io(format!(
                "could not open directory \"{MAPPINGS_DIR}\": {}",
                crate::adapter::snapfiles::strerror(&e)
            ))
        })?;
        let mut names = Vec::new();
        for e in dir {
            // a directory of many files is read once per cid miss of a heap scan
            if names.len() % 1024 == 1023 {
                pgrx::check_for_interrupts!();
            }
            let e = e.map_err(|e| {
                LookupError::Io(format!(
                    "could not read directory \"{MAPPINGS_DIR}\": {}",
                    crate::adapter::snapfiles::strerror(&e)
                ))
            })?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn mapping_file(&mut self, name: &str) -> Result<Vec<u8>, LookupError> {
        pgrx::check_for_interrupts!();
        let path = format!("{MAPPINGS_DIR}/{name}");
        std::fs::read(&path).map_err(|e| {
            LookupError::Io(format!(
                "could not open file \"{path}\": {}",
                crate::adapter::snapfiles::strerror(&e)
            ))
        })
    }
}

/// Raises a lookup failure as the server would: a file error or a refused name.
pub fn raise_lookup(e: LookupError) -> ! {
    match e {
        LookupError::Io(m) => raise(C::ERRCODE_IO_ERROR, m),
        LookupError::Corrupt(m) => raise(C::ERRCODE_DATA_CORRUPTED, m),
    }
}

/// An open relation, closed (lock released) when dropped.
struct OpenRel(pg_sys::Relation);

impl Drop for OpenRel {
    fn drop(&mut self) {
        unsafe { pg_sys::relation_close(self.0, pg_sys::AccessShareLock as pg_sys::LOCKMODE) }
    }
}

/// A pinned buffer, share-locked once `locked`; unlocked and unpinned when dropped, also
/// while an ERROR unwinds.
struct PinnedPage {
    buf: pg_sys::Buffer,
    locked: bool,
}

impl PinnedPage {
    unsafe fn read_share_locked(rel: pg_sys::Relation, block: u32) -> Self {
        let buf = pg_sys::ReadBufferExtended(
            rel,
            pg_sys::ForkNumber::MAIN_FORKNUM,
            block,
            pg_sys::ReadBufferMode::RBM_NORMAL,
            std::ptr::null_mut(),
        );
        let mut p = PinnedPage { buf, locked: false };
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as _);
        p.locked = true;
        p
    }
}

impl Drop for PinnedPage {
    fn drop(&mut self) {
        unsafe {
            if self.locked {
                pg_sys::LockBuffer(self.buf, pg_sys::BUFFER_LOCK_UNLOCK as _);
            }
            pg_sys::ReleaseBuffer(self.buf);
        }
    }
}

/// The entry the server's tuple-cid hash `h` holds for `key` (HASH_FIND: nothing is
/// added), as its routine left it (mapping files it applied included).
unsafe fn server_cid_entry(h: *mut pg_sys::HTAB, key: &TupleCidKey) -> Option<TupleCidEnt> {
    if h.is_null() {
        return None;
    }
    let k = cid_key(key);
    let mut found = false;
    let ent = pg_sys::hash_search(
        h,
        &k as *const CidKey as *const std::ffi::c_void,
        pg_sys::HASHACTION::HASH_FIND,
        &mut found,
    ) as *const CidEnt;
    (found && !ent.is_null()).then(|| TupleCidEnt {
        cmin: (*ent).cmin,
        cmax: (*ent).cmax,
        combocid: (*ent).combocid,
    })
}

/// The historic snapshot installed for catalog access, as ReorderBufferProcessTXN
/// installs it; removed when dropped (with `is_error` while an ERROR unwinds, as the
/// decoder's PG_CATCH does).
struct HistoricInstalled;

impl HistoricInstalled {
    unsafe fn setup(snap: pg_sys::Snapshot, tuplecids: *mut pg_sys::HTAB) -> Self {
        pg_sys::SetupHistoricSnapshot(snap, tuplecids);
        HistoricInstalled
    }
}

impl Drop for HistoricInstalled {
    fn drop(&mut self) {
        unsafe { pg_sys::TeardownHistoricSnapshot(std::thread::panicking()) }
    }
}

/// The relfilelocator of a buffer (BufferGetTag), as ResolveCminCmaxDuringDecoding
/// takes it for the tuple-cid key.
#[cfg(any(feature = "pg14", feature = "pg15"))]
unsafe fn buffer_locator(buf: pg_sys::Buffer) -> RelFileLocator {
    let mut n = pg_sys::RelFileNode::default();
    let mut fork: pg_sys::ForkNumber::Type = 0;
    let mut blk: pg_sys::BlockNumber = 0;
    pg_sys::BufferGetTag(buf, &mut n, &mut fork, &mut blk);
    RelFileLocator {
        spc_oid: n.spcNode.to_u32(),
        db_oid: n.dbNode.to_u32(),
        rel_number: n.relNode.to_u32(),
    }
}

#[cfg(not(any(feature = "pg14", feature = "pg15")))]
unsafe fn buffer_locator(buf: pg_sys::Buffer) -> RelFileLocator {
    let mut n = pg_sys::RelFileLocator::default();
    let mut fork: pg_sys::ForkNumber::Type = 0;
    let mut blk: pg_sys::BlockNumber = 0;
    pg_sys::BufferGetTag(buf, &mut n, &mut fork, &mut blk);
    RelFileLocator {
        spc_oid: n.spcOid.to_u32(),
        db_oid: n.dbOid.to_u32(),
        rel_number: n.relNumber.to_u32(),
    }
}

/// reorderbuffer.c's ReorderBufferTupleCidKey: a RelFileLocator and an ItemPointerData
/// (18 bytes, padded to 20). The padding is an explicit zero field: the hash covers
/// every byte of the key, as the server's (memset before filling) does.
#[repr(C)]
#[derive(Clone, Copy)]
struct CidKey {
    spc: u32,
    db: u32,
    rel: u32,
    bi_hi: u16,
    bi_lo: u16,
    posid: u16,
    pad: u16,
}

/// reorderbuffer.c's ReorderBufferTupleCidEnt.
#[repr(C)]
struct CidEnt {
    key: CidKey,
    cmin: u32,
    cmax: u32,
    combocid: u32,
}

const _: () = assert!(std::mem::size_of::<CidKey>() == 20);
const _: () = assert!(std::mem::size_of::<CidEnt>() == 32);
const _: () = assert!(std::mem::size_of::<pg_sys::ItemPointerData>() == 6);

fn cid_key(k: &TupleCidKey) -> CidKey {
    CidKey {
        spc: k.locator.spc_oid,
        db: k.locator.db_oid,
        rel: k.locator.rel_number,
        bi_hi: (k.block >> 16) as u16,
        bi_lo: k.block as u16,
        posid: k.offset,
        pad: 0,
    }
}

/// The tuple-cid hash for the server's routine, built the way
/// ReorderBufferBuildTupleCidHash builds it (a dynahash with blob keys in the current
/// memory context; the first entry of a tuple sets cmin, later ones move cmax).
unsafe fn server_tuplecid_hash(entries: &[TupleCid]) -> *mut pg_sys::HTAB {
    let mut ctl: pg_sys::HASHCTL = std::mem::zeroed();
    ctl.keysize = std::mem::size_of::<CidKey>();
    ctl.entrysize = std::mem::size_of::<CidEnt>();
    ctl.hcxt = pg_sys::CurrentMemoryContext;
    let h = pg_sys::hash_create(
        c"pg_snapbuild tuplecids".as_ptr(),
        entries.len().max(1) as std::ffi::c_long,
        &ctl,
        (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS | pg_sys::HASH_CONTEXT) as std::ffi::c_int,
    );
    for e in entries {
        let key = cid_key(&e.key);
        let mut found = false;
        let ent = pg_sys::hash_search(
            h,
            &key as *const CidKey as *const std::ffi::c_void,
            pg_sys::HASHACTION::HASH_ENTER,
            &mut found,
        ) as *mut CidEnt;
        if found {
            (*ent).cmax = e.cmax;
        } else {
            (*ent).cmin = e.cmin;
            (*ent).cmax = e.cmax;
            (*ent).combocid = e.combocid;
        }
    }
    h
}

/// A `SNAPSHOT_HISTORIC_MVCC` snapshot with the fields of `s`, in the current memory
/// context (what SnapBuildBuildSnapshot / ReorderBufferCopySnap hand the decoder).
unsafe fn server_snapshot(s: &HistoricSnapshot) -> pg_sys::Snapshot {
    let copy = |v: &[u32]| -> *mut pg_sys::TransactionId {
        let p = pg_sys::palloc0(std::mem::size_of::<pg_sys::TransactionId>() * v.len().max(1))
            as *mut pg_sys::TransactionId;
        for (i, x) in v.iter().enumerate() {
            *p.add(i) = pg_sys::TransactionId::from_inner(*x);
        }
        p
    };
    let snap =
        pg_sys::palloc0(std::mem::size_of::<pg_sys::SnapshotData>()) as *mut pg_sys::SnapshotData;
    (*snap).snapshot_type = pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC;
    (*snap).xmin = pg_sys::TransactionId::from_inner(s.xmin);
    (*snap).xmax = pg_sys::TransactionId::from_inner(s.xmax);
    (*snap).xip = copy(&s.xip);
    (*snap).xcnt = s.xip.len() as u32;
    if s.subxip.is_empty() {
        (*snap).subxip = std::ptr::null_mut();
    } else {
        (*snap).subxip = copy(&s.subxip);
    }
    (*snap).subxcnt = s.subxip.len() as i32;
    (*snap).curcid = s.curcid;
    (*snap).copied = s.copied;
    (*snap).active_count = 1;
    snap
}

fn rel_name(rel: pg_sys::Relation) -> String {
    unsafe {
        let n = &(*(*rel).rd_rel).relname;
        std::ffi::CStr::from_ptr(n.data.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// Opens `rel_oid` (AccessShareLock) and refuses what has no heap pages to judge.
///
/// Errors: `wrong_object_type` for anything but a heap table, materialized view or
/// TOAST table; `feature_not_supported` for temporary relations (their pages live in
/// local buffers, and logical decoding never reads them).
unsafe fn open_heap(rel_oid: pg_sys::Oid) -> OpenRel {
    let rel = OpenRel(pg_sys::relation_open(
        rel_oid,
        pg_sys::AccessShareLock as pg_sys::LOCKMODE,
    ));
    let form = &*(*rel.0).rd_rel;
    let kind = form.relkind as u8;
    if !matches!(kind, b'r' | b'm' | b't') || form.relam != pg_sys::HEAP_TABLE_AM_OID {
        raise(
            C::ERRCODE_WRONG_OBJECT_TYPE,
            format!(
                "\"{}\" is not a heap table, materialized view or TOAST table",
                rel_name(rel.0)
            ),
        );
    }
    if form.relpersistence as u8 == b't' {
        raise(
            C::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!(
                "\"{}\" is a temporary relation: logical decoding never reads those",
                rel_name(rel.0)
            ),
        );
    }
    rel
}

/// Judges every tuple of `rel_oid` under `snapshot` with the decoding transaction's
/// tuple-cid entries (`None`: no hash, as ReorderBufferBuildTupleCidHash leaves it).
/// With `with_rust` false only the server judges (everything else is the same: the
/// snapshot, the hash, the pinned and share-locked page); the benchmark's baseline.
///
/// Errors: as [`open_heap`]; `object_not_in_prerequisite_state` when a historic snapshot
/// is already installed in this backend; `data_corrupted` for a page whose line pointers
/// reach outside it; mapping-file errors as the server raises them.
pub fn judge_relation(
    rel_oid: pg_sys::Oid,
    snapshot: &HistoricSnapshot,
    tuplecids: Option<&[TupleCid]>,
    with_rust: bool,
) -> Scan {
    unsafe {
        if pg_sys::HistoricSnapshotActive() {
            raise(
                C::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "a historic snapshot is already installed in this backend",
            );
        }
        let rel = open_heap(rel_oid);
        let name = rel_name(rel.0);
        let db_oid = if pg_sys::IsSharedRelation(rel_oid) {
            0
        } else {
            pg_sys::MyDatabaseId.to_u32()
        };
        let mut resolver = CidResolver {
            hash: tuplecids.map(TupleCidHash::build),
            rel_oid: rel_oid.to_u32(),
            db_oid,
            applied_files: Vec::new(),
        };
        let c_snap = server_snapshot(snapshot);
        let c_hash = match tuplecids {
            Some(e) => server_tuplecid_hash(e),
            None => std::ptr::null_mut(),
        };
        let mut lookups = Server;
        let blocks =
            pg_sys::RelationGetNumberOfBlocksInFork(rel.0, pg_sys::ForkNumber::MAIN_FORKNUM);
        let mut out = Vec::new();
        for block in 0..blocks {
            pgrx::check_for_interrupts!();
            let page = PinnedPage::read_share_locked(rel.0, block);
            let base = pg_sys::BufferGetPage(page.buf) as *const u8;
            let bytes = std::slice::from_raw_parts(base, pg_sys::BLCKSZ as usize);
            let (_, items) = heap_items(bytes).unwrap_or_else(|e| {
                raise(
                    C::ERRCODE_DATA_CORRUPTED,
                    format!("block {block} of relation \"{name}\": {}", e.text()),
                )
            });
            let locator = buffer_locator(page.buf);
            // Our verdicts first, from the headers as read under the share lock.
            let first = out.len();
            out.reserve(items.len());
            for it in &items {
                let key = TupleCidKey {
                    locator,
                    block,
                    offset: it.item.offnum,
                };
                let rust = if with_rust {
                    Some(
                        satisfies_historic_mvcc(
                            &it.header,
                            &key,
                            snapshot,
                            &mut resolver,
                            &mut lookups,
                        )
                        .unwrap_or_else(|e| raise_lookup(e)),
                    )
                } else {
                    None
                };
                let update_xid = rust.as_ref().and_then(|r| r.update_xid).or_else(|| {
                    it.header
                        .has_multi_updater()
                        .then(|| lookups.update_xid(it.header.raw_xmax, it.header.infomask))
                });
                out.push(JudgedTuple {
                    block,
                    offset: it.item.offnum,
                    lp_len: it.item.len,
                    header: it.header,
                    update_xid,
                    cids: if with_rust { resolver.peek(&key) } else { None },
                    rust,
                    server_visible: false,
                });
            }
            // Then the server's, on the same pinned and locked page, with the historic
            // snapshot installed only while it runs.
            {
                let _installed = HistoricInstalled::setup(c_snap, c_hash);
                for (j, it) in out[first..].iter_mut().zip(items.iter()) {
                    let mut htup: pg_sys::HeapTupleData = std::mem::zeroed();
                    htup.t_len = it.item.len as u32;
                    htup.t_self = tid(block, it.item.offnum);
                    htup.t_tableOid = rel_oid;
                    htup.t_data =
                        base.add(it.item.off as usize) as *mut pg_sys::HeapTupleHeaderData;
                    j.server_visible =
                        pg_sys::HeapTupleSatisfiesVisibility(&mut htup, c_snap, page.buf);
                    if !with_rust {
                        let key = TupleCidKey {
                            locator,
                            block,
                            offset: it.item.offnum,
                        };
                        j.cids = server_cid_entry(c_hash, &key);
                    }
                }
            }
            drop(page);
        }
        if !c_hash.is_null() {
            pg_sys::hash_destroy(c_hash);
        }
        Scan {
            rel_name: name,
            blocks,
            tuples: out,
            applied_mapping_files: resolver.applied_files,
        }
    }
}

/// A `tid` value (block, offset).
pub fn tid(block: u32, offset: u16) -> pg_sys::ItemPointerData {
    let mut t = pg_sys::ItemPointerData::default();
    pgrx::itemptr::item_pointer_set_all(&mut t, block, offset);
    t
}
