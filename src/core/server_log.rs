//! The server log's lines about logical decoders, as plain values. Not a PostgreSQL file:
//! it reads what logical.c's CreateDecodingContext and the postmaster print.
//!
//! A `.snap` file is written by whichever decoder first serializes at its LSN, and what it
//! holds depends on where that decoder started. The log names every decoder that
//! restarted: logical.c CreateDecodingContext logs, at LOG, `starting logical decoding
//! for slot "S"` with the DETAIL `Streaming transactions committing after A, reading WAL
//! from R.` (A: the slot's confirmed_flush, which becomes the builder's
//! start_decoding_at; R: its restart_lsn). A decoder creating a slot stops at the record
//! that makes it consistent and never serializes, so the restarted ones are all the
//! possible writers. A server start (`database system is ready to accept connections`, or
//! `… read-only connections` on a standby) ends every decoder.
//!
//! Only the stderr format with a leading timestamp in `log_line_prefix` (`%m`, `%t`, the
//! default `%m [%p] `) in UTC/GMT, a numeric zone or an abbreviation of [`ZoneNames`], and
//! the csvlog and jsonlog formats, are read;
//! messages must be untranslated (`lc_messages` C/en). Anything else gives no events,
//! which leaves the verdicts that need them undecided.

use crate::include::xlogdefs::Lsn;

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

/// xlogrecovery.c's error context while a record is redone.
const REDO_AT: &str = "WAL redo at ";
/// ReportSlotInvalidation's message (the slot is not in use by a process).
const INVALIDATING: &str = "invalidating obsolete replication slot \"";
/// slotsync.c's messages when it keeps a copy temporary (the wording of 17.x and 18.x).
const SYNC_SKIPPED: [&str; 2] = [
    "could not synchronize replication slot \"",
    "could not sync slot \"",
];

/// The slot a slotsync.c `could not synchronize` message names.
fn sync_skipped_slot(msg: &str) -> Option<String> {
    let rest = SYNC_SKIPPED.iter().find_map(|p| msg.strip_prefix(p))?;
    Some(rest[..rest.find('"')?].to_owned())
}

/// A snapshot builder's line as the server wrote it: a LOG line (`logical decoding found
/// …`) or one of the DEBUG1 lines of [`DEBUG_PREFIXES`].
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
const SEARCHING: &str = "searching for logical decoding starting point, starting at ";

/// The LSN a builder message ends with (`logical decoding found … at X/Y`).
pub fn message_lsn(message: &str) -> Option<Lsn> {
    let at = message.rfind(" at ")?;
    leading_lsn(&message[at + 4..]).map(|(l, _)| l)
}

/// The builder messages the server logs at LOG (SnapBuildFindSnapshot, SnapBuildRestore).
const BUILDER_PREFIX: &str = "logical decoding found ";

/// Whether a statement creates a slot (its decoder is a creating one).
fn creates_slot(statement: &str) -> bool {
    statement.contains("pg_create_logical_replication_slot")
        || statement
            .trim_start()
            .starts_with("CREATE_REPLICATION_SLOT")
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

impl LogEvent {
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

const STARTING: &str = "starting logical decoding for slot \"";
const DETAIL: &str = "Streaming transactions committing after ";
const READY: [&str; 2] = [
    "database system is ready to accept connections",
    "database system is ready to accept read-only connections",
];

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `ms` since the epoch as `%m` prints it in UTC (`2026-12-01 13:18:30.089 UTC`).
pub fn format_ms(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // civil_from_days (H. Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03} UTC",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// Time zone abbreviations a log may print (`CET`, `EST`…) with their offsets from UTC in
/// seconds, as the server knows them (its `log_timezone`'s own abbreviation, then
/// `pg_timezone_abbrevs`); the first entry of a name wins. UTC, GMT and numeric zones need
/// none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneNames(pub Vec<(String, i64)>);

impl ZoneNames {
    /// The offset of abbreviation `name` (seconds east of UTC), if known.
    pub fn offset(&self, name: &str) -> Option<i64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, o)| *o)
    }
}

/// A timestamp at the start of `s` as `%m`/`%t` print it (`2026-12-01 13:18:30.089 UTC`,
/// `… 13:18:30 +03`): milliseconds since the epoch and the rest of the line, or `None`
/// (no timestamp there, or a zone given by a name other than UTC/GMT:
/// [`leading_timestamp_in`] reads those).
pub fn leading_timestamp(s: &str) -> Option<(i64, &str)> {
    leading_timestamp_in(s, &ZoneNames::default())
}

/// [`leading_timestamp`], with the zone abbreviations of `zones` read too.
pub fn leading_timestamp_in<'a>(s: &'a str, zones: &ZoneNames) -> Option<(i64, &'a str)> {
    let b = s.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())
            .flatten()
    };
    if b[4] != b'-' || b[7] != b'-' || b[10] != b' ' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        let mut end = start;
        while end < b.len() && b[end].is_ascii_digit() {
            end += 1;
        }
        let frac = s.get(start..end)?;
        if frac.is_empty() {
            return None;
        }
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        ms = digits.parse().ok()?;
        i = end;
    }
    if b.get(i) != Some(&b' ') {
        return None;
    }
    let rest = &s[i + 1..];
    let (zone, after) = rest.split_once(' ').unwrap_or((rest, ""));
    let offset_s: i64 = match zone {
        "UTC" | "GMT" | "Z" => 0,
        z if (z.starts_with('+') || z.starts_with('-')) && z.len() >= 3 => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let parts: Vec<&str> = z[1..].split(':').collect();
            let hh: i64 = parts.first()?.parse().ok()?;
            let mm: i64 = parts.get(1).map_or(Some(0), |p| p.parse().ok())?;
            sign * (hh * 3600 + mm * 60)
        }
        z => zones.offset(z)?,
    };
    let secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
    Some((secs * 1000 + ms, after))
}

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

/// The `[pid]` of the default prefix, if the prefix has one.
fn prefix_pid(prefix: &str) -> Option<i32> {
    let open = prefix.find('[')?;
    let close = prefix[open..].find(']')? + open;
    prefix[open + 1..close].parse().ok()
}

/// A message being read: its prefix and what it has so far.
enum Open {
    /// `starting logical decoding for slot`: (time, pid, slot, DETAIL text, STATEMENT).
    Start(i64, Option<i32>, String, Option<String>, Option<String>),
    Builder(BuilderLine),
    Invalidation(InvalidationLine),
    SyncSkipped(InvalidationLine),
}

/// The part of an open message that continuation lines (starting with a tab) extend.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Message,
    Detail,
    Statement,
    Context,
    Other,
}

/// Reads stderr-format lines one at a time. A LOG line is paired with the DETAIL and
/// STATEMENT lines that follow it with the same prefix (one ereport writes them at once;
/// a multi-line part continues on lines that start with a tab); call
/// [`StderrParser::finish`] after the last line.
#[derive(Default)]
pub struct StderrParser {
    open: Option<(String, Open, Part)>,
    zones: ZoneNames,
}

impl StderrParser {
    /// A parser that also reads the zone abbreviations of `zones` in timestamps.
    pub fn with_zones(zones: ZoneNames) -> Self {
        StderrParser { open: None, zones }
    }

