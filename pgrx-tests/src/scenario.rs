//! A named scenario on real concurrent sessions ([`Scenario`]), checked against the real
//! server at every step: what test_decoding emitted against the replay's decode verdicts
//! ([`Scenario::compare`]), every trace row against the server (no `agrees = false`, the
//! server's `.snap` files), a slot's replayed creation against the LSN the creation
//! returned and the creating backend's LOG lines ([`Scenario::check_creation`]); failures
//! collected and reported at the end, with the scenario's counts.

use crate::checks::{check_trace_against_wal, compare_log_with_trace, Failures};
use crate::cluster::{flush_lsn, start, Env, Serial, CREATE_TIMEOUT};
use crate::decoding::{emits_for_verdict, emitted_by_replay, emitted_by_test_decoding};
use crate::server_log::{
    builder_messages, dump_log, log_branch, log_entries_since, log_offset, LogEntry,
};
use crate::sessions::{backend_pid, current_xid, server_slot, Creation, ServerSlot};
use crate::snapfiles::{server_snap_files, snap_name};
use crate::trace::{dump, trace, trace_rows, TraceRow};
use crate::values::{err_text, fmt_lsn, json_rows, query_column};
use postgres::Client;
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// (callback, xid) pairs test_decoding emitted or the replay says it emits
/// ([`emitted_by_test_decoding`], [`emitted_by_replay`]).
pub type Emitted = BTreeSet<(String, u64)>;

/// Whether `e` holds (`kind`, `xid`).
pub fn has(e: &Emitted, kind: &str, xid: u64) -> bool {
    e.contains(&(kind.to_string(), xid))
}

/// Runs `f`; a panic (a failed assertion in the shared test code) becomes a collected failure.
pub fn soft<T>(fails: &mut Failures, what: &str, f: impl FnOnce() -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            fails.check(false, || format!("{what}: {msg}"));
            None
        }
    }
}

// ---------------------------------------------------------------------------------------
// Cleanup guards
// ---------------------------------------------------------------------------------------

/// Prepared transactions of a scenario: rolled back at the end if still there (a
/// leftover prepared transaction would make every later slot creation wait for it).
pub struct Prepared {
    env: Env,
    gids: Vec<String>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let Ok(mut c) = catch_unwind(|| self.env.connect("pgsnap-sc-cleanup")) else {
            return;
        };
        for g in &self.gids {
            let left: bool = c
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE gid = $1)",
                    &[g],
                )
                .map(|r| r.get(0))
                .unwrap_or(false);
            if left {
                let _ = c.batch_execute(&format!("ROLLBACK PREPARED '{g}'"));
            }
        }
    }
}

/// Tables of a scenario, dropped at the end (after the sessions and prepared
/// transactions holding locks on them are gone).
pub struct Tables {
    env: Env,
    names: Vec<String>,
}

impl Drop for Tables {
    fn drop(&mut self) {
        let Ok(mut c) = catch_unwind(|| self.env.connect("pgsnap-sc-cleanup")) else {
            return;
        };
        let _ = c.batch_execute("SET lock_timeout = '10s'");
        for t in &self.names {
            let _ = c.batch_execute(&format!("DROP TABLE IF EXISTS {t}"));
        }
    }
}

// ---------------------------------------------------------------------------------------
// One scenario: the admin session, its failures and counts
// ---------------------------------------------------------------------------------------

/// What a scenario compared, printed on its `pgsnap-counts:` line.
#[derive(Default)]
pub struct ScenarioCounts {
    pub compares: usize,
    pub emitted: usize,
    pub rows: usize,
    pub verdict_rows: usize,
    pub agrees_true: usize,
    /// Serialize rows with a server file left undecided (the writer started elsewhere).
    pub undecided_writer: usize,
    pub serialize_with_file: usize,
    pub bytes_equal: usize,
    pub wal_rx_matched: usize,
    pub creations: usize,
    pub log_lines: usize,
    pub timetravel: usize,
    pub restarts_b: usize,
}

