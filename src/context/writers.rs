//! Other writers of a `.snap` file: decoders that restarted at an earlier serialization
//! point and read the same WAL. A file the server wrote at a serialization point depends
//! on where its writer started (xmax, the committed xids and, after a restore, xmin); when
//! the replay's own file differs only there, these replays say whether a decoder that
//! restarted at one of the `.snap` files still on disk writes exactly the server's file.

use snapbuild_core::replication::snapbuild::CommitVerdict;
use snapbuild_core::server_log::{
    candidate_lines_for, decoders, lines_at, lines_for, message_lsn, same_start_logged_debug_past,
    same_start_logs_debug, serializing_lines_for, subtransaction_lines_for, writers_of, Candidates,
    InvalidationLine, LineIndex, LogEvent, LoggedDecoder, ReplayStart, Writers, SKIPPING,
};
use snapbuild_core::verdict::{writes_same_file, DebugLines, LogLines, LogWriters, LoggedWriter};
use snapbuild_core::{BuilderParams, Lsn, SnapBuildOnDisk, TraceRow};

use crate::adapter::{server_log, snapfiles};
use crate::context::decoding::DecodingContext;
use crate::context::input::ReplayInput;

/// How many restart points a trace tries at most: each is one more replay of the WAL
/// from there to the row (a reproducing one is kept and resumed for later rows).
pub const MAX_OTHER_WRITERS: usize = 16;

struct Shadow {
    start: Lsn,
    ctx: DecodingContext,
    /// The row of the last record it fed, unless that record was quiet (rows come in LSN
    /// order; `ctx.last_record` says where it stands).
    last: Option<Box<TraceRow>>,
}

impl Shadow {
    /// Advances to the record at `row`'s LSN and returns the file it serializes there.
    fn file_at(&mut self, row: &TraceRow) -> Option<SnapBuildOnDisk> {
        if self.start >= row.lsn {
            return None;
        }
        while self.ctx.last_record.is_none_or(|l| l < row.lsn) {
            match self.ctx.next_row_upto(Some(row.end_lsn)) {
                Some(Ok(r)) => self.last = r,
                // A broken file or the end of the WAL: this writer cannot be followed.
                Some(Err(_)) | None => return None,
            }
        }
        self.last
            .as_ref()
            .filter(|l| l.lsn == row.lsn)
            .and_then(|l| l.serialized.as_deref().cloned())
    }
}

/// How many decoders named by the server log a trace replays at most.
pub const MAX_LOGGED_WRITERS: usize = 16;

/// Replays of other possible writers, started lazily and advanced only forward.
pub struct OtherWriters {
    /// The main replay's start (a decoder restarted there is the main replay itself).
    main_start: Lsn,
    slot_db: u32,
    template: BuilderParams,
    two_phase: snapbuild_core::replication::decode::TwoPhaseDecoding,
    shadows: Vec<Shadow>,
    /// Restart points already considered (opened, or skipped as unusable).
    considered: Vec<Lsn>,
    /// The memory context the replays' readers live in (the main replay's).
    mcx: pgrx::pg_sys::MemoryContext,
    /// The server log's decoder events, read once per trace when first needed.
    log: Option<Result<Vec<LogEvent>, String>>,
    /// Replays of decoders the log names, by (restart point, start_decoding_at,
    /// two_phase_at, fast_forward); `None` where one could not be started.
    logged: Vec<((Lsn, Lsn, Lsn, bool), Option<Shadow>)>,
    /// The log's decoders with their builder lines (from `log`, once), and their lines
    /// by record.
    decoders: Option<(Vec<LoggedDecoder>, LineIndex)>,
    /// The LSN the replay's first builder message names (once one was seen).
    first_message_lsn: Option<Option<Lsn>>,
    /// `log_min_messages` when above debug1, read once per trace (a setting cannot
    /// change while a statement runs).
    level_above_debug1: Option<Option<String>>,
}

impl OtherWriters {
    /// For the replay `main`: other writers read WAL in its memory context.
    pub fn new(main: &DecodingContext) -> Self {
        let input = &main.input;
        OtherWriters {
            main_start: input.start,
            slot_db: input.slot_db,
            template: input.params.clone(),
            two_phase: input.two_phase.clone(),
            shadows: Vec::new(),
            considered: Vec::new(),
            mcx: main.memory_context(),
            log: None,
            logged: Vec::new(),
            decoders: None,
            first_message_lsn: None,
            level_above_debug1: None,
        }
    }

