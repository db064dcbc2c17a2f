//! Copies replication slots out of shared memory the way slotfuncs.c
//! pg_get_replication_slots does: ReplicationSlotControlLock in shared mode, then each
//! slot's spinlock while its fields are copied.

use pgrx::pg_sys;

/// A copy of one in-use slot (`ReplicationSlot` and its persistent data).
#[derive(Clone, Debug)]
pub struct SlotCopy {
    pub name: String,
    pub plugin: String,
    pub logical: bool,
    pub datoid: u32,
    pub active_pid: i32,
    pub persistency: &'static str,
    pub xmin: u32,
    pub catalog_xmin: u32,
    pub effective_xmin: u32,
    pub effective_catalog_xmin: u32,
    pub restart_lsn: u64,
    pub confirmed_flush: u64,
    pub two_phase_at: u64,
    /// `data.two_phase`: created (or later enabled) for two-phase decoding.
    pub two_phase: bool,
    pub candidate_catalog_xmin: u32,
    pub candidate_xmin_lsn: u64,
    pub candidate_restart_valid: u64,
    pub candidate_restart_lsn: u64,
    pub invalidation_reason: Option<String>,
    /// `data.synced` (17+): a copy the standby's slot synchronization keeps of the
    /// primary's failover slot.
    pub synced: bool,
}

impl SlotCopy {
    /// The fields decoding moves, for the core's logical.c model.
    pub fn model(&self) -> snapbuild_core::replication::logical::SlotModel {
        use snapbuild_core::Lsn;
        snapbuild_core::replication::logical::SlotModel {
            catalog_xmin: self.catalog_xmin,
            effective_catalog_xmin: self.effective_catalog_xmin,
            restart_lsn: Lsn(self.restart_lsn),
            confirmed_flush: Lsn(self.confirmed_flush),
            candidate_catalog_xmin: self.candidate_catalog_xmin,
            candidate_xmin_lsn: Lsn(self.candidate_xmin_lsn),
            candidate_restart_valid: Lsn(self.candidate_restart_valid),
            candidate_restart_lsn: Lsn(self.candidate_restart_lsn),
        }
    }

    /// A logical slot whose snapshot builder has not reached consistency yet: during
    /// pg_create_logical_replication_slot / CREATE_REPLICATION_SLOT, confirmed_flush
    /// stays invalid until DecodingContextFindStartpoint finishes.
    ///
    /// A synced copy is not created by a decoder: while the slot synchronization has not
    /// advanced it yet its confirmed_flush is invalid too (slotsync.c reserves WAL and a
    /// catalog_xmin for it, then waits for the remote slot to pass them).
    pub fn in_creation(&self) -> bool {
        self.logical && self.confirmed_flush == 0 && !self.synced
    }
}

