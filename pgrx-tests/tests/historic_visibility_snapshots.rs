//! Historic snapshots against the server: which snapshot the decoder uses, and when there
//! is one. `snapbuild_visibility` and `snapbuild_historic_snapshot` against the server's
//! own HeapTupleSatisfiesVisibility (SNAPSHOT_HISTORIC_MVCC), its WAL, test_decoding and
//! its `.snap` files.
//!
//! - h3: two statements of seed 003 the server contradicts: a HOT-updated catalog tuple
//!   and its heap-only successor get the historic verdict (the opposite of another
//!   session's MVCC snapshot), and the historic xmin is the oldestRunningXid of the last
//!   RUNNING_XACTS before the build, not the slot's catalog_xmin (test_decoding decodes a
//!   column a snapshot with that xmin would hide).
//! - h4: no historic snapshot while the creating builder waits in BUILDING (55000), at
//!   restart_lsn (START) or before it (22023); refused relations (an index, a temporary
//!   table); `snapbuild_historic_snapshot_from_file` of every `.snap` file the server
//!   writes is the file's xmin, xmax and committed xids (and on 18
//!   `pg_get_logical_snapshot_info`'s).
//!
//! Every scan must agree on 100% of its tuples; the tests print `pgsnap-counts:` lines with
//! the tuple counts per branch (run with --nocapture).
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// h3: two statements of seed 003 the server contradicts
// ---------------------------------------------------------------------------------------

/// Seed 003 says HOT-updated tuples go to plain MVCC and that the historic snapshot's
/// xmin is the slot's initial xmin horizon. The server does neither: a HOT-updated
/// catalog tuple gets the historic verdict (the opposite of what an MVCC snapshot of
/// another session says), and the decoder sees catalog rows that a snapshot with the
/// slot's catalog_xmin as xmin would hide.
#[test]
fn h3_seed_003_hot_chains_and_historic_xmin() {
    let Some((_g, env, mut c)) = start_with_pageinspect() else {
        return;
    };
    let test = "h3";
    let slot = "pgsnap_h3";
    let _guard = SlotGuard::new(&env, slot);
    c.batch_execute(
        "DROP TABLE IF EXISTS pgsnap_h3_u, pgsnap_h3_d, pgsnap_h3_cat;
         CREATE TABLE pgsnap_h3_cat (a int, b int) WITH (user_catalog_table = true, autovacuum_enabled = false);
         INSERT INTO pgsnap_h3_cat VALUES (1, 0);",
    )
    .unwrap();
    create_slot(&env, slot);
    let mut counts = Counts::default();
    let mut fails = Failures::default();
    let horizon = server_slot(&mut c, slot)
        .catalog_xmin
        .expect("catalog_xmin");
    let (s, c2x) = h3_historic_xmin_from_the_wal(&env, &mut c, &mut fails, slot, horizon);
    h3_column_hidden_by_the_slots_horizon(&mut c, &mut counts, &mut fails, slot, &s, c2x, horizon);
    let hot_pairs = h3_hot_chains(&env, &mut c, &mut counts, &mut fails, slot);
    println!(
        "pgsnap-counts: {test} PG{} historic xmin {} slot catalog_xmin {horizon} HOT pairs checked {hot_pairs}",
        env.major, s.xmin
    );
    c.batch_execute("DROP TABLE IF EXISTS pgsnap_h3_u, pgsnap_h3_d, pgsnap_h3_cat")
        .unwrap();
    counts.finish(test, env.major, fails);
}