    /// How this replay began, as the log's decoders are judged against it.
    fn replay_start(&self) -> ReplayStart {
        ReplayStart::new(
            self.main_start,
            self.first_message_lsn.flatten(),
            self.template.in_slot_creation,
        )
    }

    /// The server log's events, read once per trace.
    fn events(&mut self) -> &Result<Vec<LogEvent>, String> {
        self.log.get_or_insert_with(|| {
            server_log::events(|| {
                pgrx::check_for_interrupts!();
            })
            .map(|(_, e)| e)
        })
    }

    /// The server log's `invalidating obsolete replication slot` lines for `slot`, oldest
    /// first, or why the log cannot be read.
    pub fn invalidation_lines(&mut self, slot: &str) -> Result<Vec<InvalidationLine>, String> {
        match self.events() {
            Ok(events) => Ok(events
                .iter()
                .filter_map(|e| match e {
                    LogEvent::SlotInvalidated(i) if i.slot == slot => Some(i.clone()),
                    _ => None,
                })
                .collect()),
            Err(why) => Err(why.clone()),
        }
    }

    /// What the server log says about `row`'s builder LOG message (`logical decoding
    /// found …`): the lines decoders logged for the same record, each marked whether its
    /// decoder started as this replay did (`snapbuild_core::server_log::lines_for`).
    /// `NotAsked` for a row without such a message.
    pub fn log_lines_for(&mut self, row: &TraceRow) -> LogLines {
        let Some(msg) = row
            .message
            .as_deref()
            .filter(|m| m.starts_with("logical decoding found ") || m.starts_with(SKIPPING))
        else {
            // A RUNNING_XACTS the replay passes silently: the lines decoders logged there.
            if row.running_xids.is_none() {
                return LogLines::NotAsked;
            }
            let replay = self.replay_start();
            return match self.logged_decoders() {
                Ok((ds, ix)) => LogLines::Lines(lines_at(ds, Some(ix), row.lsn, replay)),
                Err(why) => LogLines::Unreadable(why),
            };
        };
        // Decoders are told apart by their first LOG line (the DEBUG1 skip is not one).
        if self.first_message_lsn.is_none() && !msg.starts_with(SKIPPING) {
            self.first_message_lsn = Some(message_lsn(msg));
        }
        let replay = self.replay_start();
        let (ds, ix) = match self.logged_decoders() {
            Ok(d) => d,
            Err(why) => return LogLines::Unreadable(why),
        };
        LogLines::Lines(lines_for(ds, Some(ix), msg, row.detail.as_deref(), replay))
    }

    /// Whether the server log has `found subtransaction` lines (DEBUG1) for the commit of
    /// `top` (false when the log cannot be read: the lines are then not asked for either).
    pub fn logs_subtransactions_of(&mut self, top: u32) -> bool {
        self.logged_decoders()
            .is_ok_and(|(_, ix)| ix.logs_subtransactions_of(top))
    }

    /// The log's decoders with their builder lines and their index (read once per
    /// trace).
    fn logged_decoders(&mut self) -> Result<(&[LoggedDecoder], &LineIndex), String> {
        if self.decoders.is_none() {
            let ds = match self.events() {
                Ok(events) => decoders(events),
                Err(why) => return Err(why.clone()),
            };
            let ix = LineIndex::new(&ds);
            self.decoders = Some((ds, ix));
        }
        match &self.decoders {
            Some((ds, ix)) => Ok((ds, ix)),
            None => Err("the server log's decoders could not be read".into()),
        }
    }

