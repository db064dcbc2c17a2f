//! The monitoring kit in `monitoring/` against itself, the regress test that runs its queries
//! and `docs/monitoring.md` (no server needed):
//!
//! - `queries.yaml` is a postgres_exporter query file (namespace -> query, master, metrics of
//!   one column each, usage LABEL / GAUGE / COUNTER with a description); the metrics it makes
//!   are `<namespace>_<column>` for every GAUGE and COUNTER column.
//! - Each of its queries is in `pgrx-tests/regress/sql/monitoring.sql` verbatim, as the
//!   temporary view `<namespace>`; the column list that test prints (its expected output:
//!   namespace, column, type as the server reports them) is the set of columns the file
//!   declares, text for a LABEL and boolean or a number for a GAUGE or COUNTER.
//! - Every metric named in `alerts.yml` (expressions), `alerts.test.yml` (input series) and
//!   `grafana-dashboard.json` (panel targets, variable queries) is one `queries.yaml` makes;
//!   every one it makes is on the dashboard and named in `docs/monitoring.md`, with every alert.
//! - The alerts have the labels and annotations the page describes, their runbook links reach
//!   a heading of `docs/troubleshooting.md`, and each has a promtool unit test that fires it.
//! - The dashboard has a Prometheus data source variable and a slot variable, and every panel
//!   queries through the first.
//! - The metrics an annotation reads with the template function `query` (the blocking pid, the
//!   consumer) are ones `queries.yaml` makes.
//! - With promtool (`$PROMTOOL`, else `promtool` on PATH, else `.work/bin/promtool`, which
//!   `scripts/setup.sh` unpacks from Debian's `prometheus` package): `promtool check rules` on
//!   the alerts and on the dashboard's expressions, and `promtool test rules alerts.test.yml`.

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn yaml(rel: &str) -> Yaml {
    serde_yaml_ng::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"))
}

/// A valid Prometheus metric name part (no colons: those are for recording rules).
fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// One column of a query: its usage and description.
#[derive(Debug)]
struct Column {
    usage: String,
    description: String,
}

/// One namespace of queries.yaml.
#[derive(Debug)]
struct Query {
    text: String,
    columns: Vec<(String, Column)>,
}

fn str_of<'a>(v: &'a Yaml, what: &str, bad: &mut Vec<String>) -> &'a str {
    match v.as_str() {
        Some(s) => s,
        None => {
            bad.push(format!("{what} is not a string: {v:?}"));
            ""
        }
    }
}

/// queries.yaml, checked against postgres_exporter's format (exporter/queries.go: a map of
/// namespace to query, master, cache_seconds, runonserver, metrics).
fn queries(bad: &mut Vec<String>) -> BTreeMap<String, Query> {
    let doc = yaml("monitoring/queries.yaml");
    let Some(map) = doc.as_mapping() else {
        panic!("monitoring/queries.yaml is not a map of namespaces");
    };
    let mut out = BTreeMap::new();
    for (k, spec) in map {
        let ns = str_of(k, "a namespace", bad).to_owned();
        if !is_name(&ns) {
            bad.push(format!("namespace {ns:?} is not a metric name"));
        }
        let Some(spec) = spec.as_mapping() else {
            bad.push(format!("{ns}: not a map"));
            continue;
        };
        for key in spec.keys() {
            let key = str_of(key, "a key", bad);
            if !["query", "master", "metrics", "cache_seconds", "runonserver"].contains(&key) {
                bad.push(format!("{ns}: postgres_exporter knows no key {key:?}"));
            }
        }
        let text = spec
            .get("query")
            .map(|q| str_of(q, &format!("{ns}.query"), bad).to_owned())
            .unwrap_or_else(|| {
                bad.push(format!("{ns}: no query"));
                String::new()
            });
        if !matches!(spec.get("master"), Some(Yaml::Bool(_))) {
            bad.push(format!("{ns}: master must be true or false"));
        }
        let mut columns = Vec::new();
        match spec.get("metrics").and_then(Yaml::as_sequence) {
            None => bad.push(format!("{ns}: no list of metrics")),
            Some(list) => {
                for m in list {
                    let Some(m) = m.as_mapping().filter(|m| m.len() == 1) else {
                        bad.push(format!("{ns}: a metric is not a map of one column: {m:?}"));
                        continue;
                    };
                    let (col, opts) = m.iter().next().unwrap();
                    let col = str_of(col, &format!("{ns}: a column"), bad).to_owned();
                    let field =
                        |f: &str| opts.get(f).and_then(Yaml::as_str).unwrap_or("").to_owned();
                    let c = Column {
                        usage: field("usage"),
                        description: field("description"),
                    };
                    if !["LABEL", "GAUGE", "COUNTER"].contains(&c.usage.as_str()) {
                        bad.push(format!(
                            "{ns}.{col}: usage {:?} (LABEL, GAUGE or COUNTER)",
                            c.usage
                        ));
                    }
                    if c.description.trim().is_empty() {
                        bad.push(format!("{ns}.{col}: no description"));
                    }
                    if !is_name(&col) {
                        bad.push(format!("{ns}.{col}: not a metric name"));
                    }
                    columns.push((col, c));
                }
            }
        }
        if !columns
            .iter()
            .any(|(c, u)| c == "slot_name" && u.usage == "LABEL")
        {
            bad.push(format!("{ns}: no LABEL column slot_name"));
        }
        if !columns.iter().any(|(_, u)| u.usage != "LABEL") {
            bad.push(format!("{ns}: no GAUGE or COUNTER column"));
        }
        out.insert(ns, Query { text, columns });
    }
    out
}

