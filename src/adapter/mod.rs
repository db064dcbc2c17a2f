//! Thin adapters that fetch the server's inputs for the core: WAL through XLogReader,
//! replication slots from shared memory, `.snap` files from the data directory, and heap
//! pages through the buffer manager.

pub mod activity;
pub mod heap;
pub mod server_log;
pub mod shared_state;
pub mod slots;
pub mod snapfiles;
pub mod wal;

/// The running server's release, major and minor, read at run time from the GUC
/// `server_version_num` (the library is built against one minor's headers and loaded by
/// any minor of that major; some rules differ between minors, see
/// [`snapbuild_core::PgVersion`]). Falls back to the build's `PG_VERSION_NUM` if the
/// setting cannot be read (it always can: it is a fixed internal GUC). Cached per backend.
pub fn server_version() -> snapbuild_core::PgVersion {
    static VERSION: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let num = *VERSION.get_or_init(|| {
        // SAFETY: GetConfigOption with missing_ok = false, restrict_privileged = false
        // returns a pointer to the GUC's current value (a static string for this fixed
        // internal setting) or raises an ERROR; the string is copied at once.
        let value = unsafe {
            let p = pgrx::pg_sys::GetConfigOption(c"server_version_num".as_ptr(), false, false);
            (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        value
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(pgrx::pg_sys::PG_VERSION_NUM)
    });
    snapbuild_core::PgVersion::from_version_num(num)
}

/// The value of setting `name` as GetConfigOption gives it (an integer in the setting's
/// base unit, `on`/`off` for a boolean); `None` when the server has no such setting.
fn setting(name: &std::ffi::CStr) -> Option<String> {
    // SAFETY: GetConfigOption with missing_ok = true returns NULL for an unknown setting
    // or a pointer to a value string valid until the next call; it is copied at once.
    unsafe {
        let p = pgrx::pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// The settings that decide how much WAL a slot keeps and how long it may stay unused
/// (xlog.c's max_slot_wal_keep_size_mb, wal_keep_size_mb, wal_segment_size, slot.c's
/// idle_replication_slot_timeout_secs on 18, summarize_wal on 17+), as they are now in
/// this backend (a reload reaches it at its next command). `None` if one of the first
/// three cannot be read.
pub fn keep_settings() -> Option<snapbuild_core::diagnose::KeepSettings> {
    let int = |n: &std::ffi::CStr| setting(n).and_then(|v| v.trim().parse::<i64>().ok());
    Some(snapbuild_core::diagnose::KeepSettings {
        max_slot_wal_keep_size_mb: i32::try_from(int(c"max_slot_wal_keep_size")?).ok()?,
        wal_keep_size_mb: i32::try_from(int(c"wal_keep_size")?).ok()?,
        wal_segment_size: u64::try_from(int(c"wal_segment_size")?).ok()?,
        idle_timeout_s: int(c"idle_replication_slot_timeout").and_then(|v| i32::try_from(v).ok()),
        summarize_wal: setting(c"summarize_wal").as_deref() == Some("on"),
    })
}

/// Raises a PostgreSQL ERROR with `code` and `message`; usable in expression position.
pub fn raise(code: pgrx::PgSqlErrorCode, message: impl Into<String>) -> ! {
    let message: String = message.into();
    pgrx::ereport!(ERROR, code, message);
}

/// Raises a PostgreSQL ERROR with `code`, `message`, a DETAIL and a HINT line.
pub fn raise_with_hint(
    code: pgrx::PgSqlErrorCode,
    message: impl Into<String>,
    detail: impl Into<String>,
    hint: impl Into<String>,
) -> ! {
    let message: String = message.into();
    pgrx::pg_sys::panic::ErrorReport::new(code, message, "pg_snapbuild")
        .set_detail(detail)
        .set_hint(hint)
        .report(pgrx::PgLogLevel::ERROR);
    unreachable!("ereport(ERROR) returned")
}

/// Raises a PostgreSQL ERROR with `code`, `message` and a DETAIL line.
pub fn raise_with_detail(
    code: pgrx::PgSqlErrorCode,
    message: impl Into<String>,
    detail: impl Into<String>,
) -> ! {
    let message: String = message.into();
    let detail: String = detail.into();
    pgrx::ereport!(ERROR, code, message, detail);
}
