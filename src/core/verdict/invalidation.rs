//! Where a slot was invalidated on a hot standby: the record the replay finds against the
//! `invalidating obsolete replication slot` line the startup process logged, with the
//! record being redone as CONTEXT.
//!
//! Not a PostgreSQL file; the line is slot.c's ReportSlotInvalidation, its CONTEXT
//! xlogrecovery.c's `WAL redo at …`.

use super::Verdict;
use crate::include::xlogdefs::Lsn;

/// The server's verdict on where a slot was invalidated on a hot standby: `replayed` is
/// the record the replay found (its start and `RMGR/TYPE`, with the DETAIL the replay
/// predicts), `None` when it found none; `undecided` the records met before that may have
/// invalidated it but whose horizon the replay cannot read; `logged` the slot's
/// `invalidating obsolete replication slot` lines from the server log, oldest first (the
/// startup process logs them with the record being redone as CONTEXT), or why the log
/// could not be read. The newest logged line that names a record at or after
/// `replay_start` is the server's answer: equal LSN and DETAIL agree.
pub fn judge_invalidation(
    replayed: Option<(Lsn, &str, &str)>,
    undecided: &[(Lsn, String)],
    replay_start: Lsn,
    logged: Result<&[crate::server_log::InvalidationLine], &str>,
) -> Verdict {
    let mut v = Verdict {
        server_state: Some("invalidated".into()),
        ..Default::default()
    };
    let lines = match logged {
        Ok(l) => l,
        Err(why) => {
            v.disagreement = Some(format!(
                "undecided: the server log could not be read: {why}"
            ));
            return v;
        }
    };
    let server = lines.iter().rev().find_map(|l| {
        l.redo_record()
            .filter(|(at, _)| *at >= replay_start)
            .map(|r| (l, r))
    });
    let Some((line, (at, name))) = server else {
        v.disagreement = Some(
            "undecided: the server log read has no `invalidating obsolete replication slot` line for this slot with the WAL record being redone (CONTEXT: WAL redo at …)"
                .into(),
        );
        return v;
    };
    v.server_source = Some(format!(
        "server log: pid {} at {} (CONTEXT: WAL redo at {at} for {name})",
        line.pid.map_or("?".into(), |p| p.to_string()),
        crate::server_log::format_ms(line.at_ms)
    ));
    match replayed {
        Some((lsn, rname, detail)) => {
            let same_detail = line.detail.as_deref().is_none_or(|d| d == detail);
            if lsn == at && same_detail {
                v.agrees = Some(true);
            } else {
                v.agrees = Some(false);
                v.disagreement = Some(format!(
                    "the server invalidated the slot while redoing {at} ({name}, DETAIL {:?}); the replay at {lsn} ({rname}, DETAIL {detail:?})",
                    line.detail.as_deref().unwrap_or("")
                ));
            }
        }
        None if !undecided.is_empty() && undecided.iter().any(|(l, _)| *l == at) => {
            v.disagreement = Some(format!(
                "undecided: the server invalidated the slot while redoing {at} ({name}), a record whose horizon the replay does not read"
            ));
        }
        None => {
            v.agrees = Some(false);
            v.disagreement = Some(format!(
                "the server invalidated the slot while redoing {at} ({name}); the replay found no record that invalidates it{}",
                if undecided.is_empty() {
                    String::new()
                } else {
                    format!(" ({} records it cannot read were met)", undecided.len())
                }
            ));
        }
    }
    v
}
