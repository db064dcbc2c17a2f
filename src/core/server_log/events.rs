//! The events the server log's parsers give ([`LogEvent`]) and the lines they carry: a
//! snapshot builder's line ([`BuilderLine`]), a slot invalidation or skipped
//! synchronization ([`InvalidationLine`]), and how a decoder's start_decoding_at relates
//! to what its start line prints ([`DecoderKind`]). Not a PostgreSQL file.

use crate::include::xlogdefs::Lsn;
use crate::server_log::messages::{
    debug_kind, leading_lsn, message_lsn, parse_start_detail, restart_candidate, serializing,
    DebugKind, REDO_AT,
};

/// What the log says happened, with the line's time (milliseconds since the Unix epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEvent {
    /// The server (re)started and accepts connections: no decoder from before runs on.
    ServerStart { at_ms: i64 },
    /// A decoder restarted for `slot`, reading WAL from `restart`. `after` is the slot's
    /// confirmed_flush the line prints; the builder's start_decoding_at is that, or the
    /// position a walsender's START_REPLICATION asked for when later ([`DecoderKind`]).
    DecoderStart {
        at_ms: i64,
        pid: Option<i32>,
        slot: String,
        after: Lsn,
        restart: Lsn,
        kind: DecoderKind,
    },
    /// A LOG line of the snapshot builder (`logical decoding found …`), or one of its
    /// DEBUG1 lines ([`DEBUG_PREFIXES`]), with its DETAIL and the statement of the session
    /// that logged it (DEBUG lines carry none at the default log_min_error_statement).
    ///
    /// [`DEBUG_PREFIXES`]: crate::server_log::messages::DEBUG_PREFIXES
    Builder(BuilderLine),
    /// slot.c ReportSlotInvalidation's `invalidating obsolete replication slot "S"`, with
    /// its DETAIL and, on a standby's startup process, the CONTEXT naming the record being
    /// redone (`WAL redo at X/Y for RMGR/TYPE: …`).
    SlotInvalidated(InvalidationLine),
    /// slotsync.c's `could not synchronize replication slot "S"` (17.0: `could not sync
    /// slot "S" …`) at LOG: a standby keeps its copy of failover slot S temporary; the
    /// DETAIL says why (read by the diagnosis of synced copies).
    SlotSyncSkipped(InvalidationLine),
    /// A decoder creating a slot begins (logical.c DecodingContextFindStartpoint, DEBUG1:
    /// `searching for logical decoding starting point, starting at R`).
    CreationStart {
        at_ms: i64,
        pid: Option<i32>,
        restart: Lsn,
    },
}

impl LogEvent {
    /// A `starting logical decoding for slot "S"` line with its DETAIL (`Streaming
    /// transactions committing after …, reading WAL from …`) and the session's statement;
    /// `None` when the DETAIL does not read so.
    pub fn decoder_start(
        at_ms: i64,
        pid: Option<i32>,
        slot: String,
        detail: &str,
        statement: Option<&str>,
    ) -> Option<LogEvent> {
        let (after, restart) = parse_start_detail(detail)?;
        Some(LogEvent::DecoderStart {
            at_ms,
            pid,
            slot,
            after,
            restart,
            kind: DecoderKind::from_statement(statement),
        })
    }

    pub fn at_ms(&self) -> i64 {
        match self {
            LogEvent::ServerStart { at_ms }
            | LogEvent::DecoderStart { at_ms, .. }
            | LogEvent::CreationStart { at_ms, .. } => *at_ms,
            LogEvent::Builder(b) => b.at_ms,
            LogEvent::SlotInvalidated(i) | LogEvent::SlotSyncSkipped(i) => i.at_ms,
        }
    }
}

/// A slot invalidation as the server logged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidationLine {
    pub at_ms: i64,
    pub pid: Option<i32>,
    pub slot: String,
    pub detail: Option<String>,
    pub context: Option<String>,
}