/// The metrics postgres_exporter makes of queries.yaml: `<namespace>_<column>`.
fn produced(q: &BTreeMap<String, Query>, bad: &mut Vec<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (ns, query) in q {
        for (col, c) in &query.columns {
            if c.usage != "LABEL" && !out.insert(format!("{ns}_{col}")) {
                bad.push(format!("metric {ns}_{col} is made twice"));
            }
        }
    }
    out
}

/// The metric names a PromQL expression selects: identifiers that are not function names
/// (followed by `(`), keywords, aggregations, label names in `by (…)` / `on (…)` / …, label matchers
/// (`{…}`), ranges (`[…]`), strings, numbers or Grafana variables (`$x`, `${x}`).
fn promql_metrics(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "atan2",
        "inf",
        "nan",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        // aggregations, which may be followed by `by (…)` before their `(`
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const LABEL_LISTS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let c: Vec<char> = expr.chars().collect();
    let mut out = BTreeSet::new();
    let mut i = 0;
    // the index after the bracket that closes the one at `i`, quotes respected
    let skip_group = |mut i: usize, open: char, close: char| -> usize {
        let mut depth = 0;
        let mut quote: Option<char> = None;
        while i < c.len() {
            match (quote, c[i]) {
                (Some(_), '\\') => i += 1,
                (Some(q), ch) if ch == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'' | '`') => quote = Some(c[i]),
                (None, ch) if ch == open => depth += 1,
                (None, ch) if ch == close => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '"' || ch == '\'' || ch == '`' {
            i += 1;
            while i < c.len() && c[i] != ch {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ch == '{' {
            i = skip_group(i, '{', '}');
        } else if ch == '[' {
            i = skip_group(i, '[', ']');
        } else if ch == '#' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '$' {
            i += 1;
            if i < c.len() && c[i] == '{' {
                i = skip_group(i, '{', '}');
            }
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_') {
                i += 1;
            }
        } else if ch.is_ascii_digit()
            || (ch == '.' && c.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '.' || c[i] == '_') {
                i += 1;
            }
        } else if ch.is_ascii_alphabetic() || ch == '_' || ch == ':' {
            let start = i;
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_' || c[i] == ':') {
                i += 1;
            }
            let ident: String = c[start..i].iter().collect();
            let mut j = i;
            while j < c.len() && c[j].is_whitespace() {
                j += 1;
            }
            let call = j < c.len() && c[j] == '(';
            let lower = ident.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) && call {
                i = skip_group(j, '(', ')');
            } else if !call && !KEYWORDS.contains(&lower.as_str()) {
                out.insert(ident);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The metric of a Grafana `label_values(metric{…}, label)` variable query, if it names one.
fn label_values_metric(q: &str) -> Option<String> {
    let rest = q.trim().strip_prefix("label_values(")?;
    let args = rest.strip_suffix(')')?;
    let mut depth = 0;
    let comma = args.char_indices().rev().find_map(|(i, ch)| {
        match ch {
            '}' => depth += 1,
            '{' => depth -= 1,
            ',' if depth == 0 => return Some(i),
            _ => {}
        }
        None
    })?;
    promql_metrics(&args[..comma]).into_iter().next()
}

/// GitHub's anchors of a Markdown page's headings.
fn anchors(page: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let text = line.trim_start_matches('#').trim();
        out.insert(
            text.to_lowercase()
                .chars()
                .filter(|ch| ch.is_alphanumeric() || *ch == '-' || *ch == '_' || *ch == ' ')
                .map(|ch| if ch == ' ' { '-' } else { ch })
                .collect(),
        );
    }
    out
}

/// The column list monitoring.sql prints (namespace | column_name | column_type), from one of
/// its expected outputs: namespace -> [(column, type)].
fn printed_columns(out: &str) -> Option<BTreeMap<String, Vec<(String, String)>>> {
    let cells = |l: &str| {
        l.split('|')
            .map(|s| s.trim().to_owned())
            .collect::<Vec<_>>()
    };
    let mut lines = out.lines();
    lines.find(|l| cells(l) == ["namespace", "column_name", "column_type"])?;
    lines.next()?; // ----+----
    let mut map: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for l in lines {
        if l.starts_with('(') {
            return Some(map);
        }
        let c = cells(l);
        if c.len() != 3 {
            return None;
        }
        map.entry(c[0].clone())
            .or_default()
            .push((c[1].clone(), c[2].clone()));
    }
    None
}

fn check_regress(q: &BTreeMap<String, Query>, bad: &mut Vec<String>) -> usize {
    let sql = read("pgrx-tests/regress/sql/monitoring.sql");
    for (ns, query) in q {
        let want = format!("CREATE TEMP VIEW {ns} AS\n{};\n", query.text.trim_end());
        if !sql.contains(&want) {
            bad.push(format!(
                "pgrx-tests/regress/sql/monitoring.sql does not have the query of {ns} verbatim:\n{want}"
            ));
        }
    }
    let dir = repo().join("pgrx-tests/regress/expected");
    let mut outs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n == "monitoring.out"
                || n.strip_prefix("monitoring_")
                    .and_then(|r| r.strip_suffix(".out"))
                    .is_some_and(|d| !d.is_empty() && d.chars().all(|ch| ch.is_ascii_digit()))
        })
        .collect();
    outs.sort();
    if outs.is_empty() {
        bad.push("no pgrx-tests/regress/expected/monitoring.out".into());
    }
    const NUMBERS: &[&str] = &[
        "boolean",
        "smallint",
        "integer",
        "bigint",
        "real",
        "double precision",
        "numeric",
    ];
    let mut columns = 0;
    for path in &outs {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let Some(printed) = printed_columns(&text) else {
            bad.push(format!(
                "{name}: no column list (namespace | column_name | column_type)"
            ));
            continue;
        };
        for ns in printed.keys().filter(|ns| !q.contains_key(*ns)) {
            bad.push(format!(
                "{name}: view {ns} is not a namespace of queries.yaml"
            ));
        }
        for (ns, query) in q {
            let got: BTreeMap<&str, &str> = printed
                .get(ns)
                .map(|v| v.iter().map(|(c, t)| (c.as_str(), t.as_str())).collect())
                .unwrap_or_default();
            let declared: BTreeSet<&str> = query.columns.iter().map(|(c, _)| c.as_str()).collect();
            for c in got.keys().filter(|c| !declared.contains(*c)) {
                bad.push(format!(
                    "{name}: {ns} returns column {c}, which queries.yaml does not map (postgres_exporter would make an untyped metric of it)"
                ));
            }
            for (col, c) in &query.columns {
                columns += 1;
                match got.get(col.as_str()) {
                    None => bad.push(format!("{name}: {ns} returns no column {col}")),
                    Some(t) if c.usage == "LABEL" && *t != "text" => {
                        bad.push(format!("{ns}.{col}: a LABEL of type {t} (cast it to text)"))
                    }
                    Some(t) if c.usage != "LABEL" && !NUMBERS.contains(t) => bad.push(format!(
                        "{ns}.{col}: a {} of type {t}, which postgres_exporter cannot read as a number",
                        c.usage
                    )),
                    Some(_) => {}
                }
            }
        }
    }
    columns
}

