//! snapfuzz: deterministic, structure-aware mutation fuzzing of snapbuild-core's parsers
//! of untrusted bytes, on the stable toolchain (no libFuzzer, no AFL).
//!
//!   snapfuzz run [--inputs N] [--seconds S] [--targets a,b] [--seed X] [--corpus DIR]
//!   snapfuzz repro TARGET FILE...      run saved inputs once, panics unmasked
//!   snapfuzz capture MAJOR RAWDIR CORPUSDIR   cut fuzz/capture.sh's raw server files into seeds
//!   snapfuzz list
//!
//! Per target: every corpus entry as is, each of its truncations and single-bit flips
//! (entries up to 256 bytes; longer ones at 256 spread cuts and flips), then stacked random
//! mutations of random entries until N inputs. Every input runs under catch_unwind
//! (a panic, including an index out of bounds, is a crash) and a counting allocator (an
//! allocation above 64 × input length + 4096 bytes is a crash). Crashing inputs are
//! written to fuzz/crashes/TARGET-HASH.bin.

mod alloc;
mod mutate;
mod targets;
mod wal;

use std::collections::BTreeMap;
use std::panic;
use std::path::{Path, PathBuf};
use std::time::Instant;

use mutate::{mutate, Rng};
use targets::Target;

#[global_allocator]
static A: alloc::Counting = alloc::Counting;

/// The allocation bound: 64 bytes per input byte plus a constant.
fn alloc_bound(len: usize) -> usize {
    64 * len + 4096
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
        (h ^ *c as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .take(256)
        .map(|c| format!("{c:02x}"))
        .collect::<String>()
        + if b.len() > 256 { "…" } else { "" }
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn quiet_panics() {
    panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = format!("{at}: {msg}"));
    }));
}

fn load_corpus(dir: &Path, t: &Target) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(t.name))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    let mut v: Vec<Vec<u8>> = files.iter().filter_map(|p| std::fs::read(p).ok()).collect();
    if v.is_empty() {
        v.push(Vec::new());
    }
    v
}

#[derive(Default)]
struct Stats {
    inputs: u64,
    accepted: u64,
    crashes: u64,
    alloc_over: u64,
    largest_ratio: f64,
    seen: BTreeMap<String, u64>,
}

/// Runs one input; records a crash (panic or allocation over the bound).
fn one(t: &Target, input: &[u8], st: &mut Stats, crash_dir: &Path) {
    st.inputs += 1;
    alloc::reset();
    let r = panic::catch_unwind(|| (t.run)(input));
    let (largest, _) = alloc::stop();
    let bound = alloc_bound(input.len());
    let ratio = largest as f64 / (input.len().max(1)) as f64;
    if ratio > st.largest_ratio && largest > 4096 {
        st.largest_ratio = ratio;
    }
    let problem = match r {
        Ok(acc) => {
            st.accepted += acc as u64;
            if largest > bound {
                st.alloc_over += 1;
                Some(format!(
                    "allocation of {largest} bytes for a {}-byte input (bound {bound})",
                    input.len()
                ))
            } else {
                None
            }
        }
        Err(_) => Some(LAST_PANIC.with(|p| p.borrow().clone())),
    };
    if let Some(p) = problem {
        st.crashes += 1;
        let key = p.split(": ").next().unwrap_or("").to_string();
        let n = st.seen.entry(key).or_insert(0);
        *n += 1;
        if *n <= 3 {
            let _ = std::fs::create_dir_all(crash_dir);
            let path = crash_dir.join(format!("{}-{:016x}.bin", t.name, fnv(input)));
            let _ = std::fs::write(&path, input);
            eprintln!(
                "CRASH {}: {p}\n  input ({} bytes, saved as {}): {}",
                t.name,
                input.len(),
                path.display(),
                hex(input)
            );
        }
    }
}

