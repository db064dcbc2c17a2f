//! Historic MVCC on real heap pages, every branch: `snapbuild_visibility`'s re-run of
//! HeapTupleSatisfiesHistoricMVCC against the server's own HeapTupleSatisfiesVisibility
//! (SNAPSHOT_HISTORIC_MVCC, same snapshot fields, same tuple-cid hash).
//!
//! - h1: every branch of both sides, reached on purpose by concurrent sessions (a
//!   transaction X with several commands, a key-share locker making a multixact with X as
//!   updater, committed, aborted and in-progress transactions, lockers, transactions that
//!   end unseen): each expected branch seen with the server agreeing; the multixact's
//!   updater is the server's; tuple headers are pageinspect's; earlier points of X's
//!   replay; judging leaves the pages byte for byte unchanged; the catalog at every commit
//!   of the trace; a background session decodes another slot throughout.
//!
//! Every scan must agree on 100% of its tuples. The scenario also makes sure the
//! branches it is built for are really taken, and prints `pgsnap-counts:` lines with the
//! tuple counts per branch (run with --nocapture).
//!
//! Branch-sensitive rows live in user catalog tables (`user_catalog_table = true`, so
//! NEW_CID records are logged for them exactly as for system catalogs) with autovacuum
//! off: nothing but the scenario reads them, so hint bits are set only when a scenario
//! scans them on purpose. System catalogs are judged too, for realism and counts.
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::collections::BTreeMap;
use std::time::Duration;

/// A sequential scan with an ordinary MVCC snapshot: sets the hint bits of every
/// tuple whose inserter or deleter has finished.
fn set_hints(c: &mut Client, rel: &str) {
    c.batch_execute(&format!(
        "SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off; \
         SELECT count(*) FROM {rel}; RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan"
    ))
    .unwrap();
}

/// The four hint bits of t_infomask (set by readers, not by the writer).
const HINT_BITS: [&str; 4] = [
    "HEAP_XMIN_COMMITTED",
    "HEAP_XMIN_INVALID",
    "HEAP_XMAX_COMMITTED",
    "HEAP_XMAX_INVALID",
];

/// The raw header fields of `rel` as contrib pageinspect reads them, per ctid:
/// (t_xmin, t_xmax, t_field3, lp_len, raw infomask flags without the four hint bits).
fn pageinspect_headers(
    c: &mut Client,
    rel: &str,
) -> BTreeMap<String, (u64, u64, i64, i64, Vec<String>)> {
    let sql = format!(
        "SELECT format('(%s,%s)', b, lp) AS ctid, t_xmin, t_xmax, t_field3, lp_len, \
                (SELECT raw_flags FROM heap_tuple_infomask_flags(t_infomask, t_infomask2)) AS flags \
           FROM generate_series(0, pg_relation_size('{rel}') / current_setting('block_size')::int - 1) b, \
                heap_page_items(get_raw_page('{rel}', b::int)) \
          WHERE lp_flags = 1"
    );
    json_rows(c, &sql, &[])
        .unwrap_or_else(|e| panic!("pageinspect on {rel}: {}", err_text(&e)))
        .iter()
        .map(|r| {
            let mut flags: Vec<String> = match r.get("flags") {
                Some(serde_json::Value::Array(a)) => {
                    a.iter().map(|v| v.as_str().unwrap().to_owned()).collect()
                }
                _ => Vec::new(),
            };
            flags.retain(|f| !HINT_BITS.contains(&f.as_str()));
            (
                js(r, "ctid").unwrap(),
                (
                    jxid(r, "t_xmin").unwrap(),
                    jxid(r, "t_xmax").unwrap(),
                    jnum(r, "t_field3").unwrap(),
                    jnum(r, "lp_len").unwrap(),
                    flags,
                ),
            )
        })
        .collect()
}

