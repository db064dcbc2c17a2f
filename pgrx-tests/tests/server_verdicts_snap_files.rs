//! pg_snapbuild's reading of `.snap` files against the real server's, with several real
//! sessions:
//!
//! - s6: corrupt copies of a real `.snap` file (truncated, a bit flipped, wrong magic or
//!   version, a committed count too high, empty): `snapbuild_snapshot_info` raises the
//!   server's SQLSTATE and text (pg_logicalinspect's on 18); `snapbuild_snapshot_files()`
//!   lists what `pg_ls_logicalsnapdir()` lists; a missing file and bad names get the
//!   server's errors.
//! - s7: every `.snap` file the server wrote: `snapbuild_snapshot_info` equals
//!   pg_logicalinspect's columns on 18, the file's bytes and the major's layout before.
//! - s9: a corrupt `.snap` file on the replay's restore path: the trace ends with the
//!   server's checksum-mismatch text in an ERROR row, and the backend and a bystander
//!   decoding its own slot go on.
//!
//! Every expected value comes from the server: the files it wrote (`pg_ls_logicalsnapdir`,
//! their bytes), pg_logicalinspect on 18, the RUNNING_XACTS records in its WAL.
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).
//! Each test uses its own slot and drops it, even on failure; the corrupt copies are
//! removed at its end.
//!
//! Counts are printed on lines starting with `pgsnap-counts:` (run with --nocapture).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------
// 6. corrupt copies of a real .snap file
// ---------------------------------------------------------------------------------------

/// A file's path as the server's messages name it.
fn snap_path(n: &str) -> String {
    format!("pg_logical/snapshots/{n}")
}

/// A corrupt copy: (name, bytes, the server's message for it as a regex).
type Corrupt = (String, Vec<u8>, String);

/// Copies of `bytes` truncated (10 bytes, −4 bytes), with one bit flipped, with a wrong
/// magic and a wrong version, with the committed count one too high, and empty; the
/// messages carry the real file's magic, checksum and version.
fn corrupt_copies(bytes: &[u8]) -> Vec<Corrupt> {
    let u32le = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let (magic, stored_crc, version) = (u32le(0), u32le(4), u32le(8));
    let quoted = |n: &str| regex::escape(&format!("\"{}\"", snap_path(n)));
    let mut cases: Vec<Corrupt> = Vec::new();
    let n1 = "FFFFFFFF-1.snap".to_string();
    let re = format!(r"^could not read file {}: read 10 of \d+$", quoted(&n1));
    cases.push((n1, bytes[..10].to_vec(), re));
    let n2 = "FFFFFFFF-2.snap".to_string();
    let cut = bytes.len() - 4;
    let re = format!(r"^could not read file {}: read \d+ of \d+$", quoted(&n2));
    cases.push((n2, bytes[..cut].to_vec(), re));
    let n3 = "FFFFFFFF-3.snap".to_string();
    let mut flipped = bytes.to_vec();
    flipped[16] ^= 0x01; // builder.state: checksummed, not used to size the reads
    let re = format!(
        r"^checksum mismatch for snapbuild state file {}: is \d+, should be {stored_crc}$",
        quoted(&n3)
    );
    cases.push((n3, flipped, re));
    let n4 = "FFFFFFFF-4.snap".to_string();
    let mut bad_magic = bytes.to_vec();
    bad_magic[0..4].copy_from_slice(&0xDEADBEEFu32.to_le_bytes());
    let re = format!(
        "^{}$",
        regex::escape(&format!(
            "snapbuild state file \"{}\" has wrong magic number: {} instead of {magic}",
            snap_path(&n4),
            0xDEADBEEFu32
        ))
    );
    cases.push((n4, bad_magic, re));
    let n5 = "FFFFFFFF-5.snap".to_string();
    let mut bad_version = bytes.to_vec();
    bad_version[8..12].copy_from_slice(&99u32.to_le_bytes());
    let re = format!(
        "^{}$",
        regex::escape(&format!(
            "snapbuild state file \"{}\" has unsupported version: 99 instead of {version}",
            snap_path(&n5)
        ))
    );
    cases.push((n5, bad_version, re));
    // The fuzzer's structure-aware edits (fuzz/): the committed count one too high (the
    // array read comes up short before the checksum is looked at), and an empty file.
    let n8 = "FFFFFFFF-8.snap".to_string();
    let mut count_plus_one = bytes.to_vec();
    let at = 16 + 80; // SnapBuildOnDisk.builder.committed.xcnt (size_t)
    let xcnt = u64::from_le_bytes(count_plus_one[at..at + 8].try_into().unwrap());
    count_plus_one[at..at + 8].copy_from_slice(&(xcnt + 1).to_le_bytes());
    let re = format!(r"^could not read file {}: read \d+ of \d+$", quoted(&n8));
    cases.push((n8, count_plus_one, re));
    let n9 = "FFFFFFFF-9.snap".to_string();
    let re = format!(r"^could not read file {}: read 0 of 16$", quoted(&n9));
    cases.push((n9, Vec::new(), re));
    cases
}