/// One scenario: its admin session (`c`, whose backend peeks and traces), its collected
/// failures and its counts; it holds [`crate::cluster::serial`] for its whole run.
pub struct Scenario {
    pub tag: &'static str,
    pub env: Env,
    pub c: Client,
    pid: i32,
    pub fails: Failures,
    pub n: ScenarioCounts,
    t0: Instant,
    _g: Serial,
}

/// The result of one comparison step.
pub struct Step {
    pub emitted: Emitted,
    pub rows: Vec<TraceRow>,
    /// The builder messages the peeking backend logged.
    pub msgs: Vec<(u64, LogEntry)>,
    /// test_decoding's lines of the peek.
    pub lines: Vec<String>,
}

/// The trace rows that carry a decode verdict, one per line.
fn dump_verdicts(rows: &[TraceRow]) -> String {
    rows.iter()
        .filter(|r| r.verdict().is_some())
        .map(|r| {
            format!(
                "  {} .. {} {:<16} xid {:?} verdict {:?} decoded {:?} timetravel {:?}\n",
                r.lsn.map(fmt_lsn).unwrap_or_default(),
                r.end_lsn.map(fmt_lsn).unwrap_or_default(),
                r.record,
                r.xid,
                r.verdict(),
                r.raw.get("decoded"),
                r.flag("timetravel")
            )
        })
        .collect()
}

impl Scenario {
    /// The scenario `tag` on the live cluster ([`start`]); `None` when live tests are
    /// skipped on purpose.
    pub fn start(tag: &'static str) -> Option<Scenario> {
        let (g, env, mut c) = start()?;
        let pid = backend_pid(&mut c);
        Some(Scenario {
            tag,
            env,
            c,
            pid,
            fails: Failures::default(),
            n: ScenarioCounts::default(),
            t0: Instant::now(),
            _g: g,
        })
    }