/// Our reading of the pages (ctid, xmin, xmax, t_cid, lp_len, flags) is pageinspect's.
fn check_against_pageinspect(
    fails: &mut Failures,
    c: &mut Client,
    rel: &str,
    tups: &[Tup],
) -> usize {
    let pi = pageinspect_headers(c, rel);
    let ours: BTreeMap<String, (u64, u64, i64, i64, Vec<String>)> = tups
        .iter()
        .map(|t| {
            // pageinspect's raw_flags cover t_infomask and t_infomask2 like ours.
            let mut f = t.flags.clone();
            f.retain(|x| !HINT_BITS.contains(&x.as_str()));
            (t.ctid.clone(), (t.xmin, t.xmax, t.t_cid, t.lp_len, f))
        })
        .collect();
    let mut pi_sorted = pi.clone();
    for v in pi_sorted.values_mut() {
        v.4.sort();
    }
    let mut ours_sorted = ours.clone();
    for v in ours_sorted.values_mut() {
        v.4.sort();
    }
    fails.check(pi_sorted == ours_sorted, || {
        let diff: Vec<String> = pi_sorted
            .iter()
            .filter(|(k, v)| ours_sorted.get(*k) != Some(v))
            .map(|(k, v)| format!("  {k}: pageinspect {v:?} ours {:?}", ours_sorted.get(k)))
            .chain(
                ours_sorted
                    .keys()
                    .filter(|k| !pi_sorted.contains_key(*k))
                    .map(|k| format!("  {k}: only ours")),
            )
            .collect();
        format!(
            "{rel}: tuple headers differ from pageinspect's:\n{}",
            diff.join("\n")
        )
    });
    pi.len()
}

// ---------------------------------------------------------------------------------------
// h1: every branch of both sides, on a user catalog table, with real sessions
// ---------------------------------------------------------------------------------------

/// The xids of h1's sessions, and two LSNs of X's replay (after its first and second
/// command).
#[derive(Clone, Copy)]
struct H1Xids {
    x: u64,
    d: u64,
    c1: u64,
    e: u64,
    ab2: u64,
    c2: u64,
    l1: u64,
    l2: u64,
}

/// h1's sessions still open after the setup.
struct H1Sessions {
    x: OpenXact,
    k: OpenXact,
    lk: OpenXact,
    m1: OpenXact,
    m2: OpenXact,
    e: OpenXact,
    ab2: OpenXact,
    c2: OpenXact,
}

/// h1's relations and slot.
struct H1<'a> {
    slot: &'a str,
    cat: &'a str,
    plain: &'a str,
}

