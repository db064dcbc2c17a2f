//! What ends or holds a logical slot on a hot standby (PostgreSQL 16+), as the diagnosis,
//! the health view and the trace there say, against the standby's own log, slot catalog
//! and WAL:
//!
//! - st6: a recovery conflict (without hot_standby_feedback the primary's VACUUM removes
//!   catalog rows the slot needs) invalidates the standby's slot (`rows_removed`): the
//!   diagnosis is that one `invalidated` row, the health view says `invalidated`, and the
//!   trace ends at the record the standby's log line names in its CONTEXT, with its DETAIL.
//! - st7: the primary restarted with `wal_level = replica` invalidates it
//!   (`wal_level_insufficient`) at the PARAMETER_CHANGE record, checked the same way.
//! - st11: a transaction of the primary holds the standby's slot: the diagnosis names it as
//!   running on the primary, the query in its remedy, run on the primary, finds the
//!   session, and ending it (then a RUNNING_XACTS and a confirm) moves the slot as the
//!   forecast says.
//! - st12: st11 on a cascading standby (PostgreSQL 18).
//!
//! The standby is made from the test cluster with `pg_basebackup -R` ([`Env::standby`]);
//! transactions and RUNNING_XACTS records come from the primary. On 14 and 15 (no decoding
//! on a standby) the tests print `SKIPPED:` with the reason.

use pg_snapbuild_tests::*;
// The standby tests wait longer than the others (see STANDBY_WAIT).
use pg_snapbuild_tests::STANDBY_WAIT as WAIT;
use postgres::Client;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// st6: a slot on the standby invalidated by a recovery conflict (rows_removed)
// ---------------------------------------------------------------------------------------

#[test]
fn st6_conflict_rows_removed_invalidates_the_standby_slot() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_on_standby("st6") else {
        return;
    };
    let slot = "pgsnap_st6";
    let _guard = SlotGuard::new(&sb.env, slot);
    // Without feedback the primary's VACUUM removes catalog rows the slot still needs.
    let _feedback_off = sb.env.set_reloaded("hot_standby_feedback", "off");
    sb.wait_replayed(&mut pc);
    create_on_standby(&env, &sb, &mut pc, slot);
    let catalog_xmin = server_slot(&mut sc, slot).catalog_xmin;
    let off = log_offset(&sb.env);
    pc.batch_execute("CREATE TABLE pgsnap_st6_x (id int)")
        .unwrap();
    pc.batch_execute("DROP TABLE pgsnap_st6_x").unwrap();
    pc.batch_execute("VACUUM pg_class").unwrap();
    sb.wait_replayed(&mut pc);
    let reason_sql = if env.major >= 17 {
        "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1"
    } else {
        "SELECT CASE WHEN conflicting THEN 'rows_removed' END FROM pg_replication_slots WHERE slot_name = $1"
    };
    let mut reason: Option<String> = None;
    wait_for("the standby to invalidate the slot", WAIT, || {
        reason = sc.query_one(reason_sql, &[&slot]).unwrap().get(0);
        reason.is_some()
    });
    let reason = reason.unwrap();
    assert_eq!(reason, "rows_removed", "the standby's reason");
    let d = diagnosis(&mut sc, slot);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].0, "invalidated");
    assert!(d[0].2.contains(&reason), "{}", d[0].2);
    let state: String = sc
        .query_one(
            "SELECT state FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(state, "invalidated");
    // WAL after the invalidation: the trace must not read past the record.
    env.log_standby_snapshot(&mut pc);
    let after = sb.wait_replayed(&mut pc);
    let rows = trace_ok(&mut sc, slot);
    let start = rows[0].message.clone().unwrap_or_default();
    assert!(
        start.contains(&format!("the slot is invalidated ({reason})")),
        "REPLAY START names the invalidation: {start}"
    );
    // The server's own line: which replayed record invalidated it.
    let (logged_detail, redo) = logged_invalidation(&sb.env, off, slot)
        .unwrap_or_else(|| panic!("the standby logged no invalidation of {slot}"));
    let (redo_lsn, redo_name) =
        redo.unwrap_or_else(|| panic!("no WAL redo CONTEXT with the invalidation line"));
    let last = check_invalidation_row(&mut sc, &rows, redo_lsn, &redo_name, &logged_detail, after);
    println!(
        "pgsnap-counts: st6 PG{} catalog_xmin {catalog_xmin:?} invalidated: {reason}; diagnosis rows {}; server log: redo at {} for {redo_name} ({logged_detail:?}); trace row {} {} agrees {:?} ({}); trace rows {}",
        env.major,
        d.len(),
        fmt_lsn(redo_lsn),
        fmt_lsn(last.lsn.unwrap()),
        last.record,
        last.agrees,
        last.raw.get("server_source").and_then(|v| v.as_str()).unwrap_or(""),
        rows.len()
    );
    pc.batch_execute("SELECT 1").unwrap();
}

