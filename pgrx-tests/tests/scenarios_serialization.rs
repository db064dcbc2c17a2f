//! Named scenarios on real concurrent sessions: a catalog change before a serialization
//! point, committed after it, and decoding restarted from that point, each checked against
//! the real server ([`Scenario`]):
//!
//! - b_catalog_change_across_serialization_point: the change at top level.
//! - c_subxact_only_catalog_change_across_serialization_point: the change only inside a
//!   released subtransaction.
//! - c2_overflowed_subxact_catalog_change_across_serialization_point: the change spread
//!   over 70 subtransactions, so the subxid cache overflows and the RUNNING_XACTS at the
//!   restart point lists the top-level xid alone.
//!
//! At every step: what `test_decoding` emitted equals what the replay's decode verdicts
//! say it emits; the slot's replayed creation becomes consistent on the record ending at
//! the LSN the creation returned, with the creating backend's LOG lines; no trace row
//! disagrees with the server, and a serialize row with a `.snap` file the server wrote
//! agrees. After the restart from the serialized snapshot (branch b on both sides, the
//! server's `.snap` there or its RUNNING_XACTS knowing the change), the commit of the
//! transaction whose catalog change lies before the restart point is time travel in the
//! replay, and the server decodes the DML that follows with the new column.
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).
//! Every failure of a scenario is collected and reported at its end (`FAILURE:` lines);
//! counts are printed on `pgsnap-counts:` lines (run with --nocapture).

use pg_snapbuild_tests::*;

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
