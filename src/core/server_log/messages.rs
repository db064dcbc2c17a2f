//! The server's messages the log is read for, and their recognizers: the snapshot
//! builder's LOG lines (snapbuild.c's `logical decoding found …`) and DEBUG1 lines
//! ([`DEBUG_PREFIXES`]), logical.c's decoder start with its DETAIL and a creation's
//! starting point, slot.c's invalidation, slotsync.c's skipped synchronization and the
//! postmaster's `ready to accept connections`. Not a PostgreSQL file: the texts are those
//! of snapbuild.c, logical.c, slot.c, slotsync.c and postmaster.c, untranslated.

use crate::include::xlogdefs::Lsn;

/// xlogrecovery.c's error context while a record is redone.
pub(super) const REDO_AT: &str = "WAL redo at ";
/// ReportSlotInvalidation's message (the slot is not in use by a process).
pub(super) const INVALIDATING: &str = "invalidating obsolete replication slot \"";
/// slotsync.c's messages when it keeps a copy temporary (the wording of 17.x and 18.x).
const SYNC_SKIPPED: [&str; 2] = [
    "could not synchronize replication slot \"",
    "could not sync slot \"",
];

/// The slot a slotsync.c `could not synchronize` message names.
pub(super) fn sync_skipped_slot(msg: &str) -> Option<String> {
    let rest = SYNC_SKIPPED.iter().find_map(|p| msg.strip_prefix(p))?;
    Some(rest[..rest.find('"')?].to_owned())
}

/// The DEBUG1 lines of the snapshot builder and of the slot's candidates read from the log
/// (the same texts in 14-18; `got new catalog xmin` is printed from 15 on):
/// snapbuild.c SnapBuildFindSnapshot's xmin-horizon pre-filter (with a DETAIL naming both
/// xids), SnapBuildCommitTxn's catalog-changing subtransactions, logical.c
/// LogicalIncreaseRestartDecodingForSlot's accepted and refused restart candidates,
/// LogicalIncreaseXminForSlot's accepted catalog xmin candidate, and snapbuild.c
/// SnapBuildSerialize's `serializing snapshot to pg_logical/snapshots/X-Y.snap` (printed
/// only by the decoder that writes the file: one that finds it already there says nothing).
pub const DEBUG_PREFIXES: [&str; 6] = [
    SKIPPING,
    "found subtransaction ",
    "got new restart lsn ",
    "failed to increase restart lsn: proposed ",
    "got new catalog xmin ",
    SERIALIZING,
];

/// snapbuild.c SnapBuildSerialize's DEBUG1 message, before the file's path.
pub const SERIALIZING: &str = "serializing snapshot to ";

/// The directory of `.snap` files as the server names them (PG_LOGICAL_SNAPSHOTS_DIR).
const SNAPSHOTS_DIR: &str = "pg_logical/snapshots/";

/// snapbuild.c SnapBuildFindSnapshot's DEBUG1 pre-filter message.
pub const SKIPPING: &str = "skipping snapshot at ";

/// What a DEBUG1 builder line is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugKind {
    /// `skipping snapshot at L while building logical decoding snapshot, xmin horizon too
    /// low`: a builder verdict on the RUNNING_XACTS at L, as the LOG lines are.
    Skip,
    /// `found subtransaction X:S with catalog changes`.
    Subtransaction,
    /// `got new restart lsn R at L` / `failed to increase restart lsn: proposed R, after L,
    /// …`: the restart candidate (R) proposed at the RUNNING_XACTS at L.
    RestartCandidate,
    /// `got new catalog xmin X at L`: the catalog xmin candidate proposed at L.
    XminCandidate,
    /// `serializing snapshot to pg_logical/snapshots/X-Y.snap`: this decoder wrote the
    /// `.snap` file of the record at X/Y.
    Serialize,
}

/// The kind of a DEBUG1 builder message (`None`: not one of [`DEBUG_PREFIXES`]).
pub fn debug_kind(message: &str) -> Option<DebugKind> {
    if message.starts_with(SKIPPING) {
        Some(DebugKind::Skip)
    } else if message.starts_with(DEBUG_PREFIXES[1]) {
        Some(DebugKind::Subtransaction)
    } else if message.starts_with(DEBUG_PREFIXES[2]) || message.starts_with(DEBUG_PREFIXES[3]) {
        Some(DebugKind::RestartCandidate)
    } else if message.starts_with(DEBUG_PREFIXES[4]) {
        Some(DebugKind::XminCandidate)
    } else if message.starts_with(SERIALIZING) {
        Some(DebugKind::Serialize)
    } else {
        None
    }
}