    /// What the server log says at DEBUG1 about `row`: the slot-candidate lines decoders
    /// logged for its record (RUNNING_XACTS rows with a candidate,
    /// `snapbuild_core::server_log::candidate_lines_for`), the `found subtransaction`
    /// lines of a commit row's transaction (`subtransaction_lines_for`), the `serializing
    /// snapshot to` lines of the record's `.snap` file on rows that may serialize
    /// (`serializing_lines_for`), whether a decoder that started as this replay did
    /// logged at DEBUG1 (and past this record), and the server's `log_min_messages` when
    /// above debug1. `NotAsked` for other rows, for a commit row with no such line when the
    /// replay found no catalog-changing subtransaction either (nothing to judge), and when
    /// the log cannot be read.
    pub fn debug_lines_for(&mut self, row: &TraceRow) -> DebugLines {
        let skip = row
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with(SKIPPING));
        // Every RUNNING_XACTS: a candidate line where the replay proposes none differs.
        let at = match (row.candidate_xmin, row.candidate_restart) {
            (Some((at, _)), _) | (None, Some((at, _))) => Some(at),
            (None, None) => row.running_xids.is_some().then_some(row.lsn),
        };
        let commit_of = row.commit.as_ref().and(row.xid);
        let may_serialize = row.serialized.is_some()
            || row.running_xids.is_some()
            || row
                .branch
                .is_some_and(|b| b.starts_with("serialization point"));
        if !skip && at.is_none() && commit_of.is_none() && !may_serialize {
            return DebugLines::NotAsked;
        }
        let replay = self.replay_start();
        let Ok((ds, ix)) = self.logged_decoders() else {
            return DebugLines::NotAsked;
        };
        let candidates = match at {
            Some(at) => candidate_lines_for(
                ds,
                Some(ix),
                Candidates {
                    at,
                    xmin: row.candidate_xmin.map(|(_, x)| x),
                    restart: row.candidate_restart.map(|(_, r)| r),
                },
                replay,
            ),
            None => Vec::new(),
        };
        let subs = match &row.commit {
            Some(CommitVerdict::Timetravel {
                catalog_subxacts, ..
            }) => catalog_subxacts.as_slice(),
            _ => &[],
        };
        let subtransactions = match commit_of {
            Some(top) => subtransaction_lines_for(ds, Some(ix), top, subs, replay),
            None => Vec::new(),
        };
        // Asked only where it can matter: the replay finds some and no such line is there.
        let same_start_passed = !subs.is_empty()
            && !subtransactions.iter().any(|m| m.may_refute)
            && same_start_logged_debug_past(ds, row.lsn, replay);
        let serializing = if may_serialize {
            serializing_lines_for(ds, Some(ix), row.lsn, row.serialized.is_some(), replay)
        } else {
            Vec::new()
        };
        // Most commits: no line and no catalog-changing subtransaction, nothing to judge.
        if !skip
            && !may_serialize
            && candidates.is_empty()
            && subtransactions.is_empty()
            && subs.is_empty()
        {
            return DebugLines::NotAsked;
        }
        let same_start_logs_debug = same_start_logs_debug(ds, replay);
        let level_above_debug1 = self
            .level_above_debug1
            .get_or_insert_with(log_min_messages_above_debug1)
            .clone();
        DebugLines::Lines {
            candidates,
            subtransactions,
            serializing,
            same_start_passed,
            same_start_logs_debug,
            level_above_debug1,
        }
    }

    /// What the server log says about the writer of `server` (the file at `row`'s LSN,
    /// found at `path`): every decoder that could have written it
    /// (`snapbuild_core::server_log::writers_of`: started after the last server start
    /// before the file's modification time and no later, reading from at or before the
    /// row, with the file's start_decoding_at), each replayed from its restart point with
    /// the file's start_decoding_at and two_phase_at up to the row.
    pub fn logged_writers_at(
        &mut self,
        row: &TraceRow,
        server: &SnapBuildOnDisk,
        path: &str,
    ) -> LogWriters {
        let events = match self.events() {
            Ok(e) => e,
            Err(why) => return LogWriters::Unknown(why.clone()),
        };
        let Some(mtime) = server_log::mtime_ms(path) else {
            return LogWriters::Unknown(format!("{path}: no modification time"));
        };
        let after = server.builder.start_decoding_at;
        let found = match writers_of(events, row.lsn, after, mtime) {
            Writers::Known(w) => w,
            Writers::Unknown(why) => return LogWriters::Unknown(why),
        };
        let two_phase_at = server.builder.two_phase_at;
        let mut out = Vec::new();
        for (restart, slot, pid, fast_forward) in found {
            let key = (restart, after, two_phase_at, fast_forward);
            let idx = match self.logged.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    if self.logged.len() >= MAX_LOGGED_WRITERS {
                        return LogWriters::Unknown(format!(
                            "the server log names more than {MAX_LOGGED_WRITERS} possible writers in this trace"
                        ));
                    }
                    let shadow = self.open_at(restart, after, two_phase_at, fast_forward);
                    self.logged.push((key, shadow));
                    self.logged.len() - 1
                }
            };
            let file = self.logged[idx].1.as_mut().and_then(|s| s.file_at(row));
            out.push(LoggedWriter {
                restart,
                slot,
                pid,
                fast_forward,
                file,
            });
        }
        LogWriters::Known(out)
    }

    /// A replay as a decoder restarted at `start` with the given start_decoding_at and
    /// two_phase_at would run, in fast-forward mode or not (`None` if its WAL is gone).
    fn open_at(
        &self,
        start: Lsn,
        start_decoding_at: Lsn,
        two_phase_at: Lsn,
        fast_forward: bool,
    ) -> Option<Shadow> {
        let params = BuilderParams {
            initial_xmin_horizon: 0,
            start_decoding_at,
            building_full_snapshot: false,
            in_slot_creation: false,
            two_phase_at,
            ..self.template.clone()
        };
        let input = ReplayInput {
            params,
            slot_db: self.slot_db,
            start,
            end: None,
            slot: None,
            two_phase: self.two_phase.clone(),
            all_records: false,
            fast_forward,
            label: format!("a decoder restarted at {start}"),
        };
        DecodingContext::try_start_tolerant(input, self.mcx).map(|ctx| Shadow {
            start,
            ctx,
            last: None,
        })
    }

    /// The files that decoders restarted at earlier `.snap` files would write at `row`'s
    /// LSN, as `(restart point, file)`, ending with the first that writes exactly
    /// `server` (the server's file there; its writer's own fields, start_decoding_at and
    /// two_phase_at, parameterise the replays). A restart point that reproduced an
    /// earlier file is asked first and kept; others are tried once each, those before the
    /// replay's own start first, nearest first, at most [`MAX_OTHER_WRITERS`] over the
    /// whole trace, and let go when they do not reproduce the file.
    pub fn files_at(
        &mut self,
        row: &TraceRow,
        server: &SnapBuildOnDisk,
    ) -> Vec<(Lsn, SnapBuildOnDisk)> {
        let mut out = Vec::new();
        // Writers that reproduced an earlier file.
        for s in &mut self.shadows {
            if let Some(f) = s.file_at(row) {
                let same = writes_same_file(&f, server);
                out.push((s.start, f));
                if same {
                    return out;
                }
            }
        }
        while let Some(mut s) = self.open_next(row.lsn, server) {
            if let Some(f) = s.file_at(row) {
                let same = writes_same_file(&f, server);
                out.push((s.start, f));
                if same {
                    self.shadows.push(s);
                    return out;
                }
            }
        }
        out
    }

    /// The next untried restart point before `before`, opened as a replay.
    fn open_next(&mut self, before: Lsn, server: &SnapBuildOnDisk) -> Option<Shadow> {
        if self.considered.len() >= MAX_OTHER_WRITERS {
            return None;
        }
        let entries = snapfiles::list().ok()?;
        let main_start = self.main_start;
        // Decoders restart where the slot's restart_lsn pointed, which only moves forward:
        // the writer of a file the replay finds most likely started at or before the
        // replay's own start.
        let start = entries
            .iter()
            .filter_map(|e| e.lsn)
            .filter(|l| *l < before && *l != main_start && !self.considered.contains(l))
            .min_by_key(|l| {
                (
                    *l > main_start,
                    if *l > main_start { l.0 } else { u64::MAX - l.0 },
                )
            })?;
        self.considered.push(start);
        let b = &server.builder;
        match self.open_at(start, b.start_decoding_at, b.two_phase_at, false) {
            Some(shadow) => Some(shadow),
            // Its WAL is gone: try the next one.
            None => self.open_next(before, server),
        }
    }
}

/// The server's `log_min_messages` when above debug1 (`warning`, …), `None` at debug1 or
/// below (or when it cannot be read).
fn log_min_messages_above_debug1() -> Option<String> {
    // SAFETY: GetConfigOption returns a pointer into the GUC's own string (or NULL with
    // missing_ok), valid until the setting changes; it is copied at once.
    let level = unsafe {
        let p = pgrx::pg_sys::GetConfigOption(c"log_min_messages".as_ptr(), true, false);
        if p.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    (!level.starts_with("debug")).then_some(level)
}