    /// Feeds one line (without its newline); returns the events it completes.
    pub fn line(&mut self, line: &str) -> Vec<LogEvent> {
        let mut out = Vec::new();
        if let Some((prefix, mut open, part)) = self.open.take() {
            if let Some(cont) = line.strip_prefix('\t') {
                let field = match (&mut open, part) {
                    (Open::Builder(b), Part::Message) => Some(&mut b.message),
                    (Open::Builder(b), Part::Detail) => b.detail.as_mut(),
                    (Open::Builder(b), Part::Statement) => b.statement.as_mut(),
                    (Open::Start(_, _, _, d, _), Part::Detail) => d.as_mut(),
                    (Open::Start(_, _, _, _, st), Part::Statement) => st.as_mut(),
                    (Open::Invalidation(i) | Open::SyncSkipped(i), Part::Detail) => {
                        i.detail.as_mut()
                    }
                    (Open::Invalidation(i) | Open::SyncSkipped(i), Part::Context) => {
                        i.context.as_mut()
                    }
                    _ => None,
                };
                if let Some(f) = field {
                    f.push('\n');
                    f.push_str(cont);
                }
                self.open = Some((prefix, open, part));
                return out;
            }
            let rest = line.strip_prefix(prefix.as_str());
            let tagged = |tag: &str| rest.and_then(|r| r.strip_prefix(tag)).map(str::to_owned);
            if let Some(d) = tagged("DETAIL:  ") {
                match &mut open {
                    Open::Builder(b) => b.detail = Some(d),
                    Open::Start(_, _, _, det, _) => *det = Some(d),
                    Open::Invalidation(i) | Open::SyncSkipped(i) => i.detail = Some(d),
                }
                self.open = Some((prefix, open, Part::Detail));
                return out;
            }
            if let Some(st) = tagged("STATEMENT:  ") {
                match &mut open {
                    Open::Builder(b) => b.statement = Some(st),
                    Open::Start(_, _, _, _, s) => *s = Some(st),
                    Open::Invalidation(_) | Open::SyncSkipped(_) => {}
                }
                self.open = Some((prefix, open, Part::Statement));
                return out;
            }
            if let (Some(c), Open::Invalidation(i) | Open::SyncSkipped(i)) =
                (tagged("CONTEXT:  "), &mut open)
            {
                i.context = Some(c);
                self.open = Some((prefix, open, Part::Context));
                return out;
            }
            if tagged("HINT:  ").is_some() || tagged("CONTEXT:  ").is_some() {
                self.open = Some((prefix, open, Part::Other));
                return out;
            }
            out.extend(close(open));
        }
        let Some((at_ms, _)) = leading_timestamp_in(line, &self.zones) else {
            return out;
        };
        // The severity tag after the prefix: the first `LOG:  ` or `DEBUG:  `.
        let log = line.find("LOG:  ").map(|p| (p, p + 6, LineLevel::Log));
        let debug = line.find("DEBUG:  ").map(|p| (p, p + 8, LineLevel::Debug1));
        let Some((pos, body, level)) = [log, debug].into_iter().flatten().min_by_key(|t| t.0)
        else {
            return out;
        };
        let (prefix, msg) = (&line[..pos], &line[body..]);
        let pid = prefix_pid(prefix);
        if level == LineLevel::Debug1 {
            if let Some(restart) = msg.strip_prefix(SEARCHING).and_then(leading_lsn) {
                out.push(LogEvent::CreationStart {
                    at_ms,
                    pid,
                    restart: restart.0,
                });
            } else if debug_kind(msg).is_some() {
                let b = BuilderLine::new(at_ms, pid, level, msg);
                self.open = Some((prefix.to_owned(), Open::Builder(b), Part::Message));
            }
            return out;
        }
        if let Some(rest) = msg.strip_prefix(STARTING) {
            let slot = rest.strip_suffix('"').unwrap_or(rest).to_owned();
            self.open = Some((
                prefix.to_owned(),
                Open::Start(at_ms, pid, slot, None, None),
                Part::Message,
            ));
        } else if msg.starts_with(BUILDER_PREFIX) {
            let b = BuilderLine::new(at_ms, pid, level, msg);
            self.open = Some((prefix.to_owned(), Open::Builder(b), Part::Message));
        } else if let Some(rest) = msg.strip_prefix(INVALIDATING) {
            let inv = InvalidationLine {
                at_ms,
                pid,
                slot: rest.strip_suffix('"').unwrap_or(rest).to_owned(),
                detail: None,
                context: None,
            };
            self.open = Some((prefix.to_owned(), Open::Invalidation(inv), Part::Message));
        } else if let Some(slot) = sync_skipped_slot(msg) {
            let line = InvalidationLine {
                at_ms,
                pid,
                slot,
                detail: None,
                context: None,
            };
            self.open = Some((prefix.to_owned(), Open::SyncSkipped(line), Part::Message));
        } else if READY.iter().any(|r| msg.starts_with(r)) {
            out.push(LogEvent::ServerStart { at_ms });
        }
        out
    }

    /// The message still open at the end of the input.
    pub fn finish(&mut self) -> Option<LogEvent> {
        self.open.take().and_then(|(_, o, _)| close(o))
    }
}

/// The event of a message read to its end.
fn close(open: Open) -> Option<LogEvent> {
    match open {
        Open::Start(at_ms, pid, slot, detail, statement) => {
            let (after, restart) = parse_start_detail(detail.as_deref()?)?;
            Some(LogEvent::DecoderStart {
                at_ms,
                pid,
                slot,
                after,
                restart,
                kind: DecoderKind::from_statement(statement.as_deref()),
            })
        }
        Open::Builder(b) => Some(LogEvent::Builder(b)),
        Open::Invalidation(i) => Some(LogEvent::SlotInvalidated(i)),
        Open::SyncSkipped(i) => Some(LogEvent::SlotSyncSkipped(i)),
    }
}

/// The event of one structured log entry (jsonlog, csvlog): its severity, `%m`-style
/// time, pid, message, detail and statement.
#[allow(clippy::too_many_arguments)]
fn event_from_fields(
    zones: &ZoneNames,
    severity: &str,
    timestamp: &str,
    pid: Option<i32>,
    msg: &str,
    detail: Option<&str>,
    statement: Option<&str>,
    context: Option<&str>,
) -> Option<LogEvent> {
    let level = match severity {
        "LOG" => LineLevel::Log,
        "DEBUG" => LineLevel::Debug1,
        _ => return None,
    };
    let (at_ms, _) = leading_timestamp_in(timestamp, zones)?;
    if let Some(rest) = msg
        .strip_prefix(INVALIDATING)
        .filter(|_| level == LineLevel::Log)
    {
        return Some(LogEvent::SlotInvalidated(InvalidationLine {
            at_ms,
            pid,
            slot: rest.strip_suffix('"').unwrap_or(rest).to_owned(),
            detail: detail.map(str::to_owned),
            context: context.map(str::to_owned),
        }));
    }
    if let Some(slot) = sync_skipped_slot(msg).filter(|_| level == LineLevel::Log) {
        return Some(LogEvent::SlotSyncSkipped(InvalidationLine {
            at_ms,
            pid,
            slot,
            detail: detail.map(str::to_owned),
            context: context.map(str::to_owned),
        }));
    }
    if level == LineLevel::Debug1 {
        if let Some(restart) = msg.strip_prefix(SEARCHING).and_then(leading_lsn) {
            return Some(LogEvent::CreationStart {
                at_ms,
                pid,
                restart: restart.0,
            });
        }
        debug_kind(msg)?;
    } else if READY.iter().any(|r| msg.starts_with(r)) {
        return Some(LogEvent::ServerStart { at_ms });
    }
    if level == LineLevel::Debug1 || msg.starts_with(BUILDER_PREFIX) {
        return Some(LogEvent::Builder(BuilderLine {
            detail: detail.map(str::to_owned),
            statement: statement.map(str::to_owned),
            ..BuilderLine::new(at_ms, pid, level, msg)
        }));
    }
    let rest = msg.strip_prefix(STARTING)?;
    let slot = rest.strip_suffix('"').unwrap_or(rest).to_owned();
    let (after, restart) = parse_start_detail(detail?)?;
    Some(LogEvent::DecoderStart {
        at_ms,
        pid,
        slot,
        after,
        restart,
        kind: DecoderKind::from_statement(statement),
    })
}

/// One jsonlog line (`log_destination = jsonlog`): its `timestamp`, `error_severity`,
/// `pid`, `message`, `detail` and `statement`; `zones` reads named zones in its timestamp.
pub fn parse_json_line(line: &str, zones: &ZoneNames) -> Option<LogEvent> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let text = |k: &str| v.get(k).and_then(|x| x.as_str());
    event_from_fields(
        zones,
        text("error_severity")?,
        text("timestamp")?,
        v.get("pid").and_then(|p| p.as_i64()).map(|p| p as i32),
        text("message")?,
        text("detail"),
        text("statement"),
        text("context"),
    )
}

/// Reads csvlog (`log_destination = csvlog`) line by line: a record ends at a newline
/// outside quotes (fields may hold newlines); its columns are those of the server's
/// csvlog (log_time 0, process_id 3, error_severity 11, message 13, detail 14, context 18,
/// query 19).
#[derive(Default)]
pub struct CsvParser {
    record: String,
    zones: ZoneNames,
}

impl CsvParser {
    /// A parser that also reads the zone abbreviations of `zones` in timestamps.
    pub fn with_zones(zones: ZoneNames) -> Self {
        CsvParser {
            record: String::new(),
            zones,
        }
    }

    /// Feeds one line (without its newline); returns the event of a record it completes.
    pub fn line(&mut self, line: &str) -> Option<LogEvent> {
        if !self.record.is_empty() {
            self.record.push('\n');
        }
        self.record.push_str(line);
        // complete when the quotes are balanced
        if self.record.bytes().filter(|&b| b == b'"').count() % 2 != 0 {
            if self.record.len() > 1 << 20 {
                self.record.clear(); // not csvlog after all
            }
            return None;
        }
        let record = std::mem::take(&mut self.record);
        let f = csv_fields(&record);
        let field = |i: usize| f.get(i).map(String::as_str).filter(|s| !s.is_empty());
        event_from_fields(
            &self.zones,
            field(11)?,
            field(0)?,
            field(3).and_then(|p| p.parse().ok()),
            field(13)?,
            field(14),
            field(19),
            field(18),
        )
    }
}