#[test]
fn s6_corrupt_snap_files() {
    let slot = "pgsnap_s6";
    let tab = "pgsnap_s6_tab";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let (src, bytes) = real_snap_file(&env, &mut c, slot, tab);
    assert!(bytes.len() >= 64, "{src} is {} bytes", bytes.len());
    let cases = corrupt_copies(&bytes);
    let mut planted = PlantedFiles(Vec::new());
    for (n, b, _) in &cases {
        plant(&env, &mut planted, n, b);
    }
    let good_copy = "FFFFFFFF-6.snap";
    plant(&env, &mut planted, good_copy, &bytes);

    let mut fails = Failures::default();
    let ours_vs_server = check_corrupt_info_errors(&env, &mut c, &cases, &mut fails);
    let (listed, good) = check_listing(&mut c, &cases, &mut fails);
    let info = json_rows(
        &mut c,
        "SELECT checksum_ok, state FROM snapbuild_snapshot_info($1)",
        &[&good_copy],
    )
    .unwrap();
    assert_eq!(jb(&info[0], "checksum_ok"), Some(true));
    check_missing_file(&env, &mut c, &mut fails);
    let bad_names = check_bad_names(&env, &mut c, &mut fails);
    drop(planted);
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_2"))
        .unwrap();
    println!(
        "pgsnap-counts: s6 PG{} source {src} ({} bytes) corrupt files {} errors identical to pg_logicalinspect {} listed files {} good files without error {} bad names {bad_names}",
        env.major,
        bytes.len(),
        cases.len(),
        ours_vs_server,
        listed,
        good
    );
    fails.finish("s6");
}

/// snapbuild_snapshot_info on each corrupt copy: XX001 with the server's text; on 18 the
/// same SQLSTATE and text as pg_logicalinspect's two functions. Returns how many equal
/// `pg_get_logical_snapshot_meta`'s.
fn check_corrupt_info_errors(
    env: &Env,
    c: &mut Client,
    cases: &[Corrupt],
    fails: &mut Failures,
) -> usize {
    let mut ours_vs_server = 0;
    for (n, _, re) in cases {
        let e = c
            .query("SELECT * FROM snapbuild_snapshot_info($1)", &[n])
            .err()
            .unwrap_or_else(|| panic!("snapbuild_snapshot_info('{n}') must fail"));
        let (code, msg) = db_err(&e);
        fails.check(code == "XX001", || {
            format!("{n}: SQLSTATE {code}, expected XX001: {msg}")
        });
        fails.check(regex::Regex::new(re).unwrap().is_match(&msg), || {
            format!("{n}: message {msg:?} does not match {re:?}")
        });
        if !env.has_logicalinspect() {
            continue;
        }
        for f in [
            "pg_get_logical_snapshot_meta",
            "pg_get_logical_snapshot_info",
        ] {
            let se = c
                .query(format!("SELECT * FROM {f}($1)").as_str(), &[n])
                .err()
                .unwrap_or_else(|| panic!("{f}('{n}') must fail"));
            let theirs = db_err(&se);
            let same = theirs == (code.clone(), msg.clone());
            fails.check(same, || {
                format!(
                    "{n}: pg_logicalinspect's {f} says {theirs:?}, ours {:?}",
                    (&code, &msg)
                )
            });
            if same && f == "pg_get_logical_snapshot_meta" {
                ours_vs_server += 1;
            }
        }
    }
    ours_vs_server
}