#[test]
fn h1_every_branch_with_concurrent_sessions() {
    let Some((_g, env, mut c)) = start_with_pageinspect() else {
        return;
    };
    let test = "h1";
    let h = H1 {
        slot: "pgsnap_h1",
        cat: "pgsnap_h1_cat",
        plain: "pgsnap_h1_plain",
    };
    let (slot, cat, plain, ddl) = (h.slot, h.cat, h.plain, "pgsnap_h1_ddl");
    let _guard = SlotGuard::new(&env, slot);
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {cat}, {plain}, {ddl}, pgsnap_h1_d;
         CREATE TABLE {cat} (a int, b int) WITH (user_catalog_table = true, autovacuum_enabled = false);
         CREATE TABLE {plain} (a int) WITH (autovacuum_enabled = false);
         INSERT INTO {cat} SELECT g, 0 FROM generate_series(1, 20) g;
         INSERT INTO {plain} SELECT g FROM generate_series(1, 5) g;"
    ))
    .unwrap();
    let decoder = BackgroundDecoder::start(&env, "pgsnap_h1_dec");
    create_slot(&env, slot);
    let mut counts = Counts::default();
    let mut fails = Failures::default();
    let (mut sessions, ids) = h1_sessions(&env, cat, plain, ddl);
    flush_wal(&mut c);

    // Phase 1: everything open.
    let n = h1_everything_open(&mut c, &mut counts, &mut fails, &h, ids);
    h1_as_x(&mut c, &mut counts, &mut fails, &h, ids);
    h1_xmax_ours_no_cmax(&mut c, &mut counts, &mut fails, &h, &mut sessions.x, ids.x);

    // Phase 2: end everything without scanning the table again, move the builder's
    // xmin past all of it, and rebuild the snapshot with one more catalog commit.
    h1_end_everything(&env, &mut c, &mut fails, &h, sessions, ids);
    let t = h1_unhinted(&mut c, &mut counts, &mut fails, &h, ids);
    let after = h1_judging_writes_nothing(&mut c, &mut counts, &mut fails, &h, &t);
    let n2 = h1_hinted(&mut c, &mut counts, &mut fails, &h, ids, &after);
    let points = h1_catalog_at_every_commit(&mut c, &mut counts, &mut fails, &h);

    // The decoders really decoded it: X's rows came out of the slot.
    let rounds = decoder.finish();
    check_test_decoding_emits(
        &mut c,
        &mut fails,
        slot,
        &format!("table public.{cat}: INSERT: a[integer]:102 b[integer]:0"),
        "X's row",
    );
    // After consuming, the replay starts from the slot's new restart_lsn.
    let sr = snapshot(&mut c, slot, None, None);
    counts.scan(&mut c, cat, slot, None, None);
    println!(
        "pgsnap-counts: {test} PG{} pageinspect headers compared {} background decoding calls {rounds} trace points {points} snapshot after consuming from: {}",
        env.major,
        n + n2,
        sr.source
    );
    counts.finish(test, env.major, fails);
}

/// The sessions: X (catalog rows inserted and deleted over several commands, DDL,
/// plain-table rows), K (key-share lock on a row X then updates: a multixact with an
/// updater), D (a committed catalog change younger than X), AB1 (aborts), C1 (commits),
/// lockers FOR UPDATE and FOR SHARE ×2, E (in progress, younger than every committed
/// catalog change), AB2 and C2 (they will end without anyone scanning their rows).
fn h1_sessions(env: &Env, cat: &str, plain: &str, ddl: &str) -> (H1Sessions, H1Xids) {
    let mut x = OpenXact::begin(env, "pgsnap-h1-x");
    let xx = x.xid;
    x.exec(&format!("INSERT INTO {cat} VALUES (101, 0)"));
    let l1 = x.insert_lsn();
    x.exec(&format!("INSERT INTO {cat} VALUES (102, 0)"));
    let l2 = x.insert_lsn();
    x.exec(&format!("DELETE FROM {cat} WHERE a = 101"));
    x.exec(&format!("DELETE FROM {cat} WHERE a = 1"));
    x.exec(&format!(
        "CREATE TABLE {ddl} (a int); ALTER TABLE {ddl} ADD COLUMN b int"
    ));
    x.exec(&format!(
        "INSERT INTO {plain} VALUES (100); DELETE FROM {plain} WHERE a = 1"
    ));
    let mut k = OpenXact::begin(env, "pgsnap-h1-k");
    k.exec(&format!("SELECT * FROM {cat} WHERE a = 2 FOR KEY SHARE"));
    x.exec(&format!("UPDATE {cat} SET b = 1 WHERE a = 2"));
    let mut d = OpenXact::begin(env, "pgsnap-h1-d");
    let dx = d.xid;
    d.exec(&format!(
        "INSERT INTO {cat} VALUES (201, 0); DELETE FROM {cat} WHERE a = 3; CREATE TABLE pgsnap_h1_d (a int)"
    ));
    d.commit();
    in_session(env, "pgsnap-h1-ab1", cat, 301, 4).rollback();
    let c1 = in_session(env, "pgsnap-h1-c1", cat, 401, 5);
    let c1x = c1.xid;
    c1.commit();
    let mut lk = OpenXact::begin(env, "pgsnap-h1-l");
    lk.exec(&format!("SELECT * FROM {cat} WHERE a = 6 FOR UPDATE"));
    let mut m1 = OpenXact::begin(env, "pgsnap-h1-m1");
    m1.exec(&format!("SELECT * FROM {cat} WHERE a = 7 FOR SHARE"));
    let mut m2 = OpenXact::begin(env, "pgsnap-h1-m2");
    m2.exec(&format!("SELECT * FROM {cat} WHERE a = 7 FOR SHARE"));
    let e = in_session(env, "pgsnap-h1-e", cat, 501, 8);
    let ab2 = in_session(env, "pgsnap-h1-ab2", cat, 701, 9);
    let c2 = in_session(env, "pgsnap-h1-c2", cat, 801, 10);
    let ids = H1Xids {
        x: xx,
        d: dx,
        c1: c1x,
        e: e.xid,
        ab2: ab2.xid,
        c2: c2.xid,
        l1,
        l2,
    };
    let s = H1Sessions {
        x,
        k,
        lk,
        m1,
        m2,
        e,
        ab2,
        c2,
    };
    (s, ids)
}

