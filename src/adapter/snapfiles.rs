//! Reads `pg_logical/snapshots/*.snap` from the data directory (the backend's working
//! directory) and decodes them with the core codec.

use std::path::Path;

use snapbuild_core::replication::snapbuild_ondisk::{parse_snap_file_name, snap_file_name};
use snapbuild_core::{Lsn, OnDiskError, SnapBuildOnDisk};

/// `PG_LOGICAL_SNAPSHOTS_DIR`, relative to the data directory.
pub const SNAPSHOTS_DIR: &str = "pg_logical/snapshots";

/// Why a snapshot file could not be had.
#[derive(Debug)]
pub enum SnapFileError {
    /// The name is not `%X-%X.snap`.
    BadName(String),
    /// open/read failed (ENOENT included).
    Io { path: String, err: std::io::Error },
    /// The bytes are broken.
    Corrupt { path: String, err: OnDiskError },
}

impl SnapFileError {
    /// Raises this as a PostgreSQL ERROR with the matching SQLSTATE:
    /// `invalid_parameter_value` (22023) for a bad name, `undefined_file` (58P01) for a
    /// missing file, `io_error` (58030) for other I/O, `data_corrupted` (XX001) for bad
    /// contents, `internal_error` (XX000) for a count too large to allocate.
    pub fn raise(self) -> ! {
        use pgrx::PgSqlErrorCode as C;
        match self {
            SnapFileError::BadName(n) => crate::adapter::raise(
                C::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("invalid snapshot file name \"{n}\""),
            ),
            SnapFileError::Io { path, err } => {
                let code = if err.kind() == std::io::ErrorKind::NotFound {
                    C::ERRCODE_UNDEFINED_FILE
                } else {
                    C::ERRCODE_IO_ERROR
                };
                crate::adapter::raise(
                    code,
                    format!("could not open file \"{path}\": {}", strerror(&err)),
                )
            }
            SnapFileError::Corrupt { path, err } => {
                let code = if err.is_internal_error() {
                    C::ERRCODE_INTERNAL_ERROR
                } else {
                    C::ERRCODE_DATA_CORRUPTED
                };
                crate::adapter::raise(code, err.message(&path))
            }
        }
    }

    /// The text for the `error` column of a listing.
    pub fn text(&self) -> String {
        match self {
            SnapFileError::BadName(n) => format!("invalid snapshot file name \"{n}\""),
            SnapFileError::Io { path, err } => {
                format!("could not open file \"{path}\": {}", strerror(&err))
            }
            SnapFileError::Corrupt { path, err } => err.message(path),
        }
    }
}

/// The `%m` text of an I/O error, as the server prints it (without Rust's
/// " (os error N)" suffix).
pub fn strerror(err: &std::io::Error) -> String {
    let text = err.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// The path the server uses for the snapshot at `lsn`.
pub fn path_for(lsn: Lsn) -> String {
    format!("{SNAPSHOTS_DIR}/{}", snap_file_name(lsn))
}

/// Reads and decodes the file for `lsn`; `Ok(None)` when it does not exist (the
/// `missing_ok` path of SnapBuildRestoreSnapshot).
pub fn read_snapshot(lsn: Lsn, version: u32) -> Result<Option<SnapBuildOnDisk>, SnapFileError> {
    Ok(read_snapshot_bytes(lsn, version)?.map(|(file, _)| file))
}

/// [`read_snapshot`] with the file's raw bytes beside its decoded contents.
pub fn read_snapshot_bytes(
    lsn: Lsn,
    version: u32,
) -> Result<Option<(SnapBuildOnDisk, Vec<u8>)>, SnapFileError> {
    let path = path_for(lsn);
    match std::fs::read(&path) {
        Ok(bytes) => SnapBuildOnDisk::decode(&bytes, version)
            .map(|file| Some((file, bytes)))
            .map_err(|err| SnapFileError::Corrupt { path, err }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(SnapFileError::Io { path, err }),
    }
}

/// Reads and decodes a file given by its bare name (strictly `%X-%X.snap`).
pub fn read_named(name: &str, version: u32) -> Result<(Lsn, SnapBuildOnDisk), SnapFileError> {
    let lsn = parse_snap_file_name(name).ok_or_else(|| SnapFileError::BadName(name.to_owned()))?;
    let path = path_for(lsn);
    let bytes = std::fs::read(&path).map_err(|err| SnapFileError::Io {
        path: path.clone(),
        err,
    })?;
    let file = SnapBuildOnDisk::decode(&bytes, version)
        .map_err(|err| SnapFileError::Corrupt { path, err })?;
    Ok((lsn, file))
}

/// One directory entry of `pg_logical/snapshots`.
pub struct DirEntry {
    pub name: String,
    pub lsn: Option<Lsn>,
    pub size: u64,
    /// Seconds since the Unix epoch (with fraction).
    pub modified: Option<f64>,
}

/// Lists `*.snap` files, sorted by LSN then name (temporary `.tmp` files are skipped, and
/// so is a file removed between the directory read and its stat, as a checkpoint's
/// CheckPointSnapBuild does: genfile.c's pg_ls_dir_files skips those too).
pub fn list() -> std::io::Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(Path::new(SNAPSHOTS_DIR))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".snap") {
            continue;
        }
        let meta = match e.metadata() {
            Ok(m) => m,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        out.push(DirEntry {
            lsn: parse_snap_file_name(&name),
            name,
            size: meta.len(),
            modified,
        });
    }
    out.sort_by(|a, b| (a.lsn, &a.name).cmp(&(b.lsn, &b.name)));
    Ok(out)
}
