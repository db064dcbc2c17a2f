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
//! default `%m [%p] `) in UTC/GMT or a numeric zone, and the jsonlog format, are read;
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
}

/// How a decoder's start_decoding_at relates to the `after` its log line prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecoderKind {
    /// A SQL function (peek, get, advance): it asks for no position, so start_decoding_at
    /// is `after`.
    Sql,
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
            DecoderKind::Sql => start_decoding_at == after,
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
            return DecoderKind::Sql;
        }
        st.find(" LOGICAL ")
            .and_then(|i| leading_lsn(&st[i + 9..]))
            .map_or(DecoderKind::Unknown, |(l, _)| DecoderKind::Walsender(l))
    }
}

impl LogEvent {
    pub fn at_ms(&self) -> i64 {
        match self {
            LogEvent::ServerStart { at_ms } | LogEvent::DecoderStart { at_ms, .. } => *at_ms,
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

/// A timestamp at the start of `s` as `%m`/`%t` print it (`2026-12-01 13:18:30.089 UTC`,
/// `… 13:18:30 +03`): milliseconds since the epoch and the rest of the line, or `None`
/// (no timestamp there, or a zone given by a name other than UTC/GMT).
pub fn leading_timestamp(s: &str) -> Option<(i64, &str)> {
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
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
    Some((secs * 1000 + ms, after))
}

/// `X/Y` (an LSN as the server prints it) at the start of `s`, and what follows.
fn leading_lsn(s: &str) -> Option<(Lsn, &str)> {
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

/// Reads stderr-format lines one at a time. A decoder start's LOG line is paired with the
/// DETAIL line and the STATEMENT line that follow it with the same prefix (one ereport
/// writes them at once); call [`StderrParser::finish`] after the last line.
#[derive(Default)]
pub struct StderrParser {
    /// A `starting logical decoding` line waiting for its DETAIL: (time, prefix, pid, slot).
    pending: Option<(i64, String, Option<i32>, String)>,
    /// A decoder start waiting for its STATEMENT: (prefix, event without its kind).
    started: Option<(String, LogEvent)>,
}

impl StderrParser {
    /// Feeds one line (without its newline); returns the events it completes.
    pub fn line(&mut self, line: &str) -> Vec<LogEvent> {
        let mut out = Vec::new();
        let pending = self.pending.take();
        let started = self.started.take();
        if let Some((prefix, mut ev)) = started {
            let statement = line
                .strip_prefix(prefix.as_str())
                .and_then(|rest| rest.strip_prefix("STATEMENT:  "));
            if let LogEvent::DecoderStart { kind, .. } = &mut ev {
                *kind = DecoderKind::from_statement(statement);
            }
            out.push(ev);
            if statement.is_some() {
                return out;
            }
        }
        let Some((at_ms, _)) = leading_timestamp(line) else {
            return out;
        };
        if let Some(pos) = line.find("DETAIL:  ") {
            let (prefix, detail) = (&line[..pos], &line[pos + 9..]);
            if let Some((t, p, pid, slot)) = pending {
                if p == prefix {
                    if let Some((after, restart)) = parse_start_detail(detail) {
                        let ev = LogEvent::DecoderStart {
                            at_ms: t,
                            pid,
                            slot,
                            after,
                            restart,
                            kind: DecoderKind::Unknown,
                        };
                        self.started = Some((prefix.to_owned(), ev));
                    }
                }
            }
            return out;
        }
        let Some(pos) = line.find("LOG:  ") else {
            return out;
        };
        let (prefix, msg) = (&line[..pos], &line[pos + 6..]);
        if let Some(rest) = msg.strip_prefix(STARTING) {
            let slot = rest.strip_suffix('"').unwrap_or(rest).to_owned();
            self.pending = Some((at_ms, prefix.to_owned(), prefix_pid(prefix), slot));
        } else if READY.iter().any(|r| msg.starts_with(r)) {
            out.push(LogEvent::ServerStart { at_ms });
        }
        out
    }

    /// The event still waiting for a STATEMENT line at the end of the input.
    pub fn finish(&mut self) -> Option<LogEvent> {
        self.pending = None;
        self.started.take().map(|(_, e)| e)
    }
}

/// One jsonlog line (`log_destination = jsonlog`): its `timestamp`, `error_severity`,
/// `message`, `detail` and `pid`.
pub fn parse_json_line(line: &str) -> Option<LogEvent> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let text = |k: &str| v.get(k).and_then(|x| x.as_str());
    if text("error_severity")? != "LOG" {
        return None;
    }
    let (at_ms, _) = leading_timestamp(text("timestamp")?)?;
    let msg = text("message")?;
    if READY.iter().any(|r| msg.starts_with(r)) {
        return Some(LogEvent::ServerStart { at_ms });
    }
    let rest = msg.strip_prefix(STARTING)?;
    let slot = rest.strip_suffix('"').unwrap_or(rest).to_owned();
    let (after, restart) = parse_start_detail(text("detail")?)?;
    Some(LogEvent::DecoderStart {
        at_ms,
        pid: v.get("pid").and_then(|p| p.as_i64()).map(|p| p as i32),
        slot,
        after,
        restart,
        kind: DecoderKind::from_statement(text("statement")),
    })
}

/// The decoders that could have written a `.snap` file, from the log's events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Writers {
    /// Every decoder the log shows running when the file was written, reading from at
    /// or before its LSN with the file's start_decoding_at: `(restart, slot, pid)`.
    Known(Vec<(Lsn, String, Option<i32>)>),
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
    let mut found: Vec<(Lsn, String, Option<i32>)> = Vec::new();
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
                && *at_ms <= mtime_ms + CLOCK_SLACK_MS
                && kind.can_start_at(*a, after)
                && *restart <= lsn
                && !found
                    .iter()
                    .any(|(r, s, p)| r == restart && s == slot && p == pid)
            {
                found.push((*restart, slot.clone(), *pid));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
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
    }

    #[test]
    fn json_decoder_start() {
        let l = r#"{"timestamp":"2026-12-01 13:18:30.102 UTC","pid":22976,"error_severity":"LOG","message":"starting logical decoding for slot \"s\"","detail":"Streaming transactions committing after 1/2, reading WAL from 1/1.","statement":"SELECT 1"}"#;
        assert_eq!(
            parse_json_line(l),
            Some(LogEvent::DecoderStart {
                at_ms: 1_796_131_110_102,
                pid: Some(22976),
                slot: "s".into(),
                after: Lsn((1 << 32) | 2),
                restart: Lsn((1 << 32) | 1),
                kind: DecoderKind::Sql,
            })
        );
        assert_eq!(parse_json_line("not json"), None);
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
                (Lsn(60), "s".into(), Some(1)),
                (Lsn(70), "s".into(), Some(1))
            ])
        );
        // A file before 70 was not read by the decoder restarted at 70.
        assert_eq!(
            writers_of(&events, Lsn(65), Lsn(100), 45),
            Writers::Known(vec![(Lsn(60), "s".into(), Some(1))])
        );
        assert!(matches!(
            writers_of(&events[3..], Lsn(75), Lsn(100), 45),
            Writers::Unknown(_)
        ));
        assert!(matches!(
            writers_of(&events, Lsn(75), Lsn(300), 45),
            Writers::Unknown(_)
        ));
    }
}
