//! Historic MVCC on real heap pages: `snapbuild_visibility`'s re-run of
//! HeapTupleSatisfiesHistoricMVCC against the server's own HeapTupleSatisfiesVisibility
//! (SNAPSHOT_HISTORIC_MVCC, same snapshot fields, same tuple-cid hash), with several
//! real sessions doing DDL and catalog DML that commits, aborts, stays in progress, runs
//! in subtransactions or is prepared, while other sessions decode.
//!
//! Every scan must agree on 100% of its tuples. Each scenario also makes sure the
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// [`start`] with contrib pageinspect in the database.
fn start_with_pageinspect() -> Option<(Serial, Env, Client)> {
    let (g, env, mut c) = start()?;
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        .unwrap();
    Some((g, env, c))
}

#[derive(Clone, Debug)]
struct Tup {
    ctid: String,
    xmin: u64,
    xmax: u64,
    xmax_update: Option<u64>,
    flags: Vec<String>,
    t_cid: i64,
    cmin: Option<i64>,
    cmax: Option<i64>,
    resolved: bool,
    xmin_branch: String,
    xmax_branch: Option<String>,
    rust: bool,
    server: bool,
    agrees: bool,
    lp_len: i64,
}

impl Tup {
    fn branch(&self) -> String {
        match &self.xmax_branch {
            Some(x) => format!("{}; {x}", self.xmin_branch),
            None => self.xmin_branch.clone(),
        }
    }
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

fn jnum(r: &Row, k: &str) -> Option<i64> {
    match r.get(k) {
        None => panic!("column {k} missing"),
        Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => n.as_i64(),
        Some(v) => panic!("column {k} is not a number: {v}"),
    }
}

fn opt_text(v: Option<u64>) -> Option<String> {
    v.map(|x| x.to_string())
}

/// `snapbuild_visibility(rel, slot, at, xid)`.
fn judge(c: &mut Client, rel: &str, slot: &str, at: Option<u64>, xid: Option<u64>) -> Vec<Tup> {
    let at_text = at.map(fmt_lsn);
    let xid_text = opt_text(xid);
    let rows = json_rows(
        c,
        "SELECT * FROM snapbuild_visibility($1::text::regclass, $2::text::name, $3::text::pg_lsn, $4::text::xid)",
        &[&rel, &slot, &at_text, &xid_text],
    )
    .unwrap_or_else(|e| {
        panic!(
            "snapbuild_visibility({rel}, {slot}, {at_text:?}, {xid_text:?}): {}",
            err_text(&e)
        )
    });
    rows.iter()
        .map(|r| Tup {
            ctid: js(r, "ctid").unwrap(),
            xmin: jxid(r, "t_xmin").unwrap(),
            xmax: jxid(r, "t_xmax").unwrap(),
            xmax_update: jxid(r, "t_xmax_update"),
            flags: match r.get("infomask") {
                Some(serde_json::Value::Array(a)) => a
                    .iter()
                    .map(|v| v.as_str().unwrap_or_default().to_owned())
                    .collect(),
                _ => Vec::new(),
            },
            t_cid: jnum(r, "t_cid").unwrap(),
            cmin: jnum(r, "cmin"),
            cmax: jnum(r, "cmax"),
            resolved: jb(r, "cid_resolved").unwrap(),
            xmin_branch: js(r, "xmin_branch").unwrap(),
            xmax_branch: js(r, "xmax_branch"),
            rust: jb(r, "rust_visible").unwrap(),
            server: jb(r, "server_visible").unwrap(),
            agrees: jb(r, "agrees").unwrap(),
            lp_len: jnum(r, "lp_len").unwrap(),
        })
        .collect()
}

/// The historic snapshot as `snapbuild_historic_snapshot` gives it.
#[derive(Clone, Debug)]
struct Snap {
    xmin: u64,
    xmax: u64,
    xip: Vec<u64>,
    subxip: Vec<u64>,
    curcid: i64,
    lsn: u64,
    source: String,
    built_at: Option<u64>,
    status: Option<String>,
    tuplecids: Option<i64>,
}

fn snapshot(c: &mut Client, slot: &str, at: Option<u64>, xid: Option<u64>) -> Snap {
    let at_text = at.map(fmt_lsn);
    let xid_text = opt_text(xid);
    let rows = json_rows(
        c,
        "SELECT * FROM snapbuild_historic_snapshot($1::name, $2::text::pg_lsn, $3::text::xid)",
        &[&slot, &at_text, &xid_text],
    )
    .unwrap_or_else(|e| panic!("snapbuild_historic_snapshot({slot}): {}", err_text(&e)));
    let r = &rows[0];
    Snap {
        xmin: jxid(r, "xmin").unwrap(),
        xmax: jxid(r, "xmax").unwrap(),
        xip: jxids(r, "xip").unwrap(),
        subxip: jxids(r, "subxip").unwrap(),
        curcid: jnum(r, "curcid").unwrap(),
        lsn: jlsn(r, "lsn").unwrap(),
        source: js(r, "source").unwrap(),
        built_at: jlsn(r, "built_at"),
        status: js(r, "decoding_status"),
        tuplecids: jnum(r, "tuplecids"),
    }
}

/// Tuple counts per branch over every scan of a scenario, and every disagreement.
#[derive(Default)]
struct Counts {
    scans: usize,
    tuples: usize,
    agree: usize,
    xmin: BTreeMap<String, usize>,
    xmax: BTreeMap<String, usize>,
    multi_updaters: usize,
    bad: Vec<String>,
}

impl Counts {
    fn add(&mut self, what: &str, tups: &[Tup]) {
        self.scans += 1;
        for t in tups {
            self.tuples += 1;
            if t.agrees && t.rust == t.server {
                self.agree += 1;
            } else {
                self.bad.push(format!(
                    "{what}: ctid {} xmin {} xmax {} flags {:?} cid {} cmin {:?} cmax {:?}: ours {} ({}) vs server {}",
                    t.ctid, t.xmin, t.xmax, t.flags, t.t_cid, t.cmin, t.cmax, t.rust, t.branch(), t.server
                ));
            }
            *self.xmin.entry(t.xmin_branch.clone()).or_default() += 1;
            if let Some(b) = &t.xmax_branch {
                *self.xmax.entry(b.clone()).or_default() += 1;
            }
            if t.xmax_update.is_some() {
                self.multi_updaters += 1;
            }
        }
    }