    /// A failure of the scenario (`what`, prefixed by its tag) unless `ok`.
    pub fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        let tag = self.tag;
        self.fails.check(ok, || format!("{tag}: {}", what()));
    }

    /// Tables `names` dropped and made again by `ddl`; dropped at the end.
    pub fn tables(&mut self, names: &[&str], ddl: &str) -> Tables {
        for t in names {
            self.c
                .batch_execute(&format!("DROP TABLE IF EXISTS {t}"))
                .unwrap();
        }
        self.c.batch_execute(ddl).unwrap();
        Tables {
            env: self.env.clone(),
            names: names.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Prepared transactions `gids` (leftovers of an earlier run rolled back now), rolled
    /// back at the end if still there.
    pub fn prepared(&self, gids: &[&str]) -> Prepared {
        let p = Prepared {
            env: self.env.clone(),
            gids: gids.iter().map(|s| s.to_string()).collect(),
        };
        // leftovers of an earlier failed run
        drop(Prepared {
            env: self.env.clone(),
            gids: p.gids.clone(),
        });
        p
    }

    /// Runs a one-statement transaction (BEGIN; sql; COMMIT) and returns its xid.
    pub fn commit_one(&mut self, sql: &str) -> u64 {
        self.c.batch_execute("BEGIN").unwrap();
        self.c
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {}", err_text(&e)));
        let x = current_xid(&mut self.c);
        self.c.batch_execute("COMMIT").unwrap();
        x
    }

    /// A RUNNING_XACTS record now (pg_log_standby_snapshot on 16+, CHECKPOINT on 14/15),
    /// followed by a small commit so the WAL is flushed past it.
    pub fn running_xacts(&mut self, flush_table: &str) -> Option<u64> {
        self.env
            .log_standby_snapshot_flushed(&mut self.c, flush_table, "0")
    }

    /// `pg_logical_slot_get_changes` of `slot` (include-xids, skip-empty-xacts off): the
    /// lines test_decoding emitted.
    pub fn get_changes(&mut self, slot: &str) -> Vec<String> {
        query_column(
            &mut self.c,
            "SELECT data FROM pg_logical_slot_get_changes($1::name, NULL, NULL, 'include-xids', '1', 'skip-empty-xacts', '0')",
            &[&slot],
            &format!("get_changes({slot})"),
        )
    }

    /// Check 3 on a trace: no row disagrees; a serialize row at an LSN where the server
    /// wrote a .snap file agrees; no byte-for-byte difference.
    fn check_rows(&mut self, slot: &str, step: &str, rows: &[TraceRow]) {
        let files = server_snap_files(&mut self.c);
        let tag = self.tag;
        for r in rows {
            self.n.rows += 1;
            if r.agrees == Some(true) {
                self.n.agrees_true += 1;
            }
            self.fails.check(r.agrees != Some(false), || {
                format!(
                    "{tag} {step}: {slot}: trace row disagrees with the server: {}",
                    r.show()
                )
            });
            let with_file = r.branch_is("serialize")
                && r.lsn.is_some_and(|l| files.contains_key(&snap_name(l)));
            if with_file {
                self.n.serialize_with_file += 1;
                if r.agrees.is_none() {
                    self.n.undecided_writer += 1;
                }
                self.fails.check(r.agrees_or_undecided_writer(), || {
                    format!(
                        "{tag} {step}: {slot}: serialize row at {} has a .snap file the server wrote but agrees = {:?}: {}",
                        fmt_lsn(r.lsn.unwrap()),
                        r.agrees,
                        r.show()
                    )
                });
            }
            match r.flag("bytes_agree") {
                Some(true) => self.n.bytes_equal += 1,
                Some(false) => self.fails.check(false, || {
                    format!(
                        "{tag} {step}: {slot}: the replay's file differs byte for byte from the server's: {}",
                        r.show()
                    )
                }),
                None => {}
            }
            if let Some(v) = r.verdict() {
                self.n.verdict_rows += 1;
                let emits = !emits_for_verdict(&v).is_empty();
                let decoded = r.flag("decoded");
                self.fails.check(decoded == Some(emits), || {
                    format!(
                        "{tag} {step}: {slot}: row with verdict {v:?} has decoded = {decoded:?}: {}",
                        r.show()
                    )
                });
            }
        }
    }

    /// Check 1 (and 3) at one point: test_decoding's emitted set up to the flush position
    /// (a peek, which also writes the .snap files of the serialization points it passes)
    /// against the replay's.
    pub fn compare(&mut self, slot: &str, step: &str) -> Step {
        let off = log_offset(&self.env);
        let flush = flush_lsn(&mut self.c);
        let lines: Vec<String> = query_column(
            &mut self.c,
            "SELECT data FROM pg_logical_slot_peek_changes($1::name, $2::text::pg_lsn, NULL, 'include-xids', '1', 'skip-empty-xacts', '0')",
            &[&slot, &fmt_lsn(flush)],
            &format!("peek {slot}"),
        );
        let server = emitted_by_test_decoding(&mut self.c, slot, flush);
        let msgs = builder_messages(&log_entries_since(&self.env, off), self.pid);
        let ss = server_slot(&mut self.c, slot);
        let rows = match trace(&mut self.c, slot) {
            Ok(r) => r,
            Err(e) => {
                let tag = self.tag;
                self.fails.check(false, || {
                    format!(
                        "{tag} {step}: snapbuild_trace('{slot}') failed: {}",
                        err_text(&e)
                    )
                });
                Vec::new()
            }
        };
        let ours = emitted_by_replay(&rows, flush);
        self.n.compares += 1;
        self.n.emitted += server.len();
        let tag = self.tag;
        self.fails.check(server == ours, || {
            format!(
                "{tag} {step}: {slot}: emitted up to {} differ: test_decoding only {:?}, replay only {:?}\n\
                 test_decoding printed:\n  {}\nreplay verdicts:\n{}",
                fmt_lsn(flush),
                server.difference(&ours).collect::<Vec<_>>(),
                ours.difference(&server).collect::<Vec<_>>(),
                lines.join("\n  "),
                dump_verdicts(&rows)
            )
        });
        if !rows.is_empty() {
            self.check_rows(slot, step, &rows);
            let c = &mut self.c;
            if let Some(st) = soft(
                &mut self.fails,
                &format!("{tag} {step}: {slot}: trace against the WAL"),
                || check_trace_against_wal(c, ss.restart_lsn, flush, &rows),
            ) {
                self.n.wal_rx_matched += st.wal_records_matched;
            }
        }
        Step {
            emitted: server,
            rows,
            msgs,
            lines,
        }
    }

    /// Check 2: the replayed creation of `slot` (from its restart_lsn, with its
    /// catalog_xmin, in slot creation) becomes consistent on the record ending at `ret`,
    /// and the creating backend's LOG lines are the replay's.
    pub fn check_creation(&mut self, slot: &str, pid: i32, ret: u64, log_off: u64) {
        let ss = server_slot(&mut self.c, slot);
        self.check(ss.confirmed_flush == Some(ret), || {
            format!(
                "{slot}: confirmed_flush {:?} but the creation returned {}",
                ss.confirmed_flush.map(fmt_lsn),
                fmt_lsn(ret)
            )
        });
        let msgs = self.creation_messages(pid, log_off);
        let Some(rows) = self.replayed_creation(slot, &ss) else {
            return;
        };
        self.n.creations += 1;
        let crow = rows
            .iter()
            .find(|r| {
                r.record != "REPLAY START"
                    && r.state_before.as_deref() != Some("consistent")
                    && r.state.as_deref() == Some("consistent")
            })
            .cloned();
        let Some(crow) = crow else {
            self.check(false, || {
                format!(
                    "{slot}: the replayed creation never becomes consistent:\n{}",
                    dump(&rows)
                )
            });
            return;
        };
        self.check_consistent_like_the_server(slot, ret, &msgs, &rows, &crow);
        let upto = crow.end_lsn.unwrap_or(0);
        let bad: Vec<String> = rows
            .iter()
            .filter(|r| r.agrees == Some(false) && r.end_lsn.is_some_and(|e| e <= upto))
            .map(|r| r.show())
            .collect();
        self.check(bad.is_empty(), || {
            format!(
                "{slot}: replayed creation rows disagree:\n{}",
                bad.join("\n")
            )
        });
    }

    /// The creating backend's builder messages; the consistent message is written before
    /// the function returns, so the log gets a moment (≤ 5 s) to show it.
    fn creation_messages(&self, pid: i32, log_off: u64) -> Vec<(u64, LogEntry)> {
        let mut msgs = Vec::new();
        for _ in 0..50 {
            msgs = builder_messages(&log_entries_since(&self.env, log_off), pid);
            if msgs.iter().any(|(_, e)| {
                e.message
                    .starts_with("logical decoding found consistent point")
            }) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        msgs
    }

    /// `snapbuild_trace_range` of a slot's creation: from its restart_lsn, with its
    /// catalog_xmin, in slot creation (a failure is collected).
    fn replayed_creation(&mut self, slot: &str, ss: &ServerSlot) -> Option<Vec<TraceRow>> {
        let rows = json_rows(
            &mut self.c,
            "SELECT * FROM snapbuild_trace_range($1::text::pg_lsn, NULL, $2::text::xid, true)",
            &[
                &fmt_lsn(ss.restart_lsn),
                &ss.catalog_xmin.unwrap_or(0).to_string(),
            ],
        );
        match rows {
            Ok(r) => Some(trace_rows(r)),
            Err(e) => {
                self.check(false, || {
                    format!("{slot}: snapbuild_trace_range failed: {}", err_text(&e))
                });
                None
            }
        }
    }

    /// The replayed creation's consistent row `crow` ends where the creation returned
    /// (`ret`), by the branch the server logged last, and the LOG lines up to it are the
    /// server's.
    fn check_consistent_like_the_server(
        &mut self,
        slot: &str,
        ret: u64,
        msgs: &[(u64, LogEntry)],
        rows: &[TraceRow],
        crow: &TraceRow,
    ) {
        let tag = self.tag;
        self.check(crow.end_lsn == Some(ret), || {
            format!(
                "{slot}: the replayed creation becomes consistent on a record ending at {:?}, the server returned {}:\n{}",
                crow.end_lsn.map(fmt_lsn),
                fmt_lsn(ret),
                dump(rows)
            )
        });
        let server_kind = msgs.last().map(|(_, e)| log_branch(e));
        self.check(server_kind == crow.branch.as_deref(), || {
            format!(
                "{slot}: the server became consistent by {server_kind:?}, the replay by {:?}:\n{}{}",
                crow.branch,
                dump_log(msgs),
                dump(rows)
            )
        });
        self.n.log_lines += msgs.len();
        soft(
            &mut self.fails,
            &format!("{tag}: {slot}: creation LOG lines vs the replay"),
            || compare_log_with_trace(msgs, rows, crow.lsn),
        );
    }

    /// Slot creation waits for every transaction of the cluster: before one, wait (up
    /// to 10 min) until no session outside these tests holds an xid and no prepared
    /// transaction of someone else is left (other people may work on the same cluster).
    pub fn wait_quiet(&mut self) {
        let t0 = Instant::now();
        let mut said = false;
        loop {
            let busy: Vec<String> = query_column(
                &mut self.c,
                "SELECT 'prepared ' || gid || ' (db ' || database || ')' FROM pg_prepared_xacts WHERE gid NOT LIKE 'pgsnap_sc_%' \
                 UNION ALL SELECT 'pid ' || pid || ' ' || coalesce(application_name, '') || ' xid ' || backend_xid \
                   FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND backend_type = 'client backend' \
                    AND coalesce(application_name, '') NOT LIKE 'pgsnap%'",
                &[],
                "others' transactions",
            );
            if busy.is_empty() {
                return;
            }
            if !said {
                println!(
                    "{}: waiting for others' transactions before a slot creation: {busy:?}",
                    self.tag
                );
                said = true;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(600),
                "the cluster is not quiet after 10 min (a slot creation would wait for these): {busy:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Creates `slot` (nothing of the scenario running) and checks the creation.
    pub fn create_checked(&mut self, slot: &str, two_phase: bool) -> u64 {
        self.wait_quiet();
        let off = log_offset(&self.env);
        let cr = Creation::start_with(&self.env, slot, "test_decoding", two_phase);
        let pid = cr.pid;
        let ret = cr.wait(CREATE_TIMEOUT);
        self.check_creation(slot, pid, ret, off);
        ret
    }

    /// Prints the counts line (with `extra`) and fails the test with every collected
    /// failure.
    pub fn finish(self, extra: &str) {
        let n = &self.n;
        println!(
            "pgsnap-counts: {} PG{} compares {} emitted {} trace rows {} (verdict rows {}, agreeing {}) serialize rows with a server file {} (undecided, written by a decoder that started elsewhere: {}) byte-equal {} \
             RUNNING_XACTS matched to WAL {} creations checked {} creation LOG lines {} timetravel checks {} restarts from a .snap {} {extra} failures {} ({:.1}s)",
            self.tag,
            self.env.major,
            n.compares,
            n.emitted,
            n.rows,
            n.verdict_rows,
            n.agrees_true,
            n.serialize_with_file,
            n.undecided_writer,
            n.bytes_equal,
            n.wal_rx_matched,
            n.creations,
            n.log_lines,
            n.timetravel,
            n.restarts_b,
            self.fails.0.len(),
            self.t0.elapsed().as_secs_f64()
        );
        let tag = self.tag;
        self.fails.finish(tag);
    }
}