/// A session that inserted row `ins` into `cat` and deleted row `del`, still open.
fn in_session(env: &Env, app: &str, cat: &str, ins: i32, del: i32) -> OpenXact {
    let mut s = OpenXact::begin(env, app);
    s.exec(&format!(
        "INSERT INTO {cat} VALUES ({ins}, 0); DELETE FROM {cat} WHERE a = {del}"
    ));
    s
}

/// Everything open, no decoding transaction: D and C1 are in xip, X is not; each
/// session's rows and the locked and multixact rows take their branch; the multixact's
/// updater is the server's; tuple headers are pageinspect's. Returns how many headers
/// were compared.
fn h1_everything_open(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    h: &H1,
    ids: H1Xids,
) -> usize {
    let H1Xids {
        x: xx,
        d: dx,
        c1: c1x,
        e: ex,
        ..
    } = ids;
    let s = snapshot(c, h.slot, None, None);
    fails.check(
        s.xip.contains(&dx) && s.xip.contains(&c1x) && !s.xip.contains(&xx),
        || format!("snapshot after D and C1 committed: {s:?} (X {xx} D {dx} C1 {c1x})"),
    );
    let t = counts.scan(c, h.cat, h.slot, None, None);
    let n = check_against_pageinspect(fails, c, h.cat, &t);
    expect_all(
        fails,
        &t,
        &[
            (
                "X's row, no decoding xid",
                &|t: &Tup| t.xmin == xx && t.xmax == 0,
                "xmin in [xmin, xmax), not in xip",
                false,
            ),
            ("D's row", &|t: &Tup| t.xmin == dx, "xmin in xip", true),
            (
                "E's row",
                &|t: &Tup| t.xmin == ex,
                "xmin >= snapshot xmax",
                false,
            ),
            (
                "row deleted by X",
                &|t: &Tup| t.xmax == xx && t.xmin != xx,
                "xmax in [xmin, xmax), not in xip",
                true,
            ),
            (
                "row deleted by D",
                &|t: &Tup| t.xmax == dx,
                "xmax in xip",
                false,
            ),
            (
                "row deleted by E",
                &|t: &Tup| t.xmax == ex,
                "xmax >= snapshot xmax",
                true,
            ),
            (
                "row locked FOR UPDATE",
                &|t: &Tup| t.has("HEAP_XMAX_LOCK_ONLY") && !t.has("HEAP_XMAX_IS_MULTI"),
                "xmax locked only",
                true,
            ),
            (
                "row locked FOR SHARE twice",
                &|t: &Tup| t.has("HEAP_XMAX_LOCK_ONLY") && t.has("HEAP_XMAX_IS_MULTI"),
                "xmax locked only",
                true,
            ),
            (
                "row updated under a key-share lock",
                &|t: &Tup| t.xmax_update == Some(xx),
                "xmax in [xmin, xmax), not in xip",
                true,
            ),
        ],
    );
    check_multixact_updater(c, fails, &t, xx);
    for rel in ["pg_class", "pg_attribute", "pg_type"] {
        counts.scan(c, rel, h.slot, None, None);
    }
    n
}

