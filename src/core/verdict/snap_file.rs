//! The replay's `.snap` file against the one the server wrote at the same LSN: the fields
//! every builder agrees on, the fields that depend on how the writing decoder got there
//! (writer-dependent), the bytes once the writer's own fields are taken from the server's
//! file, and the decoders the server log names as the file's possible writers.
//!
//! Not a PostgreSQL file: the server never compares two serialized snapshots. The file's
//! layout is snapbuild.c's SnapBuildOnDisk (`replication::snapbuild_ondisk`).

use super::{RowFacts, Verdict};
use crate::include::snapbuild::SnapBuildState;
use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;
use crate::replication::decode::TraceRow;
use crate::replication::snapbuild::SerializeContext;
use crate::replication::snapbuild_ondisk::SnapBuildOnDisk;

/// How a predicted `.snap` compares with the one the server wrote at the same LSN.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FileComparison {
    /// Fields any consistent builder must agree on at this LSN: state, next_phase_at, the
    /// catchange xids (the running catalog-modifying transactions), and xmin whenever both
    /// the replay and the writer took it from the previous RUNNING_XACTS record.
    pub differences: Vec<String>,
    /// Fields that depend on how the writing decoder got here: xmin after a restore
    /// (branch b keeps the file's older xmin until the next record), xmax (moved only by
    /// catalog commits seen since the decoder became consistent, or set by branch a) and
    /// the committed xids (collected since then). They match when the replay and the
    /// writer started alike; otherwise they are reported here, not held against the
    /// replay.
    pub writer_dependent: Vec<String>,
    /// The writer's xmin when the replay can tell it although its own differs (the
    /// replay restored at the previous RUNNING_XACTS, the writer was consistent there);
    /// the committed xids are then compared as that writer purged them.
    pub writer_xmin: Option<TransactionId>,
    /// The committed xids are equal only once purged at `writer_xmin` (which assumes the
    /// writer's state at that record was the restored file's: not proven).
    pub committed_as_purged: bool,
}

impl FileComparison {
    /// No difference in the fields every builder must agree on.
    pub fn agrees(&self) -> bool {
        self.differences.is_empty()
    }

    /// Something differs, and only in what depends on the writing decoder's history:
    /// the writer-dependent fields, or the catchange xids (a decoder that read the
    /// assignment of a catalog-changing subtransaction flags its top-level transaction
    /// too). Another decoder writing exactly the server's file then settles it.
    pub fn other_writers_may_settle(&self) -> bool {
        (!self.differences.is_empty() || !self.writer_dependent.is_empty())
            && self.differences.iter().all(|d| d.starts_with("catchange "))
    }
}