/// The fields of one CSV record (RFC 4180 quoting, as the server writes csvlog).
fn csv_fields(record: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = record.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// The decoders that could have written a `.snap` file, from the log's events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Writers {
    /// Every decoder the log shows running when the file was written, reading from at
    /// or before its LSN with the file's start_decoding_at: `(restart, slot, pid,
    /// fast_forward)`.
    Known(Vec<(Lsn, String, Option<i32>, bool)>),
    /// The log cannot tell: why.
    Unknown(String),
}

/// Slack between the log's clock and the file's modification time (ms): a decoder that
/// started up to this long after the file was written still counts as a candidate (file
/// times come from the kernel's coarse clock, up to one tick, 10 ms at HZ=100, behind).
const CLOCK_SLACK_MS: i64 = 50;

/// The possible writers of the file at `lsn` with builder start_decoding_at `after`,
/// written at `mtime_ms`: the decoders that started after the last server start before
/// `mtime_ms` (which ended every earlier one) and no later than `mtime_ms`, read WAL from
/// at or before `lsn`, and can have had `after` as start_decoding_at
/// ([`DecoderKind::can_start_at`]). `Unknown` when the events do
/// not reach back to that server start (the log was read from a later point, rotated, or
/// has no timestamps), or no decoder qualifies.
pub fn writers_of(events: &[LogEvent], lsn: Lsn, after: Lsn, mtime_ms: i64) -> Writers {
    let Some(start) = events
        .iter()
        .filter_map(|e| match e {
            LogEvent::ServerStart { at_ms } if *at_ms <= mtime_ms => Some(*at_ms),
            _ => None,
        })
        .max()
    else {
        return Writers::Unknown(
            "the server log read holds no server start before the file was written".into(),
        );
    };
    let mut found: Vec<(Lsn, String, Option<i32>, bool)> = Vec::new();
    for e in events {
        if let LogEvent::DecoderStart {
            at_ms,
            pid,
            slot,
            after: a,
            restart,
            kind,
        } = e
        {
            if *at_ms >= start
                && *at_ms <= mtime_ms.saturating_add(CLOCK_SLACK_MS)
                && kind.can_start_at(*a, after)
                && *restart <= lsn
                && !found
                    .iter()
                    .any(|(r, s, p, _)| r == restart && s == slot && p == pid)
            {
                found.push((*restart, slot.clone(), *pid, *kind == DecoderKind::Advance));
            }
        }
    }
    if found.is_empty() {
        return Writers::Unknown(format!(
            "the server log shows no decoder with start_decoding_at {after} reading from at or before {lsn} when the file was written"
        ));
    }
    found.sort();
    Writers::Known(found)
}

/// Where a decoder the log shows began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Restarted (`starting logical decoding`): reading WAL from `restart`.
    Restart { restart: Lsn, slot: String },
    /// Creating a slot (its statement creates one): it began at its first message's record.
    Creation,
    /// Neither could be told (no statement logged, no start line seen).
    Unknown,
}

/// How a replay began, which is what a logged decoder's lines are judged by
/// ([`LoggedDecoder::same_start_as`], [`LogLineMatch`]): where it reads WAL from, the
/// record its first builder LOG message names (`None` before it has one), and whether it
/// runs in creation mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayStart {
    pub start: Lsn,
    pub first_message_lsn: Option<Lsn>,
    pub in_creation: bool,
}

impl ReplayStart {
    pub const fn new(start: Lsn, first_message_lsn: Option<Lsn>, in_creation: bool) -> Self {
        ReplayStart {
            start,
            first_message_lsn,
            in_creation,
        }
    }
}

/// One decoder's run as the log shows it: who, where it began, its builder lines in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedDecoder {
    pub pid: Option<i32>,
    pub origin: Origin,
    /// Its LOG lines (`logical decoding found …`), in order.
    pub lines: Vec<BuilderLine>,
    /// Its DEBUG1 lines ([`DEBUG_PREFIXES`]), in order.
    pub debug: Vec<BuilderLine>,
    /// It logged at DEBUG1: some DEBUG line of it is in the log (its `searching for
    /// logical decoding starting point` for a creation, or any of `debug`).
    pub logs_debug: bool,
    /// Where a creation began reading, from its `searching for logical decoding starting
    /// point` line (DEBUG1).
    pub creation_start: Option<Lsn>,
}

impl LoggedDecoder {
    /// Whether a replay that starts at `start` and whose first builder message names
    /// `first_message_lsn` runs as this decoder did: a restarted one read from `start`; a
    /// creating one's first message names the same record (the first LOG line; before the
    /// replay has one, as for a DEBUG1 skip ahead of it, a creation that logged where it
    /// began reading started at `start`).
    pub fn same_start_as(&self, start: Lsn, first_message_lsn: Option<Lsn>) -> bool {
        match &self.origin {
            Origin::Restart { restart, .. } => *restart == start,
            Origin::Creation => match first_message_lsn {
                Some(_) => self.lines.first().and_then(BuilderLine::lsn) == first_message_lsn,
                None => self.creation_start == Some(start),
            },
            Origin::Unknown => false,
        }
    }
}

/// The decoders of the log's builder lines: a `starting logical decoding` line opens a
/// restarted decoder for its pid, a `searching for logical decoding starting point` line
/// (DEBUG1) a creating one; a LOG builder line whose statement creates a slot belongs to
/// that pid's creation (a new one after a `found consistent point`, which ends a
/// creation); other LOG builder lines go to the pid's open decoder. DEBUG1 lines (which
/// carry no statement) go to the pid's latest decoder, a finished creation included (a
/// creation's candidates at its consistent point are logged after that line); a pid with
/// none opens one of unknown origin. A server start closes all.
pub fn decoders(events: &[LogEvent]) -> Vec<LoggedDecoder> {
    let mut out: Vec<LoggedDecoder> = Vec::new();
    // pid -> (index in out, creation finished)
    let mut open: Vec<(Option<i32>, usize, bool)> = Vec::new();
    let new = |pid: Option<i32>, origin: Origin| LoggedDecoder {
        pid,
        origin,
        lines: Vec::new(),
        debug: Vec::new(),
        logs_debug: false,
        creation_start: None,
    };
    for e in events {
        match e {
            LogEvent::ServerStart { .. } => open.clear(),
            LogEvent::DecoderStart {
                pid, slot, restart, ..
            } => {
                open.retain(|(p, _, _)| p != pid);
                out.push(new(
                    *pid,
                    Origin::Restart {
                        restart: *restart,
                        slot: slot.clone(),
                    },
                ));
                open.push((*pid, out.len() - 1, false));
            }
            LogEvent::CreationStart { pid, restart, .. } => {
                open.retain(|(p, _, _)| p != pid);
                let mut d = new(*pid, Origin::Creation);
                d.logs_debug = true;
                d.creation_start = Some(*restart);
                out.push(d);
                open.push((*pid, out.len() - 1, false));
            }
            LogEvent::Builder(b) if b.level == LineLevel::Debug1 => {
                let idx = match open.iter().find(|(p, _, _)| *p == b.pid) {
                    Some(o) => o.1,
                    None => {
                        out.push(new(b.pid, Origin::Unknown));
                        open.push((b.pid, out.len() - 1, false));
                        out.len() - 1
                    }
                };
                out[idx].debug.push(b.clone());
                out[idx].logs_debug = true;
            }
            LogEvent::Builder(b) => {
                let creating = b.statement.as_deref().is_some_and(creates_slot);
                let current = open.iter().position(|(p, _, _)| *p == b.pid);
                let reuse = current.filter(|&i| {
                    let (_, idx, finished) = open[i];
                    let is_creation = out[idx].origin == Origin::Creation;
                    if creating {
                        is_creation && !finished
                    } else {
                        !is_creation || !finished
                    }
                });
                let idx = match reuse {
                    Some(i) => open[i].1,
                    None => {
                        if let Some(i) = current {
                            open.remove(i);
                        }
                        out.push(new(
                            b.pid,
                            if creating {
                                Origin::Creation
                            } else {
                                Origin::Unknown
                            },
                        ));
                        open.push((b.pid, out.len() - 1, false));
                        out.len() - 1
                    }
                };
                out[idx].lines.push(b.clone());
                if creating
                    && b.message
                        .starts_with("logical decoding found consistent point")
                {
                    if let Some(o) = open.iter_mut().find(|(_, i, _)| *i == idx) {
                        o.2 = true;
                    }
                }
            }
            LogEvent::SlotInvalidated(_) | LogEvent::SlotSyncSkipped(_) => {}
        }
    }
    out
}