    /// Scans `rel`, adds the tuples, returns them.
    fn scan(
        &mut self,
        c: &mut Client,
        rel: &str,
        slot: &str,
        at: Option<u64>,
        xid: Option<u64>,
    ) -> Vec<Tup> {
        let t = judge(c, rel, slot, at, xid);
        self.add(
            &format!("{rel} at {:?} for xid {xid:?}", at.map(fmt_lsn)),
            &t,
        );
        t
    }

    fn print(&self, test: &str, major: u32) {
        println!(
            "pgsnap-counts: {test} PG{major} scans {} tuples {} agree {} ({:.1}%) multixact updaters {}",
            self.scans,
            self.tuples,
            self.agree,
            100.0 * self.agree as f64 / self.tuples.max(1) as f64,
            self.multi_updaters
        );
        for (b, n) in &self.xmin {
            println!("pgsnap-counts: {test} PG{major} xmin [{b}] {n}");
        }
        for (b, n) in &self.xmax {
            println!("pgsnap-counts: {test} PG{major} xmax [{b}] {n}");
        }
    }

    fn finish(self, test: &str, major: u32, fails: Failures) {
        self.print(test, major);
        assert!(self.tuples > 0, "{test}: no tuple judged");
        assert!(
            self.bad.is_empty(),
            "{test}: {} of {} tuples disagree with the server:\n{}",
            self.bad.len(),
            self.tuples,
            self.bad.join("\n")
        );
        fails.finish(test);
    }
}

/// At least one tuple matching `pred` took `branch` (on the xmin or the xmax side) with
/// visibility `visible`, and the server agreed.
fn expect(
    fails: &mut Failures,
    what: &str,
    tups: &[Tup],
    pred: impl Fn(&Tup) -> bool,
    branch: &str,
    visible: bool,
) {
    let matching: Vec<&Tup> = tups.iter().filter(|t| pred(t)).collect();
    // `branch` may list alternatives separated by `|`.
    let hit = matching.iter().any(|t| {
        branch
            .split('|')
            .any(|b| t.xmin_branch == b || t.xmax_branch.as_deref() == Some(b))
            && t.rust == visible
            && t.server == visible
    });
    fails.check(hit, || {
        format!(
            "{what}: expected a tuple with branch [{branch}] visible={visible}; matching tuples:\n{}",
            matching
                .iter()
                .map(|t| format!(
                    "  {} xmin {} xmax {} upd {:?} {:?} cmin {:?} cmax {:?}: {} ours {} server {}",
                    t.ctid, t.xmin, t.xmax, t.xmax_update, t.flags, t.cmin, t.cmax, t.branch(), t.rust, t.server
                ))
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
}

/// Flushes the WAL written so far: a transaction that wrote WAL commits synchronously
/// (one that only took an xid would commit asynchronously, leaving the flush to the WAL
/// writer). The transactional message is the only WAL it writes.
/// One expected branch for [`expect_all`]: (what, which tuples, branch, visible).
type Want<'a> = (&'a str, &'a dyn Fn(&Tup) -> bool, &'a str, bool);

/// [`expect`] for each of `wants`, in order.
fn expect_all(fails: &mut Failures, tups: &[Tup], wants: &[Want]) {
    for (what, pred, branch, visible) in wants {
        expect(fails, what, tups, pred, branch, *visible);
    }
}

/// test_decoding emits (consuming the slot) a line containing `want` (`what` says what
/// it is).
fn check_test_decoding_emits(
    c: &mut Client,
    fails: &mut Failures,
    slot: &str,
    want: &str,
    what: &str,
) {
    let out = slot_changes(c, slot, true);
    fails.check(out.iter().any(|l| l.contains(want)), || {
        format!("test_decoding did not emit {what}:\n{}", out.join("\n"))
    });
}

fn flush_wal(c: &mut Client) {
    c.batch_execute("SELECT pg_logical_emit_message(true, 'pgsnap', 'flush')")
        .unwrap();
}

/// A sequential scan with an ordinary MVCC snapshot: sets the hint bits of every
/// tuple whose inserter or deleter has finished.
fn set_hints(c: &mut Client, rel: &str) {
    c.batch_execute(&format!(
        "SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off; \
         SELECT count(*) FROM {rel}; RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan"
    ))
    .unwrap();
}

/// Another session decoding a second slot over and over while the scenario runs.
struct BackgroundDecoder {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<usize>>,
    _slot: SlotGuard,
}

impl BackgroundDecoder {
    fn start(env: &Env, slot: &str) -> Self {
        let guard = SlotGuard::new(env, slot);
        create_slot(env, slot);
        let stop = Arc::new(AtomicBool::new(false));
        let (s, e, name) = (stop.clone(), env.clone(), slot.to_owned());
        let handle = std::thread::spawn(move || {
            let mut c = e.connect("pgsnap-hv-decoder");
            let mut rounds = 0;
            while !s.load(Ordering::Relaxed) {
                c.query(
                    "SELECT count(*) FROM pg_logical_slot_get_changes($1, NULL, NULL)",
                    &[&name],
                )
                .unwrap_or_else(|e| panic!("background decoding of {name}: {}", err_text(&e)));
                rounds += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            rounds
        });
        BackgroundDecoder {
            stop,
            handle: Some(handle),
            _slot: guard,
        }
    }

    /// Stops the decoder; the number of decoding calls it made.
    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .unwrap()
            .join()
            .expect("background decoder failed")
    }
}

impl Drop for BackgroundDecoder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
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
    let maps: Vec<String> = c
        .query(
            "SELECT name FROM pg_ls_dir('pg_logical/mappings') AS name WHERE name LIKE 'map-%' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
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