/// The trace of a slot the standby invalidated ends with one `invalidated` row at the
/// record the standby's log names in its CONTEXT (`redo_lsn`, `redo_name`), with the
/// standby's DETAIL, judged `agrees = true` from that line; pg_walinspect on the standby
/// names the same record there; no row follows although WAL up to `after` was replayed.
fn check_invalidation_row<'a>(
    sc: &mut Client,
    rows: &'a [TraceRow],
    redo_lsn: u64,
    redo_name: &str,
    logged_detail: &Option<String>,
    after: u64,
) -> &'a TraceRow {
    let last = rows.last().unwrap();
    assert_eq!(
        last.branch.as_deref(),
        Some("invalidated"),
        "the trace ends at the invalidation:\n{}",
        dump(rows)
    );
    assert_eq!(
        rows.iter()
            .filter(|r| r.branch.as_deref() == Some("invalidated"))
            .count(),
        1
    );
    assert_eq!(
        last.lsn,
        Some(redo_lsn),
        "the row is at the record the standby names (CONTEXT: WAL redo at {} for {redo_name}):\n{}",
        fmt_lsn(redo_lsn),
        dump(rows)
    );
    assert_eq!(last.record, redo_name, "{}", dump(rows));
    assert_eq!(&last.detail, logged_detail, "the standby's DETAIL");
    assert_eq!(last.agrees, Some(true), "{}", dump(rows));
    assert!(
        last.end_lsn.unwrap() < after,
        "WAL past the invalidation was replayed"
    );
    let (rm, ty): (String, String) = sc
        .query_one(
            "SELECT resource_manager, record_type FROM pg_get_wal_record_info($1::text::pg_lsn)",
            &[&fmt_lsn(redo_lsn)],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(
        format!("{rm}/{ty}"),
        redo_name,
        "pg_walinspect on the standby"
    );
    // The diagnosis names the same record.
    let slot: String = sc
        .query_one(
            "SELECT slot_name::text FROM pg_replication_slots WHERE conflicting",
            &[],
        )
        .unwrap()
        .get(0);
    let d = diagnosis(sc, &slot);
    let want = format!(
        "the standby invalidated it while redoing the record at {} ({redo_name})",
        fmt_lsn(redo_lsn)
    );
    assert!(d[0].2.contains(&want), "{want}: {}", d[0].2);
    last
}

// ---------------------------------------------------------------------------------------
// st7: the primary restarts with wal_level = replica: the standby's slot is invalidated
// (wal_level_insufficient) at the PARAMETER_CHANGE record
// ---------------------------------------------------------------------------------------

/// Puts the primary's wal_level back (ALTER SYSTEM RESET, restart), also on panic.
struct WalLevelReset<'a>(&'a Env);

impl Drop for WalLevelReset<'_> {
    fn drop(&mut self) {
        let mut c = self.0.connect("pgsnap-st7-reset");
        let _ = c.batch_execute("ALTER SYSTEM RESET wal_level");
        drop(c);
        let _ = self.0.restart(false);
    }
}

/// The standby's reason for an invalidated slot (16 shows only `conflicting`; its reason
/// is then read from the standby's log DETAIL by the caller).
fn invalidation_reason(env: &Env, sc: &mut Client, slot: &str) -> Option<String> {
    let sql = if env.major >= 17 {
        "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1"
    } else {
        "SELECT CASE WHEN conflicting THEN 'conflicting' END FROM pg_replication_slots WHERE slot_name = $1"
    };
    sc.query_one(sql, &[&slot]).unwrap().get(0)
}

