//! The slots' replays in shared memory, so that every backend (and the watcher) resumes
//! them where any of them stopped instead of replaying each slot's WAL again; and the
//! watcher's memory of what it has seen.
//!
//! Two homes for the replays, one layout ([`snapbuild_core::replication::shared_replays`]):
//! - preloaded (`shared_preload_libraries`, every major): an area of
//!   `pg_snapbuild.shared_state_size` asked for at server start (ShmemInitStruct) and the
//!   first LWLock of the named tranche `pg_snapbuild` guarding it;
//! - not preloaded, on PostgreSQL 17 and later: a dynamic shared memory segment made by
//!   the first session that asks, of the size that session reads, kept (pinned) until the
//!   server stops. Sessions find it through a small named segment (dsm_registry.c
//!   GetNamedDSMSegment) that holds its LWLock (tranche `pg_snapbuild`, numbered by
//!   LWLockNewTrancheId), its handle and its size; that segment's name carries the
//!   area's format ([`FORMAT`]), so two builds of the library never share an area. A
//!   session that reads another size after a reload uses the segment already made; the
//!   new size applies after a restart. When the segments cannot be made or found (a
//!   small `/dev/shm`), the session says so in one WARNING and keeps its replays itself.
//!
//! On 14 to 16 without the preload there is no area: each session keeps its replays.
//!
//! Readers take the lock shared only to copy the used part of the area out; writers take
//! it exclusive only to apply a plan computed outside it (a generation check, a few bytes
//! cleared and one copy: [`shared_replays::apply`]). No allocation, parsing or call that
//! can raise an ERROR happens while it is held. A replay too large for the area stays in
//! its backend. An allocation that fails outside the lock is an ERROR (`out_of_memory`).
//!
//! The areas are made anew at every server start and after a crash restart (empty: the
//! replays are rebuilt from the slots' restart_lsn by the next scrape or look).

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

use snapbuild_core::replication::shared_replays::{self, Entry, Held, HEADER};

use crate::adapter::raise;

/// `pg_snapbuild.shared_state_size`, kB (0: no shared area).
static SHARED_STATE_SIZE: GucSetting<i32> = GucSetting::<i32>::new(8 * 1024);
/// `pg_snapbuild.shared_state`: whether this session uses the shared area.
static SHARED_STATE: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `pg_snapbuild.join_replays`: whether replays that came to the same state are fed as
/// one (by the slots' health, diagnosis and watcher).
static JOIN_REPLAYS: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `pg_snapbuild.debug_shared_segment_error`: a developer setting (hidden) that makes
/// finding or making the shared segment fail as a full `/dev/shm` does, to test the
/// fallback.
static DEBUG_SEGMENT_ERROR: GucSetting<bool> = GucSetting::<bool>::new(false);

const AREA_NAME: &CStr = c"pg_snapbuild replay state";
const WATCH_NAME: &CStr = c"pg_snapbuild watcher memory";
const TRANCHE: &CStr = c"pg_snapbuild";
/// The watcher's memory: a length (u32), then up to this many bytes.
const WATCH_BYTES: usize = 64 * 1024;

/// The area and its lock in this process (set by the startup hook and inherited by every
/// process the postmaster forks after it; or by [`attach`] in this backend).
static mut AREA: *mut u8 = std::ptr::null_mut();
static mut AREA_SIZE: usize = 0;
static mut LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
/// The watcher's memory and its lock (preloaded only).
static mut WATCH: *mut u8 = std::ptr::null_mut();
static mut WATCH_LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
/// Whether the library was loaded by shared_preload_libraries (then the area, if any, is
/// the one made at server start).
static PRELOADED: AtomicBool = AtomicBool::new(false);
/// Set once this backend failed to find or make the named segment (it then keeps its
/// replays itself, and says so once).
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
static ATTACH_FAILED: AtomicBool = AtomicBool::new(false);

/// Whether replays that came to the same state are fed as one (`pg_snapbuild.join_replays`).
pub fn join_replays() -> bool {
    JOIN_REPLAYS.get()
}

