//! The decoders the log shows ([`decoders`]: which process ran one, where it began, its
//! builder lines) and those that could have written a `.snap` file ([`writers_of`]). Not
//! a PostgreSQL file: it follows logical.c's CreateDecodingContext (a restarted decoder)
//! and DecodingContextFindStartpoint (a creating one), and the server start that ends
//! every decoder.

use crate::include::xlogdefs::Lsn;
use crate::server_log::events::{BuilderLine, DecoderKind, LineLevel, LogEvent};
use crate::server_log::messages::creates_slot;

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

/// One decoder's run as the log shows it: who, where it began, its builder lines in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedDecoder {
    pub pid: Option<i32>,
    pub origin: Origin,
    /// Its LOG lines (`logical decoding found …`), in order.
    pub lines: Vec<BuilderLine>,
    /// Its DEBUG1 lines ([`DEBUG_PREFIXES`]), in order.
    ///
    /// [`DEBUG_PREFIXES`]: crate::server_log::messages::DEBUG_PREFIXES
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_log::events::DecoderKind;

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
}
