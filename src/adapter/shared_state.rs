//! The slots' replays in shared memory, so that every backend (and the watcher) resumes
//! them where any of them stopped instead of replaying each slot's WAL again.
//!
//! Two homes, one layout:
//! - preloaded (`shared_preload_libraries`, every major): an area of
//!   `pg_snapbuild.shared_state_size` asked for at server start (ShmemInitStruct) and one
//!   LWLock of the named tranche `pg_snapbuild` guarding it;
//! - not preloaded, on PostgreSQL 17 and later: a named dynamic shared memory segment
//!   (dsm_registry.c GetNamedDSMSegment) of the same size, made by the first session that
//!   asks and kept until the server stops; its LWLock lives at its start (tranche
//!   `pg_snapbuild`, numbered by LWLockNewTrancheId). The segment's name carries its size,
//!   so a session that reads another size after a reload uses a segment of that size
//!   rather than failing on the existing one.
//!
//! On 14 to 16 without the preload there is no area: each session keeps its replays.
//!
//! The area holds one entry per slot: the slot's name, the key of its decoder
//! ([`ReplayKey`](snapbuild_core::replication::shared_replays::ReplayKey)), the end of the
//! last record its replay took, and the replay itself serialized (JSON). Readers take the
//! lock shared only to copy the area out; writers take it exclusive only to merge and copy
//! their entries in (no allocation of PostgreSQL memory and no call that can raise an
//! ERROR while it is held). An entry never replaces one for the same slot and key that is
//! further along. A replay too large for the area stays in its backend.
//!
//! The area is made anew at every server start and after a crash restart (empty: the
//! replays are rebuilt from the slots' restart_lsn by the next scrape or look).

use std::ffi::CStr;

use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

use snapbuild_core::replication::shared_replays::{self, Entry};

/// `pg_snapbuild.shared_state_size`, kB (0: no shared area).
static SHARED_STATE_SIZE: GucSetting<i32> = GucSetting::<i32>::new(8 * 1024);
/// `pg_snapbuild.shared_state`: whether this session uses the shared area.
static SHARED_STATE: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `pg_snapbuild.join_replays`: whether replays that came to the same state are fed as
/// one (by the slots' health, diagnosis and watcher).
static JOIN_REPLAYS: GucSetting<bool> = GucSetting::<bool>::new(true);

const AREA_NAME: &CStr = c"pg_snapbuild replay state";
const TRANCHE: &CStr = c"pg_snapbuild";
const MAGIC: u32 = 0x5053_4231;
/// magic (4), padding (4), generation (8), bytes used (8).
const HEADER: usize = 24;

/// The area and its lock in this process (set by the startup hook and inherited by every
/// process the postmaster forks after it; or by [`attach`] in this backend).
static mut AREA: *mut u8 = std::ptr::null_mut();
static mut AREA_SIZE: usize = 0;
static mut LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
/// Whether the library was loaded by shared_preload_libraries (then the area, if any, is
/// the one made at server start).
static PRELOADED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether replays that came to the same state are fed as one (`pg_snapbuild.join_replays`).
pub fn join_replays() -> bool {
    JOIN_REPLAYS.get()
}

/// Defines the settings; when the library is being preloaded, asks for the area and sets
/// the hook that makes it.
pub fn init() {
    GucRegistry::define_bool_guc(
        c"pg_snapbuild.shared_state",
        c"Whether this session's slot replays are shared with every other session.",
        c"When pg_snapbuild is preloaded, snapbuild_slot_health and snapbuild_diagnose resume the replays any session (or the watcher) left in shared memory. Off: this session replays on its own.",
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
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        // PostgreSQL 17+: a named segment made on first use; the size is read from the
        // configuration (a reload changes it for segments made afterwards).
        #[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
        GucRegistry::define_int_guc(
            c"pg_snapbuild.shared_state_size",
            c"Shared memory for the slots' replays (0: none; each session keeps its own).",
            c"Not preloaded: the size of the named shared memory segment the first session makes.",
            &SHARED_STATE_SIZE,
            0,
            1024 * 1024,
            GucContext::Sighup,
            GucFlags::UNIT_KB,
        );
        return;
    }
    PRELOADED.store(true, std::sync::atomic::Ordering::Relaxed);
    GucRegistry::define_int_guc(
        c"pg_snapbuild.shared_state_size",
        c"Shared memory for the slots' replays (0: none; each session keeps its own).",
        c"Preloaded: set at server start.",
        &SHARED_STATE_SIZE,
        0,
        1024 * 1024,
        GucContext::Postmaster,
        GucFlags::UNIT_KB,
    );
    if SHARED_STATE_SIZE.get() <= 0 {
        return;
    }
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
    usize::try_from(SHARED_STATE_SIZE.get().max(0)).unwrap_or(0) * 1024
}