#[test]
fn st7_wal_level_insufficient_invalidates_the_standby_slot() {
    let Some((_g, env, mut pc, sb, sc)) = start_on_standby("st7") else {
        return;
    };
    let slot = "pgsnap_st7";
    let _guard = SlotGuard::new(&sb.env, slot);
    sb.wait_replayed(&mut pc);
    create_on_standby(&env, &sb, &mut pc, slot);
    // A primary with wal_level replica refuses to start with logical slots of its own.
    pc.batch_execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE slot_type = 'logical' AND NOT active",
    )
    .unwrap();
    let off = log_offset(&sb.env);
    pc.batch_execute("ALTER SYSTEM SET wal_level = replica")
        .unwrap();
    drop(pc);
    let reset = WalLevelReset(&env);
    env.restart(false)
        .expect("restarting the primary with wal_level = replica");
    let mut reason: Option<String> = None;
    wait_for(
        "the standby to invalidate the slot",
        Duration::from_secs(60),
        || {
            reason = sb
                .try_connect()
                .and_then(|mut c| invalidation_reason(&env, &mut c, slot));
            reason.is_some()
        },
    );
    // wal_level back to logical: a second PARAMETER_CHANGE the trace must not reach.
    drop(reset);
    let mut pc = env.connect("pgsnap-st7");
    let level: String = pc.query_one("SHOW wal_level", &[]).unwrap().get(0);
    assert_eq!(level, "logical");
    let after = sb.wait_replayed(&mut pc);
    let mut sc2 = sb.connect("pgsnap-st7b");
    let (logged_detail, redo) = logged_invalidation(&sb.env, off, slot)
        .unwrap_or_else(|| panic!("the standby logged no invalidation of {slot}"));
    let (redo_lsn, redo_name) =
        redo.unwrap_or_else(|| panic!("no WAL redo CONTEXT with the invalidation line"));
    assert_eq!(redo_name, "XLOG/PARAMETER_CHANGE");
    assert!(
        logged_detail.as_deref().unwrap_or("").contains("wal_level"),
        "{logged_detail:?}"
    );
    let reason = reason.unwrap();
    if env.major >= 17 {
        assert_eq!(reason, "wal_level_insufficient");
    }
    // The diagnosis and the health view name the reason the server keeps.
    let d = diagnosis(&mut sc2, slot);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].0, "invalidated");
    assert!(d[0].2.contains("wal_level_insufficient"), "{}", d[0].2);
    let rows = trace_ok(&mut sc2, slot);
    let start = rows[0].message.clone().unwrap_or_default();
    assert!(
        start.contains("the slot is invalidated (wal_level_insufficient)"),
        "REPLAY START names the invalidation: {start}"
    );
    let last = check_invalidation_row(&mut sc2, &rows, redo_lsn, &redo_name, &logged_detail, after);
    println!(
        "pgsnap-counts: st7 PG{} invalidated: {reason}; server log: redo at {} for {redo_name} ({logged_detail:?}); trace row {} {} agrees {:?} ({}); trace rows {}",
        env.major,
        fmt_lsn(redo_lsn),
        fmt_lsn(last.lsn.unwrap()),
        last.record,
        last.agrees,
        last.raw.get("server_source").and_then(|v| v.as_str()).unwrap_or(""),
        rows.len()
    );
    drop(sc);
}

// ---------------------------------------------------------------------------------------
// st11 / st12: a transaction of the primary holds a slot of a standby (st12: of a
// cascading standby); the diagnosis there names it as running on the primary, its query
// run on the primary finds the session, and ending it (then a RUNNING_XACTS and a
// confirm) moves the slot as the forecast says
// ---------------------------------------------------------------------------------------

