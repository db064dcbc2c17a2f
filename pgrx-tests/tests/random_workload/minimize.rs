//! Minimizing: delta debugging over the recorded step list, replaying candidates on the
//! same cluster under fresh names.

use crate::checks::{run_checks, Check, Failure};
use crate::exec::{Exec, Outcome};
use crate::steps::{Recording, Step};
use pg_snapbuild_tests::*;
use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Delta debugging (ddmin, complement form): a sublist of `elems` (kept in order) for
/// which `fails` still holds. Chunks of the current list are removed one after the other,
/// with chunk sizes halving from half the list (the whole list with `allow_empty`) down to
/// single elements; a removal that still fails is kept and the scan goes on at the same
/// place. Costs about 2·k·log2(n) tests when k elements are needed. `fails` returns `None`
/// once the budget is spent: the smallest failing list so far is returned then.
pub fn ddmin(
    elems: Vec<usize>,
    allow_empty: bool,
    mut fails: impl FnMut(&[usize]) -> Option<bool>,
) -> Vec<usize> {
    let mut c = elems;
    if c.is_empty() {
        return c;
    }
    let mut size = if allow_empty {
        c.len()
    } else {
        c.len().div_ceil(2)
    };
    loop {
        let mut i = 0;
        while i < c.len() {
            let end = (i + size).min(c.len());
            if !allow_empty && end - i == c.len() {
                break;
            }
            let cand: Vec<usize> = c[..i].iter().chain(&c[end..]).copied().collect();
            match fails(&cand) {
                Some(true) => c = cand,
                Some(false) => i = end,
                None => return c,
            }
        }
        if size == 1 || c.is_empty() {
            return c;
        }
        size = size.div_ceil(2).min(c.len());
    }
}

/// `PGSNAP_MINIMIZE_BUDGET=RUNS[,SECONDS]`: replays at most RUNS step lists (confirmation
/// replays included) and starts none after SECONDS. Default 60 and 300 (ddmin needs about
/// 44 tests for 3 needed units of 400, 26 for 2; small lists replay in well under a
/// second); 0 turns it off.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub runs: usize,
    pub time: Duration,
}

pub fn budget() -> Option<Budget> {
    let v = std::env::var("PGSNAP_MINIMIZE_BUDGET").unwrap_or_default();
    let mut it = v.split(',').map(str::trim);
    let runs = match it.next() {
        None | Some("") => 60,
        Some(s) => s.parse().expect("PGSNAP_MINIMIZE_BUDGET=RUNS[,SECONDS]"),
    };
    let secs = match it.next() {
        None | Some("") => 300,
        Some(s) => s.parse().expect("PGSNAP_MINIMIZE_BUDGET=RUNS[,SECONDS]"),
    };
    (runs > 0).then(|| Budget {
        runs,
        time: Duration::from_secs(secs),
    })
}

/// Replays of the final list after minimizing, to say how reliably it fails.
pub const CONFIRM: usize = 2;

/// Runs the steps `idx` of `rec` under `prefix` and checks the outcome; a panic (e.g. a
/// creation that failed) is an error, not a failing check.
pub fn replay(
    env: &Env,
    rec: &Recording,
    idx: &[usize],
    prefix: &str,
    checks: &[Check],
) -> Result<(Outcome, Vec<Failure>), String> {
    catch_unwind(AssertUnwindSafe(|| {
        let mut ex = Exec::new(env, prefix, true, false);
        for &k in idx {
            let _ = ex.run(k, &rec.steps[k].action);
        }
        let out = ex.finish();
        let steps: Vec<&Step> = idx.iter().map(|&k| &rec.steps[k]).collect();
        let f = run_checks(checks, &steps, &out);
        (out, f)
    }))
    .map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())
    })
}

struct Minimizer<'a> {
    env: &'a Env,
    rec: &'a Recording,
    checks: &'a [Check],
    target: &'static str,
    budget: Budget,
    t0: Instant,
    runs: usize,
    exhausted: bool,
    /// By selected step indices: whether that list failed.
    cache: HashMap<Vec<usize>, bool>,
    /// The last failing replay: its steps, outcome and failures.
    last_fail: Option<(Vec<usize>, Outcome, Vec<Failure>)>,
}