/// RequestAddinShmemSpace and RequestNamedLWLockTranche.
unsafe fn request() {
    unsafe {
        pg_sys::RequestAddinShmemSpace(area_bytes());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
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
        let mut found = false;
        let p = pg_sys::ShmemInitStruct(AREA_NAME.as_ptr(), size, &mut found).cast::<u8>();
        if !found {
            std::ptr::write_bytes(p, 0, HEADER);
            p.cast::<u32>().write(MAGIC);
        }
        LOCK = &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock;
        AREA = p;
        AREA_SIZE = size;
        pg_sys::LWLockRelease(init_lock);
    }
}

/// Whether this session shares its replays: the area exists and `pg_snapbuild.shared_state`
/// is on.
pub fn available() -> bool {
    if !SHARED_STATE.get() {
        return false;
    }
    #[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
    attach();
    unsafe { !AREA.is_null() && AREA_SIZE > HEADER }
}

/// The start of the named segment: its LWLock, then the tranche id (i32), then the area.
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
const SEGMENT_LOCK_BYTES: usize = 64;
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
const SEGMENT_AREA_AT: usize = 128;
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
const _: () = assert!(std::mem::size_of::<pg_sys::LWLock>() <= SEGMENT_LOCK_BYTES);

/// Not preloaded, PostgreSQL 17+: finds or makes the named segment (dsm_registry.c
/// GetNamedDSMSegment) of `pg_snapbuild.shared_state_size` and points this backend's area
/// and lock at it. Once per backend and size; nothing when preloaded or the size is 0.
/// Errors: those of GetNamedDSMSegment (out of shared memory: SQLSTATE 53200).
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
fn attach() {
    use std::sync::atomic::Ordering;
    if PRELOADED.load(Ordering::Relaxed) {
        return;
    }
    let area = area_bytes();
    if area <= HEADER || unsafe { !AREA.is_null() && AREA_SIZE == area } {
        return;
    }
    let name = std::ffi::CString::new(format!("pg_snapbuild replay state {}kB", area / 1024))
        .expect("no NUL in the segment's name");
    let mut found = false;
    let segment = unsafe {
        pg_sys::GetNamedDSMSegment(
            name.as_ptr(),
            SEGMENT_AREA_AT + area,
            Some(init_segment),
            &mut found,
        )
        .cast::<u8>()
    };
    unsafe {
        let tranche = segment.add(SEGMENT_LOCK_BYTES).cast::<i32>().read();
        pg_sys::LWLockRegisterTranche(tranche, TRANCHE.as_ptr());
        LOCK = segment.cast::<pg_sys::LWLock>();
        AREA = segment.add(SEGMENT_AREA_AT);
        AREA_SIZE = area;
    }
}

/// GetNamedDSMSegment's callback for a new segment (under DSMRegistryLock): the LWLock
/// with a new tranche id, the area's header.
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
#[pg_guard]
unsafe extern "C-unwind" fn init_segment(ptr: *mut std::ffi::c_void) {
    unsafe {
        let p = ptr.cast::<u8>();
        let tranche = pg_sys::LWLockNewTrancheId();
        pg_sys::LWLockInitialize(p.cast::<pg_sys::LWLock>(), tranche);
        p.add(SEGMENT_LOCK_BYTES).cast::<i32>().write(tranche);
        let area = p.add(SEGMENT_AREA_AT);
        std::ptr::write_bytes(area, 0, HEADER);
        area.cast::<u32>().write(MAGIC);
    }
}

/// A copy of the area's entries (empty when the area is not available).
pub fn load() -> Vec<Entry> {
    if !available() {
        return Vec::new();
    }
    let copy = unsafe {
        pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_SHARED);
        let used = (AREA.add(16).cast::<u64>().read() as usize).min(AREA_SIZE - HEADER);
        let copy = std::slice::from_raw_parts(AREA.add(HEADER), used).to_vec();
        pg_sys::LWLockRelease(LOCK);
        copy
    };
    shared_replays::decode(&copy)
        .into_iter()
        .map(|(e, _)| e)
        .collect()
}

/// Merges `mine` into the area: an entry of `mine` replaces the area's entry for the same
/// slot unless that one has the same key and is further along; the area's entries for
/// slots not in `live` (when given: every logical slot now) are dropped; entries that do
/// not fit are left out, largest first. Returns the names of the slots the area holds
/// afterwards.
pub fn store(mine: &[Entry], live: Option<&[String]>) -> Vec<String> {
    if !available() {
        return Vec::new();
    }
    unsafe {
        pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE);
    }
    // Between the acquire and the release: plain Rust on memory this process owns or the
    // area; nothing can raise an ERROR while the lock is held.
    let held = unsafe {
        let used = (AREA.add(16).cast::<u64>().read() as usize).min(AREA_SIZE - HEADER);
        let current = std::slice::from_raw_parts(AREA.add(HEADER), used);
        let (payload, names) = shared_replays::merge(current, mine, live, AREA_SIZE - HEADER);
        std::ptr::copy_nonoverlapping(payload.as_ptr(), AREA.add(HEADER), payload.len());
        let generation = AREA.add(8).cast::<u64>();
        generation.write(generation.read().wrapping_add(1));
        AREA.add(16).cast::<u64>().write(payload.len() as u64);
        names
    };
    unsafe { pg_sys::LWLockRelease(LOCK) };
    held
}
