//! Named scenarios on real concurrent sessions, in the shapes of contrib/test_decoding's
//! isolation specs (delayed startup, catalog changes across a serialization point,
//! subtransaction-only catalog changes, aborted DDL, standby snapshots between steps,
//! two-phase transactions around slot creation), each checked against the real server:
//!
//! 1. what `test_decoding` emitted (`pg_logical_slot_peek_changes` with `include-xids`,
//!    `skip-empty-xacts` off: its COMMIT / PREPARE TRANSACTION / COMMIT PREPARED /
//!    ROLLBACK PREPARED lines) equals what the replay's decode verdicts say it emits
//!    (`emitted_by_test_decoding` / `emitted_by_replay`), at every step;
//! 2. a slot created in the scenario: the replayed creation (`snapbuild_trace_range` with
//!    the slot's catalog_xmin, in_slot_creation) becomes consistent on the record ending
//!    at the LSN `pg_create_logical_replication_slot` returned, and the server's LOG lines
//!    of the creating backend are the replay's;
//! 3. no trace row disagrees with the server; a serialize row with a `.snap` file the
//!    server wrote agrees, byte for byte where compared;
//! 4. after a restart from a serialized snapshot (b, c), the commit of the transaction
//!    whose catalog change lies before the restart point is time travel in the replay,
//!    and the server decodes the DML that follows with the new column.
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).
//! Every failure of a scenario is collected and reported at its end (`FAILURE:` lines);
//! counts are printed on `pgsnap-counts:` lines (run with --nocapture).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);
const CREATE_TIMEOUT: Duration = Duration::from_secs(90);

type Emitted = BTreeSet<(String, u64)>;

fn has(e: &Emitted, kind: &str, xid: u64) -> bool {
    e.contains(&(kind.to_string(), xid))
}

