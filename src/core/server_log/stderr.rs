//! elog.c's stderr format (send_message_to_server_log, `log_destination = stderr`): each
//! part of a message on its own line after the same `log_line_prefix` (`LOG:  ` or
//! `DEBUG:  `, then `DETAIL:  `, `STATEMENT:  `, `CONTEXT:  `, `HINT:  `), a multi-line
//! part continued on lines that start with a tab. [`StderrParser`] reads it.

use crate::server_log::events::{BuilderLine, InvalidationLine, LineLevel, LogEvent};
use crate::server_log::log_time::{leading_timestamp_in, ZoneNames};
use crate::server_log::messages::{
    debug_kind, leading_lsn, sync_skipped_slot, BUILDER_PREFIX, INVALIDATING, READY, SEARCHING,
    STARTING,
};

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
            LogEvent::decoder_start(at_ms, pid, slot, detail.as_deref()?, statement.as_deref())
        }
        Open::Builder(b) => Some(LogEvent::Builder(b)),
        Open::Invalidation(i) => Some(LogEvent::SlotInvalidated(i)),
        Open::SyncSkipped(i) => Some(LogEvent::SlotSyncSkipped(i)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::xlogdefs::Lsn;
    use crate::server_log::events::DecoderKind;
    use crate::server_log::jsonlog::parse_json_line;

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
        // Named zones in the prefix, as the server's abbreviations give them.
        let zones = ZoneNames(vec![("CET".into(), 3600), ("CEST".into(), 7200)]);
        let mut p = StderrParser::with_zones(zones);
        p.line(
            "2026-12-01 14:18:30.102 CET [22976] LOG:  starting logical decoding for slot \"s\"",
        );
        p.line("2026-12-01 14:18:30.102 CET [22976] DETAIL:  Streaming transactions committing after 0/2, reading WAL from 0/1.");
        match p.finish() {
            Some(LogEvent::DecoderStart { at_ms, .. }) => assert_eq!(at_ms, 1_796_131_110_102),
            other => panic!("{other:?}"),
        }
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