/// Compares the file the replay predicts with the file the server wrote at the same LSN.
/// `ctx` says where the predicted xmin came from.
///
/// Not compared at all, because they describe the process that wrote the file rather
/// than the WAL position: start_decoding_at, last_serialized_snapshot, in_slot_creation,
/// building_full_snapshot, initial_xmin_horizon, two_phase_at, committed.xcnt_space and
/// includes_all_transactions.
pub fn compare_with_server(
    predicted: &SnapBuildOnDisk,
    server: &SnapBuildOnDisk,
    ctx: Option<SerializeContext>,
) -> FileComparison {
    let (p, s) = (&predicted.builder, &server.builder);
    let mut c = FileComparison::default();
    if p.state != s.state {
        c.differences
            .push(format!("state {} vs {}", p.state, s.state));
    }
    if p.xmin != s.xmin {
        // The writer serialized at the previous RUNNING_XACTS, so it was consistent there
        // and took that record's oldestRunningXid as its xmin (SnapBuildSerialize alone sets
        // last_serialized_snapshot; a restore does not).
        let writer_from_record = ctx.filter(|x| {
            x.prev_running_xacts.is_valid() && s.last_serialized_snapshot == x.prev_running_xacts
        });
        let d = format!("xmin {} vs {}", p.xmin, s.xmin);
        match writer_from_record {
            // So did we: the xmins must be equal.
            Some(x) if !x.xmin_from_restore => c.differences.push(d),
            // We restored there (and keep the file's xmin until the next record); the
            // writer's xmin is still that record's oldestRunningXid.
            Some(x) if s.xmin == x.prev_oldest_running_xid => c.writer_xmin = Some(s.xmin),
            Some(x) => c.differences.push(format!(
                "{d} (a decoder consistent at {} takes its oldestRunningXid {})",
                x.prev_running_xacts, x.prev_oldest_running_xid
            )),
            None => c.writer_dependent.push(d),
        }
    }
    if p.next_phase_at != s.next_phase_at {
        c.differences.push(format!(
            "next_phase_at {} vs {}",
            p.next_phase_at, s.next_phase_at
        ));
    }
    if predicted.catchange_xip != server.catchange_xip {
        c.differences.push(format!(
            "catchange {:?} vs {:?}",
            predicted.catchange_xip, server.catchange_xip
        ));
    }
    if p.xmax != s.xmax {
        c.writer_dependent
            .push(format!("xmax {} vs {}", p.xmax, s.xmax));
    }
    let sorted = |v: &[u32]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    // A writer consistent at the previous RUNNING_XACTS purged the committed xids older
    // than that record's oldestRunningXid there (SnapBuildPurgeOlderTxn); the replay, which
    // restored there, keeps them until the next record. Were the writer's state at that
    // record the restored file's, it holds exactly these.
    let committed = match c.writer_xmin {
        Some(x) => predicted
            .committed_xip
            .iter()
            .copied()
            .filter(|v| !transam::normal_precedes(*v, x))
            .collect(),
        None => predicted.committed_xip.clone(),
    };
    if sorted(&committed) != sorted(&server.committed_xip) {
        c.writer_dependent.push(format!(
            "committed {:?} vs {:?}",
            predicted.committed_xip, server.committed_xip
        ));
    } else if sorted(&predicted.committed_xip) != sorted(&server.committed_xip) {
        c.committed_as_purged = true;
    }
    c
}

/// The bytes the replay would write at this LSN, with the fields that describe the
/// writing decoder taken from the server's file, and likewise xmin, xmax or the committed
/// xids where `cmp` found them writer-dependent (the committed xids otherwise in the
/// writer's insertion order). If the result equals the file byte for byte, every other
/// field, the layout, the padding and the CRC-32C agree. `None` for a version without a
/// known layout.
pub fn bytes_with_writer_fields(
    predicted: &SnapBuildOnDisk,
    server: &SnapBuildOnDisk,
    cmp: &FileComparison,
) -> Option<Vec<u8>> {
    let mut p = predicted.clone();
    let (b, s) = (&mut p.builder, &server.builder);
    b.start_decoding_at = s.start_decoding_at;
    b.last_serialized_snapshot = s.last_serialized_snapshot;
    b.in_slot_creation = s.in_slot_creation;
    b.building_full_snapshot = s.building_full_snapshot;
    b.initial_xmin_horizon = s.initial_xmin_horizon;
    b.two_phase_at = s.two_phase_at;
    b.committed_xcnt_space = s.committed_xcnt_space;
    b.includes_all_transactions = s.includes_all_transactions;
    let flagged = |field: &str| cmp.writer_dependent.iter().any(|d| d.starts_with(field));
    if flagged("xmin ") {
        b.xmin = s.xmin;
    }
    if let Some(x) = cmp.writer_xmin {
        b.xmin = x;
    }
    if flagged("xmax ") {
        b.xmax = s.xmax;
    }
    let sorted = |v: &[u32]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    // Unflagged with a known writer xmin: the writer's purged list equals the server's.
    if flagged("committed ")
        || cmp.writer_xmin.is_some()
        || sorted(&p.committed_xip) == sorted(&server.committed_xip)
    {
        p.committed_xip = server.committed_xip.clone();
    }
    p.encode()
}

/// The `.snap` file the server left at a row's LSN, as plain input.
#[derive(Clone, Debug)]
pub enum FileFact {
    /// There is none (never written, or removed since).
    Absent,
    /// Its decoded contents and raw bytes.
    Read { file: SnapBuildOnDisk, raw: Vec<u8> },
    /// It could not be decoded: the server's error text.
    Broken(String),
    /// It could not be read (permissions, I/O): the error text. Says nothing of the file.
    Unreadable(String),
}