/// C2 commits a table's new column after the slot's `horizon`; the builder's xmin moves
/// past it at the next RUNNING_XACTS and the next catalog commit builds the snapshot
/// with it. That snapshot's xmin is not the slot's catalog_xmin but the oldestRunningXid
/// of the last RUNNING_XACTS before the build (WAL). Returns the snapshot and C2's xid.
fn h3_historic_xmin_from_the_wal(
    env: &Env,
    c: &mut Client,
    fails: &mut Failures,
    slot: &str,
    horizon: u64,
) -> (Snap, u64) {
    c.batch_execute("CREATE TABLE pgsnap_h3_u (a int)").unwrap();
    let mut c2 = OpenXact::begin(env, "pgsnap-h3-c2");
    let c2x = c2.xid;
    c2.exec("ALTER TABLE pgsnap_h3_u ADD COLUMN b int");
    c2.commit();
    // (C2 is purged from the committed list once xmin passes it.)
    let mut s = snapshot(c, slot, None, None);
    for _ in 0..10 {
        env.log_standby_snapshot(c);
        c.batch_execute("DROP TABLE IF EXISTS pgsnap_h3_d; CREATE TABLE pgsnap_h3_d (a int)")
            .unwrap();
        s = snapshot(c, slot, None, None);
        if s.xmin > c2x {
            break;
        }
    }
    c.batch_execute("INSERT INTO pgsnap_h3_u VALUES (1, 2)")
        .unwrap();
    fails.check(
        s.xmin > c2x && !s.xip.contains(&c2x) && horizon <= c2x,
        || format!("snapshot {s:?}, C2 {c2x}, slot catalog_xmin {horizon}"),
    );
    fails.check(s.xmin != horizon, || {
        format!("historic xmin {} equals the slot's catalog_xmin", s.xmin)
    });
    let built_at = s.built_at.expect("built_at");
    let ss = server_slot(c, slot);
    let rx = wal_running_xacts(c, ss.restart_lsn, built_at);
    let last = rx.last().expect("a RUNNING_XACTS record before the build");
    fails.check(last.oldest_running_xid == s.xmin, || {
        format!(
            "historic xmin {} vs oldestRunningXid {} of RUNNING_XACTS at {}",
            s.xmin,
            last.oldest_running_xid,
            fmt_lsn(last.start)
        )
    });
    (s, c2x)
}

