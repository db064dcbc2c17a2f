//! Historic MVCC on real heap pages under real DDL: `snapbuild_visibility`'s re-run of
//! HeapTupleSatisfiesHistoricMVCC against the server's own HeapTupleSatisfiesVisibility
//! (SNAPSHOT_HISTORIC_MVCC, same snapshot fields, same tuple-cid hash).
//!
//! - h2: several DDL steps in one transaction (combo CIDs), a released and a rolled-back
//!   subtransaction, a prepared transaction, aborted and committed DDL, TRUNCATE, DROP,
//!   VACUUM FULL (of a user table, and of pg_attribute with rewrite mapping files), judged
//!   at every step's LSN for the transaction, its subtransaction and nobody, while another
//!   session decodes; test_decoding emits the transaction's row with all its columns.
//!
//! Every scan must agree on 100% of its tuples; the test prints `pgsnap-counts:` lines with
//! the tuple counts per branch (run with --nocapture).
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).

use pg_snapbuild_tests::*;
use postgres::Client;

// ---------------------------------------------------------------------------------------
// h2: real DDL — several steps in one transaction (combo CIDs), subtransactions, a
// prepared transaction, aborted and committed DDL, TRUNCATE, DROP, VACUUM FULL (of a
// user table, and of pg_attribute with rewrite mapping files) — at every step's LSN
// ---------------------------------------------------------------------------------------

fn xmin_of_attribute(x: &mut OpenXact, table: &str, column: &str) -> u64 {
    x.text(&format!(
        "SELECT xmin FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attname = '{column}'"
    ))
    .parse()
    .unwrap()
}