fn run(args: &[String]) -> i32 {
    let mut inputs: u64 = 100_000;
    let mut seconds: Option<f64> = None;
    let mut only: Option<Vec<String>> = None;
    let mut seed: u64 = 1;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut corpus = root.join("corpus");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--inputs" => inputs = val().replace('_', "").parse().expect("--inputs N"),
            "--seconds" => seconds = Some(val().parse().expect("--seconds S")),
            "--targets" => only = Some(val().split(',').map(str::to_owned).collect()),
            "--seed" => seed = val().parse().expect("--seed X"),
            "--corpus" => corpus = PathBuf::from(val()),
            other => {
                eprintln!("unknown option {other}");
                return 2;
            }
        }
    }
    quiet_panics();
    let crash_dir = root.join("crashes");
    let all = targets::all();
    let chosen: Vec<&Target> = all
        .iter()
        .filter(|t| only.as_ref().is_none_or(|o| o.iter().any(|n| n == t.name)))
        .collect();
    let per_target_secs = seconds.map(|s| s / chosen.len().max(1) as f64);
    println!(
        "{:<19} {:>12} {:>8} {:>9} {:>12} {:>7} {:>6} {:>9} {:>10}",
        "target",
        "inputs",
        "corpus",
        "bytes",
        "accepted",
        "crashes",
        "alloc",
        "seconds",
        "inputs/s"
    );
    let mut total_crashes = 0;
    for t in chosen {
        let entries = load_corpus(&corpus, t);
        let corpus_bytes: usize = entries.iter().map(Vec::len).sum();
        let mut st = Stats::default();
        let mut r = Rng(seed ^ fnv(t.name.as_bytes()) | 1);
        let start = Instant::now();
        let out_of_time = |st: &Stats| {
            st.inputs >= inputs
                || per_target_secs.is_some_and(|s| {
                    st.inputs.is_multiple_of(1024) && start.elapsed().as_secs_f64() >= s
                })
        };
        // Systematic part: each entry, its truncations and single-bit flips.
        'sys: for e in &entries {
            one(t, e, &mut st, &crash_dir);
            let cuts: Vec<usize> = if e.len() <= 256 {
                (0..e.len()).collect()
            } else {
                (0..256).map(|i| i * e.len() / 256).collect()
            };
            for c in cuts {
                if out_of_time(&st) {
                    break 'sys;
                }
                one(t, &e[..c], &mut st, &crash_dir);
                let mut flipped = e.clone();
                let bit = if e.len() <= 256 {
                    c * 8 + r.below(8)
                } else {
                    r.below(e.len() * 8)
                };
                flipped[bit / 8] ^= 1 << (bit % 8);
                one(t, &flipped, &mut st, &crash_dir);
            }
        }
        // Random part: stacked mutations, sometimes of an already mutated input.
        let mut cur = Vec::new();
        while !out_of_time(&st) {
            if cur.is_empty() || r.chance(4) {
                cur = entries[r.below(entries.len())].clone();
            }
            let other = &entries[r.below(entries.len())];
            let fields = (t.fields)(&cur);
            mutate(&mut r, &mut cur, &fields, other, t.max_len);
            if let Some(fx) = t.fixup {
                fx(&mut cur, &mut r);
            }
            one(t, &cur, &mut st, &crash_dir);
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{:<19} {:>12} {:>8} {:>9} {:>12} {:>7} {:>6} {:>9.1} {:>10.0}",
            t.name,
            st.inputs,
            entries.len(),
            corpus_bytes,
            st.accepted,
            st.crashes,
            st.alloc_over,
            secs,
            st.inputs as f64 / secs.max(1e-9)
        );
        for (k, n) in &st.seen {
            println!("    {n} × {k}");
        }
        total_crashes += st.crashes;
    }
    println!("total crashes: {total_crashes}");
    (total_crashes > 0) as i32
}

fn repro(args: &[String]) -> i32 {
    let all = targets::all();
    let Some(t) = all
        .iter()
        .find(|t| Some(t.name) == args.first().map(String::as_str))
    else {
        eprintln!("usage: snapfuzz repro TARGET FILE...");
        return 2;
    };
    for f in &args[1..] {
        let d = std::fs::read(f).expect("read input");
        alloc::reset();
        let acc = (t.run)(&d);
        let (largest, _) = alloc::stop();
        println!(
            "{f}: accepted={acc} largest allocation={largest} (bound {})",
            alloc_bound(d.len())
        );
    }
    0
}