/// `(R, L)` of a restart candidate line: `got new restart lsn R at L` or `failed to
/// increase restart lsn: proposed R, after L, …`.
pub fn restart_candidate(message: &str) -> Option<(Lsn, Lsn)> {
    if let Some(rest) = message.strip_prefix(DEBUG_PREFIXES[2]) {
        let (r, rest) = leading_lsn(rest)?;
        let (l, _) = leading_lsn(rest.strip_prefix(" at ")?)?;
        return Some((r, l));
    }
    let rest = message.strip_prefix(DEBUG_PREFIXES[3])?;
    let (r, rest) = leading_lsn(rest)?;
    let (l, _) = leading_lsn(rest.strip_prefix(", after ")?)?;
    Some((r, l))
}

/// `(X, L)` of `got new catalog xmin X at L`.
pub fn xmin_candidate(message: &str) -> Option<(u32, Lsn)> {
    let rest = message.strip_prefix(DEBUG_PREFIXES[4])?;
    let (x, rest) = rest.split_once(" at ")?;
    Some((x.parse().ok()?, leading_lsn(rest)?.0))
}

/// `(X, S)` of `found subtransaction X:S with catalog changes`.
pub fn subtransaction(message: &str) -> Option<(u32, u32)> {
    let rest = message.strip_prefix(DEBUG_PREFIXES[1])?;
    let (pair, _) = rest.split_once(' ')?;
    let (x, s) = pair.split_once(':')?;
    Some((x.parse().ok()?, s.parse().ok()?))
}

/// The LSN of the file `serializing snapshot to pg_logical/snapshots/X-Y.snap` names (the
/// record the decoder serialized at).
pub fn serializing(message: &str) -> Option<Lsn> {
    let name = message
        .strip_prefix(SERIALIZING)?
        .strip_prefix(SNAPSHOTS_DIR)?;
    let (hi, lo) = name.strip_suffix(".snap")?.split_once('-')?;
    let v = (u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?;
    Some(Lsn(v))
}

/// logical.c DecodingContextFindStartpoint's DEBUG1 line: a decoder creating a slot
/// begins reading at this LSN.
pub(super) const SEARCHING: &str = "searching for logical decoding starting point, starting at ";

/// The LSN a builder message ends with (`logical decoding found … at X/Y`).
pub fn message_lsn(message: &str) -> Option<Lsn> {
    let at = message.rfind(" at ")?;
    leading_lsn(&message[at + 4..]).map(|(l, _)| l)
}

/// The builder messages the server logs at LOG (SnapBuildFindSnapshot, SnapBuildRestore).
pub(super) const BUILDER_PREFIX: &str = "logical decoding found ";

/// Whether a statement creates a slot (its decoder is a creating one).
pub(super) fn creates_slot(statement: &str) -> bool {
    statement.contains("pg_create_logical_replication_slot")
        || statement
            .trim_start()
            .starts_with("CREATE_REPLICATION_SLOT")
}

pub(super) const STARTING: &str = "starting logical decoding for slot \"";
const DETAIL: &str = "Streaming transactions committing after ";
pub(super) const READY: [&str; 2] = [
    "database system is ready to accept connections",
    "database system is ready to accept read-only connections",
];

/// `X/Y` (an LSN as the server prints it) at the start of `s`, and what follows.
pub(crate) fn leading_lsn(s: &str) -> Option<(Lsn, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_hexdigit() || c == '/'))
        .unwrap_or(s.len());
    let (hi, lo) = s[..end].split_once('/')?;
    let v = (u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?;
    Some((Lsn(v), &s[end..]))
}

/// The DETAIL text of a decoder start: `(after, restart)`.
pub fn parse_start_detail(detail: &str) -> Option<(Lsn, Lsn)> {
    let rest = detail.strip_prefix(DETAIL)?;
    let (after, rest) = leading_lsn(rest)?;
    let rest = rest.strip_prefix(", reading WAL from ")?;
    let (restart, _) = leading_lsn(rest)?;
    Some((after, restart))
}