/// What the log says about one builder message of a replay: the lines decoders logged for
/// the same record, each marked whether its decoder started as the replay did and whether
/// it says exactly what the replay says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLineMatch {
    pub line: BuilderLine,
    pub same_start: bool,
    pub equal: bool,
    /// Whether a different line from this decoder shows the replay wrong: a decoder
    /// restarted where the replay starts ran as the replay does; a creating one ran in
    /// creation mode, which a replay of a created slot does not (it may restore a `.snap`
    /// file the creation could not), so its line can confirm the replay, not refute it.
    pub may_refute: bool,
}

/// The lines of `decoders` naming the record of `message` (the replay's LOG message, with
/// `detail`), for the replay that began as `replay` says.
pub fn lines_for(
    decoders: &[LoggedDecoder],
    index: Option<&LineIndex>,
    message: &str,
    detail: Option<&str>,
    replay: ReplayStart,
) -> Vec<LogLineMatch> {
    let Some(lsn) = message_lsn(message) else {
        return Vec::new();
    };
    builder_lines_at(decoders, index, lsn)
        .into_iter()
        .map(|(d, l)| {
            d.matched(
                l,
                replay,
                l.message == message && l.detail.as_deref() == detail,
            )
        })
        .collect()
}

/// Builder lines by the record they are about ([`BuilderLine::lsn`]), so that a trace
/// asks about each row without scanning the whole log's lines.
#[derive(Clone, Debug, Default)]
pub struct LineIndex {
    /// LSN -> (decoder, DEBUG1 line or not, line), in the order a scan finds them.
    map: std::collections::HashMap<Lsn, Vec<(usize, bool, usize)>>,
    /// Top-level xid -> (decoder, DEBUG1 line) of the `found subtransaction` lines.
    by_top_xid: std::collections::HashMap<u32, Vec<(usize, usize)>>,
}

impl LineIndex {
    pub fn new(decoders: &[LoggedDecoder]) -> LineIndex {
        let mut map: std::collections::HashMap<Lsn, Vec<(usize, bool, usize)>> =
            std::collections::HashMap::new();
        let mut by_top_xid: std::collections::HashMap<u32, Vec<(usize, usize)>> =
            std::collections::HashMap::new();
        for (d, dec) in decoders.iter().enumerate() {
            for (debug, lines) in [(false, &dec.lines), (true, &dec.debug)] {
                for (i, l) in lines.iter().enumerate() {
                    if let Some(lsn) = l.lsn() {
                        map.entry(lsn).or_default().push((d, debug, i));
                    } else if let (true, Some((top, _))) = (debug, subtransaction(&l.message)) {
                        by_top_xid.entry(top).or_default().push((d, i));
                    }
                }
            }
        }
        LineIndex { map, by_top_xid }
    }

    /// Whether some decoder logged `found subtransaction` lines for the commit of `top`.
    pub fn logs_subtransactions_of(&self, top: u32) -> bool {
        self.by_top_xid.contains_key(&top)
    }
}

/// The `found subtransaction X:S with catalog changes` lines (snapbuild.c
/// SnapBuildCommitTxn, DEBUG1) decoders logged for the commit of `top`, each equal when
/// the replay found S catalog-changing there too (`replay_subxacts`), for the replay that
/// began as `replay` says. A decoder logs one line per catalog-changing subtransaction the commit record
/// lists, all before it looks at the top-level transaction, so a decoder's lines for a
/// commit are the whole set it found.
pub fn subtransaction_lines_for(
    decoders: &[LoggedDecoder],
    index: Option<&LineIndex>,
    top: u32,
    replay_subxacts: &[u32],
    replay: ReplayStart,
) -> Vec<LogLineMatch> {
    let found: Vec<(&LoggedDecoder, &BuilderLine)> = match index {
        Some(ix) => ix
            .by_top_xid
            .get(&top)
            .map(|v| {
                v.iter()
                    .filter_map(|&(d, i)| {
                        let dec = decoders.get(d)?;
                        Some((dec, dec.debug.get(i)?))
                    })
                    .collect()
            })
            .unwrap_or_default(),
        None => decoders
            .iter()
            .flat_map(|d| d.debug.iter().map(move |l| (d, l)))
            .filter(|(_, l)| subtransaction(&l.message).is_some_and(|(x, _)| x == top))
            .collect(),
    };
    found
        .into_iter()
        .filter_map(|(d, l)| {
            let (_, sub) = subtransaction(&l.message)?;
            Some(d.matched(l, replay, replay_subxacts.contains(&sub)))
        })
        .collect()
}

/// The `serializing snapshot to pg_logical/snapshots/X-Y.snap` lines (snapbuild.c
/// SnapBuildSerialize, DEBUG1) decoders logged for the record at `lsn`: the decoder that
/// wrote the file there (more than one only when two raced to write it). Each is equal
/// when the replay serializes at that record too (`replay_serializes`); a decoder that
/// found the file already written logs nothing, so no line says nothing about the replay.
pub fn serializing_lines_for(
    decoders: &[LoggedDecoder],
    index: Option<&LineIndex>,
    lsn: Lsn,
    replay_serializes: bool,
    replay: ReplayStart,
) -> Vec<LogLineMatch> {
    lines_about(decoders, index, lsn)
        .into_iter()
        .filter(|(_, l)| {
            l.level == LineLevel::Debug1 && debug_kind(&l.message) == Some(DebugKind::Serialize)
        })
        .map(|(d, l)| d.matched(l, replay, replay_serializes))
        .collect()
}

/// Whether a decoder whose lines could refute the replay `replay` ([`LogLineMatch`]'s
/// `may_refute`) logged a DEBUG1 line about a record after `lsn`: it read past `lsn` while
/// logging at DEBUG1, so a DEBUG1 line it would print at `lsn` is in the log.
pub fn same_start_logged_debug_past(
    decoders: &[LoggedDecoder],
    lsn: Lsn,
    replay: ReplayStart,
) -> bool {
    decoders
        .iter()
        .any(|d| d.judges(replay).1 && d.debug.iter().any(|l| l.lsn().is_some_and(|at| at > lsn)))
}

/// The lines about the record at `lsn`, decoder by decoder (its LOG lines, then its DEBUG1
/// lines), through `index` when given (built from the same `decoders`).
fn lines_about<'a>(
    decoders: &'a [LoggedDecoder],
    index: Option<&LineIndex>,
    lsn: Lsn,
) -> Vec<(&'a LoggedDecoder, &'a BuilderLine)> {
    match index {
        Some(ix) => ix
            .map
            .get(&lsn)
            .map(|v| {
                v.iter()
                    .filter_map(|&(d, debug, i)| {
                        let dec = decoders.get(d)?;
                        let l = if debug {
                            dec.debug.get(i)?
                        } else {
                            dec.lines.get(i)?
                        };
                        Some((dec, l))
                    })
                    .collect()
            })
            .unwrap_or_default(),
        None => decoders
            .iter()
            .flat_map(|d| {
                d.lines
                    .iter()
                    .chain(d.debug.iter())
                    .filter(move |l| l.lsn() == Some(lsn))
                    .map(move |l| (d, l))
            })
            .collect(),
    }
}

/// The builder verdicts about the record at `lsn`: LOG lines and the DEBUG1 pre-filter
/// skip (a builder verdict on the record as the LOG lines are: a skip where the replay
/// logs a LOG line, or the reverse, differs).
fn builder_lines_at<'a>(
    decoders: &'a [LoggedDecoder],
    index: Option<&LineIndex>,
    lsn: Lsn,
) -> Vec<(&'a LoggedDecoder, &'a BuilderLine)> {
    lines_about(decoders, index, lsn)
        .into_iter()
        .filter(|(_, l)| {
            l.level == LineLevel::Log || debug_kind(&l.message) == Some(DebugKind::Skip)
        })
        .collect()
}

/// The builder lines (LOG, and the DEBUG1 skip) decoders logged for the record at `lsn`,
/// for a replay row that logs no builder message there (a RUNNING_XACTS row the replay
/// passes silently): none is equal to what the replay says.
pub fn lines_at(
    decoders: &[LoggedDecoder],
    index: Option<&LineIndex>,
    lsn: Lsn,
    replay: ReplayStart,
) -> Vec<LogLineMatch> {
    builder_lines_at(decoders, index, lsn)
        .into_iter()
        .map(|(d, l)| d.matched(l, replay, false))
        .collect()
}

impl LoggedDecoder {
    /// `(same_start, may_refute)` of this decoder's lines for a replay ([`LogLineMatch`]).
    /// `line` of this decoder as matched to a replay row that started as `replay`,
    /// `equal` to what the row says or not (see [`LoggedDecoder::judges`]).
    fn matched(&self, line: &BuilderLine, replay: ReplayStart, equal: bool) -> LogLineMatch {
        let (same_start, may_refute) = self.judges(replay);
        LogLineMatch {
            line: line.clone(),
            equal,
            same_start,
            may_refute,
        }
    }