/// snapbuild_snapshot_files: every file the server lists (sizes too), errors only on the
/// corrupt ones. Returns the number of files listed and of those without error.
fn check_listing(c: &mut Client, cases: &[Corrupt], fails: &mut Failures) -> (usize, usize) {
    let server_before = server_snap_files(c);
    let listing = json_rows(
        c,
        "SELECT name, size, error, checksum_ok FROM snapbuild_snapshot_files()",
        &[],
    )
    .unwrap_or_else(|e| panic!("snapbuild_snapshot_files(): {}", err_text(&e)));
    let server_after = server_snap_files(c);
    let ours: BTreeMap<String, (i64, Option<String>)> = listing
        .iter()
        .map(|r| {
            (
                js(r, "name").unwrap(),
                (js(r, "size").unwrap().parse().unwrap(), js(r, "error")),
            )
        })
        .collect();
    // a timed checkpoint may remove old files meanwhile: ours must lie between the
    // server's listings taken before and after it
    for n in ours.keys() {
        assert!(
            server_before.contains_key(n),
            "snapbuild_snapshot_files() lists {n}, pg_ls_logicalsnapdir() did not"
        );
    }
    for (n, size) in &server_after {
        let o = ours.get(n).unwrap_or_else(|| {
            panic!("pg_ls_logicalsnapdir() lists {n}, snapbuild_snapshot_files() did not")
        });
        assert_eq!(o.0, *size, "{n}: size vs pg_ls_logicalsnapdir()");
    }
    for (n, _, re) in cases {
        let err = ours[n]
            .1
            .clone()
            .unwrap_or_else(|| panic!("{n} is corrupt: error must be set"));
        let re2 = regex::Regex::new(&re.replace(['^', '$'], "")).unwrap();
        fails.check(re2.is_match(&err), || {
            format!("{n}: listing error {err:?} vs {re:?}")
        });
    }
    let good: Vec<&String> = ours
        .keys()
        .filter(|n| !cases.iter().any(|(c, _, _)| c == *n))
        .collect();
    for n in &good {
        assert_eq!(
            ours[*n].1, None,
            "{n} was written by the server (or is its exact copy): no error expected"
        );
    }
    (ours.len(), good.len())
}

/// A missing file: 58P01 with the server's text (and pg_logicalinspect's on 18).
fn check_missing_file(env: &Env, c: &mut Client, fails: &mut Failures) {
    let missing = "FFFFFFFF-7.snap";
    let e = c
        .query("SELECT * FROM snapbuild_snapshot_info($1)", &[&missing])
        .expect_err("missing file must fail");
    let (code, msg) = db_err(&e);
    let want = format!(
        "could not open file \"{}\": No such file or directory",
        snap_path(missing)
    );
    fails.check(code == "58P01" && msg == want, || {
        format!(
            "missing file: ours {:?}, expected {:?}",
            (&code, &msg),
            ("58P01", &want)
        )
    });
    if env.has_logicalinspect() {
        let se = c
            .query(
                "SELECT * FROM pg_get_logical_snapshot_meta($1)",
                &[&missing],
            )
            .err()
            .unwrap();
        let theirs = db_err(&se);
        fails.check(theirs == (code.clone(), msg.clone()), || {
            format!(
                "missing file: pg_logicalinspect says {theirs:?}, ours {:?}",
                (&code, &msg)
            )
        });
    }
}