/// Names a metric `known` does not have, for an error line.
fn unknown(what: &str, names: &BTreeSet<String>, known: &BTreeSet<String>, bad: &mut Vec<String>) {
    if names.is_empty() {
        bad.push(format!("{what}: names no metric"));
    }
    for m in names.difference(known) {
        bad.push(format!(
            "{what}: metric {m} is not one monitoring/queries.yaml makes"
        ));
    }
}

fn check_alerts(known: &BTreeSet<String>, bad: &mut Vec<String>) -> Vec<String> {
    let doc = yaml("monitoring/alerts.yml");
    let trouble = anchors(&read("docs/troubleshooting.md"));
    let mut names = Vec::new();
    let groups = doc
        .get("groups")
        .and_then(Yaml::as_sequence)
        .cloned()
        .unwrap_or_default();
    if groups.is_empty() {
        bad.push("monitoring/alerts.yml: no groups".into());
    }
    for g in &groups {
        for r in g
            .get("rules")
            .and_then(Yaml::as_sequence)
            .cloned()
            .unwrap_or_default()
        {
            let name = r
                .get("alert")
                .and_then(Yaml::as_str)
                .unwrap_or("")
                .to_owned();
            if name.is_empty() {
                bad.push(format!("alerts.yml: a rule without alert: {r:?}"));
                continue;
            }
            let expr = r.get("expr").and_then(Yaml::as_str).unwrap_or("");
            unknown(&format!("alert {name}"), &promql_metrics(expr), known, bad);
            if r.get("for").and_then(Yaml::as_str).is_none() {
                bad.push(format!("alert {name}: no for"));
            }
            let sev = r
                .get("labels")
                .and_then(|l| l.get("severity"))
                .and_then(Yaml::as_str);
            if !matches!(sev, Some("warning" | "critical")) {
                bad.push(format!(
                    "alert {name}: severity {sev:?} (warning or critical)"
                ));
            }
            let ann = |k: &str| {
                r.get("annotations")
                    .and_then(|a| a.get(k))
                    .and_then(Yaml::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            // metrics read by `{{ with printf "metric{…}" … | query }}` in the annotations
            for k in ["summary", "description"] {
                for part in ann(k).split("printf \"").skip(1) {
                    // `printf "%.0f"` formats a value; `printf "metric{…}"` builds a query
                    let metric: String = part
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !metric.is_empty() {
                        unknown(
                            &format!("alert {name}: a query in its {k}"),
                            &BTreeSet::from([metric]),
                            known,
                            bad,
                        );
                    }
                }
            }
            for k in ["summary", "description"] {
                if !ann(k).contains("{{ $labels.slot_name }}") {
                    bad.push(format!("alert {name}: its {k} does not name the slot"));
                }
            }
            if ann("diagnose") != "SELECT * FROM snapbuild_diagnose('{{ $labels.slot_name }}')" {
                bad.push(format!("alert {name}: diagnose is {:?}", ann("diagnose")));
            }
            match ann("runbook").strip_prefix("docs/troubleshooting.md#") {
                Some(a) if trouble.contains(a) => {}
                _ => bad.push(format!(
                    "alert {name}: runbook {:?} is not a heading of docs/troubleshooting.md",
                    ann("runbook")
                )),
            }
            names.push(name);
        }
    }
    // the promtool unit tests: series of known metrics, each alert fired at least once
    let tests = yaml("monitoring/alerts.test.yml");
    if tests
        .get("rule_files")
        .and_then(Yaml::as_sequence)
        .map(|v| v.len())
        != Some(1)
        || tests["rule_files"][0].as_str() != Some("alerts.yml")
    {
        bad.push("alerts.test.yml: rule_files is not [alerts.yml]".into());
    }
    let mut fired = BTreeSet::new();
    for t in tests
        .get("tests")
        .and_then(Yaml::as_sequence)
        .cloned()
        .unwrap_or_default()
    {
        for s in t
            .get("input_series")
            .and_then(Yaml::as_sequence)
            .cloned()
            .unwrap_or_default()
        {
            let series = s.get("series").and_then(Yaml::as_str).unwrap_or("");
            unknown(
                &format!("alerts.test.yml series {series}"),
                &promql_metrics(series),
                known,
                bad,
            );
        }
        for a in t
            .get("alert_rule_test")
            .and_then(Yaml::as_sequence)
            .cloned()
            .unwrap_or_default()
        {
            let fires = a
                .get("exp_alerts")
                .and_then(Yaml::as_sequence)
                .is_some_and(|v| !v.is_empty());
            if let (true, Some(n)) = (fires, a.get("alertname").and_then(Yaml::as_str)) {
                fired.insert(n.to_owned());
            }
        }
    }
    for n in names.iter().filter(|n| !fired.contains(*n)) {
        bad.push(format!("alert {n}: no test in alerts.test.yml fires it"));
    }
    names
}

/// The dashboard's panel target expressions (with the panels of rows), after its checks.
fn check_dashboard(
    known: &BTreeSet<String>,
    bad: &mut Vec<String>,
) -> (Vec<String>, BTreeSet<String>) {
    let text = read("monitoring/grafana-dashboard.json");
    let d: Json =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("grafana-dashboard.json: {e}"));
    if d["schemaVersion"].as_u64().is_none_or(|v| v < 36) {
        bad.push(format!("dashboard: schemaVersion {}", d["schemaVersion"]));
    }
    let vars = d["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let var = |n: &str| vars.iter().find(|v| v["name"] == n).cloned();
    match var("datasource") {
        Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
        v => bad.push(format!(
            "dashboard: no Prometheus data source variable `datasource`: {v:?}"
        )),
    }
    if var("slot").is_none() {
        bad.push("dashboard: no variable `slot`".into());
    }
    let mut used = BTreeSet::new();
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let q = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .unwrap_or("");
        match label_values_metric(q) {
            Some(m) => {
                unknown(
                    &format!("dashboard variable {}", v["name"]),
                    &BTreeSet::from([m.clone()]),
                    known,
                    bad,
                );
                used.insert(m);
            }
            None => bad.push(format!(
                "dashboard variable {}: not label_values(metric, label): {q}",
                v["name"]
            )),
        }
        if v["datasource"]["uid"] != "${datasource}" {
            bad.push(format!(
                "dashboard variable {}: not queried through $datasource",
                v["name"]
            ));
        }
    }
    let mut exprs = Vec::new();
    let mut ids = BTreeSet::new();
    let mut stack: Vec<Json> = d["panels"].as_array().cloned().unwrap_or_default();
    while let Some(p) = stack.pop() {
        stack.extend(p["panels"].as_array().cloned().unwrap_or_default());
        let title = p["title"].as_str().unwrap_or("").to_owned();
        if !ids.insert(p["id"].as_u64().unwrap_or(0)) {
            bad.push(format!(
                "dashboard panel {title:?}: id {} is not unique",
                p["id"]
            ));
        }
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            bad.push(format!("dashboard panel {title:?}: no targets"));
        }
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or("").to_owned();
            let names = promql_metrics(&expr);
            unknown(&format!("dashboard panel {title:?}"), &names, known, bad);
            if !expr.contains("slot_name=~\"$slot\"") {
                bad.push(format!(
                    "dashboard panel {title:?}: {expr} does not select slot_name=~\"$slot\""
                ));
            }
            used.extend(names);
            exprs.push(expr);
        }
        for ds in [&p["datasource"]].into_iter().chain(
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| &t["datasource"]),
        ) {
            if ds["uid"] != "${datasource}" {
                bad.push(format!(
                    "dashboard panel {title:?}: data source {ds} is not $datasource"
                ));
            }
        }
    }
    for m in known.difference(&used) {
        bad.push(format!("dashboard: metric {m} is on no panel"));
    }
    (exprs, used)
}

