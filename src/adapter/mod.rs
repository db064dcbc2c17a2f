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