/// Defines the settings; when the library is being preloaded, asks for the areas and sets
/// the hook that makes them.
pub fn init() {
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    GucRegistry::define_bool_guc(
        c"pg_snapbuild.shared_state",
        c"Whether this session's slot replays are shared with every other session.",
        c"snapbuild_slot_health and snapbuild_diagnose resume the replays any session (or the watcher) left in shared memory. Off: this session replays on its own.",
        &SHARED_STATE,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_snapbuild.join_replays",
        c"Whether slot replays that have come to the same state are fed as one.",
        c"snapbuild_slot_health, snapbuild_diagnose and the watcher feed the replays of slots held at about the same place once, from where they are alike. Off: every slot's replay is fed on its own (the answers are the same).",
        &JOIN_REPLAYS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_snapbuild.debug_shared_segment_error",
        c"Developer setting: finding or making the shared segment fails.",
        c"For tests of the fallback to each session's own replays.",
        &DEBUG_SEGMENT_ERROR,
        GucContext::Suset,
        GucFlags::NO_SHOW_ALL,
    );
    // Preloaded: the area is made at server start, of the size read then. Otherwise
    // (17+): the size of the segment the first session makes.
    GucRegistry::define_int_guc(
        c"pg_snapbuild.shared_state_size",
        c"Shared memory for the slots' replays (0: none; each session keeps its own).",
        c"With the library preloaded, set at server start. Otherwise (PostgreSQL 17 and later) the size of the shared segment the first session makes; a change applies after a restart.",
        &SHARED_STATE_SIZE,
        0,
        1024 * 1024,
        if preloading {
            GucContext::Postmaster
        } else {
            GucContext::Sighup
        },
        GucFlags::UNIT_KB,
    );
    if !preloading {
        return;
    }
    PRELOADED.store(true, Ordering::Relaxed);
    unsafe {
        #[cfg(feature = "pg14")]
        request();
        #[cfg(not(feature = "pg14"))]
        {
            PREV_REQUEST = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(on_request);
        }
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_startup);
    }
}

fn area_bytes() -> usize {
    let kb = usize::try_from(SHARED_STATE_SIZE.get().max(0)).unwrap_or(0);
    if kb == 0 {
        0
    } else {
        kb * 1024
    }
}

/// RequestAddinShmemSpace and RequestNamedLWLockTranche: the replays' area (when
/// `pg_snapbuild.shared_state_size` is not 0) and the watcher's memory, two locks.
unsafe fn request() {
    unsafe {
        pg_sys::RequestAddinShmemSpace(area_bytes() + 4 + WATCH_BYTES);
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 2);
    }
}

#[cfg(not(feature = "pg14"))]
static mut PREV_REQUEST: Option<unsafe extern "C-unwind" fn()> = None;
static mut PREV_STARTUP: Option<unsafe extern "C-unwind" fn()> = None;

