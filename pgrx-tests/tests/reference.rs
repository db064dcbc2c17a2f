//! `docs/reference.md` against the installed extension: every function, argument, OUT /
//! TABLE column, view, view column and setting of `pg_snapbuild`, as the running server's
//! catalogs list them, must be named in the page, in the section of its own function or
//! view; and every function or view a section heading names must exist.
//!
//! The page's sections are its `## ` headings. A function's section is the one whose
//! heading names it in backticks (`` `snapbuild_trace` `` or `` `snapbuild_trace(…)` ``);
//! one section may name several functions that share their columns. Inside it each name
//! must appear in backticks. Settings (`pg_snapbuild.*` in `pg_settings`, once the library
//! is loaded) must appear in backticks in the section headed `## Settings`.

use pg_snapbuild_tests::*;
use postgres::Client;
use std::collections::BTreeSet;
use std::path::PathBuf;

const EXTENSION: &str = "pg_snapbuild";

/// The page, read from the repository.
fn page() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/reference.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The page cut at its `## ` headings: (heading, body) pairs.
fn sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with("## ") {
            out.push((line.to_owned(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// Whether `heading` names `object` in backticks: `` `object` `` or `` `object(…` ``.
fn heading_names(heading: &str, object: &str) -> bool {
    heading.contains(&format!("`{object}`")) || heading.contains(&format!("`{object}("))
}

/// The names in backticks that start with `snapbuild_` in a heading.
fn named_in_heading(heading: &str) -> BTreeSet<String> {
    heading
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| {
            let name: String = code
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            name.starts_with("snapbuild_").then_some(name)
        })
        .collect()
}

/// An object of the extension and the names its section must mention.
#[derive(Debug)]
struct Member {
    kind: &'static str,
    name: String,
    /// (what, name): arguments, OUT / TABLE columns, view columns.
    names: Vec<(&'static str, String)>,
}

/// The extension's functions (arguments, OUT / TABLE columns) and views (columns), from
/// pg_depend, pg_proc and pg_attribute.
fn members(c: &mut Client) -> Vec<Member> {
    let mut out = Vec::new();
    let funcs = c
        .query(
            "SELECT p.proname::text,
                    coalesce(p.proargnames, '{}')::text[],
                    coalesce(p.proargmodes::text[],
                             array_fill('i'::text, ARRAY[coalesce(array_length(p.proargnames, 1), 0)]))
               FROM pg_depend d
               JOIN pg_extension e ON e.oid = d.refobjid
               JOIN pg_proc p ON p.oid = d.objid
              WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_extension'::regclass
                AND d.deptype = 'e' AND e.extname = $1
              ORDER BY 1",
            &[&EXTENSION],
        )
        .expect("reading the extension's functions");
    for r in funcs {
        let name: String = r.get(0);
        let argnames: Vec<String> = r.get(1);
        let modes: Vec<String> = r.get(2);
        let names = argnames
            .into_iter()
            .zip(modes)
            .filter(|(n, _)| !n.is_empty())
            .map(|(n, m)| {
                let what = match m.as_str() {
                    "o" | "t" => "column",
                    "b" => "argument and column",
                    _ => "argument",
                };
                (what, n)
            })
            .collect();
        out.push(Member {
            kind: "function",
            name,
            names,
        });
    }
    let views = c
        .query(
            "SELECT c.relname::text,
                    array(SELECT a.attname::text FROM pg_attribute a
                           WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                           ORDER BY a.attnum)
               FROM pg_depend d
               JOIN pg_extension e ON e.oid = d.refobjid
               JOIN pg_class c ON c.oid = d.objid
              WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_extension'::regclass
                AND d.deptype = 'e' AND e.extname = $1 AND c.relkind IN ('v', 'm')
              ORDER BY 1",
            &[&EXTENSION],
        )
        .expect("reading the extension's views");
    for r in views {
        let cols: Vec<String> = r.get(1);
        out.push(Member {
            kind: "view",
            name: r.get(0),
            names: cols.into_iter().map(|n| ("column", n)).collect(),
        });
    }
    out
}

/// The extension's settings, once its library is loaded in this session.
fn settings(c: &mut Client) -> Vec<String> {
    // Any call loads the library, whose _PG_init defines the settings.
    c.batch_execute("SELECT count(*) FROM snapbuild_slots()")
        .expect("loading the library");
    query_column(
        c,
        "SELECT name FROM pg_settings WHERE name LIKE $1 ORDER BY 1",
        &[&format!("{EXTENSION}.%")],
        "reading pg_settings",
    )
}

/// Every function, argument, column, view and setting of the installed extension is in
/// docs/reference.md, in its own section; every object a heading names exists.
#[test]
fn reference_names_every_member_of_the_installed_extension() {
    let Some((_serial, _env, mut c)) = start() else {
        return;
    };
    let text = page();
    let secs = sections(&text);
    let members = members(&mut c);
    assert!(
        members.iter().any(|m| m.kind == "function"),
        "no functions found for extension {EXTENSION}: is it installed?"
    );
    let mut missing = Vec::new();
    let mut checked = 0usize;
    for m in &members {
        let own: Vec<&(String, String)> = secs
            .iter()
            .filter(|(h, _)| heading_names(h, &m.name))
            .collect();
        if own.is_empty() {
            missing.push(format!(
                "{} {}: no `## ` heading names it in backticks",
                m.kind, m.name
            ));
            continue;
        }
        for (what, n) in &m.names {
            checked += 1;
            let quoted = format!("`{n}`");
            if !own.iter().any(|(_, body)| body.contains(&quoted)) {
                missing.push(format!(
                    "{} {}: {what} {quoted} is not in its section ({})",
                    m.kind,
                    m.name,
                    own.iter()
                        .map(|(h, _)| h.as_str())
                        .collect::<Vec<_>>()
                        .join(" / ")
                ));
            }
        }
    }
    let settings = settings(&mut c);
    match secs.iter().find(|(h, _)| h.trim() == "## Settings") {
        Some((_, body)) => {
            for s in &settings {
                checked += 1;
                if !body.contains(&format!("`{s}`")) {
                    missing.push(format!("setting `{s}` is not in the Settings section"));
                }
            }
        }
        None if !settings.is_empty() => {
            missing.push(format!(
                "no `## Settings` section, and the extension defines {settings:?}"
            ));
        }
        None => {}
    }
    let known: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    for (h, _) in &secs {
        for n in named_in_heading(h) {
            if !known.contains(n.as_str()) {
                missing.push(format!(
                    "heading {h:?} names {n}, which the installed extension does not have"
                ));
            }
        }
    }
    println!(
        "pgsnap-counts: reference: {} functions and views, {checked} names and settings checked",
        members.len()
    );
    assert!(
        missing.is_empty(),
        "docs/reference.md does not match the installed extension:\n  {}",
        missing.join("\n  ")
    );
}

/// The page's own structure: the section cutting and heading matching the check above
/// relies on (no server needed).
#[test]
fn reference_sections_are_found_by_name() {
    let secs = sections(
        "intro\n## `snapbuild_trace(slot_name name)`, `snapbuild_trace_range(…)`\nbody `lsn`\n\
         ```\n## not a heading\n```\n## Settings\n`pg_snapbuild.x`\n",
    );
    assert_eq!(secs.len(), 2, "{secs:?}");
    assert!(heading_names(&secs[0].0, "snapbuild_trace"));
    assert!(heading_names(&secs[0].0, "snapbuild_trace_range"));
    assert!(!heading_names(&secs[0].0, "snapbuild_trace_json"));
    assert!(secs[0].1.contains("`lsn`") && secs[0].1.contains("## not a heading"));
    assert_eq!(
        named_in_heading(&secs[0].0),
        BTreeSet::from(["snapbuild_trace".into(), "snapbuild_trace_range".into()])
    );
}