impl Minimizer<'_> {
    /// Replays `idx` once (no budget check, no cache).
    fn replay(&mut self, idx: &[usize]) -> bool {
        self.runs += 1;
        let prefix = format!("rw{}m{}", self.rec.seed, self.runs);
        let t = Instant::now();
        let r = replay(self.env, self.rec, idx, &prefix, self.checks);
        let (fails, what) = match r {
            Ok((out, f)) => {
                let hit = f.iter().any(|x| x.check == self.target);
                let kinds: BTreeSet<&str> = f.iter().map(|x| x.check).collect();
                if hit {
                    self.last_fail = Some((idx.to_vec(), out, f));
                }
                (hit, format!("failing checks {kinds:?}"))
            }
            Err(p) => (false, format!("the replay panicked: {p}")),
        };
        println!(
            "pgsnap-minimize: replay {} ({} steps, {:.1}s): {} -> {}",
            self.runs,
            idx.len(),
            t.elapsed().as_secs_f64(),
            what,
            if fails { "still fails" } else { "passes" }
        );
        self.cache.insert(idx.to_vec(), fails);
        fails
    }

    fn test(&mut self, idx: Vec<usize>) -> Option<bool> {
        if let Some(&r) = self.cache.get(&idx) {
            return Some(r);
        }
        if self.runs + CONFIRM >= self.budget.runs || self.t0.elapsed() >= self.budget.time {
            self.exhausted = true;
            return None;
        }
        Some(self.replay(&idx))
    }
}

pub struct Minimized {
    pub target: &'static str,
    /// The smallest failing step list (indices into the recording).
    pub steps: Vec<usize>,
    pub reproduced: bool,
    pub exhausted: bool,
    pub runs: usize,
    pub elapsed: Duration,
    /// This list failed in `failed` of `tried` replays.
    pub failed: usize,
    pub tried: usize,
    /// The last failing replay of `steps`.
    pub shown: Option<(Outcome, Vec<Failure>)>,
}

/// Delta-debugs the recording for a list that still fails `target`: first over units
/// (transactions with their COMMIT PREPARED, slot creations, peeks/gets, RUNNING_XACTS),
/// then over single statements inside the kept transactions; then replays the result
/// [`CONFIRM`] more times.
pub fn minimize(
    env: &Env,
    rec: &Recording,
    checks: &[Check],
    target: &'static str,
    budget: Budget,
) -> Minimized {
    let mut m = Minimizer {
        env,
        rec,
        checks,
        target,
        budget,
        t0: Instant::now(),
        runs: 0,
        exhausted: false,
        cache: HashMap::new(),
        last_fail: None,
    };
    let all_units: Vec<usize> = (0..rec.units.len()).collect();
    let full = rec.select(&all_units.iter().copied().collect(), &BTreeSet::new());
    // The recorded run against a replay of its list: twice at most.
    let reproduced = (0..2).any(|_| m.runs < budget.runs && m.replay(&full));
    if !reproduced {
        return Minimized {
            target,
            steps: full,
            reproduced,
            exhausted: false,
            runs: m.runs,
            elapsed: m.t0.elapsed(),
            failed: 0,
            tried: m.runs,
            shown: None,
        };
    }
    let units = m.minimize_units(all_units);
    let steps = m.minimize_statements(&units);
    let (mut failed, mut tried) = (1, 1);
    for _ in 0..CONFIRM {
        if m.runs >= budget.runs {
            break;
        }
        tried += 1;
        if m.replay(&steps) {
            failed += 1;
        }
    }
    let shown = m
        .last_fail
        .take()
        .filter(|(s, _, _)| *s == steps)
        .map(|(_, o, f)| (o, f));
    Minimized {
        target,
        steps,
        reproduced,
        exhausted: m.exhausted,
        runs: m.runs,
        elapsed: m.t0.elapsed(),
        failed,
        tried,
        shown,
    }
}

impl Minimizer<'_> {
    /// ddmin over units; the kept units that have a step in the list (a peek of a slot
    /// whose creation is not kept has none).
    fn minimize_units(&mut self, all_units: Vec<usize>) -> BTreeSet<usize> {
        let rec = self.rec;
        let none = BTreeSet::new();
        let units = ddmin(all_units, false, |els| {
            self.test(rec.select(&els.iter().copied().collect(), &none))
        });
        let mut u: Vec<usize> = rec
            .select(&units.into_iter().collect(), &none)
            .iter()
            .map(|&k| rec.steps[k].unit)
            .collect();
        u.dedup();
        u.sort_unstable();
        u.dedup();
        u.into_iter().collect()
    }

    /// ddmin over the single statements inside the kept transactions (`units`); the
    /// resulting step list.
    fn minimize_statements(&mut self, units: &BTreeSet<usize>) -> Vec<usize> {
        let rec = self.rec;
        let inner: Vec<usize> = rec
            .select(units, &BTreeSet::new())
            .into_iter()
            .filter(|&k| rec.is_inner(k))
            .collect();
        let dropped_but = |keep: &[usize]| -> BTreeSet<usize> {
            let keep: BTreeSet<usize> = keep.iter().copied().collect();
            inner
                .iter()
                .copied()
                .filter(|k| !keep.contains(k))
                .collect()
        };
        let kept_inner = ddmin(inner.clone(), true, |els| {
            self.test(rec.select(units, &dropped_but(els)))
        });
        rec.select(units, &dropped_but(&kept_inner))
    }
}