#[cfg(not(feature = "pg14"))]
#[pg_guard]
unsafe extern "C-unwind" fn on_request() {
    unsafe {
        if let Some(prev) = PREV_REQUEST {
            prev();
        }
        request();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_startup() {
    unsafe {
        if let Some(prev) = PREV_STARTUP {
            prev();
        }
        let size = area_bytes();
        // AddinShmemInitLock (lwlocknames.h: MainLWLockArray[21] on 14 to 18).
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let locks = pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr());
        if size > HEADER {
            let mut found = false;
            let p = pg_sys::ShmemInitStruct(AREA_NAME.as_ptr(), size, &mut found).cast::<u8>();
            if !found {
                shared_replays::init(std::slice::from_raw_parts_mut(p, size));
            }
            LOCK = &raw mut (*locks).lock;
            AREA = p;
            AREA_SIZE = size;
        }
        let mut found = false;
        let w =
            pg_sys::ShmemInitStruct(WATCH_NAME.as_ptr(), 4 + WATCH_BYTES, &mut found).cast::<u8>();
        if !found {
            std::ptr::write_bytes(w, 0, 4);
        }
        WATCH = w;
        WATCH_LOCK = &raw mut (*locks.add(1)).lock;
        pg_sys::LWLockRelease(init_lock);
    }
}

/// Whether this session shares its replays: the area exists and `pg_snapbuild.shared_state`
/// is on. Not preloaded (17+), the first call finds or makes the shared segment; if that
/// fails the session says so in one WARNING and keeps its replays itself.
pub fn available() -> bool {
    if !SHARED_STATE.get() {
        return false;
    }
    #[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
    attach_or_fall_back();
    unsafe { !AREA.is_null() && AREA_SIZE > HEADER }
}

/// The directory segment (named): the area segment's LWLock, its tranche id, its handle
/// and its size. Fixed size, whatever the area's.
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
#[repr(C)]
struct Directory {
    lock: pg_sys::LWLock,
    tranche: i32,
    /// 0 until the area segment is made.
    handle: pg_sys::dsm_handle,
    size: u64,
}

/// [`attach`] in a subtransaction: an ERROR on the way (out of shared memory) is rolled
/// back (with the locks it held), reported once as a WARNING, and this session keeps its
/// replays itself from then on.
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
fn attach_or_fall_back() {
    if PRELOADED.load(Ordering::Relaxed)
        || ATTACH_FAILED.load(Ordering::Relaxed)
        || unsafe { !AREA.is_null() }
        || area_bytes() <= HEADER
        || unsafe { !pg_sys::IsTransactionState() }
    {
        return;
    }
    let (cx, owner) = unsafe { (pg_sys::CurrentMemoryContext, pg_sys::CurrentResourceOwner) };
    unsafe { pg_sys::BeginInternalSubTransaction(std::ptr::null()) };
    unsafe { pg_sys::MemoryContextSwitchTo(cx) };
    let outcome = PgTryBuilder::new(|| {
        attach();
        None
    })
    .catch_others(|e| match e {
        pg_sys::panic::CaughtError::PostgresError(ref r)
        | pg_sys::panic::CaughtError::ErrorReport(ref r) => Some(r.message().to_string()),
        other => Some(format!("{other:?}")),
    })
    .execute();
    unsafe {
        match &outcome {
            None => pg_sys::ReleaseCurrentSubTransaction(),
            Some(_) => pg_sys::RollbackAndReleaseCurrentSubTransaction(),
        }
        pg_sys::MemoryContextSwitchTo(cx);
        pg_sys::CurrentResourceOwner = owner;
    }
    if let Some(message) = outcome {
        unsafe {
            AREA = std::ptr::null_mut();
            AREA_SIZE = 0;
        }
        ATTACH_FAILED.store(true, Ordering::Relaxed);
        ereport!(
            PgLogLevel::WARNING,
            PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
            format!("pg_snapbuild could not find or make the shared memory for the slots' replays: {message}"),
            "This session replays the slots' WAL itself (snapbuild_slot_health says replay_state = backend): the answers are the same, each new session reads the whole backlog. Preload pg_snapbuild, or make room in /dev/shm, or lower pg_snapbuild.shared_state_size."
        );
    }
}

/// Not preloaded, PostgreSQL 17+: finds or makes the directory segment (dsm_registry.c
/// GetNamedDSMSegment) and the area segment it points to, of `pg_snapbuild.shared_state_size`
/// when this session makes it, and points this backend's area and lock at them (mapped
/// for the backend's life).
///
/// Errors: those of GetNamedDSMSegment and dsm_create (out of shared memory: 53200).
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
fn attach() {
    if DEBUG_SEGMENT_ERROR.get() {
        raise(
            PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
            "could not resize shared memory segment to the requested size: No space left on device (pg_snapbuild.debug_shared_segment_error)",
        );
    }
    let name = std::ffi::CString::new(format!(
        "pg_snapbuild replay state {:08x}",
        shared_replays::FORMAT
    ))
    .expect("no NUL in the segment's name");
    let mut found = false;
    unsafe {
        let dir = pg_sys::GetNamedDSMSegment(
            name.as_ptr(),
            std::mem::size_of::<Directory>(),
            Some(init_directory),
            &mut found,
        )
        .cast::<Directory>();
        pg_sys::LWLockRegisterTranche((*dir).tranche, TRANCHE.as_ptr());
        let lock = &raw mut (*dir).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let (seg, size) = if (*dir).handle == 0 {
            // dsm_create raises only after it released what it took; the lock is
            // released by the subtransaction's abort.
            let size = area_bytes();
            let seg = pg_sys::dsm_create(size, 0);
            pg_sys::dsm_pin_segment(seg);
            shared_replays::init(std::slice::from_raw_parts_mut(
                pg_sys::dsm_segment_address(seg).cast::<u8>(),
                size,
            ));
            (*dir).handle = pg_sys::dsm_segment_handle(seg);
            (*dir).size = size as u64;
            (seg, size)
        } else {
            (pg_sys::dsm_attach((*dir).handle), (*dir).size as usize)
        };
        pg_sys::LWLockRelease(lock);
        if seg.is_null() {
            raise(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "the shared segment of the slots' replays is gone",
            );
        }
        pg_sys::dsm_pin_mapping(seg);
        LOCK = lock;
        AREA = pg_sys::dsm_segment_address(seg).cast::<u8>();
        AREA_SIZE = size;
    }
}

/// GetNamedDSMSegment's callback for a new directory segment (under DSMRegistryLock):
/// its LWLock with a new tranche id, no area yet.
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
#[pg_guard]
unsafe extern "C-unwind" fn init_directory(ptr: *mut std::ffi::c_void) {
    unsafe {
        let dir = ptr.cast::<Directory>();
        let tranche = pg_sys::LWLockNewTrancheId();
        pg_sys::LWLockInitialize(&raw mut (*dir).lock, tranche);
        (&raw mut (*dir).tranche).write(tranche);
        (&raw mut (*dir).handle).write(0);
        (&raw mut (*dir).size).write(0);
    }
}

/// Raises the ERROR for an allocation that failed outside the lock.
fn out_of_memory(what: &str, bytes: usize) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
        format!("out of memory while copying the slots' shared replays ({what}, {bytes} bytes)"),
    )
}

