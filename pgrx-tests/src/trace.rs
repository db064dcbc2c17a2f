//! Rows of `snapbuild_trace` / `snapbuild_trace_range`.

use crate::values::{err_text, fmt_lsn, jb, jlsn, js, js_opt, json_rows, jxid, jxids, show, Row};
use postgres::Client;
use std::fmt::Write as _;

#[derive(Clone, Debug)]
pub struct TraceRow {
    pub raw: Row,
    pub lsn: Option<u64>,
    pub end_lsn: Option<u64>,
    pub record: String,
    pub xid: Option<u64>,
    pub branch: Option<String>,
    pub state_before: Option<String>,
    pub state: Option<String>,
    pub xmin: Option<u64>,
    pub xmax: Option<u64>,
    pub next_phase_at: Option<u64>,
    pub start_decoding_at: Option<u64>,
    pub running_xids: Option<Vec<u64>>,
    pub wait_xids: Option<Vec<u64>>,
    pub level: Option<String>,
    pub message: Option<String>,
    pub detail: Option<String>,
    pub initial_xmin_horizon: Option<u64>,
    pub in_slot_creation: Option<bool>,
    pub agrees: Option<bool>,
    pub disagreement: Option<String>,
    pub serialized_xmin: Option<u64>,
    pub serialized_xmax: Option<u64>,
}

impl TraceRow {
    /// What this row claims the `.snap` file at its LSN holds, as (state, xmin, xmax):
    /// a `serialize` row gives what SnapBuildSerialize wrote (taken before the record
    /// moves xmin), a branch `b` row the snapshot it restored. Other rows neither write nor
    /// read the file at their LSN (branch a, for one, is taken before any restore).
    pub fn file_claim(&self) -> Option<(Option<String>, Option<u64>, Option<u64>)> {
        match self.branch.as_deref() {
            Some("serialize") => Some((
                Some("consistent".into()),
                self.serialized_xmin,
                self.serialized_xmax,
            )),
            Some("b") => Some((self.state.clone(), self.xmin, self.xmax)),
            _ => None,
        }
    }

    pub fn show(&self) -> String {
        show(&self.raw)
    }
    /// The `verdict` column (the decode verdict of a transaction's last record), if any.
    pub fn verdict(&self) -> Option<String> {
        js_opt(&self.raw, "verdict")
    }
    /// A boolean column outside [`TraceRow`]'s fields (`decoded`, `timetravel`,
    /// `bytes_agree`): `None` when NULL or missing.
    pub fn flag(&self, column: &str) -> Option<bool> {
        self.raw.get(column).and_then(|v| v.as_bool())
    }
    pub fn is(&self, record: &str) -> bool {
        self.record == record
    }
    pub fn branch_is(&self, b: &str) -> bool {
        self.branch.as_deref() == Some(b)
    }
    /// A row judged against a .snap file the server wrote either agrees, or is undecided
    /// only because the file's writer started elsewhere (`undecided: writer-dependent …`,
    /// with the reason), while every other field agrees: the bytes, with the writer's own
    /// fields taken from the file, are the file's.
    pub fn agrees_or_undecided_writer(&self) -> bool {
        let undecided = self
            .disagreement
            .as_deref()
            .is_some_and(|d| d.starts_with("undecided:"));
        self.agrees == Some(true)
            || (self.agrees.is_none() && undecided && self.flag("bytes_agree") == Some(true))
    }

    /// [`TraceRow::agrees_or_undecided_writer`] where a decoder history that writes
    /// exactly the file was found (`consistent with a decoder restarted at …`, or the
    /// committed list of a writer consistent at the previous record).
    pub fn agrees_or_possible_writer(&self) -> bool {
        let possible_writer = self.disagreement.as_deref().is_some_and(|d| {
            d.contains("consistent with a decoder restarted at") || d.contains("equal once purged")
        });
        self.agrees == Some(true) || (self.agrees_or_undecided_writer() && possible_writer)
    }
}

pub fn trace(c: &mut Client, slot: &str) -> Result<Vec<TraceRow>, postgres::Error> {
    let rows = json_rows(c, "SELECT * FROM snapbuild_trace($1::name)", &[&slot])?;
    Ok(trace_rows(rows))
}

/// [`trace`], failing the test with the server's error.
pub fn trace_ok(c: &mut Client, slot: &str) -> Vec<TraceRow> {
    trace(c, slot).unwrap_or_else(|e| panic!("snapbuild_trace('{slot}') failed: {}", err_text(&e)))
}

/// Rows of `snapbuild_trace` / `snapbuild_trace_range` (as [`json_rows`] returns them) as
/// [`TraceRow`]s.
pub fn trace_rows(rows: Vec<Row>) -> Vec<TraceRow> {
    rows.into_iter()
        .map(|r| TraceRow {
            lsn: jlsn(&r, "lsn"),
            end_lsn: jlsn(&r, "end_lsn"),
            record: js(&r, "record").unwrap_or_default(),
            xid: jxid(&r, "xid"),
            branch: js(&r, "branch"),
            state_before: js(&r, "state_before"),
            state: js(&r, "state"),
            xmin: jxid(&r, "xmin"),
            xmax: jxid(&r, "xmax"),
            next_phase_at: jxid(&r, "next_phase_at"),
            start_decoding_at: jlsn(&r, "start_decoding_at"),
            running_xids: jxids(&r, "running_xids"),
            wait_xids: jxids(&r, "wait_xids"),
            level: js(&r, "level"),
            message: js(&r, "message"),
            detail: js(&r, "detail"),
            initial_xmin_horizon: jxid(&r, "initial_xmin_horizon"),
            in_slot_creation: jb(&r, "in_slot_creation"),
            agrees: jb(&r, "agrees"),
            disagreement: js(&r, "disagreement"),
            serialized_xmin: jxid(&r, "serialized_xmin"),
            serialized_xmax: jxid(&r, "serialized_xmax"),
            raw: r,
        })
        .collect()
}

/// The first row that took `branch` (`c-1`, `c-2`, …); panics with the trace when none did.
pub fn branch_row<'a>(rows: &'a [TraceRow], branch: &str) -> &'a TraceRow {
    rows.iter()
        .find(|r| r.branch_is(branch))
        .unwrap_or_else(|| panic!("no {branch} row:\n{}", dump(rows)))
}

pub fn dump(rows: &[TraceRow]) -> String {
    let mut s = String::new();
    for r in rows {
        let _ = writeln!(
            s,
            "  {:<20} {:>10} -> {:>10} {:<8} state {:?} -> {:?} xmin {:?} xmax {:?} npa {:?} running {:?} wait {:?} {:?} {:?} / {:?} agrees {:?} {:?}",
            r.record,
            r.lsn.map(fmt_lsn).unwrap_or_default(),
            r.end_lsn.map(fmt_lsn).unwrap_or_default(),
            r.branch.clone().unwrap_or_default(),
            r.state_before,
            r.state,
            r.xmin,
            r.xmax,
            r.next_phase_at,
            r.running_xids,
            r.wait_xids,
            r.level,
            r.message,
            r.detail,
            r.agrees,
            r.disagreement
        );
    }
    s
}

/// The row where the replay became consistent (state_before not consistent, state consistent).
pub fn consistent_row(rows: &[TraceRow]) -> Option<&TraceRow> {
    rows.iter().find(|r| {
        r.state.as_deref() == Some("consistent")
            && r.state_before.as_deref() != Some("consistent")
            && r.lsn.is_some()
            && r.record != "REPLAY START"
    })
}