/// The multixact's updating member, as the server lists it, is X.
fn check_multixact_updater(c: &mut Client, fails: &mut Failures, t: &[Tup], xx: u64) {
    let Some(mt) = t.iter().find(|t| t.xmax_update.is_some()) else {
        return;
    };
    let members = json_rows(
        c,
        "SELECT xid, mode FROM pg_get_multixact_members($1::text::xid)",
        &[&mt.xmax.to_string()],
    )
    .unwrap();
    let upd: Vec<u64> = members
        .iter()
        .filter(|m| matches!(js(m, "mode").as_deref(), Some("nokeyupd") | Some("upd")))
        .map(|m| jxid(m, "xid").unwrap())
        .collect();
    fails.check(upd == vec![xx], || {
        format!(
            "multixact {}: members {members:?}, our update xid {:?}",
            mt.xmax, mt.xmax_update
        )
    });
}

/// Phase 1 for X itself: its own rows by command id, the plain table's rows unresolved
/// (no NEW_CID), earlier points of its replay, and E's view.
fn h1_as_x(c: &mut Client, counts: &mut Counts, fails: &mut Failures, h: &H1, ids: H1Xids) {
    let (slot, cat, xx) = (h.slot, h.cat, ids.x);
    let sx = snapshot(c, slot, None, Some(xx));
    fails.check(
        sx.subxip == vec![xx] && sx.curcid > 2 && sx.tuplecids.is_some(),
        || format!("X's snapshot: {sx:?}"),
    );
    let t = counts.scan(c, cat, slot, None, Some(xx));
    expect_all(
        fails,
        &t,
        &[
            (
                "X's surviving row",
                &|t: &Tup| t.xmin == xx && t.xmax == 0,
                "xmin ours, cmin < curcid",
                true,
            ),
            (
                "X's row deleted by X",
                &|t: &Tup| t.xmin == xx && t.xmax == xx,
                "xmax ours, cmax < curcid",
                false,
            ),
            (
                "row updated by X under a key-share lock",
                &|t: &Tup| t.xmax_update == Some(xx),
                "xmax ours, cmax < curcid",
                false,
            ),
        ],
    );
    for rel in ["pg_class", "pg_attribute", "pg_type", "pg_depend"] {
        counts.scan(c, rel, slot, None, Some(xx));
    }
    let t = counts.scan(c, h.plain, slot, None, Some(xx));
    expect_all(
        fails,
        &t,
        &[
            (
                "X's plain-table row (no NEW_CID)",
                &|t: &Tup| t.xmin == xx,
                "xmin ours, unresolved",
                false,
            ),
            (
                "plain-table row deleted by X",
                &|t: &Tup| t.xmax == xx && t.xmin != xx,
                "xmax ours, unresolved",
                true,
            ),
        ],
    );
    h1_earlier_points_of_x(c, counts, fails, h, ids, sx.curcid);
    // E's view: X is neither ours nor committed.
    counts.scan(c, cat, slot, None, Some(ids.e));
}