fn name_str(n: &pg_sys::NameData) -> String {
    let bytes: Vec<u8> = n
        .data
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `ReplicationSlotControlLock` (`&MainLWLockArray[37].lock` on 15 through 18).
unsafe fn slot_control_lock() -> *mut pg_sys::LWLock {
    &mut (*pg_sys::MainLWLockArray.add(37)).lock
}

#[cfg(any(feature = "pg16", feature = "pg17"))]
unsafe fn invalidation(s: &pg_sys::ReplicationSlot) -> Option<String> {
    use pg_sys::ReplicationSlotInvalidationCause as C;
    // The names slot.c gives these causes (SlotInvalidationCauses).
    match s.data.invalidated {
        C::RS_INVAL_NONE => None,
        C::RS_INVAL_WAL_REMOVED => Some("wal_removed".into()),
        C::RS_INVAL_HORIZON => Some("rows_removed".into()),
        C::RS_INVAL_WAL_LEVEL => Some("wal_level_insufficient".into()),
        other => Some(format!("unknown ({other})")),
    }
}

#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16", feature = "pg17")))]
unsafe fn invalidation(s: &pg_sys::ReplicationSlot) -> Option<String> {
    if s.data.invalidated == pg_sys::ReplicationSlotInvalidationCause::RS_INVAL_NONE {
        return None;
    }
    let p = pg_sys::GetSlotInvalidationCauseName(s.data.invalidated);
    (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
}

#[cfg(any(feature = "pg14", feature = "pg15"))]
unsafe fn invalidation(s: &pg_sys::ReplicationSlot) -> Option<String> {
    // 14/15 only know one cause: required WAL removed (16+ calls it wal_removed).
    (s.data.invalidated_at != 0 && s.data.restart_lsn == 0).then(|| "wal_removed".to_owned())
}

/// `data.synced` (17+; earlier majors have no slot synchronization).
#[cfg(not(any(feature = "pg14", feature = "pg15", feature = "pg16")))]
fn synced(s: &pg_sys::ReplicationSlot) -> bool {
    s.data.synced as i32 != 0
}

#[cfg(any(feature = "pg14", feature = "pg15", feature = "pg16"))]
fn synced(_s: &pg_sys::ReplicationSlot) -> bool {
    false
}

/// The slot's `two_phase_at` (14 calls it `initial_consistent_point`).
#[cfg(not(feature = "pg14"))]
fn two_phase_at(s: &pg_sys::ReplicationSlot) -> u64 {
    s.data.two_phase_at
}

#[cfg(feature = "pg14")]
fn two_phase_at(s: &pg_sys::ReplicationSlot) -> u64 {
    s.data.initial_consistent_point
}

/// Copies every in-use slot. Read-only; holds the control lock only while copying.
pub fn copy_slots() -> Vec<SlotCopy> {
    let mut out = Vec::new();
    unsafe {
        if pg_sys::ReplicationSlotCtl.is_null() || pg_sys::max_replication_slots <= 0 {
            return out;
        }
        pg_sys::LWLockAcquire(slot_control_lock(), pg_sys::LWLockMode::LW_SHARED);
        let base = (*pg_sys::ReplicationSlotCtl).replication_slots.as_mut_ptr();
        for i in 0..pg_sys::max_replication_slots as usize {
            let slot = base.add(i);
            if !(*slot).in_use {
                continue;
            }
            pg_sys::SpinLockAcquire(&mut (*slot).mutex);
            let s: pg_sys::ReplicationSlot = std::ptr::read(slot);
            pg_sys::SpinLockRelease(&mut (*slot).mutex);
            let persistency = match s.data.persistency {
                pg_sys::ReplicationSlotPersistency::RS_PERSISTENT => "persistent",
                pg_sys::ReplicationSlotPersistency::RS_EPHEMERAL => "ephemeral",
                _ => "temporary",
            };
            out.push(SlotCopy {
                name: name_str(&s.data.name),
                plugin: name_str(&s.data.plugin),
                logical: s.data.database != pg_sys::Oid::INVALID,
                datoid: s.data.database.to_u32(),
                active_pid: s.active_pid,
                persistency,
                xmin: s.data.xmin.into_inner(),
                catalog_xmin: s.data.catalog_xmin.into_inner(),
                effective_xmin: s.effective_xmin.into_inner(),
                effective_catalog_xmin: s.effective_catalog_xmin.into_inner(),
                restart_lsn: s.data.restart_lsn,
                confirmed_flush: s.data.confirmed_flush,
                two_phase_at: two_phase_at(&s),
                two_phase: s.data.two_phase,
                candidate_catalog_xmin: s.candidate_catalog_xmin.into_inner(),
                candidate_xmin_lsn: s.candidate_xmin_lsn,
                candidate_restart_valid: s.candidate_restart_valid,
                candidate_restart_lsn: s.candidate_restart_lsn,
                invalidation_reason: invalidation(&s),
                synced: synced(&s),
            });
        }
        pg_sys::LWLockRelease(slot_control_lock());
    }
    out
}

/// The slot called `name`, or ERROR `undefined_object` (42704).
pub fn find_slot(name: &str) -> SlotCopy {
    copy_slots()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| {
            crate::adapter::raise(
                pgrx::PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                format!("replication slot \"{name}\" does not exist"),
            )
        })
}