/// One decoder the server log shows could have written a `.snap` file, and the file a
/// replay started as it would (same restart point, start_decoding_at and two_phase_at)
/// writes at that LSN (`None`: the replay could not follow it there, e.g. its WAL is gone).
#[derive(Clone, Debug)]
pub struct LoggedWriter {
    pub restart: Lsn,
    pub slot: String,
    pub pid: Option<i32>,
    /// It was `pg_replication_slot_advance` (fast-forward decoding).
    pub fast_forward: bool,
    pub file: Option<SnapBuildOnDisk>,
}

impl LoggedWriter {
    fn name(&self) -> String {
        match self.pid {
            Some(pid) => format!(
                "slot {}'s decoder (pid {pid}) restarted at {}",
                self.slot, self.restart
            ),
            None => format!("slot {}'s decoder restarted at {}", self.slot, self.restart),
        }
    }
}

/// What the server log says about the writer of a row's file.
#[derive(Clone, Debug, Default)]
pub enum LogWriters {
    /// Not looked at (the replay's own file settles the row).
    #[default]
    NotAsked,
    /// The log cannot tell (not readable, incomplete, no such decoder): why.
    Unknown(String),
    /// Every decoder that could have written the file, per the log.
    Known(Vec<LoggedWriter>),
}

/// Whether `other` (a file some decoder would write) equals `server` in every field the
/// comparison looks at, writer-dependent ones included.
pub fn writes_same_file(other: &SnapBuildOnDisk, server: &SnapBuildOnDisk) -> bool {
    let c = compare_with_server(other, server, None);
    c.differences.is_empty()
        && c.writer_dependent.is_empty()
        && other.builder.xmin == server.builder.xmin
}

/// What the writers the server log names say about a file.
enum ByLog {
    /// All of them write it (true) or none does (false).
    Decided(Verdict),
    /// Some do and some do not: the row cannot be false; the note names them.
    Mixed(String),
    /// The log does not settle it: the replay's own file is judged.
    NoInfo,
}

/// The verdict on a server file when the log names every decoder that could have
/// written it and each was replayed: `true` when all of them write exactly the file,
/// `false` when none does (with how the first one differs), mixed when some do and some
/// do not.
fn judge_by_logged_writers(file: &SnapBuildOnDisk, raw: &[u8], facts: &RowFacts) -> ByLog {
    let LogWriters::Known(ws) = &facts.log_writers else {
        return ByLog::NoInfo;
    };
    if ws.is_empty() || ws.iter().any(|w| w.file.is_none()) {
        return ByLog::NoInfo;
    }
    let (same, other): (Vec<&LoggedWriter>, Vec<&LoggedWriter>) = ws
        .iter()
        .partition(|w| writes_same_file(w.file.as_ref().unwrap(), file));
    let names = |v: &[&LoggedWriter]| v.iter().map(|w| w.name()).collect::<Vec<_>>().join(", ");
    let base = Verdict {
        server_state: Some(SnapBuildState::name_of_raw(file.builder.state).to_owned()),
        server_source: Some(facts.path.clone()),
        ..Verdict::default()
    };
    if other.is_empty() {
        // The writer's own fields (start_decoding_at, last_serialized_snapshot, the
        // committed array's allocated size, …) come from the server's file, as for the
        // replay's own prediction.
        let w = same[0].file.as_ref().unwrap();
        let bytes = bytes_with_writer_fields(w, file, &compare_with_server(w, file, None));
        ByLog::Decided(Verdict {
            agrees: Some(true),
            bytes_agree: bytes.map(|b| b == raw),
            ..base
        })
    } else if same.is_empty() {
        let w = other[0];
        let cmp = compare_with_server(w.file.as_ref().unwrap(), file, None);
        let mut diffs = cmp.differences.clone();
        diffs.extend(cmp.writer_dependent.iter().cloned());
        if file.builder.xmin != w.file.as_ref().unwrap().builder.xmin
            && !diffs.iter().any(|d| d.starts_with("xmin "))
        {
            diffs.push(format!(
                "xmin {} vs {}",
                w.file.as_ref().unwrap().builder.xmin,
                file.builder.xmin
            ));
        }
        ByLog::Decided(Verdict {
            agrees: Some(false),
            disagreement: Some(format!(
                "{}; the server log shows the decoders that could have written this file ({}), and none writes it",
                diffs.join("; "),
                names(&other)
            )),
            bytes_agree: Some(false),
            ..base
        })
    } else {
        ByLog::Mixed(format!(
            "undecided: of the decoders the server log shows could have written this file, {} write it and {} do not",
            names(&same),
            names(&other)
        ))
    }
}

