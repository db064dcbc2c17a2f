//! `snapbuild_diagnose` as the tests read it: [`Diag`] rows with the sessions a hung
//! creation waits for (pid, gid, database, remedy) and [`of_kind`], the (kind, xid, finding,
//! remedy) rows of [`diagnosis`], and [`DiagRow`]s with the positions and forecasts of a
//! held or synced slot ([`diag_rows`], [`assert_no_zero_lsn`]).

use crate::values::err_text;
use postgres::Client;

/// One row of `snapbuild_diagnose`, the columns the tests check.
#[derive(Debug, Clone)]
pub struct Diag {
    pub kind: String,
    pub xid: Option<u64>,
    pub pid: Option<i32>,
    pub gid: Option<String>,
    pub datname: Option<String>,
    pub remedy: Option<String>,
}

/// The [`Diag`] rows of `snapbuild_diagnose(slot)`, each also printed with its finding
/// (`pgsnap-diagnose:`).
pub fn diagnose(c: &mut Client, slot: &str) -> Vec<Diag> {
    let rows = c
        .query(
            "SELECT kind, xid::text, pid, gid, datname, remedy, finding FROM snapbuild_diagnose($1)",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("snapbuild_diagnose({slot}): {}", err_text(&e)));
    let out: Vec<Diag> = rows
        .iter()
        .map(|r| Diag {
            kind: r.get(0),
            xid: r.get::<_, Option<String>>(1).map(|s| s.parse().unwrap()),
            pid: r.get(2),
            gid: r.get(3),
            datname: r.get(4),
            remedy: r.get(5),
        })
        .collect();
    for r in &rows {
        println!(
            "pgsnap-diagnose: {slot}: {} | {}",
            r.get::<_, String>(0),
            r.get::<_, String>(6)
        );
    }
    out
}

/// The rows of `d` of kind `kind`.
pub fn of_kind<'a>(d: &'a [Diag], kind: &str) -> Vec<&'a Diag> {
    d.iter().filter(|r| r.kind == kind).collect()
}

/// (kind, xid, finding, remedy) rows of `snapbuild_diagnose(slot)`.
pub fn diagnosis(c: &mut Client, slot: &str) -> Vec<(String, Option<u64>, String, Option<String>)> {
    c.query(
        "SELECT kind, xid::text, finding, remedy FROM snapbuild_diagnose($1)",
        &[&slot],
    )
    .unwrap_or_else(|e| panic!("snapbuild_diagnose({slot}): {}", err_text(&e)))
    .iter()
    .map(|r| {
        (
            r.get::<_, String>(0),
            r.get::<_, Option<String>>(1).map(|x| x.parse().unwrap()),
            r.get::<_, String>(2),
            r.get::<_, Option<String>>(3),
        )
    })
    .collect()
}

/// One row of `snapbuild_diagnose` with the columns these checks read.
#[derive(Debug)]
pub struct DiagRow {
    pub kind: String,
    pub xid: Option<u64>,
    pub lsn: Option<String>,
    pub forecast_catalog_xmin: Option<u64>,
    pub finding: String,
    pub remedy: Option<String>,
}

/// The [`DiagRow`]s of `snapbuild_diagnose(slot)`.
pub fn diag_rows(c: &mut Client, slot: &str) -> Vec<DiagRow> {
    c.query(
        "SELECT kind, xid::text, lsn::text, forecast_catalog_xmin::text, finding, remedy \
         FROM snapbuild_diagnose($1)",
        &[&slot],
    )
    .unwrap_or_else(|e| panic!("snapbuild_diagnose({slot}): {}", err_text(&e)))
    .iter()
    .map(|r| DiagRow {
        kind: r.get(0),
        xid: r.get::<_, Option<String>>(1).map(|x| x.parse().unwrap()),
        lsn: r.get(2),
        forecast_catalog_xmin: r.get::<_, Option<String>>(3).map(|x| x.parse().unwrap()),
        finding: r.get(4),
        remedy: r.get(5),
    })
    .collect()
}

/// No row shows 0/0 for a position the server does not have.
pub fn assert_no_zero_lsn(d: &[DiagRow]) {
    for r in d {
        assert_ne!(r.lsn.as_deref(), Some("0/0"), "{r:#?}");
        assert!(!r.finding.contains(" 0/0"), "{r:#?}");
    }
}