    fn judges(&self, replay: ReplayStart) -> (bool, bool) {
        let same_start = self.same_start_as(replay.start, replay.first_message_lsn);
        let may_refute = same_start
            && match self.origin {
                Origin::Restart { .. } => true,
                Origin::Creation => replay.in_creation,
                Origin::Unknown => false,
            };
        (same_start, may_refute)
    }
}

/// The slot candidates a replay proposes at one RUNNING_XACTS (snapbuild.c
/// SnapBuildProcessRunningXacts' calls of logical.c LogicalIncreaseXminForSlot and
/// LogicalIncreaseRestartDecodingForSlot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidates {
    /// The record's LSN (`current_lsn` of both calls).
    pub at: Lsn,
    /// The catalog xmin proposed there.
    pub xmin: Option<u32>,
    /// The restart LSN proposed there (none before CONSISTENT, or with no restart point).
    pub restart: Option<Lsn>,
}

/// The DEBUG1 candidate lines decoders logged for the record at `c.at` (`got new catalog
/// xmin X at L`, `got new restart lsn R at L`, `failed to increase restart lsn: proposed
/// R, after L, …`), each equal when it names what the replay proposes there. The server
/// logs a proposal only when the slot takes it as a candidate (or, for the restart LSN,
/// refuses it for a pending one), so no line is no statement; a line naming another value,
/// or a proposal where the replay makes none, is a difference.
pub fn candidate_lines_for(
    decoders: &[LoggedDecoder],
    index: Option<&LineIndex>,
    c: Candidates,
    replay: ReplayStart,
) -> Vec<LogLineMatch> {
    let mut out = Vec::new();
    for (d, l) in lines_about(decoders, index, c.at) {
        let equal = match debug_kind(&l.message) {
            Some(DebugKind::RestartCandidate) => match restart_candidate(&l.message) {
                Some((r, at)) if at == c.at => c.restart == Some(r),
                _ => continue,
            },
            Some(DebugKind::XminCandidate) => match xmin_candidate(&l.message) {
                Some((x, at)) if at == c.at => c.xmin == Some(x),
                _ => continue,
            },
            _ => continue,
        };
        out.push(d.matched(l, replay, equal));
    }
    out
}