/// Bad names: 22023, with pg_logicalinspect's text on 18. Returns how many were tried.
fn check_bad_names(env: &Env, c: &mut Client, fails: &mut Failures) -> usize {
    let mut bad_names = 0;
    for bad in [
        "foo",
        "../0-1.snap",
        "0-1.snap.123.tmp",
        "0-1",
        "/tmp/0-1.snap",
        "G-1.snap",
        "",
    ] {
        let e = c
            .query("SELECT * FROM snapbuild_snapshot_info($1)", &[&bad])
            .err()
            .unwrap_or_else(|| panic!("bad name {bad:?} must fail"));
        let (code, msg) = db_err(&e);
        fails.check(code == "22023", || {
            format!("bad name {bad:?}: SQLSTATE {code}, expected 22023: {msg}")
        });
        if env.has_logicalinspect() {
            // pg_logicalinspect raises XX000 here; its text is the reference
            let se = c
                .query("SELECT * FROM pg_get_logical_snapshot_meta($1)", &[&bad])
                .err()
                .unwrap();
            let theirs = db_err(&se).1;
            fails.check(theirs == msg, || {
                format!("bad name {bad:?}: pg_logicalinspect says {theirs:?}, ours {msg:?}")
            });
        }
        bad_names += 1;
    }
    bad_names
}

// ---------------------------------------------------------------------------------------
// 7. every .snap file: snapbuild_snapshot_info vs pg_logicalinspect, column by column
// ---------------------------------------------------------------------------------------

const INFO_COLS: &[&str] = &[
    "state",
    "xmin",
    "xmax",
    "start_decoding_at",
    "two_phase_at",
    "initial_xmin_horizon",
    "building_full_snapshot",
    "in_slot_creation",
    "last_serialized_snapshot",
    "next_phase_at",
    "committed_count",
    "committed_xip",
    "catchange_count",
    "catchange_xip",
];

const META_COLS: &[&str] = &["magic", "checksum", "version"];

/// What s7 compared, and every difference.
#[derive(Default)]
struct InfoTally {
    files: usize,
    cols: usize,
    with_committed: usize,
    with_catchange: usize,
    diffs: Vec<String>,
}

#[test]
fn s7_snapshot_info_matches_server() {
    let slot = "pgsnap_s7";
    let tab = "pgsnap_s7_tab";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_k, {tab}_c"))
        .unwrap();
    c.batch_execute(&format!("CREATE TABLE {tab} (a int)"))
        .unwrap();
    create_slot(&env, slot);
    // files with both arrays in use: k holds an uncommitted catalog change (catchange),
    // a committed DDL after it stays above xmin (committed)
    let mut xk = OpenXact::begin(&env, "pgsnap-k");
    xk.exec(&format!("CREATE TABLE {tab}_k (a int)"));
    c.batch_execute(&format!("CREATE TABLE {tab}_c (a int)"))
        .unwrap();
    produce_snap_files(&env, &mut c, slot, tab);
    produce_snap_files(&env, &mut c, slot, tab);
    xk.commit();
    produce_snap_files(&env, &mut c, slot, tab);

    let mut t = InfoTally::default();
    for name in server_snap_files(&mut c).keys() {
        compare_snapshot_info(&env, &mut c, name, &mut t);
    }
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_k, {tab}_c"))
        .unwrap();
    assert!(t.files >= 1, "no .snap file to compare");
    assert!(
        t.diffs.is_empty(),
        "snapbuild_snapshot_info vs the server:\n{}",
        t.diffs.join("\n")
    );
    assert!(
        t.with_committed >= 1,
        "no file with committed xids: the arrays were not exercised"
    );
    if env.has_logicalinspect() {
        assert!(
            t.with_catchange >= 1,
            "no file with catalog-changing running xids: catchange not exercised"
        );
    }
    println!(
        "pgsnap-counts: s7 PG{} files compared {} columns agreeing {} files with committed xids {} with catchange xids {}",
        env.major, t.files, t.cols, t.with_committed, t.with_catchange
    );
}

