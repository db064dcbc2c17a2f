//! The server's verdict beside a replayed row: gathers the server facts for the row
//! (the `.snap` file it wrote at that LSN, the slot's confirmed_flush) and hands them, as
//! plain values, to the pure comparison ([`judge_row`]).

use snapbuild_core::replay::{bytes_with_writer_fields, compare_with_server, TraceRow};
use snapbuild_core::{SnapBuildOnDisk, SnapBuildState};

use crate::adapter::slots::SlotCopy;
use crate::adapter::snapfiles;

/// The server's verdict beside one replayed step.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Verdict {
    /// The state the server recorded (`start|building|full|consistent`).
    pub server_state: Option<String>,
    /// Where it was read: a `.snap` path, or `slot confirmed_flush_lsn`.
    pub server_source: Option<String>,
    pub agrees: Option<bool>,
    pub disagreement: Option<String>,
    /// Serialize rows with a server file: the replay's bytes (writer-dependent fields
    /// taken from the file) equal the file's bytes.
    pub bytes_agree: Option<bool>,
}

/// A trace row with its verdict, as both the SQL and the JSON forms show it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Traced {
    #[serde(flatten)]
    pub row: TraceRow,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// The `.snap` file the server left at a row's LSN.
pub enum FileFact {
    /// There is none (never written, or removed since).
    Absent,
    /// Its decoded contents and raw bytes.
    Read { file: SnapBuildOnDisk, raw: Vec<u8> },
    /// It could not be decoded: the server's error text.
    Broken(String),
}

/// What the server left behind that a row can be compared with.
pub struct ServerFacts {
    /// `pg_logical/snapshots/<lsn>.snap` for the row's LSN (the restored file's on branch b).
    pub path: String,
    /// The file there (only looked up for rows that serialize).
    pub file: FileFact,
    /// The traced slot's confirmed_flush, once created (not while in creation).
    pub confirmed_flush: Option<u64>,
}

/// Reads the server facts for `row`: its `.snap` file on serialize rows, and the slot.
pub fn server_facts(row: &TraceRow, slot: Option<&SlotCopy>, version: u32) -> ServerFacts {
    let file = if row.serialized.is_some() {
        match snapfiles::read_snapshot_bytes(row.lsn, version) {
            Ok(Some((file, raw))) => FileFact::Read { file, raw },
            Ok(None) => FileFact::Absent,
            Err(e) => FileFact::Broken(e.text()),
        }
    } else {
        FileFact::Absent
    };
    ServerFacts {
        path: snapfiles::path_for(row.restored_from.unwrap_or(row.lsn)),
        file,
        confirmed_flush: slot.filter(|s| !s.in_creation()).map(|s| s.confirmed_flush),
    }
}

/// The name pg_logicalinspect gives a raw SnapBuildState value.
pub fn state_name(raw: i32) -> String {
    SnapBuildState::from_raw(raw)
        .map(|s| s.as_str())
        .unwrap_or("unknown state")
        .to_owned()
}

/// Judges one replayed row against the server's facts.
///
/// - A serialize row with a file: the file comparison (fields every builder agrees on
///   decide `agrees`; writer-dependent ones are named in `disagreement`), and whether the
///   bytes are equal once the writer's own fields are taken from the file.
/// - A broken file: `agrees = false` with the server's error text.
/// - A branch b (restore) row: the restored file is consistent, so is the replay.
/// - The record that made a created slot's builder consistent: it must end at the
///   slot's confirmed_flush_lsn (DecodingContextFindStartpoint stores EndRecPtr).
/// - Anything else: no verdict (all NULL).
pub fn judge_row(row: &TraceRow, facts: &ServerFacts) -> Verdict {
    if let Some(pred) = &row.serialized {
        return match &facts.file {
            FileFact::Read { file, raw } => {
                let cmp = compare_with_server(pred, file, row.serialize_context);
                let mut text: Vec<String> = cmp.differences.clone();
                text.extend(
                    cmp.writer_dependent
                        .iter()
                        .map(|d| format!("writer-dependent: {d}")),
                );
                let ours = bytes_with_writer_fields(pred, file, &cmp);
                Verdict {
                    server_state: Some(state_name(file.builder.state)),
                    server_source: Some(facts.path.clone()),
                    agrees: Some(cmp.agrees()),
                    disagreement: (!text.is_empty()).then(|| text.join("; ")),
                    bytes_agree: ours.map(|ours| *raw == ours),
                }
            }
            FileFact::Absent => Verdict::default(),
            FileFact::Broken(text) => Verdict {
                server_state: None,
                server_source: Some(facts.path.clone()),
                agrees: Some(false),
                disagreement: Some(text.clone()),
                bytes_agree: None,
            },
        };
    }
    if row.restored_from.is_some() {
        return Verdict {
            server_state: Some("consistent".into()),
            server_source: Some(facts.path.clone()),
            agrees: Some(row.state == SnapBuildState::Consistent),
            disagreement: None,
            bytes_agree: None,
        };
    }
    let became_consistent =
        row.state_before < SnapBuildState::Consistent && row.state == SnapBuildState::Consistent;
    if let Some(cf) = facts.confirmed_flush.filter(|_| became_consistent) {
        if row.end_lsn.0 == cf {
            return Verdict {
                server_state: Some("consistent".into()),
                server_source: Some("slot confirmed_flush_lsn".to_owned()),
                agrees: Some(true),
                disagreement: None,
                bytes_agree: None,
            };
        }
        // Later restarts begin at restart_lsn and may become consistent anywhere up to
        // or past confirmed_flush (changes before it are skipped): no verdict then.
    }
    Verdict::default()
}

/// [`server_facts`] then [`judge_row`].
pub fn judge(row: TraceRow, slot: Option<&SlotCopy>, version: u32) -> Traced {
    let facts = server_facts(&row, slot, version);
    let verdict = judge_row(&row, &facts);
    Traced { row, verdict }
}