/// Cuts capture.sh's raw server files into seeds: `corpus/<target>/pgMAJOR-<kind>-<hash>.bin`.
fn capture(args: &[String]) -> i32 {
    let [major, raw, out] = args else {
        eprintln!("usage: snapfuzz capture MAJOR RAWDIR CORPUSDIR");
        return 2;
    };
    let major: u32 = major.parse().expect("MAJOR");
    let (raw, out) = (PathBuf::from(raw), PathBuf::from(out));
    // (target, kind) -> distinct seeds, preferring distinct lengths
    let mut seeds: BTreeMap<(&str, String), Vec<Vec<u8>>> = BTreeMap::new();
    let mut add = |target: &'static str, kind: String, bytes: Vec<u8>| {
        seeds.entry((target, kind)).or_default().push(bytes);
    };
    let ls = |d: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(raw.join(d))
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let mut nrec = 0;
    for seg in ls("wal") {
        let name = seg.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&seg).expect("segment");
        let seg_size = bytes.len() as u64;
        // TTTTTTTTXXXXXXXXYYYYYYYY: log id and segment number
        let log = u64::from_str_radix(&name[8..16], 16).unwrap_or(0);
        let segno = u64::from_str_radix(&name[16..24], 16).unwrap_or(0);
        let seg_lsn = (log << 32) + segno * seg_size;
        let recs = wal::records(&bytes, seg_lsn, major);
        // Replay seeds: windows of 48 records from each of the first RUNNING_XACTS
        // records, framed as targets::replay reads them.
        let starts: Vec<usize> = (0..recs.len())
            .filter(|i| recs[*i].rmid == 8 && recs[*i].info & 0xf0 == 0x10)
            .collect();
        for (w, s) in starts
            .iter()
            .step_by((starts.len() / 4).max(1))
            .take(4)
            .enumerate()
        {
            let flags = [0u8, 1, 3, 4][w % 4];
            let mut seed = vec![major as u8, flags];
            for r in &recs[*s..(*s + 48).min(recs.len())] {
                seed.extend(targets::frame_record(
                    r.rmid,
                    r.info,
                    r.xid,
                    r.top_xid,
                    &r.main_data,
                    false,
                ));
            }
            add("replay", "window".into(), seed);
            // the same window with reorderbuffer.c's memory accounting: heap records
            // carry block 0 (4 kB of work_mem, with and without streaming alternately), up to 48 kB
            let mut seed = vec![
                major as u8,
                flags | 32 | 64 | if w % 2 == 1 { 128 } else { 0 },
            ];
            for r in &recs[*s..] {
                if seed.len() > 48 << 10 {
                    break;
                }
                let kind =
                    snapbuild_core::replication::decode::RecordKind::classify(r.rmid, r.info);
                let data = if kind == snapbuild_core::replication::decode::RecordKind::Change {
                    let b0 = r.block0.as_ref();
                    targets::frame_change(
                        b0.map(|b| (b.data.as_deref().unwrap_or(&[]), [b.spc, b.db, b.rel])),
                        &r.main_data,
                    )
                } else {
                    r.main_data.clone()
                };
                seed.extend(targets::frame_record(
                    r.rmid, r.info, r.xid, r.top_xid, &data, true,
                ));
            }
            add("replay", "memory".into(), seed);
        }
        for rec in recs {
            nrec += 1;
            // keep the corpus small: records of at most 16 kB of main data
            if rec.main_data.len() > 16384 {
                continue;
            }
            let d = rec.main_data;
            let framed = |info: Option<u8>| {
                let mut v = vec![major as u8];
                v.extend(info);
                v.extend_from_slice(&d);
                v
            };
            match (rec.rmid, rec.info & 0x70) {
                (1, 0x00) => add("xact_commit", "commit".into(), framed(Some(rec.info))),
                (1, 0x20) => add("xact_commit", "abort".into(), framed(Some(rec.info))),
                (1, 0x30) => add(
                    "xact_commit",
                    "commit_prepared".into(),
                    framed(Some(rec.info)),
                ),
                (1, 0x40) => add(
                    "xact_commit",
                    "abort_prepared".into(),
                    framed(Some(rec.info)),
                ),
                (1, 0x10) => add("xact_prepare", "prepare".into(), framed(None)),
                (1, 0x50) => add("xact_assignment", "assignment".into(), d),
                (1, 0x60) => add("xact_invalidations", "invalidations".into(), d),
                (8, 0x10) => add("running_xacts", "running_xacts".into(), d),
                (9, 0x70) => add("new_cid", "new_cid".into(), d),
                (21, _) => add("logical_message", "message".into(), d),
                (10, op) | (9, op)
                    if (rec.rmid == 10 && op != 0x60 && op != 0x70)
                        || (rec.rmid == 9 && op == 0x50) =>
                {
                    // heap changes: major, rmid, info, block 0 and the main data
                    let b0 = rec.block0.as_ref();
                    let block = b0.and_then(|b| b.data.as_deref()).unwrap_or(&[]);
                    let mut v = vec![
                        major as u8,
                        rec.rmid,
                        rec.info,
                        b0.is_some_and(|b| b.data.is_some()) as u8,
                    ];
                    v.extend((block.len() as u16).to_le_bytes());
                    v.extend_from_slice(block);
                    v.extend_from_slice(&d);
                    let op_name = [
                        "insert",
                        "delete",
                        "update",
                        "truncate",
                        "hot_update",
                        "confirm",
                    ]
                    .get((op >> 4) as usize)
                    .copied()
                    .unwrap_or("multi_insert");
                    let mut kind = if rec.rmid == 9 {
                        "multi_insert"
                    } else {
                        op_name
                    }
                    .to_owned();
                    if op == 0 && d.get(2).is_some_and(|f| f & (1 << 4) != 0) {
                        kind = "toast_chunk".into();
                    } else if op == 0 && d.get(2).is_some_and(|f| f & (1 << 2) != 0) {
                        kind = "spec_insert".into();
                    } else if block.windows(2).any(|w| w == [0x01, 18]) {
                        kind.push_str("_toasted");
                    }
                    add("heap_change", kind, v)
                }
                _ => {}
            }
        }
    }
    for p in ls("snapshots") {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        add("file_names", "snap_name".into(), name.into_bytes());
        let b = std::fs::read(&p).expect("snap");
        let v = b
            .get(8..12)
            .map_or(0, |v| u32::from_le_bytes(v.try_into().unwrap()));
        add("snap", format!("v{v}"), b);
    }
    for p in ls("mappings") {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        add("file_names", "map_name".into(), name.into_bytes());
        let b = std::fs::read(&p).expect("mapping");
        add("rewrite_mapping", "mapping".into(), b);
    }
    // Server log windows: each line about decoding or a server start, with the lines
    // around it (its DETAIL and STATEMENT), up to 4 kB per seed.
    if let Ok(log) = std::fs::read(raw.join("server.log")) {
        let text = String::from_utf8_lossy(&log);
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        let mut n = 0;
        while i < lines.len() && n < 24 {
            let l = lines[i];
            if l.contains("logical decoding") || l.contains("ready to accept") {
                let from = i.saturating_sub(2);
                let mut seed = String::new();
                let mut j = from;
                while j < lines.len() && j < from + 12 && seed.len() + lines[j].len() < 4096 {
                    seed.push_str(lines[j]);
                    seed.push('\n');
                    j += 1;
                }
                add("server_log", "stderr".into(), seed.into_bytes());
                n += 1;
                i = j;
            } else {
                i += 1;
            }
        }
    }
    for p in ls("pages") {
        let b = std::fs::read(&p).expect("page");
        if let Ok((_, items)) = snapbuild_core::storage::bufpage::heap_items(&b) {
            for it in items.iter().step_by(7).take(6) {
                let (o, l) = (it.item.off as usize, it.item.len as usize);
                add("tuple_header", "tuple".into(), b[o..o + l].to_vec());
            }
        }
        add("heap_page", "page".into(), b);
    }
    let mut written = 0;
    for ((target, kind), mut v) in seeds {
        let cap = match target {
            "heap_page" => 6,
            "snap" | "rewrite_mapping" | "replay" | "server_log" => 6,
            _ => 12,
        };
        // distinct contents, then distinct lengths first
        v.sort();
        v.dedup();
        let mut by_len: BTreeMap<usize, Vec<Vec<u8>>> = BTreeMap::new();
        for s in v {
            by_len.entry(s.len()).or_default().push(s);
        }
        let mut picked = Vec::new();
        while picked.len() < cap && by_len.values().any(|l| !l.is_empty()) {
            for l in by_len.values_mut() {
                if let Some(s) = l.pop() {
                    if picked.len() < cap {
                        picked.push(s);
                    }
                }
            }
        }
        let dir = out.join(target);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        for s in picked {
            // mapping files can be large: keep at most 100 records of each
            let s = if target == "rewrite_mapping" {
                s[..s.len().min(3600)].to_vec()
            } else {
                s
            };
            std::fs::write(
                dir.join(format!("pg{major}-{kind}-{:08x}.bin", fnv(&s) as u32)),
                &s,
            )
            .expect("write");
            written += 1;
        }
    }
    println!("pg{major}: {nrec} WAL records read, {written} seeds written");
    0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("repro") => repro(&args[1..]),
        Some("capture") => capture(&args[1..]),
        Some("list") => {
            for t in targets::all() {
                println!("{:<19} {}", t.name, t.about);
            }
            0
        }
        _ => {
            eprintln!("usage: snapfuzz run|repro|capture|list …");
            2
        }
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(run: fn(&[u8]) -> bool) -> Target {
        Target {
            name: "selftest",
            about: "",
            run,
            fields: |_| vec![],
            fixup: None,
            max_len: 64,
        }
    }

    /// The harness itself: a panic (here an index out of bounds) and an allocation past
    /// the bound are both counted as crashes; a well-behaved target is not.
    #[test]
    fn harness_catches_panics_and_large_allocations() {
        quiet_panics();
        let dir = std::env::temp_dir().join("snapfuzz-selftest");
        let mut st = Stats::default();
        one(&target(|d| d[d.len()] == 0), b"abc", &mut st, &dir);
        assert_eq!((st.crashes, st.alloc_over), (1, 0));
        assert!(
            st.seen.keys().any(|k| k.contains("main.rs")),
            "{:?}",
            st.seen
        );
        let mut st = Stats::default();
        one(
            &target(|d| vec![0u8; 64 * d.len() + 5000].len() > 1),
            b"abc",
            &mut st,
            &dir,
        );
        assert_eq!((st.crashes, st.alloc_over), (1, 1));
        let mut st = Stats::default();
        one(&target(|d| !d.to_vec().is_empty()), b"abc", &mut st, &dir);
        assert_eq!((st.crashes, st.accepted), (0, 1));
        let _ = std::fs::remove_dir_all(dir);
    }
}