/// Runs `f`; a panic (a failed assertion in the shared test code) becomes a collected failure.
fn soft<T>(fails: &mut Failures, what: &str, f: impl FnOnce() -> T) -> Option<T> {
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
struct Prepared {
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
struct Tables {
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

#[derive(Default)]
struct Counts {
    compares: usize,
    emitted: usize,
    rows: usize,
    verdict_rows: usize,
    agrees_true: usize,
    /// Serialize rows with a server file left undecided (the writer started elsewhere).
    undecided_writer: usize,
    serialize_with_file: usize,
    bytes_equal: usize,
    wal_rx_matched: usize,
    creations: usize,
    log_lines: usize,
    timetravel: usize,
    restarts_b: usize,
}

struct Scenario {
    tag: &'static str,
    env: Env,
    c: Client,
    pid: i32,
    fails: Failures,
    n: Counts,
    t0: Instant,
    _g: Serial,
}

/// The result of one comparison step.
struct Step {
    emitted: Emitted,
    rows: Vec<TraceRow>,
    /// The builder messages the peeking backend logged.
    msgs: Vec<(u64, LogEntry)>,
    /// test_decoding's lines of the peek.
    lines: Vec<String>,
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
    fn start(tag: &'static str) -> Option<Scenario> {
        let (g, env, mut c) = start()?;
        let pid = backend_pid(&mut c);
        Some(Scenario {
            tag,
            env,
            c,
            pid,
            fails: Failures::default(),
            n: Counts::default(),
            t0: Instant::now(),
            _g: g,
        })
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        let tag = self.tag;
        self.fails.check(ok, || format!("{tag}: {}", what()));
    }

    fn tables(&mut self, names: &[&str], ddl: &str) -> Tables {
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

    fn prepared(&self, gids: &[&str]) -> Prepared {
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
    fn commit_one(&mut self, sql: &str) -> u64 {
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
    fn running_xacts(&mut self, flush_table: &str) -> Option<u64> {
        self.env
            .log_standby_snapshot_flushed(&mut self.c, flush_table, "0")
    }

    fn get_changes(&mut self, slot: &str) -> Vec<String> {
        self.c
            .query(
                "SELECT data FROM pg_logical_slot_get_changes($1::name, NULL, NULL, 'include-xids', '1', 'skip-empty-xacts', '0')",
                &[&slot],
            )
            .unwrap_or_else(|e| panic!("get_changes({slot}): {}", err_text(&e)))
            .iter()
            .map(|r| r.get(0))
            .collect()
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
    fn compare(&mut self, slot: &str, step: &str) -> Step {
        let off = log_offset(&self.env);
        let flush = flush_lsn(&mut self.c);
        let lines: Vec<String> = self
            .c
            .query(
                "SELECT data FROM pg_logical_slot_peek_changes($1::name, $2::text::pg_lsn, NULL, 'include-xids', '1', 'skip-empty-xacts', '0')",
                &[&slot, &fmt_lsn(flush)],
            )
            .unwrap_or_else(|e| panic!("peek {slot}: {}", err_text(&e)))
            .iter()
            .map(|r| r.get(0))
            .collect();
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
    fn check_creation(&mut self, slot: &str, pid: i32, ret: u64, log_off: u64) {
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
    fn wait_quiet(&mut self) {
        let t0 = Instant::now();
        let mut said = false;
        loop {
            let busy: Vec<String> = self
                .c
                .query(
                    "SELECT 'prepared ' || gid || ' (db ' || database || ')' FROM pg_prepared_xacts WHERE gid NOT LIKE 'pgsnap_sc_%' \
                     UNION ALL SELECT 'pid ' || pid || ' ' || coalesce(application_name, '') || ' xid ' || backend_xid \
                       FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND backend_type = 'client backend' \
                        AND coalesce(application_name, '') NOT LIKE 'pgsnap%'",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
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
    fn create_checked(&mut self, slot: &str, two_phase: bool) -> u64 {
        self.wait_quiet();
        let off = log_offset(&self.env);
        let cr = Creation::start_with(&self.env, slot, "test_decoding", two_phase);
        let pid = cr.pid;
        let ret = cr.wait(CREATE_TIMEOUT);
        self.check_creation(slot, pid, ret, off);
        ret
    }

    fn finish(self, extra: &str) {
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

// ---------------------------------------------------------------------------------------
// a. delayed startup: the creation waits for a running transaction
// ---------------------------------------------------------------------------------------

#[test]
fn a_delayed_startup() {
    let Some(mut s) = Scenario::start("a_delayed_startup") else {
        return;
    };
    let (slot, tab) = ("pgsnap_sc_a", "pgsnap_sc_a_tab");
    let _slot = SlotGuard::new(&s.env, slot);
    let _t = s.tables(
        &[tab],
        &format!("CREATE TABLE {tab} (id serial primary key)"),
    );

    s.wait_quiet();
    let mut xa = OpenXact::begin(&s.env, "pgsnap-sc-a1");
    xa.exec(&format!("INSERT INTO {tab} DEFAULT VALUES"));
    let a = xa.xid;
    let off = log_offset(&s.env);
    let mut cr = Creation::start_with(&s.env, slot, "test_decoding", false);
    let pid = cr.pid;
    wait_for("the creation to wait for a", WAIT, || {
        waits_for_xid(&mut s.c, pid, a)
    });
    std::thread::sleep(Duration::from_millis(300));
    let returned_early = cr.try_done();
    s.check(!returned_early, || {
        "the creation returned while a was still running".into()
    });
    xa.commit();
    let ret = cr.wait(CREATE_TIMEOUT);
    s.check_creation(slot, pid, ret, off);

    let st = s.compare(slot, "after the creation");
    s.check(!has(&st.emitted, "commit", a), || {
        format!("a={a} committed before the consistent point, yet test_decoding emitted it")
    });
    s.get_changes(slot);

    let b = s.commit_one(&format!("INSERT INTO {tab} DEFAULT VALUES"));
    let st = s.compare(slot, "b committed");
    s.check(has(&st.emitted, "commit", b), || {
        format!("test_decoding did not emit b={b}: {:?}", st.lines)
    });
    s.get_changes(slot);

    let mut xc = OpenXact::begin(&s.env, "pgsnap-sc-a3");
    xc.exec(&format!("INSERT INTO {tab} DEFAULT VALUES"));
    let cx = xc.xid;
    let st = s.compare(slot, "c open");
    s.check(!has(&st.emitted, "commit", cx), || {
        format!("c={cx} is still open, yet emitted")
    });
    xc.commit();
    let st = s.compare(slot, "c committed");
    s.check(has(&st.emitted, "commit", cx), || {
        format!("test_decoding did not emit c={cx}: {:?}", st.lines)
    });
    s.finish(&format!("xids a={a} b={b} c={cx}"));
}

// ---------------------------------------------------------------------------------------
// b, c. a catalog change before a serialization point, committed after it; decoding
// restarted from that point
// ---------------------------------------------------------------------------------------

/// Where s0 changes the catalog in [`across_serialization`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    /// At top level.
    TopLevel,
    /// Only inside a released subtransaction, after a top-level insert.
    Subxact,
    /// In each of 70 subtransactions (`BEGIN … EXCEPTION … END` blocks creating tables,
    /// the last one adding the column), so the subxid cache overflows and RUNNING_XACTS
    /// lists s0's top-level xid alone.
    OverflowedSubxacts,
}

/// Tables the overflowed-subxact variant creates, one per subtransaction.
const OVERFLOW_TABLES: usize = 70;

fn across_serialization(tag: &'static str, change: Change) {
    let Some(mut s) = Scenario::start(tag) else {
        return;
    };
    let p = match change {
        Change::TopLevel => "pgsnap_sc_b",
        Change::Subxact => "pgsnap_sc_c",
        Change::OverflowedSubxacts => "pgsnap_sc_o",
    };
    let slot = p.to_string();
    let tab = format!("{p}_tab");
    let ktab = format!("{p}_k");
    let col = format!("added_{}", &p[p.len() - 1..]);
    let _slot = SlotGuard::new(&s.env, &slot);
    let mut names = vec![tab.clone(), ktab.clone()];
    if change == Change::OverflowedSubxacts {
        names.extend((1..=OVERFLOW_TABLES).map(|i| format!("{p}_t{i}")));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let _t = s.tables(
        &names,
        &format!("CREATE TABLE {tab} (id int); CREATE TABLE {ktab} (a int)"),
    );
    s.create_checked(&slot, false);

    let (mut s0, changer) = catalog_change_in_s0(&mut s, &tab, &col, change);
    let ddl_end = s0.insert_lsn();
    let rx1 = s.running_xacts(&ktab);
    // k's first change comes after that record: while k is the oldest transaction, the
    // slot's restart point is the last serialization point before it
    let mut k = OpenXact::begin(&s.env, "pgsnap-sc-k");
    k.exec(&format!("INSERT INTO {ktab} VALUES (1)"));
    s.compare(&slot, "s0 open across a RUNNING_XACTS");
    s.get_changes(&slot);
    let x0 = s0.xid;
    s0.commit();
    let st = s.compare(&slot, "s0 committed");
    let commit_lsn = st
        .rows
        .iter()
        .find(|r| r.is("COMMIT") && r.xid == Some(x0))
        .and_then(|r| r.lsn);
    s.check(commit_lsn.is_some(), || {
        format!(
            "no COMMIT row for s0={x0} in the first decoding:\n{}",
            dump(&st.rows)
        )
    });
    let commit_lsn = commit_lsn.unwrap_or(u64::MAX);
    let Some(restart) = consume_until_restart_between(&mut s, &slot, &ktab, ddl_end, commit_lsn)
    else {
        s.finish("");
        return;
    };
    let how = server_knows_the_change(&mut s, restart, changer, x0);
    let dml = check_restart_decodes_the_new_column(&mut s, &slot, &tab, &col, restart, x0);
    let kx = k.xid;
    k.commit();
    let st = s.compare(&slot, "k committed");
    s.check(has(&st.emitted, "commit", kx), || {
        format!("test_decoding did not emit k={kx}: {:?}", st.lines)
    });
    s.finish(&format!(
        "s0={x0} catalog change by {changer} dml={dml} k={kx} first RUNNING_XACTS ends {:?} restart_lsn {} ({how})",
        rx1.map(fmt_lsn),
        fmt_lsn(restart)
    ));
}

/// s0 changes the catalog (at top level, or only inside a released subtransaction after
/// a top-level insert) and stays open; returns s0 and the xid that changed the catalog
/// (the new pg_attribute row's xmin).
fn catalog_change_in_s0(s: &mut Scenario, tab: &str, col: &str, change: Change) -> (OpenXact, u64) {
    let mut s0 = OpenXact::begin(&s.env, "pgsnap-sc-s0");
    match change {
        Change::Subxact => s0.exec(&format!(
            "INSERT INTO {tab} VALUES (0); SAVEPOINT sp1; ALTER TABLE {tab} ADD COLUMN {col} int"
        )),
        Change::TopLevel => s0.exec(&format!("ALTER TABLE {tab} ADD COLUMN {col} int")),
        Change::OverflowedSubxacts => {
            let p = tab.trim_end_matches("_tab");
            s0.exec(&format!(
                "INSERT INTO {tab} VALUES (0); \
                 DO $$ BEGIN \
                   FOR i IN 1..{OVERFLOW_TABLES} LOOP \
                     BEGIN EXECUTE format('CREATE TABLE {p}_t%s (a int)', i); \
                     EXCEPTION WHEN others THEN RAISE; END; \
                   END LOOP; \
                   BEGIN ALTER TABLE {tab} ADD COLUMN {col} int; \
                   EXCEPTION WHEN others THEN RAISE; END; \
                 END $$"
            ));
        }
    }
    let in_subxact = change != Change::TopLevel;
    let changer: u64 = s0
        .text(&format!(
            "SELECT xmin FROM pg_attribute WHERE attrelid = '{tab}'::regclass AND attname = '{col}'"
        ))
        .parse()
        .unwrap();
    if change == Change::Subxact {
        s0.exec("RELEASE SAVEPOINT sp1");
    }
    if in_subxact {
        s.check(changer != s0.xid, || {
            format!(
                "the catalog change should be the subtransaction's, not s0={}'s",
                s0.xid
            )
        });
    }
    (s0, changer)
}

/// Consumes the slot until it restarts between the DDL and s0's commit, at a serialized
/// RUNNING_XACTS; that restart_lsn (`None`, with a failure, when it never does).
fn consume_until_restart_between(
    s: &mut Scenario,
    slot: &str,
    ktab: &str,
    ddl_end: u64,
    commit_lsn: u64,
) -> Option<u64> {
    for _ in 0..8 {
        s.running_xacts(ktab);
        s.get_changes(slot);
        let ss = server_slot(&mut s.c, slot);
        let files = server_snap_files(&mut s.c);
        if ss.restart_lsn > ddl_end
            && ss.restart_lsn < commit_lsn
            && files.contains_key(&snap_name(ss.restart_lsn))
        {
            return Some(ss.restart_lsn);
        }
    }
    let ss = server_slot(&mut s.c, slot);
    s.check(false, || {
        format!(
            "the slot's restart_lsn never settled on a serialized RUNNING_XACTS between the DDL (before {}) and s0's commit ({}): restart_lsn {}",
            fmt_lsn(ddl_end),
            fmt_lsn(commit_lsn),
            fmt_lsn(ss.restart_lsn)
        )
    });
    None
}

/// How the server's restarted decoder can know about the catalog change: from 16 the
/// .snap file at restart_lsn carries it in its catchange array; 14/15 remember the
/// transactions the RUNNING_XACTS there lists (InitialRunningXacts). Says which.
fn server_knows_the_change(s: &mut Scenario, restart: u64, changer: u64, x0: u64) -> String {
    let name = snap_name(restart);
    if s.env.major >= 16 {
        let sql = if s.env.has_logicalinspect() {
            "SELECT catchange_xip FROM pg_get_logical_snapshot_info($1)"
        } else {
            "SELECT catchange_xip FROM snapbuild_snapshot_info($1)"
        };
        let f = json_rows(&mut s.c, sql, &[&name])
            .unwrap_or_else(|e| panic!("{sql} {name}: {}", err_text(&e)));
        let cat = f
            .first()
            .and_then(|r| jxids(r, "catchange_xip"))
            .unwrap_or_default();
        s.check(cat.contains(&changer), || {
            format!("the server's {name} (restart_lsn) has catchange {cat:?}, not the catalog-changing xid {changer}")
        });
        format!("catchange of {name} {cat:?}")
    } else {
        let w = wal_running_xacts_at(&mut s.c, restart);
        let xacts = w.as_ref().map(|w| w.xacts.clone()).unwrap_or_default();
        s.check(xacts.contains(&x0), || {
            format!(
                "the RUNNING_XACTS at restart_lsn {} must list s0={x0}: {:?}",
                fmt_lsn(restart),
                w.map(|w| w.description)
            )
        });
        format!("RUNNING_XACTS at restart_lsn runs {xacts:?}")
    }
}

/// DML using the new column; decoding restarts at `restart` (branch b on both sides),
/// s0's commit is time travel in the replay and the server decodes the DML with the new
/// column. The DML's xid.
fn check_restart_decodes_the_new_column(
    s: &mut Scenario,
    slot: &str,
    tab: &str,
    col: &str,
    restart: u64,
    x0: u64,
) -> u64 {
    let dml = s.commit_one(&format!("INSERT INTO {tab} ({col}) VALUES (42)"));
    // A RUNNING_XACTS no decoder has passed yet: the decoder restarted at `restart`
    // (the peek in `compare`) writes its .snap, with s0's commit in its history.
    let before = flush_lsn(&mut s.c);
    s.running_xacts(tab);
    let st = s.compare(slot, "restarted from the serialized snapshot");
    check_restart_is_b(s, &st, restart);
    check_file_of_the_restarted_decoder(s, &st, before);
    let crow = st
        .rows
        .iter()
        .find(|r| r.is("COMMIT") && r.xid == Some(x0))
        .cloned();
    s.n.timetravel += 1;
    s.check(crow.as_ref().and_then(|r| r.flag("timetravel")) == Some(true), || {
        format!(
            "after the restart at {} s0={x0}'s commit must be time travel (its catalog change lies before the restart point), trace row: {:?}\n{}",
            fmt_lsn(restart),
            crow.as_ref().map(|r| r.show()),
            dump(&st.rows)
        )
    });
    let want = format!("{col}[integer]:42");
    s.check(has(&st.emitted, "commit", dml), || {
        format!("test_decoding did not emit the DML {dml}: {:?}", st.lines)
    });
    s.check(
        st.lines
            .iter()
            .any(|l| l.starts_with(&format!("table public.{tab}: INSERT:")) && l.contains(&want)),
        || {
            format!(
                "the server's restarted decoder did not decode {tab} with the new column ({want}): {:?}",
                st.lines
            )
        },
    );
    dml
}

/// The serialize row of the first RUNNING_XACTS after `after`: its .snap file was
/// written by the server's decoder restarted where the trace starts, so the replay must
/// agree with it by itself (not through another possible writer).
fn check_file_of_the_restarted_decoder(s: &mut Scenario, st: &Step, after: u64) {
    let row = st
        .rows
        .iter()
        .find(|r| r.branch_is("serialize") && r.lsn.is_some_and(|l| l >= after))
        .cloned();
    s.check(
        row.as_ref().is_some_and(|r| r.agrees == Some(true) && r.disagreement.is_none()),
        || {
            format!(
                "the .snap file the restarted decoder wrote after {} must agree with the replay itself: {:?}\n{}",
                fmt_lsn(after),
                row.as_ref().map(|r| r.show()),
                dump(&st.rows)
            )
        },
    );
}

/// The replay restarted at `restart` restores its .snap (branch b), and so did the
/// server (its first builder line), with the same LOG line.
fn check_restart_is_b(s: &mut Scenario, st: &Step, restart: u64) {
    let tag = s.tag;
    let first_rx = st.rows.iter().find(|r| r.is("RUNNING_XACTS")).cloned();
    s.check(
        first_rx
            .as_ref()
            .is_some_and(|r| r.lsn == Some(restart) && r.branch_is("b")),
        || {
            format!(
                "the replay restarted at {} must restore its .snap (branch b):\n{}",
                fmt_lsn(restart),
                dump(&st.rows)
            )
        },
    );
    let kinds: Vec<&str> = st.msgs.iter().map(|(_, e)| log_branch(e)).collect();
    s.check(kinds.first() == Some(&"b"), || {
        format!(
            "the server's restart did not use the saved snapshot at {}:\n{}",
            fmt_lsn(restart),
            dump_log(&st.msgs)
        )
    });
    if kinds.first() == Some(&"b") {
        s.n.restarts_b += 1;
        let (msgs, rows) = (st.msgs[..1].to_vec(), st.rows.clone());
        let upto = first_rx.as_ref().and_then(|r| r.lsn);
        soft(
            &mut s.fails,
            &format!("{tag}: restart LOG line vs the replay"),
            || compare_log_with_trace(&msgs, &rows, upto),
        );
    }
}

#[test]
fn b_catalog_change_across_serialization_point() {
    across_serialization(
        "b_catalog_change_across_serialization_point",
        Change::TopLevel,
    );
}

/// The catalog change is spread over 70 subtransactions, so the RUNNING_XACTS
/// at the restart point lists only s0's top-level xid. On 14/15 the restarted server
/// flags every subxact of s0's commit record (SnapBuildXidSetCatalogChanges); its later
/// .snap files hold all 71 xids as committed, and the trace must agree with them.
#[test]
fn c2_overflowed_subxact_catalog_change_across_serialization_point() {
    across_serialization(
        "c2_overflowed_subxact_catalog_change_across_serialization_point",
        Change::OverflowedSubxacts,
    );
}

#[test]
fn c_subxact_only_catalog_change_across_serialization_point() {
    across_serialization(
        "c_subxact_only_catalog_change_across_serialization_point",
        Change::Subxact,
    );
}

// ---------------------------------------------------------------------------------------
// d. aborted DDL (ROLLBACK, ROLLBACK TO SAVEPOINT) while another transaction runs and
// the slot keeps decoding
// ---------------------------------------------------------------------------------------

#[test]
fn d_aborted_ddl() {
    let Some(mut s) = Scenario::start("d_aborted_ddl") else {
        return;
    };
    let (slot, tab, other, newt) = (
        "pgsnap_sc_d",
        "pgsnap_sc_d_tab",
        "pgsnap_sc_d_o",
        "pgsnap_sc_d_new",
    );
    let _slot = SlotGuard::new(&s.env, slot);
    let _t = s.tables(
        &[tab, other, newt],
        &format!("CREATE TABLE {tab} (id int); CREATE TABLE {other} (a int)"),
    );
    s.create_checked(slot, false);

    let mut y = OpenXact::begin(&s.env, "pgsnap-sc-y");
    y.exec(&format!("INSERT INTO {other} VALUES (1)"));
    s.compare(slot, "y open");

    let mut x1 = OpenXact::begin(&s.env, "pgsnap-sc-x1");
    x1.exec(&format!(
        "CREATE TABLE {newt} (a int); INSERT INTO {newt} VALUES (1); \
         ALTER TABLE {tab} ADD COLUMN gone1 int; INSERT INTO {tab} VALUES (1, 1)"
    ));
    let a1 = x1.xid;
    x1.rollback();
    s.running_xacts(other);
    let st = s.compare(slot, "x1 rolled back");
    s.check(!st.emitted.iter().any(|(_, x)| *x == a1), || {
        format!("the aborted x1={a1} was emitted: {:?}", st.lines)
    });
    s.get_changes(slot);

    let mut x2 = OpenXact::begin(&s.env, "pgsnap-sc-x2");
    x2.exec(&format!(
        "INSERT INTO {tab} VALUES (2); SAVEPOINT s; ALTER TABLE {tab} ADD COLUMN gone2 int; \
         INSERT INTO {tab} VALUES (3, 3); ROLLBACK TO SAVEPOINT s; INSERT INTO {tab} VALUES (4)"
    ));
    y.exec(&format!("INSERT INTO {other} VALUES (2)"));
    s.running_xacts(other);
    s.compare(slot, "x2 open after ROLLBACK TO SAVEPOINT");
    let a2 = x2.xid;
    x2.commit();
    let yx = y.xid;
    y.commit();
    let a3 = s.commit_one(&format!("INSERT INTO {tab} VALUES (5)"));
    let st = s.compare(slot, "all ended");
    for x in [a2, yx, a3] {
        s.check(has(&st.emitted, "commit", x), || {
            format!("test_decoding did not emit {x}: {:?}", st.lines)
        });
    }
    let tab_lines: Vec<&String> = st
        .lines
        .iter()
        .filter(|l| l.starts_with(&format!("table public.{tab}:")))
        .collect();
    let want: Vec<String> = [2, 4, 5]
        .iter()
        .map(|v| format!("table public.{tab}: INSERT: id[integer]:{v}"))
        .collect();
    s.check(
        tab_lines.iter().map(|l| l.as_str()).collect::<Vec<_>>() == want,
        || format!("the server decoded {tab} as {tab_lines:?}, not {want:?}"),
    );
    s.finish(&format!("x1={a1} (rolled back) x2={a2} y={yx} x3={a3}"));
}

// ---------------------------------------------------------------------------------------
// e. a RUNNING_XACTS between every step: during the creation (BUILDING, FULL) and after
// ---------------------------------------------------------------------------------------

#[test]
fn e_standby_snapshots_between_steps() {
    let Some(mut s) = Scenario::start("e_standby_snapshots_between_steps") else {
        return;
    };
    let (slot, t1, t2) = ("pgsnap_sc_e", "pgsnap_sc_e1", "pgsnap_sc_e2");
    let _slot = SlotGuard::new(&s.env, slot);
    let _t = s.tables(
        &[t1, t2],
        &format!("CREATE TABLE {t1} (id int); CREATE TABLE {t2} (id int)"),
    );
    let mut rx = Vec::new();
    let (a, b, mut xc) = e_creation_between_snapshots(&mut s, slot, (t1, t2), &mut rx);
    let cx = xc.xid;

    xc.exec(&format!("INSERT INTO {t2} (id, b2) VALUES (2, 22)"));
    rx.push(s.running_xacts(t1));
    s.compare(slot, "c open after the creation");
    xc.commit();
    rx.push(s.running_xacts(t1));
    let st = s.compare(slot, "c committed");
    s.check(has(&st.emitted, "commit", cx), || {
        format!("test_decoding did not emit c={cx}: {:?}", st.lines)
    });
    let (c_line, after_line, b_row) = e_check_b_column_after_creation(&mut s, slot, t2, b, &st);
    s.get_changes(slot);
    let d = e_check_d_rebuilds_the_snapshot(&mut s, slot, (t1, t2), &mut rx);
    s.finish(&format!(
        "a={a} b={b} c={cx} d={d} server decoded c's insert as {c_line:?}, one begun after consistency as {after_line:?}; replay's b commit row (verdict, timetravel) {b_row:?}; RUNNING_XACTS logged {} (LSNs {:?})",
        rx.len(),
        rx.iter().flatten().map(|l| fmt_lsn(*l)).collect::<Vec<_>>()
    ));
}

/// The creation with a RUNNING_XACTS between every step: a (open before it) makes it wait
/// (c-1), b adds a column while the builder is BUILDING, a commits, the creation waits
/// for b (c-2), c begins, b commits in FULL; the creation is checked. Returns a's and
/// b's xids and c, still open.
fn e_creation_between_snapshots(
    s: &mut Scenario,
    slot: &str,
    (t1, t2): (&str, &str),
    rx: &mut Vec<Option<u64>>,
) -> (u64, u64, OpenXact) {
    s.wait_quiet();
    let mut xa = OpenXact::begin(&s.env, "pgsnap-sc-ea");
    xa.exec(&format!("INSERT INTO {t1} VALUES (1)"));
    let a = xa.xid;
    let off = log_offset(&s.env);
    let cr = Creation::start_with(&s.env, slot, "test_decoding", false);
    let pid = cr.pid;
    wait_for("the creation to wait for a (c-1)", WAIT, || {
        waits_for_xid(&mut s.c, pid, a)
    });
    rx.push(s.running_xacts(t1));
    let mut xb = OpenXact::begin(&s.env, "pgsnap-sc-eb");
    xb.exec(&format!("ALTER TABLE {t2} ADD COLUMN b2 int"));
    let b = xb.xid;
    rx.push(s.running_xacts(t1));
    xa.exec(&format!("INSERT INTO {t1} VALUES (2)"));
    xa.commit();
    wait_for("the creation to wait for b (c-2)", WAIT, || {
        waits_for_xid(&mut s.c, pid, b)
    });
    rx.push(s.running_xacts(t1));
    let mut xc = OpenXact::begin(&s.env, "pgsnap-sc-ec");
    xc.exec(&format!("INSERT INTO {t1} VALUES (3)"));
    rx.push(s.running_xacts(t1));
    xb.exec(&format!("INSERT INTO {t2} (id, b2) VALUES (1, 21)"));
    xb.commit();
    let ret = cr.wait(CREATE_TIMEOUT);
    s.check_creation(slot, pid, ret, off);
    rx.push(s.running_xacts(t1));
    (a, b, xc)
}

/// The commit row of xid `x` in a trace as (verdict, timetravel, disagreement).
type CommitRow = Option<(Option<String>, Option<bool>, Option<String>)>;

/// b's DDL ran while the builder was BUILDING (decode.c passes nothing of a transaction
/// to the builder before FULL), so to the decoder b's commit in FULL is no catalog
/// change: the catalog snapshot built in FULL, before b committed, stays in use and c's
/// insert into t2 (after b's commit) is decoded without b2, as is a transaction begun
/// after the consistent point, until the next catalog-changing commit rebuilds the
/// snapshot. What the server printed is recorded; where it shows b's column missing, the
/// replay must not have made b's commit time travel, and flags it (a known PostgreSQL
/// behaviour, not hidden). Returns the server's lines for c's and the later insert and
/// the replay's row for b's commit.
fn e_check_b_column_after_creation(
    s: &mut Scenario,
    slot: &str,
    t2: &str,
    b: u64,
    st: &Step,
) -> (Option<String>, Option<String>, CommitRow) {
    let c_line = st
        .lines
        .iter()
        .find(|l| l.starts_with(&format!("table public.{t2}: INSERT:")))
        .cloned();
    let b_row = st
        .rows
        .iter()
        .find(|r| r.is("COMMIT") && r.xid == Some(b))
        .map(|r| (r.verdict(), r.flag("timetravel"), r.disagreement.clone()));
    let after = s.commit_one(&format!("INSERT INTO {t2} (id, b2) VALUES (7, 27)"));
    let st = s.compare(slot, "insert with b2 after the creation");
    s.check(has(&st.emitted, "commit", after), || {
        format!("test_decoding did not emit {after}: {:?}", st.lines)
    });
    let after_line = st
        .lines
        .iter()
        .find(|l| l.starts_with(&format!("table public.{t2}: INSERT: id[integer]:7")))
        .cloned();
    let server_sees_b2 = after_line
        .as_deref()
        .is_some_and(|l| l.contains("b2[integer]:27"));
    s.check(
        server_sees_b2 || b_row.as_ref().is_some_and(|(_, tt, _)| *tt == Some(false)),
        || {
            format!(
                "the server decodes {t2} without b's column after b committed ({after_line:?}), \
                 so b={b}'s commit was no catalog change to it; the replay's row for it: {b_row:?}"
            )
        },
    );
    // The trace flags b's commit exactly when the server decodes without b's column.
    let flagged = b_row
        .as_ref()
        .and_then(|(_, _, n)| n.as_deref())
        .is_some_and(|n| n.starts_with("postgres-behaviour:"));
    s.check(flagged == !server_sees_b2, || {
        format!(
            "b={b}'s commit row flagged {flagged}, the server decodes b's column: {server_sees_b2} ({b_row:?})"
        )
    });
    (c_line, after_line, b_row)
}

/// d adds a column (RUNNING_XACTS around it) and commits: its insert is decoded with d2;
/// its catalog change rebuilt the snapshot (its xmin is past b now), so b2 is visible.
/// d's xid.
fn e_check_d_rebuilds_the_snapshot(
    s: &mut Scenario,
    slot: &str,
    (t1, t2): (&str, &str),
    rx: &mut Vec<Option<u64>>,
) -> u64 {
    let mut xd = OpenXact::begin(&s.env, "pgsnap-sc-ed");
    xd.exec(&format!("ALTER TABLE {t1} ADD COLUMN d2 int"));
    rx.push(s.running_xacts(t2));
    xd.exec(&format!("INSERT INTO {t1} (id, d2) VALUES (4, 44)"));
    rx.push(s.running_xacts(t2));
    s.compare(slot, "d open with DDL");
    let d = xd.xid;
    xd.commit();
    rx.push(s.running_xacts(t2));
    let st = s.compare(slot, "d committed");
    s.check(has(&st.emitted, "commit", d), || {
        format!("test_decoding did not emit d={d}: {:?}", st.lines)
    });
    s.check(
        st.lines.iter().any(|l| l.contains("d2[integer]:44")),
        || format!("d's insert not decoded with d2: {:?}", st.lines),
    );
    let late = s.commit_one(&format!("INSERT INTO {t2} (id, b2) VALUES (8, 28)"));
    let st = s.compare(slot, "insert with b2 after d");
    s.check(
        has(&st.emitted, "commit", late) && st.lines.iter().any(|l| l.contains("b2[integer]:28")),
        || {
            format!(
                "after d's catalog change the server must decode b2: {:?}",
                st.lines
            )
        },
    );
    d
}

// ---------------------------------------------------------------------------------------
// f. two-phase transactions around slot creation, with and without two_phase
// ---------------------------------------------------------------------------------------

fn prepare(env: &Env, app: &str, sql: &str, gid: &str) -> u64 {
    let mut x = OpenXact::begin(env, app);
    x.exec(sql);
    let xid = x.xid;
    x.prepare(gid);
    xid
}

/// The prepared transactions of f1: p0 (committed) and p0r (rolled back) prepared before
/// the creation, p1 and p2 between FULL and CONSISTENT.
struct F1Xids {
    p0: u64,
    p0r: u64,
    p1: u64,
    p2: u64,
}

fn twophase_creation(tag: &'static str, two_phase: bool) {
    let Some(mut s) = Scenario::start(tag) else {
        return;
    };
    let p = if two_phase {
        "pgsnap_sc_f2pc"
    } else {
        "pgsnap_sc_fplain"
    };
    let slot = p.to_string();
    let tab = format!("{p}_tab");
    let gids: Vec<String> = ["p0", "p0r", "p1", "p2"]
        .iter()
        .map(|g| format!("{p}_{g}"))
        .collect();
    let _slot = SlotGuard::new(&s.env, &slot);
    let _t = s.tables(&[&tab], &format!("CREATE TABLE {tab} (id int)"));
    let _prep = s.prepared(&gids.iter().map(String::as_str).collect::<Vec<_>>());
    let ins = |v: i32| format!("INSERT INTO {tab} VALUES ({v})");

    let F1Xids { p0, p0r, p1, p2 } =
        creation_around_prepared(&mut s, &slot, &gids, &ins, two_phase);
    let after = s.commit_one(&ins(6));
    let st = s.compare(&slot, "created, p1 and p2 prepared");
    s.check(has(&st.emitted, "commit", after), || {
        format!("test_decoding did not emit {after}: {:?}", st.lines)
    });
    s.check(
        !st.emitted
            .iter()
            .any(|(_, x)| [p0, p0r, p1, p2].contains(x)),
        || {
            format!(
                "nothing of the prepared transactions is emitted before they end: {:?}",
                st.lines
            )
        },
    );
    s.c.batch_execute(&format!("COMMIT PREPARED '{}'", gids[2]))
        .unwrap();
    s.c.batch_execute(&format!("ROLLBACK PREPARED '{}'", gids[3]))
        .unwrap();
    let st = s.compare(&slot, "p1 committed, p2 rolled back");
    if two_phase {
        s.check(
            has(&st.emitted, "prepare", p1) && has(&st.emitted, "commit_prepared", p1),
            || {
                format!(
                    "p1={p1} (prepared before the consistent point) must come whole at COMMIT PREPARED: {:?}",
                    st.lines
                )
            },
        );
    } else {
        s.check(has(&st.emitted, "commit", p1), || {
            format!("p1={p1} must be decoded as a commit: {:?}", st.lines)
        });
    }
    s.check(
        !st.emitted.iter().any(|(_, x)| *x == p0 || *x == p0r),
        || format!("p0/p0r ended before the consistent point: {:?}", st.lines),
    );
    s.finish(&format!(
        "two_phase {two_phase} p0={p0} p0r={p0r} (ended during creation) p1={p1} (committed) p2={p2} (rolled back) emitted at the end {:?}",
        st.emitted
    ));
}

/// The creation of `slot` around prepared transactions: p0 and p0r prepared before it
/// starts (it waits for them too) and ended while it waits; p1 and p2 prepared between
/// FULL and CONSISTENT. The creation is checked.
fn creation_around_prepared(
    s: &mut Scenario,
    slot: &str,
    gids: &[String],
    ins: &dyn Fn(i32) -> String,
    two_phase: bool,
) -> F1Xids {
    s.wait_quiet();
    let mut x2 = OpenXact::begin(&s.env, "pgsnap-sc-f-x2");
    let p0 = prepare(&s.env, "pgsnap-sc-f-p0", &ins(1), &gids[0]);
    let p0r = prepare(&s.env, "pgsnap-sc-f-p0r", &ins(2), &gids[1]);
    let off = log_offset(&s.env);
    let cr = Creation::start_with(&s.env, slot, "test_decoding", two_phase);
    let pid = cr.pid;
    wait_for("the creation to wait (c-1)", WAIT, || {
        [x2.xid, p0, p0r]
            .iter()
            .any(|x| waits_for_xid(&mut s.c, pid, *x))
    });
    let mut x3 = OpenXact::begin(&s.env, "pgsnap-sc-f-x3");
    x3.exec("SELECT 1");
    let x3id = x3.xid;
    x2.exec(&ins(3));
    x2.commit();
    s.c.batch_execute(&format!("COMMIT PREPARED '{}'", gids[0]))
        .unwrap();
    s.c.batch_execute(&format!("ROLLBACK PREPARED '{}'", gids[1]))
        .unwrap();
    wait_for("the creation to wait for x3 (c-2)", WAIT, || {
        waits_for_xid(&mut s.c, pid, x3id)
    });
    // prepared between FULL and CONSISTENT
    let p1 = prepare(&s.env, "pgsnap-sc-f-p1", &ins(4), &gids[2]);
    let p2 = prepare(&s.env, "pgsnap-sc-f-p2", &ins(5), &gids[3]);
    x3.commit();
    let ret = cr.wait(CREATE_TIMEOUT);
    s.check_creation(slot, pid, ret, off);
    F1Xids { p0, p0r, p1, p2 }
}

#[test]
fn f1_prepared_around_creation_plain_slot() {
    twophase_creation("f1_prepared_around_creation_plain_slot", false);
}

#[test]
fn f1_prepared_around_creation_two_phase_slot() {
    twophase_creation("f1_prepared_around_creation_two_phase_slot", true);
}

/// The gids of f2 (all under `pgsnap_sc_f2_`).
struct F2Gids {
    rs: String,
    dec: String,
    rb: String,
    nd: String,
    lock: String,
}

/// The xids of f2's prepared transactions.
struct F2Xids {
    rs: u64,
    dec: u64,
    rb: u64,
    nd: u64,
    lock: u64,
}

#[test]
fn f2_prepared_after_creation() {
    let Some(mut s) = Scenario::start("f2_prepared_after_creation") else {
        return;
    };
    let (plain, tpc) = ("pgsnap_sc_f2_plain", "pgsnap_sc_f2_2pc");
    let (tab, lck, rbt) = ("pgsnap_sc_f2_tab", "pgsnap_sc_f2_lock", "pgsnap_sc_f2_rbt");
    let g = |n: &str| format!("pgsnap_sc_f2_{n}");
    let gids = F2Gids {
        rs: g("restart"),
        dec: g("dec"),
        rb: g("rb"),
        nd: g("x_nodecode"),
        lock: g("lock"),
    };
    let _s1 = SlotGuard::new(&s.env, plain);
    let _s2 = SlotGuard::new(&s.env, tpc);
    let _t = s.tables(
        &[tab, lck, rbt],
        &format!(
            "CREATE TABLE {tab} (id int); CREATE TABLE {rbt} (id int); \
             CREATE TABLE {lck} (id int primary key); INSERT INTO {lck} VALUES (1), (2)"
        ),
    );
    let _prep = s.prepared(&[&gids.rs, &gids.dec, &gids.rb, &gids.nd, &gids.lock]);
    s.create_checked(plain, false);
    s.create_checked(tpc, true);
    let slots = [plain, tpc];

    let x = f2_prepare_all(&mut s, slots, (tab, lck, rbt), &gids);
    for (gid, commit) in [
        (&gids.rs, true),
        (&gids.dec, true),
        (&gids.rb, false),
        (&gids.nd, true),
        (&gids.lock, true),
    ] {
        let verb = if commit { "COMMIT" } else { "ROLLBACK" };
        s.c.batch_execute(&format!("{verb} PREPARED '{gid}'"))
            .unwrap();
    }
    let after = s.commit_one(&format!("INSERT INTO {tab} VALUES (5)"));
    let mut summary = Vec::new();
    for sl in slots {
        let st = s.compare(sl, "all ended");
        s.check(has(&st.emitted, "commit", after), || {
            format!("{sl}: test_decoding did not emit {after}: {:?}", st.lines)
        });
        // what the server did, for the record
        summary.push(format!("{sl}: {:?}", st.emitted));
        f2_check_all_ended(&mut s, &st, sl == tpc, &x, &gids);
    }
    s.finish(&format!(
        "restart={} dec={} rb={} nodecode={} lock={} emitted at the end: {}",
        x.rs,
        x.dec,
        x.rb,
        x.nd,
        x.lock,
        summary.join("; ")
    ));
}

/// rs is prepared, decoded at PREPARE by the two_phase slot and consumed on both slots;
/// then dec, rb (with ALTER TABLE), nd (filtered by test_decoding at PREPARE) and lock
/// (only SELECT … FOR UPDATE) are prepared.
fn f2_prepare_all(
    s: &mut Scenario,
    slots: [&str; 2],
    (tab, lck, rbt): (&str, &str, &str),
    gids: &F2Gids,
) -> F2Xids {
    let rs = prepare(
        &s.env,
        "pgsnap-sc-f2-rs",
        &format!("INSERT INTO {tab} VALUES (1)"),
        &gids.rs,
    );
    for sl in slots {
        s.compare(sl, "restart: prepared");
        let out = s.get_changes(sl);
        if sl == slots[1] {
            s.check(
                out.iter()
                    .any(|l| l.starts_with(&format!("PREPARE TRANSACTION '{}'", gids.rs))),
                || {
                    format!(
                        "the two_phase slot did not decode {} at PREPARE: {out:?}",
                        gids.rs
                    )
                },
            );
        }
    }
    s.running_xacts(tab);

    let dec = prepare(
        &s.env,
        "pgsnap-sc-f2-dec",
        &format!("INSERT INTO {tab} VALUES (2)"),
        &gids.dec,
    );
    let rb = prepare(
        &s.env,
        "pgsnap-sc-f2-rb",
        &format!("INSERT INTO {rbt} VALUES (3); ALTER TABLE {rbt} ADD COLUMN rb_gone int"),
        &gids.rb,
    );
    let nd = prepare(
        &s.env,
        "pgsnap-sc-f2-nd",
        &format!("INSERT INTO {tab} VALUES (4)"),
        &gids.nd,
    );
    let lock = prepare(
        &s.env,
        "pgsnap-sc-f2-lock",
        &format!("SELECT id FROM {lck} WHERE id = 1 FOR UPDATE"),
        &gids.lock,
    );
    for sl in slots {
        s.compare(sl, "all prepared");
    }
    F2Xids {
        rs,
        dec,
        rb,
        nd,
        lock,
    }
}

/// After every prepared transaction ended: the two_phase slot sends only rs's COMMIT
/// PREPARED (its PREPARE was consumed) and nd as a plain commit; the plain slot sends
/// every committed one as a plain commit and nothing else.
fn f2_check_all_ended(s: &mut Scenario, st: &Step, two_phase: bool, x: &F2Xids, gids: &F2Gids) {
    let (rs, dec, nd) = (x.rs, x.dec, x.nd);
    if two_phase {
        s.check(
            !has(&st.emitted, "prepare", rs) && has(&st.emitted, "commit_prepared", rs),
            || {
                format!(
                    "{}'s PREPARE was consumed: after the restart only its COMMIT PREPARED is sent: {:?}",
                    gids.rs, st.lines
                )
            },
        );
        s.check(
            has(&st.emitted, "commit", nd) && !has(&st.emitted, "prepare", nd),
            || {
                format!(
                    "{} is filtered at PREPARE and decoded as a plain commit: {:?}",
                    gids.nd, st.lines
                )
            },
        );
    } else {
        s.check(
            [rs, dec, nd].iter().all(|x| has(&st.emitted, "commit", *x))
                && !st.emitted.iter().any(|(k, _)| k != "commit"),
            || {
                format!(
                    "without two_phase every prepared transaction is a plain commit: {:?}",
                    st.lines
                )
            },
        );
    }
}

/// g. A PostgreSQL crash: a ROLLBACK PREPARED decoded while a two-phase slot is being
/// created. The builder is in FULL_SNAPSHOT (waiting for b), p began after FULL, changed a
/// row, prepared and is rolled back: DecodeAbort does not skip it (aborts do not move
/// start_decoding_at, commits in FULL_SNAPSHOT do), ReorderBufferFinishPrepared calls the
/// plugin's rollback_prepared callback, and pg_create_logical_replication_slot has given the
/// context no writer: the creating backend dies of SIGSEGV and the postmaster restarts every
/// session. The replay (`snapbuild_trace_range(…, in_slot_creation => true, two_phase =>
/// true)` from the creation's starting point) must flag exactly that record.
///
/// Opt-in (`PGSNAP_CRASH_TESTS=1`): it crashes the cluster it runs on.
#[test]
fn g_rollback_prepared_during_two_phase_creation() {
    if std::env::var("PGSNAP_CRASH_TESTS").as_deref() != Ok("1") {
        println!("SKIPPED: g crashes the server; run with PGSNAP_CRASH_TESTS=1");
        return;
    }
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let t = "pgsnap_sc_g";
    let (slot, gid) = ("pgsnap_sc_g_slot", "pgsnap_sc_g_p");
    let _guard = SlotGuard::new(&env, slot);
    let _ = c.batch_execute(&format!("ROLLBACK PREPARED '{gid}'"));
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {t}; CREATE TABLE {t}(a int)"
    ))
    .unwrap();
    let mut fails = Failures::default();
    let (off, pid, px, catalog_xmin) =
        g_rollback_prepared_while_creating(&env, &mut c, (slot, gid, t), &mut fails);
    let entries = log_entries_since(&env, off);
    let crashed = entries.iter().any(|e| {
        e.message.contains(&format!(
            "(PID {pid}) was terminated by signal 11" // "server process (PID n)" up to 17, "client backend (PID n)" in 18
        ))
    });
    fails.check(crashed, || {
        format!("no '(PID {pid}) was terminated by signal 11' in the log")
    });
    let start = entries
        .iter()
        .find(|e| {
            e.pid == pid
                && e.message
                    .starts_with("logical decoding found initial starting point at ")
        })
        .and_then(|e| e.message.rsplit(' ').next().map(parse_lsn));
    let mut c = env.connect("pgsnap-sc-g");
    let Some(start) = start else {
        fails
            .0
            .push("the creation logged no initial starting point".into());
        fails.finish("g_rollback_prepared_during_two_phase_creation");
        return;
    };
    let (flagged, replayed) = g_check_replay_flags_it(&mut c, start, &catalog_xmin, px, &mut fails);
    println!(
        "pgsnap-counts: g PG{} crashed {crashed} (pid {pid}) flagged rows {flagged} replayed rows {replayed}",
        env.major
    );
    fails.finish("g_rollback_prepared_during_two_phase_creation");
}

/// a runs before the two-phase creation (BUILDING), b begins after its first
/// RUNNING_XACTS, a ends (FULL at the next record, waiting for b); p inserts, prepares and
/// is rolled back prepared; b ends: the creation must fail (the server crashes) and the
/// server come back. Returns where the server log stood before the creation, the
/// creating backend's pid, p's xid and the slot's catalog_xmin during the creation.
fn g_rollback_prepared_while_creating(
    env: &Env,
    c: &mut Client,
    (slot, gid, t): (&str, &str, &str),
    fails: &mut Failures,
) -> (u64, i32, u64, String) {
    // a: running before the creation, so the builder goes BUILDING first.
    let a = OpenXact::begin(env, "pgsnap-sc-ga");
    let off = log_offset(env);
    let cr = Creation::start_with(env, slot, "test_decoding", true);
    let pid = cr.pid;
    wait_for(
        "the creation to wait for a",
        Duration::from_secs(30),
        || waits_for_xid(c, pid, a.xid),
    );
    let catalog_xmin: String = c
        .query_one(
            "SELECT catalog_xmin::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap()
        .get(0);
    // b begins after the creation's first RUNNING_XACTS; a ends: FULL at the next record.
    let b = OpenXact::begin(env, "pgsnap-sc-gb");
    a.commit();
    env.log_standby_snapshot(c);
    wait_for(
        "the creation to wait for b",
        Duration::from_secs(30),
        || waits_for_xid(c, pid, b.xid),
    );
    let mut p = OpenXact::begin(env, "pgsnap-sc-gp");
    let px = p.xid;
    p.exec(&format!("INSERT INTO {t} VALUES (1)"));
    p.prepare(gid);
    c.batch_execute(&format!("ROLLBACK PREPARED '{gid}'"))
        .unwrap();
    // The creation is still waiting for b; once b ends it reads on and decodes p's
    // ROLLBACK PREPARED before the record that would make it consistent.
    drop(b);
    let created = cr.result(Duration::from_secs(60));
    fails.check(created.is_err(), || {
        format!("the creation returned {created:?}: the server did not crash")
    });
    // The postmaster restarts every session; wait for it to accept connections again.
    wait_for("the server to come back", Duration::from_secs(60), || {
        std::panic::catch_unwind(|| env.connect("pgsnap-sc-g-back")).is_ok()
    });
    (off, pid, px, catalog_xmin)
}

/// The replay from the creation's starting point with `two_phase` flags exactly p's
/// ROLLBACK PREPARED (output plugin called during slot creation, verdict `rollback
/// prepared`); without `two_phase` nothing. Returns the flagged and replayed row counts.
fn g_check_replay_flags_it(
    c: &mut Client,
    start: u64,
    catalog_xmin: &str,
    px: u64,
    fails: &mut Failures,
) -> (usize, usize) {
    let rows = trace_rows(
        json_rows(
            c,
            "SELECT * FROM snapbuild_trace_range($1::text::pg_lsn, NULL, $2::text::xid, \
             in_slot_creation => true, two_phase => true, all_records => true)",
            &[&fmt_lsn(start), &catalog_xmin],
        )
        .unwrap(),
    );
    let flagged: Vec<&TraceRow> = rows
        .iter()
        .filter(|r| {
            r.disagreement.as_deref().is_some_and(|d| {
                d.starts_with("postgres-behaviour: output plugin called during slot creation")
            })
        })
        .collect();
    fails.check(
        flagged.len() == 1
            && flagged[0].record.ends_with("ABORT_PREPARED")
            && flagged[0].xid == Some(px)
            && js(&flagged[0].raw, "verdict").as_deref() == Some("rollback prepared"),
        || {
            format!(
                "the replay must flag exactly p={px}'s ROLLBACK PREPARED; flagged: {:?}\n{}",
                flagged.iter().map(|r| r.show()).collect::<Vec<_>>(),
                dump(&rows)
            )
        },
    );
    // The same WAL decoded as a slot without two_phase calls no callback there.
    let plain = trace_rows(
        json_rows(
            c,
            "SELECT * FROM snapbuild_trace_range($1::text::pg_lsn, NULL, $2::text::xid, in_slot_creation => true)",
            &[&fmt_lsn(start), &catalog_xmin],
        )
        .unwrap(),
    );
    fails.check(plain.iter().all(|r| r.disagreement.is_none()), || {
        format!(
            "without two_phase nothing may be flagged:\n{}",
            dump(&plain)
        )
    });
    (flagged.len(), rows.len())
}
