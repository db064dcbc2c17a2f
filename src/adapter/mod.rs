//! Thin adapters that fetch the server's inputs for the core: WAL through XLogReader,
//! replication slots from shared memory, `.snap` files from the data directory, and heap
//! pages through the buffer manager.

pub mod activity;
pub mod heap;
pub mod slots;
pub mod snapfiles;
pub mod wal;

/// The running server's major version (from `PG_VERSION_NUM`).
pub fn server_major() -> snapbuild_core::PgMajor {
    snapbuild_core::PgMajor::from_version_num(pgrx::pg_sys::PG_VERSION_NUM)
}

/// Raises a PostgreSQL ERROR with `code` and `message`; usable in expression position.
pub fn raise(code: pgrx::PgSqlErrorCode, message: impl Into<String>) -> ! {
    let message: String = message.into();
    pgrx::ereport!(ERROR, code, message);
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