/// Column b's pg_attribute row: visible under the real snapshot `s`, hidden under one
/// whose xmin is the slot's `horizon` (`snapbuild_historic_visible`); test_decoding
/// decoded column b.
fn h3_column_hidden_by_the_slots_horizon(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    slot: &str,
    s: &Snap,
    c2x: u64,
    horizon: u64,
) {
    let ctid: String = c
        .query_one(
            "SELECT ctid::text FROM pg_attribute WHERE attrelid = 'pgsnap_h3_u'::regclass AND attname = 'b'",
            &[],
        )
        .unwrap()
        .get(0);
    let t = counts.scan(c, "pg_attribute", slot, None, None);
    let row = t.iter().find(|t| t.ctid == ctid).expect("column b's row");
    fails.check(row.server && row.rust && row.xmin == c2x, || {
        format!("column b: {row:?}")
    });
    let mask = infomask_of(c, "pg_attribute", &ctid);
    let xip_text = format!(
        "{{{}}}",
        s.xip
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let r = c
        .query_one(
            "SELECT visible, branch FROM snapbuild_historic_visible($1::text::xid, '0', $2, NULL, $3::text::xid, $4::text::xid, $5::text::xid[])",
            &[&c2x.to_string(), &mask, &horizon.to_string(), &s.xmax.to_string(), &xip_text],
        )
        .unwrap();
    let (vis, branch): (bool, String) = (r.get(0), r.get(1));
    fails.check(!vis, || {
        format!("with xmin = the slot's catalog_xmin {horizon}, column b would be {vis} ({branch})")
    });
    // The decoder saw column b.
    let out = slot_changes(c, slot, false);
    fails.check(
        out.iter()
            .any(|l| l.contains("table public.pgsnap_h3_u: INSERT: a[integer]:1 b[integer]:2")),
        || format!("test_decoding output:\n{}", out.join("\n")),
    );
}

/// HOT: E updates a catalog row in place (a heap-only successor on the same page). The
/// HOT-updated tuple gets the historic verdict (invisible, MVCC: visible) and its
/// heap-only successor too (visible, MVCC: invisible). Returns the pairs checked.
fn h3_hot_chains(
    env: &Env,
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    slot: &str,
) -> usize {
    let mut e = OpenXact::begin(env, "pgsnap-h3-e");
    e.exec("ALTER TABLE pgsnap_h3_u ADD COLUMN c int; UPDATE pgsnap_h3_cat SET b = 1 WHERE a = 1");
    flush_wal(c);
    let mut hot_pairs = 0;
    for rel in ["pgsnap_h3_cat", "pg_class"] {
        let t = counts.scan(c, rel, slot, None, Some(e.xid));
        for old in t
            .iter()
            .filter(|t| t.xmax == e.xid && t.has("HEAP_HOT_UPDATED"))
        {
            let new = t
                .iter()
                .find(|n| n.xmin == e.xid && n.has("HEAP_ONLY_TUPLE"));
            let mvcc = |c: &mut Client, ctid: &str| -> bool {
                c.query_one(
                    &format!("SELECT count(*) = 1 FROM {rel} WHERE ctid = $1::text::tid"),
                    &[&ctid],
                )
                .unwrap()
                .get(0)
            };
            let old_mvcc = mvcc(c, &old.ctid);
            fails.check(!old.server && old_mvcc, || {
                format!(
                    "{rel} HOT-updated {}: historic (server) {} vs MVCC {old_mvcc}",
                    old.ctid, old.server
                )
            });
            if let Some(n) = new {
                let new_mvcc = mvcc(c, &n.ctid);
                fails.check(n.server && !new_mvcc, || {
                    format!(
                        "{rel} heap-only {}: historic (server) {} vs MVCC {new_mvcc}",
                        n.ctid, n.server
                    )
                });
            }
            hot_pairs += 1;
        }
    }
    fails.check(hot_pairs >= 1, || {
        "no HOT-updated catalog tuple found".into()
    });
    e.rollback();
    hot_pairs
}

/// t_infomask of one tuple, read with pageinspect.
fn infomask_of(c: &mut Client, rel: &str, ctid: &str) -> i32 {
    let (blk, off) = ctid
        .trim_matches(|ch| ch == '(' || ch == ')')
        .split_once(',')
        .unwrap();
    let r = c
        .query_one(
            &format!(
                "SELECT t_infomask::int FROM heap_page_items(get_raw_page('{rel}', {blk})) WHERE lp = {off}"
            ),
            &[],
        )
        .unwrap();
    r.get(0)
}

// ---------------------------------------------------------------------------------------
// h4: no historic snapshot before FULL_SNAPSHOT; snapshots from .snap files
// ---------------------------------------------------------------------------------------

#[test]
fn h4_no_snapshot_before_full_and_snapshots_from_files() {
    let Some((_g, env, mut c)) = start_with_pageinspect() else {
        return;
    };
    let test = "h4";
    let slot = "pgsnap_h4";
    let tab = "pgsnap_h4_tab";
    let _guard = SlotGuard::new(&env, slot);
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {tab}; CREATE TABLE {tab} (a int)"
    ))
    .unwrap();
    let mut fails = Failures::default();
    h4_no_snapshot_while_building(&env, &mut c, &mut fails, slot);
    h4_refused_relations(&mut c, &mut fails, slot, tab);
    h4_no_snapshot_at_or_before_restart_lsn(&mut c, &mut fails, slot);
    // .snap files the server writes: the snapshot SnapBuildRestore would build from each.
    c.batch_execute(&format!("CREATE TABLE {tab}_2 (a int); DROP TABLE {tab}_2"))
        .unwrap();
    let files = produce_snap_files(&env, &mut c, slot, tab);
    let mut compared = 0;
    for name in files.keys() {
        h4_snapshot_from_file(&env, &mut c, &mut fails, name);
        compared += 1;
    }
    // After consuming, the replay starts at a .snap file (branch b): the snapshot comes
    // from that file until a catalog commit rebuilds it.
    let ss = server_slot(&mut c, slot);
    let s = snapshot(&mut c, slot, None, None);
    let mut counts = Counts::default();
    counts.scan(&mut c, "pg_class", slot, None, None);
    println!(
        "pgsnap-counts: {test} PG{} snap files compared {compared} restart_lsn {} snapshot source: {}",
        env.major,
        fmt_lsn(ss.restart_lsn),
        s.source
    );
    counts.finish(test, env.major, fails);
}

