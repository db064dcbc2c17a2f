//! What `test_decoding` emitted, and what the replay says it emits.

use crate::trace::TraceRow;
use crate::values::{err_text, fmt_lsn, query_column};
use postgres::Client;
use regex::Regex;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// What the output plugin is called for, by the replay's `verdict` label of a trace row:
/// `decoded` → a commit; `prepared` and `prepared: no changes` (PostgreSQL 18 sends a
/// PREPARE without changes, 14-17 label that case `skipped: no decoded changes`) → a
/// prepare; `commit prepared` → a commit prepared; `prepared and commit prepared` (a
/// transaction prepared before the slot's two_phase_at is sent whole at COMMIT PREPARED)
/// → both; `rollback prepared` → a rollback prepared; anything else (`skipped: …`,
/// `prepare skipped: …`, `prepare filtered: …`) → nothing.
pub fn emits_for_verdict(label: &str) -> &'static [&'static str] {
    match label {
        "decoded" => &["commit"],
        "prepared" | "prepared: no changes" => &["prepare"],
        "commit prepared" => &["commit_prepared"],
        "prepared and commit prepared" => &["prepare", "commit_prepared"],
        "rollback prepared" => &["rollback_prepared"],
        _ => &[],
    }
}

/// The transactions `test_decoding` emits for `slot` from its confirmed_flush up to `upto`
/// (a peek: the slot does not move), as (kind, xid) with kind one of `commit`, `prepare`,
/// `commit_prepared`, `rollback_prepared`: the lines `COMMIT <xid>`, `PREPARE TRANSACTION
/// '<gid>', txid <xid>`, `COMMIT PREPARED '<gid>', txid <xid>`, `ROLLBACK PREPARED '<gid>',
/// txid <xid>` of `pg_logical_slot_peek_changes(slot, upto, NULL, 'include-xids', '1',
/// 'skip-empty-xacts', '0')`. The server reads records until one ends at or after `upto`,
/// so with `upto` a record boundary (a flush position) it covers the records ending at or
/// before it, as [`emitted_by_replay`] does.
pub fn emitted_by_test_decoding(c: &mut Client, slot: &str, upto: u64) -> BTreeSet<(String, u64)> {
    let rows = c
        .query(
            "SELECT data FROM pg_logical_slot_peek_changes($1::name, $2::text::pg_lsn, NULL, \
             'include-xids', '1', 'skip-empty-xacts', '0')",
            &[&slot, &fmt_lsn(upto)],
        )
        .unwrap_or_else(|e| {
            panic!(
                "pg_logical_slot_peek_changes({slot}, {}): {}",
                fmt_lsn(upto),
                err_text(&e)
            )
        });
    rows.iter()
        .filter_map(|r| emitted_kind(&r.get::<_, String>(0)))
        .collect()
}

/// What a `test_decoding` line (`include-xids` on) says ended a transaction:
/// `COMMIT <xid>` and, streamed, `committing streamed transaction TXN <xid>` → commit;
/// `PREPARE TRANSACTION '<gid>', txid <xid>` and, streamed, `preparing streamed transaction
/// TXN '<gid>', txid <xid>` → prepare; `COMMIT PREPARED '<gid>', txid <xid>` →
/// commit_prepared; `ROLLBACK PREPARED '<gid>', txid <xid>` → rollback_prepared; `None`
/// for any other line (changes, BEGIN, messages, the streamed blocks' open/close/abort).
pub fn emitted_kind(data: &str) -> Option<(String, u64)> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(
            r"^(?:(?:COMMIT|committing streamed transaction TXN) (\d+)|(PREPARE TRANSACTION|preparing streamed transaction TXN|COMMIT PREPARED|ROLLBACK PREPARED) '(?:[^']|'')*', txid (\d+))",
        )
        .unwrap()
    });
    let m = re.captures(data)?;
    Some(match (m.get(1), m.get(2), m.get(3)) {
        (Some(x), _, _) => ("commit".to_string(), x.as_str().parse().unwrap()),
        (None, Some(kind), Some(x)) => (
            match kind.as_str() {
                "PREPARE TRANSACTION" | "preparing streamed transaction TXN" => "prepare",
                "COMMIT PREPARED" => "commit_prepared",
                _ => "rollback_prepared",
            }
            .to_string(),
            x.as_str().parse().unwrap(),
        ),
        _ => unreachable!("{data}"),
    })
}

/// What `test_decoding` prints for `slot` (no options), one line a row:
/// `pg_logical_slot_get_changes(slot, NULL, NULL)` when `consume`, else
/// `pg_logical_slot_peek_changes(slot, NULL, NULL)`.
pub fn slot_changes(c: &mut Client, slot: &str, consume: bool) -> Vec<String> {
    let f = if consume { "get" } else { "peek" };
    query_column(
        c,
        format!("SELECT data FROM pg_logical_slot_{f}_changes($1, NULL, NULL)").as_str(),
        &[&slot],
        &format!("pg_logical_slot_{f}_changes({slot})"),
    )
}

/// Consumes `slot` up to the end of the WAL (`pg_logical_slot_get_changes`, counting rows).
pub fn consume_changes(c: &mut Client, slot: &str) {
    c.query(
        "SELECT count(*) FROM pg_logical_slot_get_changes($1, NULL, NULL)",
        &[&slot],
    )
    .unwrap();
}

/// What the replay says `test_decoding` emits: every trace row ending at or before `upto`
/// whose `verdict` names an output-plugin call ([`emits_for_verdict`]), as (kind, xid)
/// pairs comparable with [`emitted_by_test_decoding`]. (Rows with `decoded = true` are
/// meant to be exactly those.)
pub fn emitted_by_replay(rows: &[TraceRow], upto: u64) -> BTreeSet<(String, u64)> {
    let mut out = BTreeSet::new();
    for r in rows {
        if !r.end_lsn.is_some_and(|e| e <= upto) {
            continue;
        }
        let Some(label) = r.verdict() else {
            continue;
        };
        let Some(x) = r.xid else { continue };
        for kind in emits_for_verdict(&label) {
            out.insert((kind.to_string(), x));
        }
    }
    out
}