fn held_by_a_primary_transaction(
    test: &str,
    where_: &str,
    env: &Env,
    pc: &mut Client,
    node: &Standby,
    nc: &mut Client,
) {
    let slot = &format!("pgsnap_{test}");
    let t = &format!("pgsnap_{test}_t");
    let _guard = SlotGuard::new(&node.env, slot);
    pc.batch_execute(&format!(
        "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int)"
    ))
    .unwrap();
    node.wait_replayed(pc);
    create_on_standby(env, node, pc, slot);
    // A RUNNING_XACTS on the primary, replayed here, then the consumer here confirms.
    let round = |pc: &mut Client, nc: &mut Client, v: &str| {
        env.log_standby_snapshot_flushed(pc, t, v);
        node.wait_replayed(pc);
        consume_changes(nc, slot);
    };
    for _ in 0..3 {
        round(pc, nc, "0");
    }
    let mut x = OpenXact::begin(env, &format!("pgsnap-{test}-x"));
    x.exec(&format!("INSERT INTO {t} VALUES (1)"));
    for _ in 0..3 {
        round(pc, nc, "0");
    }
    // What the server itself says of x on this node.
    assert_eq!(
        xact_status(nc, x.xid),
        "in progress",
        "pg_xact_status on the {where_}"
    );
    let d = diag_rows(nc, slot);
    assert_no_zero_lsn(&d);
    let held: Vec<&DiagRow> = d.iter().filter(|r| r.kind == "restart_lsn held").collect();
    assert_eq!(held.len(), 1, "{d:#?}");
    let h = held[0];
    assert_eq!(h.xid, Some(xid32(x.xid)), "{d:#?}");
    assert!(
        h.finding.contains("running on the primary") && !h.finding.contains("no longer running"),
        "x runs on the primary: {}",
        h.finding
    );
    let mut pids_found = 0;
    for r in d
        .iter()
        .filter(|r| matches!(r.kind.as_str(), "restart_lsn held" | "catalog_xmin held"))
        .filter(|r| r.xid == Some(xid32(x.xid)))
    {
        assert!(
            r.finding.contains("running on the primary"),
            "{}",
            r.finding
        );
        let remedy = r.remedy.as_deref().unwrap();
        assert_eq!(
            pid_by_remedy(pc, remedy),
            Some(x.pid),
            "the remedy's query, run on the primary, finds x's session: {remedy}"
        );
        pids_found += 1;
    }
    let fc: Vec<&DiagRow> = d
        .iter()
        .filter(|r| r.kind == "forecast" && r.xid == Some(xid32(x.xid)))
        .collect();
    assert_eq!(fc.len(), 1, "one forecast for x:\n{d:#?}");
    let fc = fc[0];
    assert!(
        fc.finding
            .starts_with(&format!("when xid {} ends", xid32(x.xid))),
        "x has not ended: {}",
        fc.finding
    );
    assert!(
        fc.remedy.as_deref().unwrap().contains("on the primary"),
        "{:?}",
        fc.remedy
    );
    // The health view names no pid of this node for a transaction of the primary.
    let blocking: Option<i32> = nc
        .query_one(
            "SELECT oldest_blocking_pid FROM snapbuild_slot_health WHERE slot_name = $1",
            &[slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(blocking, None);
    let before = server_slot(nc, slot);
    let two_rounds = fc.finding.contains("next two RUNNING_XACTS");

    // The remedy: x ends on the primary, a RUNNING_XACTS is logged, the consumer confirms.
    let ended_at = x.insert_lsn();
    let x_full = x.xid;
    x.commit();
    round(pc, nc, "2");
    if two_rounds {
        round(pc, nc, "3");
    }
    assert_eq!(xact_status(nc, x_full), "committed");
    let after = server_slot(nc, slot);
    let to = flush_lsn(nc);
    let first = wal_running_xacts(nc, ended_at, to)
        .into_iter()
        .next()
        .expect("a RUNNING_XACTS after x's commit, replayed here");
    let want_restart = fc.lsn.as_deref().map(parse_lsn).unwrap_or(first.start);
    assert_eq!(
        fmt_lsn(after.restart_lsn),
        fmt_lsn(want_restart),
        "restart_lsn after x ended vs the forecast ({}); before {}",
        fc.finding,
        fmt_lsn(before.restart_lsn)
    );
    let want_catalog = fc.forecast_catalog_xmin.unwrap_or(first.oldest_running_xid);
    assert_eq!(
        after.catalog_xmin,
        Some(want_catalog),
        "catalog_xmin after x ended vs the forecast ({})",
        fc.finding
    );
    // Nothing of x is left in the diagnosis.
    let d = diag_rows(nc, slot);
    assert!(
        !d.iter().any(|r| r.xid == Some(xid32(x_full))
            && matches!(
                r.kind.as_str(),
                "restart_lsn held" | "catalog_xmin held" | "forecast"
            )),
        "{d:#?}"
    );
    println!(
        "pgsnap-counts: {test} PG{} ({where_}): x={} running per pg_xact_status and the diagnosis, {pids_found} remedy queries found its pid on the primary; after it ended restart_lsn {} -> {} and catalog_xmin {:?} -> {:?} as forecast{}",
        env.major,
        xid32(x_full),
        fmt_lsn(before.restart_lsn),
        fmt_lsn(after.restart_lsn),
        before.catalog_xmin,
        after.catalog_xmin,
        if two_rounds { " (two rounds)" } else { "" }
    );
}

#[test]
fn st11_primary_transaction_holds_a_standby_slot() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_on_standby("st11") else {
        return;
    };
    held_by_a_primary_transaction("st11", "standby", &env, &mut pc, &sb, &mut sc);
}

#[test]
fn st12_primary_transaction_holds_a_cascading_standby_slot() {
    let Some((_g, env, mut pc, sb, _sc)) = start_on_standby("st12") else {
        return;
    };
    if env.major != 18 {
        println!("SKIPPED: st12: the cascading standby's case runs on PostgreSQL 18 only");
        return;
    }
    let cs = sb.cascade();
    let mut cc = cs.connect("pgsnap-st12");
    held_by_a_primary_transaction("st12", "cascading standby", &env, &mut pc, &cs, &mut cc);
}
