//! Named scenarios on real concurrent sessions: two-phase transactions around slot
//! creation, with and without two_phase, each checked against the real server
//! ([`Scenario`]):
//!
//! - f1_prepared_around_creation_plain_slot / _two_phase_slot: transactions prepared
//!   before the creation (which waits for them) and between FULL and CONSISTENT, ended
//!   after it: nothing of them is emitted before they end, then the server's output with
//!   and without two_phase.
//! - f2_prepared_after_creation: transactions prepared, committed and rolled back prepared
//!   after the creation (one decoded at PREPARE and consumed, one filtered at PREPARE by
//!   test_decoding, one with only a row lock), on a plain and a two_phase slot.
//! - g_rollback_prepared_during_two_phase_creation (opt-in, `PGSNAP_CRASH_TESTS=1`: it
//!   crashes the cluster): a ROLLBACK PREPARED decoded while a two-phase slot is being
//!   created kills the creating backend; the replay flags exactly that record.
//!
//! At every step: what `test_decoding` emitted equals what the replay's decode verdicts
//! say it emits; the slots' replayed creations become consistent on the record ending at
//! the LSN the creation returned, with the creating backend's LOG lines; no trace row
//! disagrees with the server, and a serialize row with a `.snap` file the server wrote
//! agrees.
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).
//! Every failure of a scenario is collected and reported at its end (`FAILURE:` lines);
//! counts are printed on `pgsnap-counts:` lines (run with --nocapture).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::Duration;

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
    let t = "pgsnap_sc_g";
    let (slot, gid) = ("pgsnap_sc_g_slot", "pgsnap_sc_g_p");
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
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