/// Earlier points of X's replay (L1, L2): later commands of X are "at or after curcid",
/// and curcid grows along the replay up to `end_curcid`.
fn h1_earlier_points_of_x(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    h: &H1,
    ids: H1Xids,
    end_curcid: i64,
) {
    let (slot, cat, xx, l1, l2) = (h.slot, h.cat, ids.x, ids.l1, ids.l2);
    let s1 = snapshot(c, slot, Some(l1), Some(xx));
    let t = counts.scan(c, cat, slot, Some(l1), Some(xx));
    expect(
        fails,
        "X's second row seen at L1",
        &t,
        |t| t.xmin == xx && t.xmax == 0 && t.cmin.unwrap_or(0) >= s1.curcid,
        "xmin ours, cmin >= curcid",
        false,
    );
    let s2 = snapshot(c, slot, Some(l2), Some(xx));
    fails.check(s1.curcid < s2.curcid && s2.curcid < end_curcid, || {
        format!(
            "curcid must grow along X's replay: {} at L1, {} at L2, {} at the end",
            s1.curcid, s2.curcid, end_curcid
        )
    });
    let t = counts.scan(c, cat, slot, Some(l2), Some(xx));
    expect(
        fails,
        "X's first row seen at L2 (deleted later)",
        &t,
        |t| t.xmin == xx && t.xmax == xx && t.cmax.unwrap_or(-1) >= s2.curcid,
        "xmax ours, cmax >= curcid",
        true,
    );
    for rel in ["pg_class", "pg_attribute"] {
        counts.scan(c, rel, slot, Some(l1), Some(xx));
        counts.scan(c, rel, slot, Some(l2), Some(xx));
    }
}

/// xmax ours without cmax: X updates its own row, and its NEW_CID is not flushed yet
/// when we look (the WAL writer flushes only full pages; nothing commits meanwhile).
fn h1_xmax_ours_no_cmax(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    h: &H1,
    x: &mut OpenXact,
    xx: u64,
) {
    let (slot, cat) = (h.slot, h.cat);
    let mut no_cmax = false;
    for i in 0..10 {
        let a = 600 + i;
        x.exec(&format!("INSERT INTO {cat} VALUES ({a}, 0)"));
        flush_wal(c);
        x.exec(&format!("UPDATE {cat} SET b = 9 WHERE a = {a}"));
        let t = counts.scan(c, cat, slot, None, Some(xx));
        if t.iter()
            .any(|t| t.xmax_branch.as_deref() == Some("xmax ours, no cmax") && t.rust && t.server)
        {
            no_cmax = true;
            println!("h1: 'xmax ours, no cmax' reached on attempt {}", i + 1);
            break;
        }
    }
    fails.check(no_cmax, || {
        "never saw 'xmax ours, no cmax' in 10 attempts (the WAL was always flushed)".into()
    });
}

