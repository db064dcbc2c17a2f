//! Historic MVCC as the tests judge it: `snapbuild_visibility`'s tuples ([`Tup`], [`judge`])
//! with our verdict beside the server's HeapTupleSatisfiesVisibility under
//! SNAPSHOT_HISTORIC_MVCC, the historic snapshot `snapbuild_historic_snapshot` gives
//! ([`Snap`]), tuple counts per branch over a test's scans ([`Counts`]), the branches a
//! test expects ([`expect`], [`expect_all`]), and a session decoding another slot
//! meanwhile ([`BackgroundDecoder`]).

use crate::checks::Failures;
use crate::cluster::{start, Env, Serial};
use crate::decoding::slot_changes;
use crate::sessions::{create_slot, SlotGuard};
use crate::values::{err_text, fmt_lsn, jb, jlsn, jnum, js, json_rows, jxid, jxids};
use postgres::Client;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// [`start`] with contrib pageinspect in the database.
pub fn start_with_pageinspect() -> Option<(Serial, Env, Client)> {
    let (g, env, mut c) = start()?;
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        .unwrap();
    Some((g, env, c))
}

/// One heap tuple as `snapbuild_visibility` judges it: its header fields, our verdict and
/// the server's, and the branch each side took.
#[derive(Clone, Debug)]
pub struct Tup {
    pub ctid: String,
    pub xmin: u64,
    pub xmax: u64,
    pub xmax_update: Option<u64>,
    pub flags: Vec<String>,
    pub t_cid: i64,
    pub cmin: Option<i64>,
    pub cmax: Option<i64>,
    pub resolved: bool,
    pub xmin_branch: String,
    pub xmax_branch: Option<String>,
    pub rust: bool,
    pub server: bool,
    pub agrees: bool,
    pub lp_len: i64,
}

impl Tup {
    pub fn branch(&self) -> String {
        match &self.xmax_branch {
            Some(x) => format!("{}; {x}", self.xmin_branch),
            None => self.xmin_branch.clone(),
        }
    }
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

fn opt_text(v: Option<u64>) -> Option<String> {
    v.map(|x| x.to_string())
}

/// `snapbuild_visibility(rel, slot, at, xid)`.
pub fn judge(c: &mut Client, rel: &str, slot: &str, at: Option<u64>, xid: Option<u64>) -> Vec<Tup> {
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
pub struct Snap {
    pub xmin: u64,
    pub xmax: u64,
    pub xip: Vec<u64>,
    pub subxip: Vec<u64>,
    pub curcid: i64,
    pub lsn: u64,
    pub source: String,
    pub built_at: Option<u64>,
    pub status: Option<String>,
    pub tuplecids: Option<i64>,
}

pub fn snapshot(c: &mut Client, slot: &str, at: Option<u64>, xid: Option<u64>) -> Snap {
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
pub struct Counts {
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
    pub fn scan(
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

    pub fn finish(self, test: &str, major: u32, fails: Failures) {
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
pub fn expect(
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

/// One expected branch for [`expect_all`]: (what, which tuples, branch, visible).
pub type Want<'a> = (&'a str, &'a dyn Fn(&Tup) -> bool, &'a str, bool);

/// [`expect`] for each of `wants`, in order.
pub fn expect_all(fails: &mut Failures, tups: &[Tup], wants: &[Want]) {
    for (what, pred, branch, visible) in wants {
        expect(fails, what, tups, pred, branch, *visible);
    }
}

/// test_decoding emits (consuming the slot) a line containing `want` (`what` says what
/// it is).
pub fn check_test_decoding_emits(
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

/// Flushes the WAL written so far: a transaction that wrote WAL commits synchronously
/// (one that only took an xid would commit asynchronously, leaving the flush to the WAL
/// writer). The transactional message is the only WAL it writes.
pub fn flush_wal(c: &mut Client) {
    c.batch_execute("SELECT pg_logical_emit_message(true, 'pgsnap', 'flush')")
        .unwrap();
}

/// Another session decoding a second slot over and over while the scenario runs.
pub struct BackgroundDecoder {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<usize>>,
    _slot: SlotGuard,
}

impl BackgroundDecoder {
    pub fn start(env: &Env, slot: &str) -> Self {
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
    pub fn finish(mut self) -> usize {
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