impl InvalidationLine {
    /// The record the CONTEXT line names: its LSN and `RMGR/TYPE`.
    pub fn redo_record(&self) -> Option<(Lsn, String)> {
        let c = self.context.as_deref()?;
        let rest = &c[c.find(REDO_AT)? + REDO_AT.len()..];
        let (lsn, rest) = leading_lsn(rest)?;
        let name = rest
            .strip_prefix(" for ")
            .map(|r| r.split([':', ' ']).next().unwrap_or("").to_owned())
            .unwrap_or_default();
        Some((lsn, name))
    }
}

/// A snapshot builder's line as the server wrote it: a LOG line (`logical decoding found
/// …`) or one of the DEBUG1 lines of [`DEBUG_PREFIXES`].
///
/// [`DEBUG_PREFIXES`]: crate::server_log::messages::DEBUG_PREFIXES
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuilderLine {
    pub at_ms: i64,
    pub pid: Option<i32>,
    /// The severity the line was logged at.
    pub level: LineLevel,
    pub message: String,
    pub detail: Option<String>,
    pub statement: Option<String>,
}

impl BuilderLine {
    /// A line `message` at `level`, without DETAIL or statement (yet).
    pub fn new(at_ms: i64, pid: Option<i32>, level: LineLevel, message: &str) -> Self {
        BuilderLine {
            at_ms,
            pid,
            level,
            message: message.to_owned(),
            detail: None,
            statement: None,
        }
    }

    /// The LSN of the record the line is about: `… at X/Y` of the LOG lines, of
    /// `skipping snapshot at`, of `got new catalog xmin` and `got new restart lsn`, the
    /// `after` of `failed to increase restart lsn`, the file name's LSN of `serializing
    /// snapshot to` (`None` for `found subtransaction`, which names transactions, not a
    /// record: see [`subtransaction`]).
    ///
    /// [`subtransaction`]: crate::server_log::messages::subtransaction
    pub fn lsn(&self) -> Option<Lsn> {
        match debug_kind(&self.message) {
            Some(DebugKind::RestartCandidate) => restart_candidate(&self.message).map(|(_, at)| at),
            Some(DebugKind::Subtransaction) => None,
            Some(DebugKind::Serialize) => serializing(&self.message),
            _ => message_lsn(&self.message),
        }
    }
}

/// The severity of a builder line. The server prints every DEBUG level as `DEBUG` (stderr,
/// csvlog and jsonlog alike); the lines read here are all DEBUG1 in snapbuild.c and
/// logical.c.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineLevel {
    Log,
    Debug1,
}

/// How a decoder's start_decoding_at relates to the `after` its log line prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecoderKind {
    /// A SQL function (peek, get): it asks for no position, so start_decoding_at is
    /// `after`.
    Sql,
    /// `pg_replication_slot_advance`: as [`DecoderKind::Sql`], decoding in fast-forward
    /// mode.
    Advance,
    /// A walsender's `START_REPLICATION SLOT … LOGICAL X`: start_decoding_at is the later of
    /// `after` and X.
    Walsender(Lsn),
    /// No statement logged with it: start_decoding_at is `after` or later.
    Unknown,
}

impl DecoderKind {
    /// Whether a decoder that logged `after` can have `start_decoding_at`.
    pub fn can_start_at(self, after: Lsn, start_decoding_at: Lsn) -> bool {
        match self {
            DecoderKind::Sql | DecoderKind::Advance => start_decoding_at == after,
            DecoderKind::Walsender(x) => start_decoding_at == after.max(x),
            DecoderKind::Unknown => start_decoding_at >= after,
        }
    }

    /// From the statement logged with the decoder's start (`None`: none logged).
    pub fn from_statement(statement: Option<&str>) -> DecoderKind {
        let Some(st) = statement else {
            return DecoderKind::Unknown;
        };
        let st = st.trim_start();
        if !st.starts_with("START_REPLICATION") {
            return if st.contains("pg_replication_slot_advance") {
                DecoderKind::Advance
            } else {
                DecoderKind::Sql
            };
        }
        st.find(" LOGICAL ")
            .and_then(|i| leading_lsn(&st[i + 9..]))
            .map_or(DecoderKind::Unknown, |(l, _)| DecoderKind::Walsender(l))
    }
}