/// Every session ends (X and C2 commit, the others roll back); RUNNING_XACTS and catalog
/// commits until the snapshot's xmin passes all their xids.
fn h1_end_everything(
    env: &Env,
    c: &mut Client,
    fails: &mut Failures,
    h: &H1,
    s: H1Sessions,
    ids: H1Xids,
) {
    for l in [s.lk, s.m1, s.m2, s.k] {
        l.rollback();
    }
    s.x.commit();
    s.ab2.rollback();
    s.c2.commit();
    s.e.rollback();
    let mine = [ids.x, ids.ab2, ids.c2, ids.e];
    let mut s_after = snapshot(c, h.slot, None, None);
    for attempt in 0.. {
        env.log_standby_snapshot_flushed(c, h.cat, &format!("900 + {attempt}, 0"));
        s_after = snapshot(c, h.slot, None, None);
        if mine.iter().all(|v| *v < s_after.xmin) || attempt >= 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    fails.check(mine.iter().all(|v| *v < s_after.xmin), || {
        format!("the snapshot's xmin never passed the scenario's xids: {s_after:?}")
    });
}

/// After the end, before any hint bit: C2's and AB2's rows and deletions go by the
/// commit log. Returns the scan of `cat`.
fn h1_unhinted(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    h: &H1,
    ids: H1Xids,
) -> Vec<Tup> {
    let (c2x, ab2x) = (ids.c2, ids.ab2);
    let t = counts.scan(c, h.cat, h.slot, None, None);
    expect_all(
        fails,
        &t,
        &[
            (
                "C2's row, no hint",
                &|t: &Tup| t.xmin == c2x,
                "xmin < snapshot xmin, clog committed",
                true,
            ),
            (
                "AB2's row, no hint",
                &|t: &Tup| t.xmin == ab2x,
                "xmin < snapshot xmin, not committed",
                false,
            ),
            (
                "row deleted by C2, no hint",
                &|t: &Tup| t.xmax == c2x,
                "xmax < snapshot xmin, clog committed",
                false,
            ),
            (
                "row deleted by AB2, no hint",
                &|t: &Tup| t.xmax == ab2x,
                "xmax < snapshot xmin, not committed",
                true,
            ),
        ],
    );
    for rel in ["pg_class", "pg_attribute", "pg_type", "pg_depend"] {
        counts.scan(c, rel, h.slot, None, None);
    }
    t
}

/// md5 of every page of `rel`.
fn page_digests(c: &mut Client, rel: &str) -> String {
    c.query_one(
        &format!(
            "SELECT string_agg(md5(get_raw_page('{rel}', b::int)), ',' ORDER BY b) \
               FROM generate_series(0, pg_relation_size('{rel}') / current_setting('block_size')::int - 1) b"
        ),
        &[],
    )
    .unwrap()
    .get(0)
}

/// Judging writes nothing: the pages are byte for byte the same after another scan
/// (neither our reading nor the server's historic routine set a hint bit), and the
/// unhinted rows (`t`) are still unhinted. Returns the pages' digests.
fn h1_judging_writes_nothing(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    h: &H1,
    t: &[Tup],
) -> String {
    let cat = h.cat;
    let before = page_digests(c, cat);
    let again = counts.scan(c, cat, h.slot, None, None);
    let after = page_digests(c, cat);
    let same_flags = t.len() == again.len()
        && t.iter()
            .zip(&again)
            .all(|(a, b)| a.ctid == b.ctid && a.flags == b.flags);
    fails.check(before == after && same_flags, || {
        format!(
            "{cat} changed while judged: pages {before} -> {after}, flags unchanged: {same_flags}"
        )
    });
    after
}

/// An MVCC scan sets hint bits (the pages change from `after`); then C2's and AB2's
/// rows go by the hints. Returns how many headers were compared with pageinspect.
fn h1_hinted(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    h: &H1,
    ids: H1Xids,
    after: &str,
) -> usize {
    let (c2x, ab2x) = (ids.c2, ids.ab2);
    set_hints(c, h.cat);
    let t = counts.scan(c, h.cat, h.slot, None, None);
    fails.check(page_digests(c, h.cat) != after, || {
        "the MVCC scan set no hint bit".into()
    });
    expect_all(
        fails,
        &t,
        &[
            (
                "AB2's row, hinted",
                &|t: &Tup| t.xmin == ab2x,
                "xmin invalid",
                false,
            ),
            (
                "C2's row, hinted",
                &|t: &Tup| t.xmin == c2x,
                "xmin < snapshot xmin, committed hint",
                true,
            ),
            (
                "row deleted by C2, hinted",
                &|t: &Tup| t.xmax == c2x,
                "xmax < snapshot xmin, committed hint",
                false,
            ),
            (
                "row deleted by AB2, hinted",
                &|t: &Tup| t.xmax == ab2x,
                "xmax invalid",
                true,
            ),
        ],
    );
    check_against_pageinspect(fails, c, h.cat, &t)
}

/// The catalog at several LSNs of one trace: after every commit the replay decodes.
/// Returns how many.
fn h1_catalog_at_every_commit(
    c: &mut Client,
    counts: &mut Counts,
    fails: &mut Failures,
    h: &H1,
) -> usize {
    let rows = trace(c, h.slot).unwrap();
    let mut points = 0;
    for r in rows
        .iter()
        .filter(|r| r.record.starts_with("COMMIT") && r.state.as_deref() == Some("consistent"))
    {
        if let Some(end) = r.end_lsn {
            counts.scan(c, h.cat, h.slot, Some(end), None);
            counts.scan(c, "pg_class", h.slot, Some(end), r.xid);
            points += 1;
        }
    }
    fails.check(points >= 5, || {
        format!("only {points} commit rows in the trace:\n{}", dump(&rows))
    });
    points
}