/// `d` marked undecided: prefixed `undecided: ` unless it already is.
fn undecided(d: String) -> String {
    if d.starts_with("undecided:") {
        d
    } else {
        format!("undecided: {d}")
    }
}

/// Judges a serialize row: `pred`, the file the replay predicts at its LSN, against the
/// server's file there ([`judge_row`](super::judge_row)'s first case).
pub(super) fn judge_serialized(
    row: &TraceRow,
    pred: &SnapBuildOnDisk,
    facts: &RowFacts,
) -> Verdict {
    match &facts.file {
        FileFact::Read { file, raw } => {
            let mixed = match judge_by_logged_writers(file, raw, facts) {
                ByLog::Decided(v) => return v,
                ByLog::Mixed(note) => Some(note),
                ByLog::NoInfo => None,
            };
            let cmp = compare_with_server(pred, file, row.serialize_context);
            let mut text: Vec<String> = cmp.differences.clone();
            text.extend(
                cmp.writer_dependent
                    .iter()
                    .map(|d| format!("undecided: writer-dependent {d}")),
            );
            let ours = bytes_with_writer_fields(pred, file, &cmp);
            // A decoder that restarted elsewhere and writes exactly the server's file
            // settles the writer-dependent fields, and a catchange difference (a
            // decoder that read a subtransaction's assignment flags its top level
            // too; one that started after it cannot).
            let writer = cmp
                .other_writers_may_settle()
                .then(|| {
                    facts
                        .other_writers
                        .iter()
                        .find(|(_, f)| writes_same_file(f, file))
                        .map(|(start, _)| *start)
                })
                .flatten();
            // Only what the replay can prove is true or false: a possible writer found
            // elsewhere, or a committed list equal only once purged as such a writer
            // would have, leaves the row undecided, with that writer named.
            let agrees = if !cmp.agrees() && writer.is_none() {
                Some(false)
            } else if writer.is_some()
                || cmp.committed_as_purged
                || !cmp.writer_dependent.is_empty()
            {
                None
            } else {
                Some(true)
            };
            if !cmp.agrees() && writer.is_some() {
                text = text.into_iter().map(undecided).collect();
            }
            if cmp.committed_as_purged {
                text.push(format!(
                    "undecided: committed {:?} vs {:?} equal once purged at xmin {}, as a decoder that was consistent at the previous RUNNING_XACTS with the restored file's state would have",
                    pred.committed_xip,
                    file.committed_xip,
                    cmp.writer_xmin.unwrap_or(0)
                ));
            }
            if let LogWriters::Unknown(why) = &facts.log_writers {
                if agrees != Some(true) {
                    text.push(format!("the server log does not settle it: {why}"));
                }
            }
            if let Some(start) = writer {
                text.push(format!(
                    "consistent with a decoder restarted at {start} (the writer's restart point is not known)"
                ));
            } else if agrees.is_none() && cmp.other_writers_may_settle() {
                text.push(format!(
                    "no decoder restarted at an earlier serialization point ({} tried) writes this file",
                    facts.other_writers.len()
                ));
            }
            // Some of the writers the log names write the file and some do not: not
            // false, whatever the replay's own file says.
            let agrees = match &mixed {
                Some(note) => {
                    text = text.into_iter().map(undecided).collect();
                    text.push(note.clone());
                    None
                }
                None => agrees,
            };
            Verdict {
                server_state: Some(SnapBuildState::name_of_raw(file.builder.state).to_owned()),
                server_source: Some(facts.path.clone()),
                agrees,
                disagreement: (!text.is_empty()).then(|| text.join("; ")),
                bytes_agree: ours.map(|ours| *raw == ours),
            }
        }
        FileFact::Absent => Verdict::default(),
        FileFact::Unreadable(text) => Verdict {
            server_source: Some(facts.path.clone()),
            disagreement: Some(format!("undecided: {text}")),
            ..Verdict::default()
        },
        FileFact::Broken(text) => Verdict {
            server_source: Some(facts.path.clone()),
            agrees: Some(false),
            disagreement: Some(text.clone()),
            ..Verdict::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{facts, serialize_row};
    use super::super::judge_row;
    use super::*;

    #[test]
    fn identical_file_agrees_byte_for_byte() {
        let row = serialize_row();
        let f = *row.serialized.clone().unwrap();
        assert_eq!(compare_with_server(&f, &f, None), FileComparison::default());
        assert_eq!(
            bytes_with_writer_fields(&f, &f, &FileComparison::default()),
            f.encode()
        );
        let raw = f.encode().unwrap();
        let v = judge_row(&row, &facts(FileFact::Read { file: f, raw }));
        assert_eq!(v.agrees, Some(true));
        assert_eq!(v.bytes_agree, Some(true));
        assert_eq!(v.disagreement, None);
    }

    /// A writer-dependent difference is never "agrees = true": it is undecided (NULL)
    /// with the field named, and a hard field difference is false.
    #[test]
    fn writer_dependent_difference_is_undecided_not_true() {
        let row = serialize_row();
        let mut server = *row.serialized.clone().unwrap();
        server.builder.xmax += 5;
        let raw = server.encode().unwrap();
        let v = judge_row(
            &row,
            &facts(FileFact::Read {
                file: server.clone(),
                raw,
            }),
        );
        assert_eq!(v.agrees, None);
        let d = v.disagreement.unwrap();
        assert!(d.starts_with("undecided: writer-dependent xmax"), "{d}");
        // A decoder restarted elsewhere that writes exactly the server's file decides it.
        let mut f = facts(FileFact::Read {
            file: server.clone(),
            raw: server.encode().unwrap(),
        });
        f.other_writers = vec![
            (Lsn(50), (*row.serialized.clone().unwrap())),
            (Lsn(40), server.clone()),
        ];
        // A possible writer is named, but nothing proves it was the writer: undecided.
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v
            .disagreement
            .unwrap()
            .contains("consistent with a decoder restarted at 0/28"));
        // A catchange difference alone is false unless another writer reproduces it.
        let mut cat = *row.serialized.clone().unwrap();
        cat.catchange_xip = vec![650];
        let raw = cat.encode().unwrap();
        let v = judge_row(
            &row,
            &facts(FileFact::Read {
                file: cat.clone(),
                raw: raw.clone(),
            }),
        );
        assert_eq!(v.agrees, Some(false));
        let mut f = facts(FileFact::Read {
            file: cat.clone(),
            raw,
        });
        f.other_writers = vec![(Lsn(40), cat)];
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v.disagreement.unwrap().starts_with("undecided: catchange"));
        server.builder.next_phase_at += 1;
        let raw = server.encode().unwrap();
        let v = judge_row(&row, &facts(FileFact::Read { file: server, raw }));
        assert_eq!(v.agrees, Some(false));
    }

    /// The replay restored at the previous RUNNING_XACTS (keeping the file's xmin); a
    /// writer whose last_serialized_snapshot is that record was consistent there and took
    /// its oldestRunningXid: decided, not writer-dependent.
    #[test]
    fn xmin_of_a_writer_consistent_at_the_previous_record_is_decided() {
        let row = serialize_row();
        let pred = *row.serialized.clone().unwrap();
        let ctx = SerializeContext {
            prev_running_xacts: Lsn(100),
            xmin_from_restore: true,
            prev_oldest_running_xid: pred.builder.xmin + 2,
        };
        let mut server = pred.clone();
        server.builder.last_serialized_snapshot = Lsn(100);
        server.builder.xmin = pred.builder.xmin + 2;
        let c = compare_with_server(&pred, &server, Some(ctx));
        assert!(
            c.differences.is_empty() && c.writer_dependent.is_empty(),
            "{c:?}"
        );
        assert_eq!(c.writer_xmin, Some(server.builder.xmin));
        assert_eq!(
            bytes_with_writer_fields(&pred, &server, &c),
            server.encode()
        );
        // Committed xids older than that xmin were purged by the writer there.
        let mut pred2 = pred.clone();
        pred2.committed_xip = vec![pred.builder.xmin, pred.builder.xmin + 3];
        let mut server2 = server.clone();
        server2.committed_xip = vec![pred.builder.xmin + 3];
        let c = compare_with_server(&pred2, &server2, Some(ctx));
        assert!(
            c.differences.is_empty() && c.writer_dependent.is_empty(),
            "{c:?}"
        );
        assert!(c.committed_as_purged);
        assert_eq!(
            bytes_with_writer_fields(&pred2, &server2, &c),
            server2.encode()
        );
        server.builder.xmin += 1;
        let c = compare_with_server(&pred, &server, Some(ctx));
        assert_eq!(c.differences.len(), 1, "{c:?}");
        // Another last_serialized_snapshot: the writer's history is unknown.
        server.builder.last_serialized_snapshot = Lsn(90);
        let c = compare_with_server(&pred, &server, Some(ctx));
        assert!(
            c.differences.is_empty() && c.writer_dependent.len() == 1,
            "{c:?}"
        );
    }

    /// A hard difference stays false even when the committed list would be explained by
    /// a purge (not NULL).
    #[test]
    fn hard_difference_beats_an_explained_committed_list() {
        let mut row = serialize_row();
        let pred = *row.serialized.clone().unwrap();
        row.serialize_context = Some(SerializeContext {
            prev_running_xacts: Lsn(100),
            xmin_from_restore: true,
            prev_oldest_running_xid: pred.builder.xmin + 2,
        });
        let mut p2 = pred.clone();
        p2.committed_xip = vec![pred.builder.xmin, pred.builder.xmin + 3];
        row.serialized = Some(Box::new(p2));
        let mut server = pred.clone();
        server.builder.last_serialized_snapshot = Lsn(100);
        server.builder.xmin = pred.builder.xmin + 2;
        server.committed_xip = vec![pred.builder.xmin + 3];
        server.builder.next_phase_at = 7;
        let raw = server.encode().unwrap();
        let v = judge_row(&row, &facts(FileFact::Read { file: server, raw }));
        assert_eq!(v.agrees, Some(false), "{v:?}");
    }

    /// The writers the server log names decide a file the replay's own history cannot:
    /// all write it → true, none → false naming the field, some → undecided (never
    /// false), one that could not be replayed → the replay's own judgement.
    #[test]
    fn writers_named_by_the_log_decide() {
        let row = serialize_row();
        let ours = *row.serialized.clone().unwrap();
        let mut server = ours.clone();
        server.builder.xmax += 5;
        let raw = server.encode().unwrap();
        let writer = |restart: u64, file: Option<&SnapBuildOnDisk>| LoggedWriter {
            restart: Lsn(restart),
            slot: "s".into(),
            pid: Some(7),
            fast_forward: false,
            file: file.cloned(),
        };
        let with = |ws: Vec<LoggedWriter>| {
            let mut f = facts(FileFact::Read {
                file: server.clone(),
                raw: raw.clone(),
            });
            f.log_writers = LogWriters::Known(ws);
            judge_row(&row, &f)
        };
        let v = with(vec![writer(40, Some(&server)), writer(50, Some(&server))]);
        assert_eq!(
            (v.agrees, v.bytes_agree, v.disagreement),
            (Some(true), Some(true), None)
        );
        let v = with(vec![writer(40, Some(&ours))]);
        assert_eq!(v.agrees, Some(false));
        let d = v.disagreement.unwrap();
        assert!(d.contains("xmax") && d.contains("none writes it"), "{d}");
        let v = with(vec![writer(40, Some(&ours)), writer(50, Some(&server))]);
        assert_eq!(v.agrees, None);
        assert!(v
            .disagreement
            .unwrap()
            .contains("restarted at 0/32 write it"));
        // A hard difference in the replay's own file is not false when a named writer
        // writes the file.
        let mut cat = server.clone();
        cat.catchange_xip = vec![650];
        let mut f = facts(FileFact::Read {
            file: cat.clone(),
            raw: cat.encode().unwrap(),
        });
        f.log_writers = LogWriters::Known(vec![writer(40, Some(&ours)), writer(50, Some(&cat))]);
        assert_eq!(judge_row(&row, &f).agrees, None);
        let v = with(vec![writer(40, None), writer(50, Some(&server))]);
        assert_eq!(v.agrees, None);
        assert!(v
            .disagreement
            .unwrap()
            .starts_with("undecided: writer-dependent xmax"));
    }

    #[test]
    fn broken_and_absent_files() {
        let row = serialize_row();
        let v = judge_row(&row, &facts(FileFact::Broken("bad magic".into())));
        assert_eq!(
            (v.agrees, v.disagreement.as_deref()),
            (Some(false), Some("bad magic"))
        );
        assert_eq!(
            judge_row(&row, &facts(FileFact::Absent)),
            Verdict::default()
        );
    }
}
