//! The builder's LOG messages (`logical decoding found consistent point …`, `… initial
//! consistent point …`, `… initial starting point …`) against the lines the server's
//! decoders logged for the same record.
//!
//! Not a PostgreSQL file; the messages are snapbuild.c's ereport(LOG) lines, read from the
//! server log by `server_log`.

use super::{add_disagreement, add_sources, log_who, Verdict};
use crate::replication::decode::TraceRow;

/// What the server log says about a row's builder message.
#[derive(Clone, Debug, Default)]
pub enum LogLines {
    /// Not looked at (no builder message on the row).
    #[default]
    NotAsked,
    /// The log could not be read: why.
    Unreadable(String),
    /// The lines decoders logged for the row's record.
    Lines(Vec<crate::server_log::LogLineMatch>),
}

/// The state a builder LOG message reports.
fn state_of_message(message: &str) -> Option<&'static str> {
    if message.starts_with("logical decoding found consistent point") {
        Some("consistent")
    } else if message.starts_with("logical decoding found initial consistent point") {
        Some("full")
    } else if message.starts_with("logical decoding found initial starting point") {
        Some("building")
    } else {
        None
    }
}

/// Adds what the server log says about the row's builder message: a decoder that started
/// as the replay did logged the same message and detail for this record (true), or
/// another one (false); lines of decoders that started elsewhere are named, not judged.
pub(super) fn with_log_lines(row: &TraceRow, mut v: Verdict, lines: &LogLines) -> Verdict {
    let LogLines::Lines(lines) = lines else {
        return v;
    };
    if lines.is_empty() {
        return v;
    }
    // A row without a builder message (a RUNNING_XACTS the replay passes silently) is
    // asked only about other decoders' lines there: none equals it.
    let message = row.message.as_deref().unwrap_or("nothing");
    let same: Vec<_> = lines.iter().filter(|m| m.same_start).collect();
    // A restore on one side only means the .snap files differ from when that decoder ran
    // (a file written later): not the replay's error.
    let saved = |d: Option<&str>| d.is_some_and(|d| d.contains("saved snapshot"));
    let restore_differs = |m: &&crate::server_log::LogLineMatch| {
        saved(m.line.detail.as_deref()) != saved(row.detail.as_deref())
    };
    let refuting: Vec<_> = same
        .iter()
        .filter(|m| !m.equal && m.may_refute && !restore_differs(m))
        .copied()
        .collect();
    let verdict = if same.iter().any(|m| m.equal) {
        Some(true)
    } else if !refuting.is_empty() {
        Some(false)
    } else {
        if let Some(m) = same.first() {
            let why = if restore_differs(m) {
                "the .snap files differ from when it ran"
            } else {
                "it was creating the slot; the replay runs as restarted decoding"
            };
            let text = format!(
                "undecided: the server's decoder that started where the replay does logged \"{}\" here ({}), not judged: {why}",
                m.line.message,
                log_who(m)
            );
            add_disagreement(&mut v, text);
        }
        None
    };
    // Lines of decoders that started elsewhere: named (at most 3), never judged.
    let others: Vec<_> = lines.iter().filter(|m| !m.same_start).collect();
    let others_text = (!others.is_empty()).then(|| {
        let mut t: Vec<String> = others
            .iter()
            .take(3)
            .map(|m| format!("{} (\"{}\")", log_who(m), m.line.message))
            .collect();
        if others.len() > 3 {
            t.push(format!("{} more", others.len() - 3));
        }
        format!("decoders that started elsewhere: {}", t.join(", "))
    });
    let Some(ok) = verdict else {
        add_sources(&mut v, others_text.into_iter().collect());
        return v;
    };
    let mut sources: Vec<String> = same
        .iter()
        .filter(|m| if ok { m.equal } else { refuting.contains(m) })
        .map(|m| log_who(m))
        .collect();
    sources.extend(others_text);
    add_sources(&mut v, sources);
    if v.server_state.is_none() {
        v.server_state = same
            .iter()
            .find(|m| if ok { m.equal } else { refuting.contains(m) })
            .and_then(|m| state_of_message(&m.line.message))
            .map(str::to_owned);
    }
    let restored_undecided = row.restored_from.is_some() && v.agrees.is_none();
    v.agrees = match v.agrees {
        Some(a) => Some(a && ok),
        None => Some(ok),
    };
    if restored_undecided {
        // The log settles what the file alone could not.
        v.disagreement = None;
    }
    if !ok {
        let m = refuting[0];
        let text = format!(
            "the server's decoder that started as the replay did logged \"{}\"{} here ({}), the replay \"{}\"{}",
            m.line.message,
            m.line.detail.as_deref().map(|d| format!(" / \"{d}\"")).unwrap_or_default(),
            log_who(m),
            message,
            row.detail.as_deref().map(|d| format!(" / \"{d}\"")).unwrap_or_default()
        );
        add_disagreement(&mut v, text);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{facts, serialize_row};
    use super::super::{judge_row, FileFact};
    use super::*;

    /// A builder message is judged by the line a decoder that started as the replay did
    /// logged for the same record; other decoders' lines do not judge it.
    #[test]
    fn builder_messages_judged_by_the_log() {
        use crate::server_log::{BuilderLine, LogLineMatch};
        let mut row = serialize_row();
        row.serialized = None;
        row.message = Some("logical decoding found consistent point at 0/64".into());
        row.detail = Some("There are no running transactions.".into());
        let line = |msg: &str, same_start: bool, equal: bool| LogLineMatch {
            line: BuilderLine::new(
                1_796_131_110_089,
                Some(42),
                crate::server_log::LineLevel::Log,
                msg,
            ),
            same_start,
            equal,
            may_refute: same_start,
        };
        let mut f = facts(FileFact::Absent);
        f.log_lines = LogLines::Lines(vec![line(
            "logical decoding found consistent point at 0/64",
            true,
            true,
        )]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(true));
        assert_eq!(v.server_state.as_deref(), Some("consistent"));
        assert_eq!(
            v.server_source.as_deref(),
            Some("server log: pid 42 at 2026-12-01 13:18:30.089 UTC")
        );
        f.log_lines = LogLines::Lines(vec![line(
            "logical decoding found initial starting point at 0/64",
            true,
            false,
        )]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(false));
        assert!(v.disagreement.unwrap().contains("initial starting point"));
        f.log_lines = LogLines::Lines(vec![line(
            "logical decoding found initial starting point at 0/64",
            false,
            false,
        )]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert_eq!(
            v.server_source.as_deref(),
            Some("decoders that started elsewhere: server log: pid 42 at 2026-12-01 13:18:30.089 UTC (\"logical decoding found initial starting point at 0/64\")")
        );
        // A creating decoder's different line confirms nothing and refutes nothing.
        let mut creation = line(
            "logical decoding found initial starting point at 0/64",
            true,
            false,
        );
        creation.may_refute = false;
        f.log_lines = LogLines::Lines(vec![creation.clone()]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v.disagreement.unwrap().contains("it was creating the slot"));
        // A restore on one side only: the .snap files changed since that decoder ran.
        let mut restored = row.clone();
        restored.detail = Some("Logical decoding will begin using saved snapshot.".into());
        creation.may_refute = true;
        f.log_lines = LogLines::Lines(vec![creation]);
        let v = judge_row(&restored, &f);
        assert_eq!(v.agrees, None);
        assert!(v.disagreement.unwrap().contains("the .snap files differ"));
        f.log_lines = LogLines::Unreadable("no log".into());
        assert_eq!(judge_row(&row, &f), Verdict::default());
    }
}