/// X's DDL steps, each with the insert LSN after it, and X's subtransactions: s1
/// (released) and s2 (rolled back).
struct XSteps {
    xx: u64,
    s1: u64,
    s2: u64,
    marks: Vec<(&'static str, u64)>,
}

const H2_CATALOGS: [&str; 4] = ["pg_class", "pg_attribute", "pg_type", "pg_depend"];

#[test]
fn h2_ddl_steps_subtransactions_prepared_and_rewrites() {
    let Some((_g, env, mut c)) = start_with_pageinspect() else {
        return;
    };
    let test = "h2";
    let slot = "pgsnap_h2";
    let gid = "pgsnap_h2_gid";
    let _ = c.batch_execute(&format!("ROLLBACK PREPARED '{gid}'"));
    let _guard = SlotGuard::new(&env, slot);
    c.batch_execute(
        "DROP TABLE IF EXISTS pgsnap_h2_x, pgsnap_h2_old, pgsnap_h2_trunc, pgsnap_h2_vf, pgsnap_h2_drop,
                              pgsnap_h2_dropc, pgsnap_h2_y, pgsnap_h2_z;
         CREATE TABLE pgsnap_h2_old (a int);
         CREATE TABLE pgsnap_h2_trunc (a int); INSERT INTO pgsnap_h2_trunc VALUES (1);
         CREATE TABLE pgsnap_h2_vf (a int); INSERT INTO pgsnap_h2_vf VALUES (1);
         CREATE TABLE pgsnap_h2_drop (a int);
         CREATE TABLE pgsnap_h2_dropc (a int);",
    )
    .unwrap();
    let decoder = BackgroundDecoder::start(&env, "pgsnap_h2_dec");
    create_slot(&env, slot);
    let mut counts = Counts::default();
    let mut fails = Failures::default();

    let x = h2_x_ddl_steps_then_prepare(&env, gid);
    let w = h2_others_ddl(&env, &mut c);
    flush_wal(&mut c);
    h2_check_x_snapshot(&mut c, &mut fails, slot, &x);
    h2_every_step(&mut c, &mut counts, &mut fails, slot, &x);
    h2_branches_of_x(&mut c, &mut counts, &mut fails, slot, &x);
    for rel in H2_CATALOGS {
        counts.scan(&mut c, rel, slot, None, None);
        counts.scan(&mut c, rel, slot, None, Some(w.xid));
    }

    // COMMIT PREPARED, W commits; the whole history at every step again.
    c.batch_execute(&format!("COMMIT PREPARED '{gid}'"))
        .unwrap();
    w.commit();
    let sx2 = snapshot(&mut c, slot, None, Some(x.xx));
    fails.check(
        sx2.status
            .as_deref()
            .is_some_and(|s| s.starts_with("committed")),
        || format!("after COMMIT PREPARED: {sx2:?}"),
    );
    fails.check(sx2.xip.contains(&x.xx), || {
        format!("X must be in xip after its commit: {sx2:?}")
    });
    for (_, at) in &x.marks {
        counts.scan(&mut c, "pg_attribute", slot, Some(*at), Some(x.xx));
    }
    let maps = h2_vacuum_full_pg_attribute(&mut c, &mut counts, &mut fails, slot, &x);

    // The real decoder needed the same: X's row comes out with all its columns.
    let rounds = decoder.finish();
    check_test_decoding_emits(
        &mut c,
        &mut fails,
        slot,
        "table public.pgsnap_h2_x: INSERT: a[integer]:1 b[integer]:2 c[integer]:3",
        "X's row with columns a, b, c",
    );
    println!(
        "pgsnap-counts: {test} PG{} steps {} background decoding calls {rounds} mapping files {maps}",
        env.major,
        x.marks.len(),
    );
    c.batch_execute("DROP TABLE IF EXISTS pgsnap_h2_x, pgsnap_h2_old, pgsnap_h2_trunc, pgsnap_h2_vf, pgsnap_h2_z")
        .unwrap();
    counts.finish(test, env.major, fails);
}

/// X: DDL steps, two subtransactions (one released, one rolled back), then PREPARE.
fn h2_x_ddl_steps_then_prepare(env: &Env, gid: &str) -> XSteps {
    let mut x = OpenXact::begin(env, "pgsnap-h2-x");
    let xx = x.xid;
    let mut marks: Vec<(&str, u64)> = Vec::new();
    x.exec("CREATE TABLE pgsnap_h2_x (a int)");
    marks.push(("CREATE", x.insert_lsn()));
    x.exec("ALTER TABLE pgsnap_h2_x ADD COLUMN b int");
    marks.push(("ADD COLUMN b", x.insert_lsn()));
    x.exec("SAVEPOINT s1; ALTER TABLE pgsnap_h2_x ADD COLUMN c int");
    let s1 = xmin_of_attribute(&mut x, "pgsnap_h2_x", "c");
    x.exec("RELEASE s1");
    marks.push(("ADD COLUMN c (released subtransaction)", x.insert_lsn()));
    x.exec("SAVEPOINT s2; ALTER TABLE pgsnap_h2_x ADD COLUMN d int");
    let s2 = xmin_of_attribute(&mut x, "pgsnap_h2_x", "d");
    marks.push(("ADD COLUMN d (subtransaction)", x.insert_lsn()));
    // ROLLBACK TO leaves the savepoint with a fresh subtransaction; RELEASE ends it
    // before it takes an xid, so what follows runs in the top level.
    x.exec("ROLLBACK TO s2; RELEASE s2");
    marks.push(("ROLLBACK TO s2", x.insert_lsn()));
    x.exec("TRUNCATE pgsnap_h2_trunc");
    marks.push(("TRUNCATE", x.insert_lsn()));
    x.exec("DROP TABLE pgsnap_h2_drop");
    marks.push(("DROP", x.insert_lsn()));
    x.exec("INSERT INTO pgsnap_h2_x VALUES (1, 2, 3)");
    x.prepare(gid);
    XSteps { xx, s1, s2, marks }
}

/// Y aborts DDL; Z commits DDL (VACUUM FULL of a user table, CREATE, DROP); W stays in
/// progress (returned).
fn h2_others_ddl(env: &Env, c: &mut Client) -> OpenXact {
    let mut y = OpenXact::begin(env, "pgsnap-h2-y");
    y.exec("CREATE TABLE pgsnap_h2_y (a int); ALTER TABLE pgsnap_h2_old ADD COLUMN z int");
    y.rollback();
    c.batch_execute("VACUUM FULL pgsnap_h2_vf").unwrap();
    c.batch_execute(
        "BEGIN; CREATE TABLE pgsnap_h2_z (a int, b text); DROP TABLE pgsnap_h2_dropc; COMMIT",
    )
    .unwrap();
    let mut w = OpenXact::begin(env, "pgsnap-h2-w");
    w.exec("ALTER TABLE pgsnap_h2_old ADD COLUMN w int");
    w
}

/// X's snapshot: its own xids are X and the released subtransaction only (the same asked
/// through that subtransaction); the prepared X is in progress.
fn h2_check_x_snapshot(c: &mut Client, fails: &mut Failures, slot: &str, x: &XSteps) {
    let (xx, s1, s2) = (x.xx, x.s1, x.s2);
    let sx = snapshot(c, slot, None, Some(xx));
    let mut expect_sub = vec![xx, s1];
    expect_sub.sort_unstable();
    fails.check(sx.subxip == expect_sub, || {
        format!(
            "subxip {:?}, expected X {xx} and s1 {s1} (s2 {s2} rolled back)",
            sx.subxip
        )
    });
    let via_sub = snapshot(c, slot, None, Some(s1));
    fails.check(
        via_sub.subxip == sx.subxip && via_sub.curcid == sx.curcid,
        || format!("asked through subtransaction {s1}: {via_sub:?} vs {sx:?}"),
    );
    fails.check(sx.status.as_deref() == Some("in progress"), || {
        format!("prepared X: {sx:?}")
    });
}

/// Every step's LSN, for X, for its subtransaction, and for nobody: curcid never goes
/// back and the replay stops at the step.
fn h2_every_step(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    slot: &str,
    x: &XSteps,
) {
    let mut prev_curcid = -1;
    for (what, at) in &x.marks {
        let s = snapshot(c, slot, Some(*at), Some(x.xx));
        fails.check(s.curcid >= prev_curcid && s.lsn <= *at, || {
            format!(
                "curcid went back, or the replay went past {}, at {what}: {s:?}",
                fmt_lsn(*at)
            )
        });
        prev_curcid = s.curcid;
        for rel in H2_CATALOGS {
            counts.scan(c, rel, slot, Some(*at), Some(x.xx));
        }
        counts.scan(c, "pg_class", slot, Some(*at), None);
        counts.scan(c, "pg_attribute", slot, Some(*at), Some(x.s1));
    }
}

/// The branches X's DDL is built for: columns by command id (also right after CREATE),
/// the released and the rolled-back subtransaction's columns, a combo CID, the dropped
/// table's row before and after the DROP.
fn h2_branches_of_x(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    slot: &str,
    x: &XSteps,
) {
    let (xx, s1, s2) = (x.xx, x.s1, x.s2);
    let at_create = x.marks[0].1;
    let t = counts.scan(c, "pg_attribute", slot, Some(at_create), Some(xx));
    expect(
        fails,
        "column b, seen right after CREATE",
        &t,
        |t| t.xmin == xx,
        "xmin ours, cmin >= curcid",
        false,
    );
    let t = counts.scan(c, "pg_attribute", slot, None, Some(xx));
    expect_all(
        fails,
        &t,
        &[
            (
                "X's columns",
                &|t: &Tup| t.xmin == xx && t.xmax == 0,
                "xmin ours, cmin < curcid",
                true,
            ),
            (
                "column c of the released subtransaction",
                &|t: &Tup| t.xmin == s1,
                "xmin ours, cmin < curcid",
                true,
            ),
            // Unhinted, the aborted inserter is judged by the snapshot; a catalog lookup
            // in another backend (a background decoder, autovacuum) that met the tuple
            // first sets HEAP_XMIN_INVALID, and the hint decides (seen once on 16.15).
            (
                "column d of the rolled-back subtransaction",
                &|t: &Tup| t.xmin == s2,
                "xmin in [xmin, xmax), not in xip|xmin invalid",
                false,
            ),
        ],
    );
    let dropped = |t: &Tup| t.xmax == xx && t.xmin != xx && t.xmin != s1;
    let t = counts.scan(c, "pg_class", slot, None, Some(xx));
    expect_all(
        fails,
        &t,
        &[
            (
                "combo CID: X's pg_class row updated by X",
                &|t: &Tup| t.xmin == xx && t.has("HEAP_COMBOCID"),
                "xmax ours, cmax < curcid",
                false,
            ),
            (
                "pg_class row of the dropped table",
                &dropped,
                "xmax ours, cmax < curcid",
                false,
            ),
        ],
    );
    let at_truncate = x.marks.iter().find(|m| m.0 == "TRUNCATE").unwrap().1;
    let t = counts.scan(c, "pg_class", slot, Some(at_truncate), Some(xx));
    expect(
        fails,
        "dropped table's row before the DROP",
        &t,
        dropped,
        "xmax ours, cmax >= curcid",
        true,
    );
}

/// VACUUM FULL pg_attribute while the slot still needs X's rows: the rewrite writes
/// mapping files (one for X), and X's rows (new relfilenode) still resolve, also at an
/// earlier step. Returns the number of mapping files.
fn h2_vacuum_full_pg_attribute(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    slot: &str,
    x: &XSteps,
) -> usize {
    let xx = x.xx;
    let filenode = |c: &mut Client| -> String {
        c.query_one("SELECT pg_relation_filenode('pg_attribute')::text", &[])
            .unwrap()
            .get(0)
    };
    let before = filenode(c);
    c.batch_execute("VACUUM FULL pg_attribute").unwrap();
    let after = filenode(c);
    let maps: Vec<String> = query_column(
        c,
        "SELECT name FROM pg_ls_dir('pg_logical/mappings') AS name WHERE name LIKE 'map-%' ORDER BY 1",
        &[],
        "pg_ls_dir('pg_logical/mappings')",
    );
    let x_hex = format!("-{xx:x}-");
    fails.check(before != after && maps.iter().any(|m| m.contains(&x_hex)), || {
        format!("pg_attribute {before} -> {after}; mapping files {maps:?} (want one for xid {xx:x})")
    });
    let t = counts.scan(c, "pg_attribute", slot, None, Some(xx));
    expect(
        fails,
        "X's columns after VACUUM FULL pg_attribute (resolved through mapping files)",
        &t,
        |t| t.xmin == xx && t.resolved,
        "xmin ours, cmin < curcid",
        true,
    );
    let t = counts.scan(c, "pg_attribute", slot, Some(x.marks[1].1), Some(xx));
    expect(
        fails,
        "X's columns after the rewrite, at an earlier step",
        &t,
        |t| t.xmin == x.s1,
        "xmin ours, cmin >= curcid",
        false,
    );
    counts.scan(c, "pg_attribute", slot, None, None);
    maps.len()
}