/// Whether any decoder that started as `replay` did ([`LoggedDecoder::same_start_as`];
/// its creation mode does not matter here) logged at DEBUG1 ([`LoggedDecoder::logs_debug`]).
pub fn same_start_logs_debug(decoders: &[LoggedDecoder], replay: ReplayStart) -> bool {
    decoders
        .iter()
        .any(|d| d.logs_debug && d.same_start_as(replay.start, replay.first_message_lsn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(format_ms(1_796_131_110_089), "2026-12-01 13:18:30.089 UTC");
        assert_eq!(format_ms(500), "1970-01-01 00:00:00.500 UTC");
        let (t, rest) = leading_timestamp("2026-12-01 13:18:30.089 UTC [22976] LOG:  x").unwrap();
        assert_eq!(t, 1_796_131_110_089);
        assert_eq!(rest, "[22976] LOG:  x");
        assert_eq!(
            leading_timestamp("2026-12-01 13:18:30 GMT x").unwrap().0,
            1_796_131_110_000
        );
        assert_eq!(
            leading_timestamp("2026-12-01 16:18:30 +03 x").unwrap().0,
            1_796_131_110_000
        );
        assert_eq!(
            leading_timestamp("1970-01-01 00:00:00.5 UTC").unwrap().0,
            500
        );
        assert!(leading_timestamp("2026-12-01 13:18:30.089 CET x").is_none());
        // Named zones as the server's abbreviations give them.
        let zones = ZoneNames(vec![("CET".into(), 3600), ("CEST".into(), 7200)]);
        assert_eq!(
            leading_timestamp_in("2026-12-01 14:18:30.089 CET x", &zones).unwrap(),
            (1_796_131_110_089, "x")
        );
        assert_eq!(
            leading_timestamp_in("2026-07-01 15:00:00 CEST x", &zones)
                .unwrap()
                .0,
            leading_timestamp("2026-07-01 13:00:00 UTC").unwrap().0
        );
        assert!(leading_timestamp_in("2026-12-01 13:18:30 EST x", &zones).is_none());
        let mut p = StderrParser::with_zones(zones.clone());
        p.line(
            "2026-12-01 14:18:30.102 CET [22976] LOG:  starting logical decoding for slot \"s\"",
        );
        p.line("2026-12-01 14:18:30.102 CET [22976] DETAIL:  Streaming transactions committing after 0/2, reading WAL from 0/1.");
        match p.finish() {
            Some(LogEvent::DecoderStart { at_ms, .. }) => assert_eq!(at_ms, 1_796_131_110_102),
            other => panic!("{other:?}"),
        }
        assert!(leading_timestamp("[22976] LOG:  x").is_none());
        assert!(leading_timestamp("2026-13-01 13:18:30 UTC").is_none());
    }

    #[test]
    fn stderr_decoder_start_and_server_start() {
        let mut p = StderrParser::default();
        let lines = [
            "2026-12-01 13:00:00.000 UTC [100] LOG:  database system is ready to accept connections",
            "2026-12-01 13:18:30.102 UTC [22976] LOG:  starting logical decoding for slot \"pgsnap_fid_get\"",
            "2026-12-01 13:18:30.102 UTC [22976] DETAIL:  Streaming transactions committing after 0/1B92040, reading WAL from 0/1B91FF0.",
            "2026-12-01 13:18:30.102 UTC [22976] STATEMENT:  SELECT 1",
            // a DETAIL of another message does not pair
            "2026-12-01 13:18:31.000 UTC [5] LOG:  starting logical decoding for slot \"x\"",
            "2026-12-01 13:18:31.000 UTC [6] DETAIL:  Streaming transactions committing after 0/1, reading WAL from 0/1.",
            // a walsender asking for a later position
            "2026-12-01 13:30:08.427 UTC [7270] LOG:  starting logical decoding for slot \"rw2_sub\"",
            "2026-12-01 13:30:08.427 UTC [7270] DETAIL:  Streaming transactions committing after 0/1BA1298, reading WAL from 0/1BA1298.",
            "2026-12-01 13:30:08.427 UTC [7270] STATEMENT:  START_REPLICATION SLOT \"rw2_sub\" LOGICAL 0/1BEDDA8 (proto_version '4')",
            // no statement logged
            "2026-12-01 13:30:09.000 UTC [7271] LOG:  starting logical decoding for slot \"y\"",
            "2026-12-01 13:30:09.000 UTC [7271] DETAIL:  Streaming transactions committing after 0/2, reading WAL from 0/1.",
        ];
        let mut events: Vec<LogEvent> = lines.iter().flat_map(|l| p.line(l)).collect();
        events.extend(p.finish());
        assert_eq!(
            events,
            vec![
                LogEvent::ServerStart {
                    at_ms: 1_796_130_000_000
                },
                LogEvent::DecoderStart {
                    at_ms: 1_796_131_110_102,
                    pid: Some(22976),
                    slot: "pgsnap_fid_get".into(),
                    after: Lsn(0x1B92040),
                    restart: Lsn(0x1B91FF0),
                    kind: DecoderKind::Sql,
                },
                LogEvent::DecoderStart {
                    at_ms: 1_796_131_808_427,
                    pid: Some(7270),
                    slot: "rw2_sub".into(),
                    after: Lsn(0x1BA1298),
                    restart: Lsn(0x1BA1298),
                    kind: DecoderKind::Walsender(Lsn(0x1BEDDA8)),
                },
                LogEvent::DecoderStart {
                    at_ms: 1_796_131_809_000,
                    pid: Some(7271),
                    slot: "y".into(),
                    after: Lsn(2),
                    restart: Lsn(1),
                    kind: DecoderKind::Unknown,
                },
            ]
        );
        let k = DecoderKind::Walsender(Lsn(0x1BEDDA8));
        assert!(k.can_start_at(Lsn(0x1BA1298), Lsn(0x1BEDDA8)));
        assert!(!k.can_start_at(Lsn(0x1BA1298), Lsn(0x1BA1298)));
        assert!(DecoderKind::Unknown.can_start_at(Lsn(2), Lsn(9)));
        assert!(!DecoderKind::Unknown.can_start_at(Lsn(2), Lsn(1)));
        assert!(!DecoderKind::Sql.can_start_at(Lsn(2), Lsn(9)));
        assert_eq!(
            DecoderKind::from_statement(Some("SELECT * FROM pg_replication_slot_advance($1, $2)")),
            DecoderKind::Advance
        );
    }

    #[test]
    fn csv_decoder_start_with_quotes_and_newlines() {
        let mut p = CsvParser::default();
        let lines = [
            r#"2026-12-01 13:18:30.102 UTC,"postgres","postgres",22976,"127.0.0.1:1",x,1,"SELECT",2026-12-01 13:18:30 UTC,3/4,0,LOG,00000,"starting logical decoding for slot ""s""","Streaming transactions committing after 1/2, reading WAL from 1/1.",,,,,"SELECT 'a"#,
            r#"b'",,,"app","client backend",,0"#,
        ];
        let events: Vec<LogEvent> = lines.iter().filter_map(|l| p.line(l)).collect();
        assert_eq!(
            events,
            vec![LogEvent::DecoderStart {
                at_ms: 1_796_131_110_102,
                pid: Some(22976),
                slot: "s".into(),
                after: Lsn((1 << 32) | 2),
                restart: Lsn((1 << 32) | 1),
                kind: DecoderKind::Sql,
            }]
        );
        assert_eq!(
            csv_fields(r#"a,"b,""c""",,d"#),
            vec!["a", "b,\"c\"", "", "d"]
        );
    }

    #[test]
    fn json_decoder_start() {
        let l = r#"{"timestamp":"2026-12-01 13:18:30.102 UTC","pid":22976,"error_severity":"LOG","message":"starting logical decoding for slot \"s\"","detail":"Streaming transactions committing after 1/2, reading WAL from 1/1.","statement":"SELECT 1"}"#;
        assert_eq!(
            parse_json_line(l, &ZoneNames::default()),
            Some(LogEvent::DecoderStart {
                at_ms: 1_796_131_110_102,
                pid: Some(22976),
                slot: "s".into(),
                after: Lsn((1 << 32) | 2),
                restart: Lsn((1 << 32) | 1),
                kind: DecoderKind::Sql,
            })
        );
        assert_eq!(parse_json_line("not json", &ZoneNames::default()), None);
    }

    #[test]
    fn writers_window() {
        let ev = |at_ms, after, restart| LogEvent::DecoderStart {
            at_ms,
            pid: Some(1),
            slot: "s".into(),
            after: Lsn(after),
            restart: Lsn(restart),
            kind: DecoderKind::Sql,
        };
        let events = vec![
            LogEvent::ServerStart { at_ms: 0 },
            ev(10, 100, 50),
            LogEvent::ServerStart { at_ms: 20 },
            ev(30, 100, 60),
            ev(40, 100, 70),
            ev(50, 200, 80),
            ev(5000, 100, 90),
        ];
        // Written at 45: the decoder from before the restart at 20 is gone, the one with
        // another start_decoding_at does not count, one starting after is too late.
        assert_eq!(
            writers_of(&events, Lsn(75), Lsn(100), 45),
            Writers::Known(vec![
                (Lsn(60), "s".into(), Some(1), false),
                (Lsn(70), "s".into(), Some(1), false)
            ])
        );
        // A file before 70 was not read by the decoder restarted at 70.
        assert_eq!(
            writers_of(&events, Lsn(65), Lsn(100), 45),
            Writers::Known(vec![(Lsn(60), "s".into(), Some(1), false)])
        );
        assert!(matches!(
            writers_of(&events[3..], Lsn(75), Lsn(100), 45),
            Writers::Unknown(_)
        ));
        assert!(matches!(
            writers_of(&events, Lsn(75), Lsn(300), 45),
            Writers::Unknown(_)
        ));
        // Found by the fuzzer (fuzz/, target server_log): a modification time at the end
        // of i64 overflowed the clock slack (a panic in a debug build).
        assert_eq!(
            writers_of(&events, Lsn(95), Lsn(100), i64::MAX),
            Writers::Known(vec![
                (Lsn(60), "s".into(), Some(1), false),
                (Lsn(70), "s".into(), Some(1), false),
                (Lsn(90), "s".into(), Some(1), false)
            ])
        );
    }

    /// DEBUG1 lines as PostgreSQL 18.6 wrote them with log_min_messages = debug1 (the
    /// stderr tag is `DEBUG` for every debug level; DEBUG lines carry no STATEMENT), read
    /// beside the LOG lines: a creation opened by its `searching …` line, a restarted
    /// decoder's candidates and subtransaction, and another creation's pre-filter skip
    /// with its DETAIL (forced with fsync = on and six clients committing short
    /// transactions while slots were created). The texts are the same in 14-18.
    #[test]
    fn debug1_lines_parsed_and_grouped() {
        let log = r#"2026-12-01 19:34:40.266 UTC [16973] LOG:  database system is ready to accept connections
2026-12-01 19:34:44.726 UTC [17051] DEBUG:  xmin required by slots: data 0, catalog 753
2026-12-01 19:34:44.732 UTC [17051] DEBUG:  searching for logical decoding starting point, starting at 0/170FFA8
2026-12-01 19:34:44.732 UTC [17051] LOG:  logical decoding found initial starting point at 0/170FFA8
2026-12-01 19:34:44.732 UTC [17051] DETAIL:  Waiting for transactions (approximately 1) older than 754 to end.
2026-12-01 19:34:44.732 UTC [17051] STATEMENT:  select pg_create_logical_replication_slot('cap1','test_decoding')
2026-12-01 19:34:47.613 UTC [17051] LOG:  logical decoding found consistent point at 0/1710028
2026-12-01 19:34:47.613 UTC [17051] DETAIL:  There are no running transactions.
2026-12-01 19:34:47.613 UTC [17051] STATEMENT:  select pg_create_logical_replication_slot('cap1','test_decoding')
2026-12-01 19:34:50.086 UTC [17085] LOG:  starting logical decoding for slot "cap1"
2026-12-01 19:34:50.086 UTC [17085] DETAIL:  Streaming transactions committing after 0/1710060, reading WAL from 0/170FFA8.
2026-12-01 19:34:50.086 UTC [17085] STATEMENT:  select count(*) from pg_logical_slot_get_changes('cap1',NULL,NULL)
2026-12-01 19:34:50.087 UTC [17085] LOG:  logical decoding found initial starting point at 0/170FFA8
2026-12-01 19:34:50.087 UTC [17085] DETAIL:  Waiting for transactions (approximately 1) older than 754 to end.
2026-12-01 19:34:50.087 UTC [17085] STATEMENT:  select count(*) from pg_logical_slot_get_changes('cap1',NULL,NULL)
2026-12-01 19:34:50.087 UTC [17085] DEBUG:  serializing snapshot to pg_logical/snapshots/0-1710060.snap
2026-12-01 19:34:50.096 UTC [17085] DEBUG:  found subtransaction 754:755 with catalog changes
2026-12-01 19:34:50.098 UTC [17085] DEBUG:  got new catalog xmin 757 at 0/1718440
2026-12-01 19:34:50.098 UTC [17085] DEBUG:  got new restart lsn 0/1718440 at 0/1718440
2026-12-01 19:34:50.103 UTC [17085] DEBUG:  updated xmin: 1 restart: 1
2026-12-01 19:54:44.513 UTC [5346] DEBUG:  searching for logical decoding starting point, starting at 0/1FA0AD0
2026-12-01 19:54:44.514 UTC [5346] DEBUG:  skipping snapshot at 0/1FA0AD0 while building logical decoding snapshot, xmin horizon too low
2026-12-01 19:54:44.514 UTC [5346] DETAIL:  initial xmin horizon of 78049 vs the snapshot's 78045
2026-12-01 19:54:44.521 UTC [5346] LOG:  logical decoding found initial starting point at 0/1FA1758
2026-12-01 19:54:44.521 UTC [5346] DETAIL:  Waiting for transactions (approximately 1) older than 78078 to end.
2026-12-01 19:54:44.521 UTC [5346] STATEMENT:  select pg_create_logical_replication_slot('skp2','test_decoding')
2026-12-01 19:54:44.521 UTC [5346] DEBUG:  got new catalog xmin 78077 at 0/1FA1758
2026-12-01 19:54:44.527 UTC [5346] LOG:  logical decoding found initial consistent point at 0/1FA1A30
2026-12-01 19:54:44.527 UTC [5346] DETAIL:  Waiting for transactions (approximately 5) older than 78084 to end.
2026-12-01 19:54:44.527 UTC [5346] STATEMENT:  select pg_create_logical_replication_slot('skp2','test_decoding')"#;
        let mut p = StderrParser::default();
        let mut events: Vec<LogEvent> = log.lines().flat_map(|l| p.line(l)).collect();
        events.extend(p.finish());
        assert!(events.contains(&LogEvent::CreationStart {
            at_ms: 1_796_153_684_732,
            pid: Some(17051),
            restart: Lsn(0x170FFA8)
        }));
        let ds = decoders(&events);
        assert_eq!(ds.len(), 3, "{ds:#?}");
        let (first, restarted, creation) = (&ds[0], &ds[1], &ds[2]);
        assert_eq!(first.origin, Origin::Creation);
        assert_eq!(first.lines.len(), 2);
        assert!(first.same_start_as(Lsn(0x170FFA8), Some(Lsn(0x170FFA8))));
        assert_eq!(creation.origin, Origin::Creation);
        assert!(first.logs_debug && restarted.logs_debug && creation.logs_debug);
        // The skip (DEBUG1, before the creation's first LOG line) stays with the creation
        // and does not change where it is said to start (its first LOG line), nor do its
        // candidates after that line.
        assert_eq!(creation.lines.len(), 2);
        assert_eq!(creation.debug.len(), 2);
        assert_eq!(
            creation.debug[0].detail.as_deref(),
            Some("initial xmin horizon of 78049 vs the snapshot's 78045")
        );
        assert_eq!(creation.debug[0].lsn(), Some(Lsn(0x1FA0AD0)));
        assert!(creation.same_start_as(Lsn(0x1FA0AD0), Some(Lsn(0x1FA1758))));
        assert!(creation.same_start_as(Lsn(0x1FA0AD0), None));
        assert!(!creation.same_start_as(Lsn(0x1FA0AD0), Some(Lsn(0x1FA0AD0))));
        assert_eq!(
            restarted
                .debug
                .iter()
                .map(|l| debug_kind(&l.message))
                .collect::<Vec<_>>(),
            vec![
                Some(DebugKind::Serialize),
                Some(DebugKind::Subtransaction),
                Some(DebugKind::XminCandidate),
                Some(DebugKind::RestartCandidate)
            ]
        );
        assert_eq!(restarted.debug[0].lsn(), Some(Lsn(0x1710060)));
        assert_eq!(
            subtransaction(&restarted.debug[1].message),
            Some((754, 755))
        );
        assert_eq!(restarted.debug[1].lsn(), None);
        // By the commit's transaction: the restarted decoder's line, judged against what a
        // replay from its start found.
        let ix = LineIndex::new(&ds);
        for index in [Some(&ix), None] {
            let m = subtransaction_lines_for(
                &ds,
                index,
                754,
                &[755],
                ReplayStart::new(Lsn(0x170FFA8), Some(Lsn(0x170FFA8)), false),
            );
            assert_eq!(m.len(), 1);
            assert!(m[0].equal && m[0].same_start && m[0].may_refute);
            assert!(
                !subtransaction_lines_for(
                    &ds,
                    index,
                    754,
                    &[],
                    ReplayStart::new(Lsn(0x170FFA8), None, false)
                )[0]
                .equal
            );
            assert!(subtransaction_lines_for(
                &ds,
                index,
                755,
                &[],
                ReplayStart::new(Lsn(0x170FFA8), None, false)
            )
            .is_empty());
            let w = serializing_lines_for(
                &ds,
                index,
                Lsn(0x1710060),
                true,
                ReplayStart::new(Lsn(0x170FFA8), None, false),
            );
            assert_eq!(w.len(), 1);
            assert!(w[0].equal && w[0].may_refute && w[0].line.pid == Some(17085));
            // Not a builder verdict on the record, nor a candidate.
            assert!(lines_at(
                &ds,
                index,
                Lsn(0x1710060),
                ReplayStart::new(Lsn(0x170FFA8), None, false)
            )
            .is_empty());
        }
        assert!(same_start_logged_debug_past(
            &ds,
            Lsn(0x1710060),
            ReplayStart::new(Lsn(0x170FFA8), None, false)
        ));
        assert!(!same_start_logged_debug_past(
            &ds,
            Lsn(0x1718440),
            ReplayStart::new(Lsn(0x170FFA8), None, false)
        ));
        assert_eq!(
            serializing("serializing snapshot to pg_logical/snapshots/1A-2B3C.snap"),
            Some(Lsn(0x1A_0000_2B3C))
        );
        assert_eq!(serializing("serializing snapshot to 0-1.snap"), None);
        assert_eq!(
            xmin_candidate(&restarted.debug[2].message),
            Some((757, Lsn(0x1718440)))
        );
        assert_eq!(
            restart_candidate(&restarted.debug[3].message),
            Some((Lsn(0x1718440), Lsn(0x1718440)))
        );
        // The refusal, as logical.c's format prints it (none was captured).
        let refused = "failed to increase restart lsn: proposed 0/1718500, after 0/1718558, current candidate 0/1718440, current after 0/1718440, flushed up to 0/1710060";
        assert_eq!(debug_kind(refused), Some(DebugKind::RestartCandidate));
        assert_eq!(
            restart_candidate(refused),
            Some((Lsn(0x1718500), Lsn(0x1718558)))
        );

        // The skip row of a replay in creation mode from 0/1FA0AD0 (before its first LOG
        // message): the creation's line.
        let skip = "skipping snapshot at 0/1FA0AD0 while building logical decoding snapshot, xmin horizon too low";
        let m = lines_for(
            &ds,
            None,
            skip,
            Some("initial xmin horizon of 78049 vs the snapshot's 78045"),
            ReplayStart::new(Lsn(0x1FA0AD0), None, true),
        );
        assert_eq!(m.len(), 1);
        assert!(m[0].same_start && m[0].equal && m[0].may_refute);
        // Another horizon in the DETAIL differs.
        let m = lines_for(
            &ds,
            None,
            skip,
            Some("initial xmin horizon of 78048 vs the snapshot's 78045"),
            ReplayStart::new(Lsn(0x1FA0AD0), None, true),
        );
        assert!(!m[0].equal && m[0].may_refute);
        // A replay that found its starting point there instead meets the skip: differs.
        let m = lines_for(
            &ds,
            None,
            "logical decoding found initial starting point at 0/1FA0AD0",
            None,
            ReplayStart::new(Lsn(0x1FA0AD0), Some(Lsn(0x1FA0AD0)), true),
        );
        assert_eq!(m.len(), 1);
        assert!(!m[0].equal);
        assert_eq!(
            lines_at(
                &ds,
                None,
                Lsn(0x1FA0AD0),
                ReplayStart::new(Lsn(0x1FA0AD0), None, true)
            )
            .len(),
            1
        );

        // Candidates at 0/1718440 of a replay restarted at 0/170FFA8.
        let c = |xmin, restart| Candidates {
            at: Lsn(0x1718440),
            xmin,
            restart,
        };
        let m = candidate_lines_for(
            &ds,
            None,
            c(Some(757), Some(Lsn(0x1718440))),
            ReplayStart::new(Lsn(0x170FFA8), Some(Lsn(0x170FFA8)), false),
        );
        assert_eq!(m.len(), 2);
        assert!(m.iter().all(|m| m.equal && m.same_start && m.may_refute));
        let m = candidate_lines_for(
            &ds,
            None,
            c(Some(756), None),
            ReplayStart::new(Lsn(0x170FFA8), Some(Lsn(0x170FFA8)), false),
        );
        assert_eq!(m.iter().filter(|m| !m.equal).count(), 2);
        // Another start: named, not judged.
        let m = candidate_lines_for(
            &ds,
            None,
            c(Some(757), None),
            ReplayStart::new(Lsn(0x1718440), None, false),
        );
        assert!(m.iter().all(|m| !m.same_start && !m.may_refute));
        // The index finds what a scan finds.
        let ix = LineIndex::new(&ds);
        for lsn in [
            0x170FFA8, 0x1710028, 0x1718440, 0x1FA0AD0, 0x1FA1758, 0x1FA1A30,
        ] {
            let c = c(Some(757), Some(Lsn(0x1718440)));
            let c = Candidates { at: Lsn(lsn), ..c };
            assert_eq!(
                candidate_lines_for(
                    &ds,
                    Some(&ix),
                    c,
                    ReplayStart::new(Lsn(0x170FFA8), None, false)
                ),
                candidate_lines_for(&ds, None, c, ReplayStart::new(Lsn(0x170FFA8), None, false))
            );
            assert_eq!(
                lines_at(
                    &ds,
                    Some(&ix),
                    Lsn(lsn),
                    ReplayStart::new(Lsn(0x1FA0AD0), None, true)
                ),
                lines_at(
                    &ds,
                    None,
                    Lsn(lsn),
                    ReplayStart::new(Lsn(0x1FA0AD0), None, true)
                )
            );
        }
        assert!(same_start_logs_debug(
            &ds,
            ReplayStart::new(Lsn(0x170FFA8), None, false)
        ));
        assert!(!same_start_logs_debug(
            &ds,
            ReplayStart::new(Lsn(0x1718440), None, false)
        ));

        // The same lines in csvlog and jsonlog: severity DEBUG.
        let csv = r#"2026-12-01 19:34:50.098 UTC,"postgres","postgres",17085,"127.0.0.1:1",x,1,"SELECT",2026-12-01 19:34:50 UTC,3/4,0,DEBUG,00000,"got new restart lsn 0/1718440 at 0/1718440",,,,,,,,,"psql","client backend",,0"#;
        match CsvParser::default().line(csv) {
            Some(LogEvent::Builder(b)) => {
                assert_eq!(b.level, LineLevel::Debug1);
                assert_eq!(b.lsn(), Some(Lsn(0x1718440)));
            }
            other => panic!("{other:?}"),
        }
        let json = r#"{"timestamp":"2026-12-01 19:34:44.732 UTC","pid":17051,"error_severity":"DEBUG","message":"searching for logical decoding starting point, starting at 0/170FFA8"}"#;
        assert_eq!(
            parse_json_line(json, &ZoneNames::default()),
            Some(LogEvent::CreationStart {
                at_ms: 1_796_153_684_732,
                pid: Some(17051),
                restart: Lsn(0x170FFA8)
            })
        );
        // Other DEBUG lines are not builder lines.
        let json = r#"{"timestamp":"2026-12-01 19:34:44.732 UTC","pid":1,"error_severity":"DEBUG","message":"updated xmin: 1 restart: 1"}"#;
        assert_eq!(parse_json_line(json, &ZoneNames::default()), None);
    }

    #[test]
    fn builder_lines_grouped_by_decoder_and_matched() {
        let log = r#"2026-12-01 13:00:00.000 UTC [1] LOG:  database system is ready to accept connections
2026-12-01 13:00:01.000 UTC [10] LOG:  logical decoding found initial starting point at 0/100
2026-12-01 13:00:01.000 UTC [10] DETAIL:  Waiting for transactions (approximately 1) older than 700 to end.
2026-12-01 13:00:01.000 UTC [10] STATEMENT:  SELECT lsn
	FROM pg_create_logical_replication_slot('s', 'test_decoding')
2026-12-01 13:00:02.000 UTC [10] LOG:  logical decoding found consistent point at 0/200
2026-12-01 13:00:02.000 UTC [10] DETAIL:  There are no old transactions anymore.
2026-12-01 13:00:02.000 UTC [10] STATEMENT:  SELECT pg_create_logical_replication_slot('s', 'test_decoding')
2026-12-01 13:00:03.000 UTC [10] LOG:  logical decoding found consistent point at 0/300
2026-12-01 13:00:03.000 UTC [10] DETAIL:  There are no running transactions.
2026-12-01 13:00:03.000 UTC [10] STATEMENT:  SELECT pg_create_logical_replication_slot('t', 'test_decoding')
2026-12-01 13:00:04.000 UTC [11] LOG:  starting logical decoding for slot "s"
2026-12-01 13:00:04.000 UTC [11] DETAIL:  Streaming transactions committing after 0/200, reading WAL from 0/100.
2026-12-01 13:00:04.000 UTC [11] STATEMENT:  SELECT * FROM pg_logical_slot_peek_changes('s', NULL, NULL)
2026-12-01 13:00:04.000 UTC [11] LOG:  logical decoding found initial starting point at 0/100
2026-12-01 13:00:04.000 UTC [11] DETAIL:  Waiting for transactions (approximately 1) older than 700 to end.
2026-12-01 13:00:04.000 UTC [11] STATEMENT:  SELECT * FROM pg_logical_slot_peek_changes('s', NULL, NULL)"#;
        let mut p = StderrParser::default();
        let mut events: Vec<LogEvent> = log.lines().flat_map(|l| p.line(l)).collect();
        events.extend(p.finish());
        let ds = decoders(&events);
        assert_eq!(ds.len(), 3, "{ds:#?}");
        assert_eq!(
            (ds[0].origin.clone(), ds[0].lines.len()),
            (Origin::Creation, 2)
        );
        assert_eq!(
            (ds[1].origin.clone(), ds[1].lines.len()),
            (Origin::Creation, 1)
        );
        assert_eq!(
            (ds[2].origin.clone(), ds[2].lines.len()),
            (
                Origin::Restart {
                    restart: Lsn(0x100),
                    slot: "s".into()
                },
                1
            )
        );
        // A replay from 0/100 whose first message names 0/100: the first creation and the
        // restarted decoder started as it did; the second creation did not.
        let m = lines_for(
            &ds,
            None,
            "logical decoding found initial starting point at 0/100",
            Some("Waiting for transactions (approximately 1) older than 700 to end."),
            ReplayStart::new(Lsn(0x100), Some(Lsn(0x100)), false),
        );
        assert_eq!(m.len(), 2);
        assert!(m.iter().all(|x| x.same_start && x.equal));
        // the creation's line confirms a restarted replay but cannot refute it
        assert_eq!(m.iter().filter(|x| x.may_refute).count(), 1);
        let m = lines_for(
            &ds,
            None,
            "logical decoding found consistent point at 0/200",
            Some("There are no running transactions."),
            ReplayStart::new(Lsn(0x100), Some(Lsn(0x100)), false),
        );
        assert_eq!(m.len(), 1);
        assert!(m[0].same_start && !m[0].equal);
        assert!(!m[0].may_refute);
        assert!(lines_for(
            &ds,
            None,
            "no lsn here",
            None,
            ReplayStart::new(Lsn(0), None, false)
        )
        .is_empty());
    }

    #[test]
    fn invalidation_with_redo_context() {
        let mut p = StderrParser::default();
        let mut ev = Vec::new();
        for l in [
            "2026-12-01 20:00:01.000 UTC [77] LOG:  invalidating obsolete replication slot \"s6\"",
            "2026-12-01 20:00:01.000 UTC [77] DETAIL:  The slot conflicted with xid horizon 812.",
            "2026-12-01 20:00:01.000 UTC [77] CONTEXT:  WAL redo at 0/3001F20 for Heap2/PRUNE_ON_ACCESS: snapshotConflictHorizon: 812, isCatalogRel: T",
            "2026-12-01 20:00:02.000 UTC [78] LOG:  checkpoint starting: time",
        ] {
            ev.extend(p.line(l));
        }
        ev.extend(p.finish());
        let LogEvent::SlotInvalidated(i) = &ev[0] else {
            panic!("{ev:?}")
        };
        assert_eq!(i.slot, "s6");
        assert_eq!(i.pid, Some(77));
        assert_eq!(
            i.detail.as_deref(),
            Some("The slot conflicted with xid horizon 812.")
        );
        assert_eq!(
            i.redo_record(),
            Some((Lsn(0x3001F20), "Heap2/PRUNE_ON_ACCESS".to_owned()))
        );
        let j = r#"{"timestamp":"2026-12-01 20:00:01.000 UTC","pid":77,"error_severity":"LOG","message":"invalidating obsolete replication slot \"s7\"","detail":"x","context":"WAL redo at 0/10 for XLOG/PARAMETER_CHANGE: max_connections=100"}"#;
        let Some(LogEvent::SlotInvalidated(i)) = parse_json_line(j, &ZoneNames::default()) else {
            panic!()
        };
        assert_eq!(
            i.redo_record(),
            Some((Lsn(0x10), "XLOG/PARAMETER_CHANGE".to_owned()))
        );
    }

    #[test]
    fn slot_sync_skipped_with_its_detail() {
        let mut p = StderrParser::default();
        let mut ev = Vec::new();
        for l in [
            "2026-12-03 10:00:01.000 UTC [91] LOG:  could not synchronize replication slot \"f1\"",
            "2026-12-03 10:00:01.000 UTC [91] DETAIL:  Synchronization could lead to data loss, because the remote slot needs WAL at LSN 0/3003F28 and catalog xmin 754, but the standby has LSN 0/3003F28 and catalog xmin 756.",
            "2026-12-03 10:00:02.000 UTC [91] LOG:  could not sync slot \"f2\" as remote slot precedes local slot",
            "2026-12-03 10:00:03.000 UTC [92] LOG:  checkpoint starting: time",
        ] {
            ev.extend(p.line(l));
        }
        ev.extend(p.finish());
        let slots: Vec<(&str, Option<&str>)> = ev
            .iter()
            .filter_map(|e| match e {
                LogEvent::SlotSyncSkipped(i) => Some((i.slot.as_str(), i.detail.as_deref())),
                _ => None,
            })
            .collect();
        assert_eq!(slots.len(), 2, "{ev:?}");
        assert_eq!(slots[0].0, "f1");
        assert!(slots[0].1.unwrap().ends_with("catalog xmin 756."));
        assert_eq!(slots[1], ("f2", None));
        let j = r#"{"timestamp":"2026-12-03 10:00:01.000 UTC","pid":91,"error_severity":"LOG","message":"could not synchronize replication slot \"f3\"","detail":"Synchronization could lead to data loss, because the standby could not build a consistent snapshot to decode WALs at LSN 0/30000D8."}"#;
        let Some(LogEvent::SlotSyncSkipped(i)) = parse_json_line(j, &ZoneNames::default()) else {
            panic!()
        };
        assert_eq!(i.slot, "f3");
    }
}