/// A transaction open while the slot is created: the builder waits in BUILDING, and
/// neither a historic snapshot nor a scan is possible (55000).
fn h4_no_snapshot_while_building(env: &Env, c: &mut Client, fails: &mut Failures, slot: &str) {
    let h = OpenXact::begin(env, "pgsnap-h4-h");
    let cr = Creation::start(env, slot, "test_decoding");
    wait_for("creation to wait for h", Duration::from_secs(30), || {
        waits_for_xid(c, cr.pid, h.xid)
    });
    for sql in [
        "SELECT * FROM snapbuild_historic_snapshot($1::text::name)",
        "SELECT count(*) FROM snapbuild_visibility('pg_class', $1::text::name)",
    ] {
        let e = c
            .query(sql, &[&slot])
            .expect_err("no historic snapshot during BUILDING");
        let (code, msg) = db_err(&e);
        fails.check(
            code == "55000" && msg.contains("state \"building\""),
            || format!("{sql}: {code} {msg}"),
        );
    }
    h.commit();
    cr.wait(Duration::from_secs(90));
}

/// Relations without heap pages to judge (an index: 42809), and temporary ones (0A000).
fn h4_refused_relations(c: &mut Client, fails: &mut Failures, slot: &str, tab: &str) {
    c.batch_execute(&format!(
        "CREATE INDEX IF NOT EXISTS {tab}_i ON {tab} (a); CREATE TEMP TABLE {tab}_tmp (a int)"
    ))
    .unwrap();
    for (rel, want) in [
        (format!("{tab}_i"), "42809"),
        (format!("{tab}_tmp"), "0A000"),
    ] {
        let e = c
            .query(
                "SELECT * FROM snapbuild_visibility($1::text::regclass, $2::text::name)",
                &[&rel, &slot],
            )
            .expect_err("refused relation");
        fails.check(db_err(&e).0 == want, || format!("{rel}: {:?}", db_err(&e)));
    }
}

/// At restart_lsn nothing is replayed yet (START: 55000); before it, 22023.
fn h4_no_snapshot_at_or_before_restart_lsn(c: &mut Client, fails: &mut Failures, slot: &str) {
    let ss = server_slot(c, slot);
    let e = c
        .query(
            "SELECT * FROM snapbuild_historic_snapshot($1::text::name, $2::text::pg_lsn)",
            &[&slot, &fmt_lsn(ss.restart_lsn)],
        )
        .expect_err("no snapshot at restart_lsn");
    let (code, msg) = db_err(&e);
    fails.check(code == "55000" && msg.contains("state \"start\""), || {
        format!("{code} {msg}")
    });
    let e = c
        .query(
            "SELECT * FROM snapbuild_historic_snapshot($1::text::name, $2::text::pg_lsn)",
            &[&slot, &fmt_lsn(ss.restart_lsn - 1)],
        )
        .expect_err("before restart_lsn");
    fails.check(db_err(&e).0 == "22023", || format!("{:?}", db_err(&e)));
}

/// `snapbuild_historic_snapshot_from_file` of a server-written file: the file's xmin,
/// xmax and sorted committed xids as xip, no subxip, the file's LSN; on 18 the same as
/// `pg_get_logical_snapshot_info`.
fn h4_snapshot_from_file(env: &Env, c: &mut Client, fails: &mut Failures, name: &String) {
    let ours = json_rows(
        c,
        "SELECT * FROM snapbuild_historic_snapshot_from_file($1)",
        &[name],
    )
    .unwrap();
    let info = json_rows(c, "SELECT * FROM snapbuild_snapshot_info($1)", &[name]).unwrap();
    let (o, i) = (&ours[0], &info[0]);
    let mut committed = jxids(i, "committed_xip").unwrap_or_default();
    committed.sort_unstable();
    fails.check(
        jxid(o, "xmin") == jxid(i, "xmin")
            && jxid(o, "xmax") == jxid(i, "xmax")
            && jxids(o, "xip") == Some(committed.clone())
            && jxids(o, "subxip") == Some(vec![])
            && jlsn(o, "lsn") == snap_lsn(name),
        || format!("{name}: {} vs {}", show(o), show(i)),
    );
    if env.has_logicalinspect() {
        let same: bool = c
            .query_one(
                "SELECT h.xmin = l.xmin AND h.xmax = l.xmax
                    AND h.xip::text[] = coalesce(ARRAY(SELECT x::text FROM unnest(l.committed_xip) x ORDER BY x::text::bigint), '{}')
                   FROM snapbuild_historic_snapshot_from_file($1) h, pg_get_logical_snapshot_info($1) l",
                &[name],
            )
            .unwrap()
            .get(0);
        fails.check(same, || {
            format!("{name}: differs from pg_get_logical_snapshot_info")
        });
    }
}
