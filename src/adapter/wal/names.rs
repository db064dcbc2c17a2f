//! The names of records as pg_waldump prints them (`rmgr/TYPE`, from each resource
//! manager's rm_name and rm_identify): a per-backend table of the names met so far and a
//! small cache in front of it for the record loop.

use super::compat;

/// A direct-mapped cache of record names in front of [`record_name`]'s table: a row per
/// record asks for one name per record, nearly always one of a few.
pub(super) struct RecordNames(pub(super) [(u32, &'static str); 64]);

impl RecordNames {
    #[inline]
    pub(super) fn get(&mut self, rmid: u8, info: u8) -> &'static str {
        // Key 0 is never a valid one: `rmid << 8 | info` plus one.
        let key = (u32::from(rmid) << 8 | u32::from(info)) + 1;
        let slot = &mut self.0[(usize::from(rmid) * 31 + usize::from(info >> 4)) & 63];
        if slot.0 != key {
            *slot = (key, record_name(rmid, info));
        }
        slot.1
    }
}

/// pg_waldump's `rmgr/TYPE` for a record, from a per-backend table of the names met so
/// far: each distinct (rmgr, info) is named once (rm_name and rm_identify, which depend on
/// nothing else) and kept for the backend's life. At most 256 × 256 names of a few dozen
/// bytes each; WAL holds a few dozen kinds in practice.
fn record_name(rmid: u8, info: u8) -> &'static str {
    thread_local! {
        static NAMES: std::cell::RefCell<rustc_hash::FxHashMap<(u8, u8), &'static str>> =
            std::cell::RefCell::new(Default::default());
    }
    NAMES.with(|names| {
        *names
            .borrow_mut()
            .entry((rmid, info))
            .or_insert_with(|| Box::leak(name_record(rmid, info).into_boxed_str()))
    })
}

/// rm_name/rm_identify of (rmgr, info), as pg_waldump prints it.
fn name_record(rmid: u8, info: u8) -> String {
    unsafe {
        let Some(rmgr) = compat::rmgr(rmid) else {
            return format!("custom {rmid}/{info:02X}");
        };
        let name = if rmgr.rm_name.is_null() {
            format!("{rmid}")
        } else {
            std::ffi::CStr::from_ptr(rmgr.rm_name)
                .to_string_lossy()
                .into_owned()
        };
        let ty = rmgr
            .rm_identify
            .map(|f| f(info))
            .filter(|p| !p.is_null())
            .map(|p| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("UNKNOWN ({:X})", info & !0x0F));
        format!("{name}/{ty}")
    }
}
