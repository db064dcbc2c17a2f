//! `snapbuild_snapshot_info(filename)` and `snapbuild_snapshot_files()`.

use pgrx::prelude::*;
use snapbuild_core::SnapBuildOnDisk;

use crate::adapter::{server_version, snapfiles};
use crate::sql::types::{xids, PgLsn, Xid};

/// The decoded columns shared by both functions, in pg_logicalinspect's order after the
/// meta columns.
pub type InfoRow = (
    i32,              // magic
    i64,              // checksum
    i32,              // version
    bool,             // checksum_ok
    String,           // state
    Xid,              // xmin
    Xid,              // xmax
    PgLsn,            // start_decoding_at
    PgLsn,            // two_phase_at
    Xid,              // initial_xmin_horizon
    bool,             // building_full_snapshot
    Option<bool>,     // in_slot_creation
    PgLsn,            // last_serialized_snapshot
    Xid,              // next_phase_at
    i32,              // committed_count
    Option<Vec<Xid>>, // committed_xip (NULL when empty, as pg_logicalinspect)
    Option<i32>,      // catchange_count
    Option<Vec<Xid>>, // catchange_xip
);

/// The state name as contrib pg_logicalinspect prints it ("unknown state" otherwise).

/// Columns for a decoded file. A decoded file always passed its checksum. Empty xid
/// arrays are NULL, and `catchange_*` are NULL where the on-disk version has no such
/// field (before 16), as contrib pg_logicalinspect shows them.
pub fn info_row(f: &SnapBuildOnDisk) -> InfoRow {
    let b = &f.builder;
    (
        f.magic as i32,
        f.checksum as i64,
        f.version as i32,
        true,
        snapbuild_core::SnapBuildState::name_of_raw(b.state).to_owned(),
        Xid(b.xmin),
        Xid(b.xmax),
        b.start_decoding_at.into(),
        b.two_phase_at.into(),
        Xid(b.initial_xmin_horizon),
        b.building_full_snapshot,
        b.in_slot_creation,
        b.last_serialized_snapshot.into(),
        Xid(b.next_phase_at),
        f.committed_xip.len() as i32,
        (!f.committed_xip.is_empty()).then(|| xids(&f.committed_xip)),
        b.catchange_xcnt.map(|_| f.catchange_xip.len() as i32),
        (!f.catchange_xip.is_empty()).then(|| xids(&f.catchange_xip)),
    )
}

/// Decodes one `pg_logical/snapshots` file, as snapbuild.c SnapBuildRestoreSnapshot
/// reads it, and returns its header and serialized builder.
///
/// `filename` must be a bare `%X-%X.snap` name. Errors: `invalid_parameter_value`
/// (bad name), `undefined_file` (no such file), `data_corrupted` (short read, wrong
/// magic, unsupported version, checksum mismatch — the server's own texts).
#[pg_extern(strict)]
#[allow(clippy::type_complexity)]
fn snapbuild_snapshot_info(
    filename: &str,
) -> TableIterator<
    'static,
    (
        name!(magic, i32),
        name!(checksum, i64),
        name!(version, i32),
        name!(checksum_ok, bool),
        name!(state, String),
        name!(xmin, Xid),
        name!(xmax, Xid),
        name!(start_decoding_at, PgLsn),
        name!(two_phase_at, PgLsn),
        name!(initial_xmin_horizon, Xid),
        name!(building_full_snapshot, bool),
        name!(in_slot_creation, Option<bool>),
        name!(last_serialized_snapshot, PgLsn),
        name!(next_phase_at, Xid),
        name!(committed_count, i32),
        name!(committed_xip, Option<Vec<Xid>>),
        name!(catchange_count, Option<i32>),
        name!(catchange_xip, Option<Vec<Xid>>),
    ),
> {
    let version = server_version().snapbuild_version();
    let (_, file) = snapfiles::read_named(filename, version).unwrap_or_else(|e| e.raise());
    TableIterator::once(info_row(&file))
}

/// Lists every `*.snap` file in `pg_logical/snapshots` with its decoded contents. A
/// broken file yields a row whose `error` says what is wrong (the server's text) and
/// whose decoded columns are NULL; the listing goes on. A file a checkpoint removes while
/// the directory is read is left out.
///
/// Errors: `io_error` if the directory cannot be read.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_snapshot_files() -> TableIterator<
    'static,
    (
        name!(name, String),
        name!(lsn, Option<PgLsn>),
        name!(size, i64),
        name!(modification, Option<pgrx::datum::TimestampWithTimeZone>),
        name!(magic, Option<i32>),
        name!(checksum, Option<i64>),
        name!(version, Option<i32>),
        name!(checksum_ok, Option<bool>),
        name!(state, Option<String>),
        name!(xmin, Option<Xid>),
        name!(xmax, Option<Xid>),
        name!(start_decoding_at, Option<PgLsn>),
        name!(two_phase_at, Option<PgLsn>),
        name!(initial_xmin_horizon, Option<Xid>),
        name!(building_full_snapshot, Option<bool>),
        name!(in_slot_creation, Option<bool>),
        name!(last_serialized_snapshot, Option<PgLsn>),
        name!(next_phase_at, Option<Xid>),
        name!(committed_count, Option<i32>),
        name!(committed_xip, Option<Vec<Xid>>),
        name!(catchange_count, Option<i32>),
        name!(catchange_xip, Option<Vec<Xid>>),
        name!(error, Option<String>),
    ),
> {
    let version = server_version().snapbuild_version();
    let entries = snapfiles::list().unwrap_or_else(|e| {
        crate::adapter::raise(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!(
                "could not read directory \"{}\": {e}",
                snapfiles::SNAPSHOTS_DIR
            ),
        )
    });
    let mut rows = Vec::with_capacity(entries.len());
    for e in entries {
        pgrx::check_for_interrupts!();
        let modification = e.modified.map(pgrx::datetime::to_timestamp);
        let decoded = snapfiles::read_named(&e.name, version);
        // Removed since it was listed (a checkpoint): no longer there to show.
        if matches!(&decoded, Err(snapfiles::SnapFileError::Io { err, .. })
            if err.kind() == std::io::ErrorKind::NotFound)
        {
            continue;
        }
        let head = (e.name, e.lsn.map(PgLsn::from), e.size as i64, modification);
        rows.push(match decoded {
            Ok((_, f)) => {
                let r = info_row(&f);
                (
                    head.0,
                    head.1,
                    head.2,
                    head.3,
                    Some(r.0),
                    Some(r.1),
                    Some(r.2),
                    Some(r.3),
                    Some(r.4),
                    Some(r.5),
                    Some(r.6),
                    Some(r.7),
                    Some(r.8),
                    Some(r.9),
                    Some(r.10),
                    r.11,
                    Some(r.12),
                    Some(r.13),
                    Some(r.14),
                    r.15,
                    r.16,
                    r.17,
                    None,
                )
            }
            Err(err) => (
                head.0,
                head.1,
                head.2,
                head.3,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                Some(err.text()),
            ),
        });
    }
    TableIterator::new(rows)
}