/// A copy of the area's header and used payload, copied under its lock in shared mode.
/// The buffer is allocated before the lock is taken (sized from the header read without
/// it, then checked under it: if the area grew meanwhile, again).
///
/// Errors: `out_of_memory` (53200) when the buffer cannot be allocated.
fn copy_area() -> Vec<u8> {
    let area = || unsafe { std::slice::from_raw_parts(AREA, AREA_SIZE) };
    let mut want = shared_replays::copy_len(area());
    loop {
        let mut buf: Vec<u8> = Vec::new();
        if buf.try_reserve_exact(want).is_err() {
            out_of_memory("a copy of the area", want);
        }
        unsafe { pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_SHARED) };
        let n = shared_replays::copy_len(area());
        if n <= want {
            buf.extend_from_slice(&area()[..n]);
        }
        unsafe { pg_sys::LWLockRelease(LOCK) };
        if n <= want {
            return buf;
        }
        want = n;
    }
}

/// The area's entries of this build's format (empty when the area is not available).
///
/// Errors: `out_of_memory` (53200) when the copy cannot be allocated.
pub fn load() -> Vec<Entry> {
    if !available() {
        return Vec::new();
    }
    shared_replays::entries(&copy_area())
}

/// Stores `mine` in the area, as [`shared_replays::plan_store`] decides (the newer entry
/// of a slot wins; the area's entries for slots not in `live`, when given, are dropped),
/// and returns what the area then holds. If other writers keep coming first, gives up
/// after three tries and returns nothing (the replays stay in this backend this time).
///
/// Errors: `out_of_memory` (53200) when a copy or the plan cannot be allocated.
pub fn store(mine: &[Entry], live: Option<&[String]>) -> Vec<Held> {
    if !available() {
        return Vec::new();
    }
    for _ in 0..3 {
        let copy = copy_area();
        let plan = shared_replays::plan_store(&copy, mine, live, unsafe { AREA_SIZE })
            .unwrap_or_else(|_| out_of_memory("a new image of the area", unsafe { AREA_SIZE }));
        drop(copy);
        let started = std::time::Instant::now();
        let applied = unsafe {
            pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE);
            let ok = shared_replays::apply(std::slice::from_raw_parts_mut(AREA, AREA_SIZE), &plan);
            pg_sys::LWLockRelease(LOCK);
            ok
        };
        let held = started.elapsed();
        pgrx::debug1!(
            "pg_snapbuild: shared replays: {} {} bytes under the lock in {} us{}",
            if plan.rewrites() {
                "compacted,"
            } else {
                "copied"
            },
            plan.bytes_copied(),
            held.as_micros(),
            if applied {
                ""
            } else {
                " (another writer came first: again)"
            }
        );
        if applied {
            return plan.holds;
        }
    }
    Vec::new()
}

/// The watcher's memory as it last stored it (empty when there is none: not preloaded,
/// nothing stored yet).
pub fn watch_memory() -> Vec<u8> {
    unsafe {
        if WATCH.is_null() {
            return Vec::new();
        }
        let mut buf: Vec<u8> = Vec::new();
        if buf.try_reserve_exact(WATCH_BYTES).is_err() {
            return Vec::new();
        }
        pg_sys::LWLockAcquire(WATCH_LOCK, pg_sys::LWLockMode::LW_SHARED);
        let len = (WATCH.cast::<u32>().read_unaligned() as usize).min(WATCH_BYTES);
        buf.extend_from_slice(std::slice::from_raw_parts(WATCH.add(4), len));
        pg_sys::LWLockRelease(WATCH_LOCK);
        buf
    }
}

/// The room for the watcher's memory ([`store_watch_memory`] takes at most this much).
pub const WATCH_MEMORY_BYTES: usize = WATCH_BYTES;

/// Stores the watcher's memory (at most [`WATCH_MEMORY_BYTES`]; nothing when not
/// preloaded).
pub fn store_watch_memory(bytes: &[u8]) {
    unsafe {
        if WATCH.is_null() || bytes.len() > WATCH_BYTES {
            return;
        }
        pg_sys::LWLockAcquire(WATCH_LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), WATCH.add(4), bytes.len());
        WATCH.cast::<u32>().write_unaligned(bytes.len() as u32);
        pg_sys::LWLockRelease(WATCH_LOCK);
    }
}