/// One server-written file: snapbuild_snapshot_info (checksum ok) against
/// pg_logicalinspect on 18, else against the file's bytes. A file a checkpoint removed
/// meanwhile is skipped.
fn compare_snapshot_info(env: &Env, c: &mut Client, name: &String, t: &mut InfoTally) {
    let ours = match json_rows(c, "SELECT * FROM snapbuild_snapshot_info($1)", &[name]) {
        Ok(r) => r.into_iter().next().unwrap(),
        Err(e) if db_err(&e).0 == "58P01" => return, // removed by a checkpoint meanwhile
        Err(e) => panic!(
            "snapbuild_snapshot_info({name}) of a server-written file: {}",
            err_text(&e)
        ),
    };
    assert_eq!(
        jb(&ours, "checksum_ok"),
        Some(true),
        "{name}: {}",
        show(&ours)
    );
    let compared = if env.has_logicalinspect() {
        compare_with_logicalinspect(c, name, &ours, t)
    } else {
        compare_with_file_bytes(env, name, &ours, t)
    };
    if compared {
        t.files += 1;
    }
}

/// All 17 columns IS NOT DISTINCT FROM pg_get_logical_snapshot_info + _meta.
fn compare_with_logicalinspect(
    c: &mut Client,
    name: &String,
    ours: &Row,
    t: &mut InfoTally,
) -> bool {
    let sql = format!(
        "SELECT {} FROM pg_get_logical_snapshot_info($1) i, pg_get_logical_snapshot_meta($1) m",
        INFO_COLS
            .iter()
            .map(|c| format!("i.{c}"))
            .chain(META_COLS.iter().map(|c| format!("m.{c}")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let theirs = match json_rows(c, &sql, &[name]) {
        Ok(r) => r.into_iter().next().unwrap(),
        Err(e) if db_err(&e).0 == "58P01" => return false,
        Err(e) => panic!("pg_logicalinspect({name}): {}", err_text(&e)),
    };
    // also in SQL, IS NOT DISTINCT FROM on each column
    let sqlcmp = format!(
        "SELECT {} FROM snapbuild_snapshot_info($1) o, pg_get_logical_snapshot_info($1) i, pg_get_logical_snapshot_meta($1) m",
        INFO_COLS
            .iter()
            .map(|c| format!("(o.{c} IS NOT DISTINCT FROM i.{c}) AS {c}"))
            .chain(META_COLS.iter().map(|c| format!("(o.{c} IS NOT DISTINCT FROM m.{c}) AS {c}")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let same = json_rows(c, &sqlcmp, &[name])
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    for col in INFO_COLS.iter().chain(META_COLS) {
        if jb(&same, col) == Some(true) {
            t.cols += 1;
        } else {
            t.diffs.push(format!(
                "{name}.{col}: ours {:?} server {:?}",
                ours.get(*col),
                theirs.get(*col)
            ));
        }
    }
    if js(&theirs, "committed_count").is_some_and(|n| n != "0") {
        t.with_committed += 1;
    }
    if js(&theirs, "catchange_count").is_some_and(|n| n != "0") {
        t.with_catchange += 1;
    }
    true
}

/// Before 18 there is no pg_logicalinspect. Header fields must be the file's own bytes;
/// the size must be the major's layout: 16-byte header plus the serialized builder (112
/// bytes in version 4, up to 15; 128 from 16), plus 4 per committed and catchange xid.
fn compare_with_file_bytes(env: &Env, name: &String, ours: &Row, t: &mut InfoTally) -> bool {
    let bytes = match std::fs::read(env.snapshots_dir().join(name)) {
        Ok(b) => b,
        Err(_) => return false,
    };
    let u32le = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as u64;
    for (col, want) in [
        ("magic", u32le(0)),
        ("checksum", u32le(4)),
        ("version", u32le(8)),
    ] {
        let got: u64 = js(ours, col).unwrap().parse::<i64>().unwrap() as u32 as u64;
        if got == want {
            t.cols += 1;
        } else {
            t.diffs
                .push(format!("{name}.{col}: ours {got} file bytes {want}"));
        }
    }
    let cc: usize = js(ours, "committed_count").unwrap().parse().unwrap();
    let ch: usize = js(ours, "catchange_count")
        .map(|v| v.parse().unwrap())
        .unwrap_or(0);
    let fixed = if env.major <= 15 { 128 } else { 144 };
    if bytes.len() == fixed + 4 * (cc + ch) {
        t.cols += 1;
    } else {
        t.diffs.push(format!(
            "{name}: {} bytes but committed_count {cc}, catchange_count {ch}",
            bytes.len()
        ));
    }
    if cc > 0 {
        t.with_committed += 1;
    }
    true
}

// ---------------------------------------------------------------------------------------
// 9. a corrupt .snap file on the replay's restore path
// ---------------------------------------------------------------------------------------

/// A corrupt `.snap` file (a real one with one bit flipped) named for a RUNNING_XACTS
/// record that runs a transaction, where no decoder wrote one: a replay starting there
/// tries it on branch b (SnapBuildRestore) and ends with the server's `data_corrupted`
/// text in an ERROR row; `snapbuild_historic_snapshot_from_file` raises XX001 on it; the
/// backend goes on, and a session decoding its own slot meanwhile is not disturbed.
#[test]
fn s9_corrupt_snap_file_on_the_restore_path() {
    let (slot, tab) = ("pgsnap_s9", "pgsnap_s9_tab");
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let (src, bytes) = real_snap_file(&env, &mut c, slot, tab);
    consume_changes(&mut c, slot);
    // k runs across a RUNNING_XACTS record nobody decodes: no file for it.
    let mut k = OpenXact::begin(&env, "pgsnap-s9-k");
    k.exec(&format!("INSERT INTO {tab} VALUES (9)"));
    let before = flush_lsn(&mut c);
    env.log_standby_snapshot_flushed(&mut c, tab, "90");
    let rx = wal_running_xacts(&mut c, before, u64::MAX)
        .into_iter()
        .find(|w| w.xacts.contains(&k.xid))
        .expect("a RUNNING_XACTS record running k");
    let name = snap_name(rx.start);
    assert!(
        !server_snap_files(&mut c).contains_key(&name),
        "{name} exists already"
    );
    let mut corrupt = bytes.clone();
    corrupt[16] ^= 0x01; // builder.state: checksummed
    let stored = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    let mut planted = PlantedFiles(Vec::new());
    plant(&env, &mut planted, &name, &corrupt);
    let k_xid = k.xid;
    k.commit();

    // A bystander decodes its own slot while the replays below fail.
    let mut bystander = env.connect("pgsnap-s9-bystander");
    let want = regex::Regex::new(&format!(
        "^checksum mismatch for snapbuild state file {}: is \\d+, should be {stored}$",
        regex::escape(&format!("\"{}\"", snap_path(&name)))
    ))
    .unwrap();
    let rows = trace_rows(
        json_rows(
            &mut c,
            "SELECT * FROM snapbuild_trace_range($1::text::pg_lsn, in_slot_creation => false)",
            &[&fmt_lsn(rx.start)],
        )
        .unwrap_or_else(|e| panic!("snapbuild_trace_range: {}", err_text(&e))),
    );
    let last = rows.last().expect("rows");
    assert_eq!(
        last.lsn,
        Some(rx.start),
        "the replay ends at the corrupt file's record:\n{}",
        dump(&rows)
    );
    assert_eq!(last.level.as_deref(), Some("ERROR"), "{}", dump(&rows));
    let msg = last.message.clone().unwrap_or_default();
    assert!(want.is_match(&msg), "ERROR row {msg:?} vs {want}");
    let e = c
        .query(
            "SELECT * FROM snapbuild_historic_snapshot_from_file($1)",
            &[&name],
        )
        .expect_err("a corrupt file must fail");
    let (code, emsg) = db_err(&e);
    assert_eq!(code, "XX001", "{emsg}");
    assert!(want.is_match(&emsg), "{emsg:?} vs {want}");
    let decoded: i64 = bystander
        .query_one(
            "SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL)",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("the bystander's decoding failed: {}", err_text(&e)))
        .get(0);
    let one: i32 = c.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1, "the backend goes on after the ERRORs");
    drop(planted);
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_2"))
        .unwrap();
    println!(
        "pgsnap-counts: s9 PG{} corrupt copy of {src} planted as {name} (k {}): trace ERROR row {msg:?}; bystander peeked {decoded} changes",
        env.major, k_xid
    );
}
