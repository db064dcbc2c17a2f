//! A replay's builder messages matched to the lines the logged decoders wrote about the
//! same record ([`lines_for`], [`lines_at`], [`candidate_lines_for`],
//! [`subtransaction_lines_for`], [`serializing_lines_for`], through a [`LineIndex`]), each
//! judged by whether its decoder started as the replay did ([`ReplayStart`]). Not a
//! PostgreSQL file.

use crate::include::xlogdefs::Lsn;
use crate::server_log::decoders::{LoggedDecoder, Origin};
use crate::server_log::events::{BuilderLine, LineLevel};
use crate::server_log::messages::{
    debug_kind, message_lsn, restart_candidate, subtransaction, xmin_candidate, DebugKind,
};

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
    use crate::server_log::csvlog::CsvParser;
    use crate::server_log::decoders::decoders;
    use crate::server_log::events::LogEvent;
    use crate::server_log::jsonlog::parse_json_line;
    use crate::server_log::log_time::ZoneNames;
    use crate::server_log::messages::serializing;
    use crate::server_log::stderr::StderrParser;

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
}
