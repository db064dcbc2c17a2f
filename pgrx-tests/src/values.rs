//! Values: LSNs, xids, server errors, a query's first column, query rows as JSON objects.

use postgres::types::{FromSqlOwned, ToSql};
use postgres::Client;
use serde_json::{Map, Value};

/// A query row as a JSON object (see [`json_rows`]).
pub type Row = Map<String, Value>;

/// `SQLSTATE: message` of a server error, or the client error's text.
pub fn err_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// (SQLSTATE, message) of a server error; panics on a client-side error.
pub fn db_err(e: &postgres::Error) -> (String, String) {
    match e.as_db_error() {
        Some(d) => (d.code().code().to_string(), d.message().to_string()),
        None => panic!("expected a server error, got {e}"),
    }
}

/// `%X/%X` → u64.
pub fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s
        .split_once('/')
        .unwrap_or_else(|| panic!("not an LSN: {s:?}"));
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

pub fn fmt_lsn(l: u64) -> String {
    format!("{:X}/{:X}", l >> 32, l & 0xffff_ffff)
}

/// The 32-bit xid of a full one (the diagnosis's `xid` column).
pub fn xid32(full: u64) -> u64 {
    full & 0xffff_ffff
}

/// The first column of every row of a query, in row order; a server error fails the test
/// with `what` and the error's text.
pub fn query_column<T: FromSqlOwned>(
    c: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    what: &str,
) -> Vec<T> {
    c.query(sql, params)
        .unwrap_or_else(|e| panic!("{what}: {}", err_text(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Rows of a query as JSON objects (`to_jsonb` of each row: xid/pg_lsn become strings).
pub fn json_rows(
    c: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, postgres::Error> {
    let q = format!("SELECT to_jsonb(t)::text FROM ({sql}) t");
    let rows = c.query(q.as_str(), params)?;
    Ok(rows
        .iter()
        .map(|r| {
            let s: String = r.get(0);
            match serde_json::from_str::<Value>(&s).unwrap() {
                Value::Object(m) => m,
                v => panic!("not an object: {v}"),
            }
        })
        .collect())
}

pub fn js(r: &Row, k: &str) -> Option<String> {
    match r.get(k) {
        None => panic!("column {k} missing in row {}", Value::Object(r.clone())),
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    }
}

pub fn jb(r: &Row, k: &str) -> Option<bool> {
    match r.get(k) {
        None => panic!("column {k} missing in row {}", Value::Object(r.clone())),
        Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => panic!("column {k} is not a boolean: {v}"),
    }
}

pub fn jlsn(r: &Row, k: &str) -> Option<u64> {
    js(r, k).map(|s| parse_lsn(&s))
}

pub fn jxid(r: &Row, k: &str) -> Option<u64> {
    js(r, k).map(|s| {
        s.parse()
            .unwrap_or_else(|_| panic!("column {k}: not an xid: {s}"))
    })
}

/// A number column of a row (`None` for NULL).
pub fn jnum(r: &Row, k: &str) -> Option<i64> {
    match r.get(k) {
        None => panic!("column {k} missing"),
        Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => n.as_i64(),
        Some(v) => panic!("column {k} is not a number: {v}"),
    }
}

pub fn jxids(r: &Row, k: &str) -> Option<Vec<u64>> {
    match r.get(k) {
        None => panic!("column {k} missing in row {}", Value::Object(r.clone())),
        Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| match v {
                    Value::String(s) => s.parse().unwrap(),
                    Value::Number(n) => n.as_u64().unwrap(),
                    v => panic!("column {k}: not an xid: {v}"),
                })
                .collect(),
        ),
        Some(v) => panic!("column {k} is not an array: {v}"),
    }
}

pub fn show(r: &Row) -> String {
    Value::Object(r.clone()).to_string()
}

/// A text column of a row that may lack it (NULL and missing alike: `None`).
pub fn js_opt(r: &Row, k: &str) -> Option<String> {
    match r.get(k) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    }
}