/// promtool: `$PROMTOOL`, else `promtool` on PATH, else `.work/bin/promtool` (scripts/setup.sh).
fn promtool() -> PathBuf {
    if let Some(p) = std::env::var_os("PROMTOOL") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("promtool").is_file()))
        .unwrap_or(false);
    let local = repo().join(".work/bin/promtool");
    if !on_path && local.is_file() {
        local
    } else {
        PathBuf::from("promtool")
    }
}

/// promtool, if there is one: the rules, their unit tests, the dashboard's expressions.
fn check_promtool(exprs: &[String], bad: &mut Vec<String>) -> bool {
    let dir = repo().join("monitoring");
    let tool = promtool();
    let run = |args: &[&str], cwd: &Path| Command::new(&tool).args(args).current_dir(cwd).output();
    match run(&["--version"], &dir) {
        Err(_) => {
            println!(
                "no promtool (PROMTOOL, PATH, .work/bin): promtool check rules / test rules skipped"
            );
            return false;
        }
        Ok(o) => println!(
            "{}",
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("promtool")
        ),
    }
    let tmp =
        std::env::temp_dir().join(format!("pgsnap-dashboard-rules-{}.yml", std::process::id()));
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e.replace("$server", ".*").replace("$slot", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:expr_{i}\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    std::fs::write(&tmp, rules).unwrap();
    let tmp_s = tmp.to_string_lossy().into_owned();
    for args in [
        vec!["check", "rules", "alerts.yml"],
        vec!["test", "rules", "alerts.test.yml"],
        vec!["check", "rules", tmp_s.as_str()],
    ] {
        let o = run(&args, &dir).expect("promtool");
        if !o.status.success() {
            bad.push(format!(
                "promtool {}:\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
    }
    let _ = std::fs::remove_file(&tmp);
    true
}

#[test]
fn monitoring_kit_is_consistent() {
    let mut bad = Vec::new();
    let q = queries(&mut bad);
    let known = produced(&q, &mut bad);
    let columns = check_regress(&q, &mut bad);
    let alerts = check_alerts(&known, &mut bad);
    let (exprs, _) = check_dashboard(&known, &mut bad);
    let page = read("docs/monitoring.md");
    for n in known.iter().chain(alerts.iter()) {
        if !page.contains(&format!("`{n}`")) {
            bad.push(format!("docs/monitoring.md does not name `{n}`"));
        }
    }
    let promtool = check_promtool(&exprs, &mut bad);
    println!(
        "pgsnap-counts: monitoring: {} queries, {columns} columns, {} metrics, {} alerts, {} dashboard expressions, promtool {}",
        q.len(),
        known.len(),
        alerts.len(),
        exprs.len(),
        if promtool { "run" } else { "not found" }
    );
    assert!(
        bad.is_empty(),
        "the monitoring kit is inconsistent:\n  {}",
        bad.join("\n  ")
    );
}

/// The PromQL, Markdown and psql-table readers above on known inputs.
#[test]
fn monitoring_readers() {
    let m = |e: &str| promql_metrics(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        m(
            r#"sum by (slot_name) (rate(a_total{x="}", y=~"$slot"}[5m] offset 1h)) / on(server) group_left(z) b > bool 3e3 and ignoring (q) c unless d or vector(0)"#
        ),
        ["a_total", "b", "c", "d"]
    );
    assert_eq!(
        m("snapbuild_x and snapbuild_y == 1"),
        ["snapbuild_x", "snapbuild_y"]
    );
    assert_eq!(m("deriv(x[$__rate_interval]) > 0.5 # y"), ["x"]);
    assert_eq!(m(r#"z{slot_name="a b"}"#), ["z"]);
    assert_eq!(
        label_values_metric(
            r#"label_values(snapbuild_slot_in_creation{server=~"$server"}, slot_name)"#
        )
        .as_deref(),
        Some("snapbuild_slot_in_creation")
    );
    assert_eq!(label_values_metric("label_values(slot_name)"), None);
    let a = anchors("# T\n## 5. restart_lsn does not move\n```\n## no\n```\n## 1. Slot creation hangs: a session idle in transaction\n");
    assert!(a.contains("5-restart_lsn-does-not-move"));
    assert!(a.contains("1-slot-creation-hangs-a-session-idle-in-transaction"));
    assert!(!a.contains("no"));
    let cols = printed_columns(
        "x\n namespace | column_name | column_type \n-----+-----+-----\n a | slot_name | text\n a | v | bigint\n(2 rows)\n",
    )
    .unwrap();
    assert_eq!(
        cols["a"],
        [
            ("slot_name".into(), "text".into()),
            ("v".into(), "bigint".into())
        ]
    );
}
