//! The core's layering, checked from its sources.
//!
//! Every `.rs` file of the crate (this `tests/` folder aside) is a module; an edge A → B
//! is a `crate::…` path in A's source (a `use`, a path in code, a doc link) that names B
//! or an item of B, and a `pub use` of B in `lib.rs` or a `mod.rs`. The test asserts that
//! (a) the header modules (`include/`) refer only to header modules, and (b) the module
//! graph has no cycle. It prints the edges it found (`-- --nocapture`), and the offending
//! edges, with the line each comes from, when it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path below the crate root (`""` for the root, `replication::decode`).
type Module = String;

/// Where an edge was seen: file and line.
type Evidence = (String, usize);

fn rs_files(dir: &Path, top: bool, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            // Integration tests and build output are not modules of the crate.
            if !(top && (name == "tests" || name == "target")) {
                rs_files(&p, false, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// `lib.rs` → root, `a/mod.rs` → `a`, `a/b.rs` → `a::b`.
fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if !(stem == "mod" || (stem == "lib" && parts.is_empty())) {
        parts.push(stem.to_owned());
    }
    parts.join("::")
}

fn skip_ws(s: &[u8], i: &mut usize) {
    while *i < s.len() && s[*i].is_ascii_whitespace() {
        *i += 1;
    }
}

/// Parses one use-tree at `s[*i..]` (`a::b::C`, `a::{b, c::D}`, `a::*`, `a::{self, B}`),
/// pushing every full path it names onto `out`, each prefixed with `prefix`.
fn use_tree(s: &[u8], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    skip_ws(s, i);
    if *i < s.len() && s[*i] == b'{' {
        *i += 1;
        loop {
            skip_ws(s, i);
            if *i >= s.len() {
                return;
            }
            if s[*i] == b'}' {
                *i += 1;
                return;
            }
            let before = *i;
            use_tree(s, i, prefix.clone(), out);
            skip_ws(s, i);
            if *i < s.len() && s[*i] == b',' {
                *i += 1;
            } else if *i == before {
                // Not a use-tree after all (prose in a comment): stop here.
                return;
            }
        }
    }
    if *i < s.len() && s[*i] == b'*' {
        *i += 1;
        out.push(prefix);
        return;
    }
    let start = *i;
    while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
        *i += 1;
    }
    let ident = String::from_utf8_lossy(&s[start..*i]).into_owned();
    if ident.is_empty() || ident == "self" {
        out.push(prefix);
        return;
    }
    let mut path = prefix;
    path.push(ident);
    if s[*i..].starts_with(b"::") {
        *i += 2;
        use_tree(s, i, path, out);
    } else {
        out.push(path);
    }
}

/// Every path named after `crate::` in `src`, with its line number.
fn crate_paths(src: &str) -> Vec<(Vec<String>, usize)> {
    let s = src.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = src[from..].find("crate::") {
        let at = from + k;
        from = at + "crate::".len();
        if at > 0 && (s[at - 1].is_ascii_alphanumeric() || s[at - 1] == b'_') {
            continue;
        }
        let line = src[..at].matches('\n').count() + 1;
        let mut i = from;
        let mut paths = Vec::new();
        use_tree(s, &mut i, Vec::new(), &mut paths);
        out.extend(paths.into_iter().map(|p| (p, line)));
    }
    out
}

/// The paths a `lib.rs` / `mod.rs` re-exports relative to itself (`pub use a::B;`).
fn relative_reexports(src: &str, here: &Module) -> Vec<(Vec<String>, usize)> {
    let mut out = Vec::new();
    for (n, line) in src.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("pub use ") else {
            continue;
        };
        if rest.starts_with("crate::") || rest.starts_with("super::") {
            continue; // crate:: paths are read by crate_paths
        }
        let rest = rest.strip_prefix("self::").unwrap_or(rest);
        let prefix: Vec<String> = here
            .split("::")
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        let mut paths = Vec::new();
        use_tree(rest.as_bytes(), &mut 0, prefix, &mut paths);
        out.extend(paths.into_iter().map(|p| (p, n + 1)));
    }
    out
}

/// The module a path lands in: its longest prefix that is a module (the root at least).
fn resolve(path: &[String], modules: &BTreeSet<Module>) -> Module {
    (0..=path.len())
        .rev()
        .map(|k| path[..k].join("::"))
        .find(|m| modules.contains(m))
        .unwrap_or_default()
}

fn is_header(m: &str) -> bool {
    m == "include" || m.starts_with("include::")
}

fn show(m: &str) -> &str {
    if m.is_empty() {
        "crate (lib.rs)"
    } else {
        m
    }
}

/// The edges of the crate at `root`, each with where it was first seen.
fn edges(root: &Path) -> BTreeMap<(Module, Module), Evidence> {
    let mut files = Vec::new();
    rs_files(root, true, &mut files);
    let rel = |p: &PathBuf| p.strip_prefix(root).expect("below the root").to_path_buf();
    let modules: BTreeSet<Module> = files.iter().map(|p| module_of(&rel(p))).collect();
    let mut out: BTreeMap<(Module, Module), Evidence> = BTreeMap::new();
    for f in &files {
        let r = rel(f);
        let from = module_of(&r);
        let src = std::fs::read_to_string(f).expect("readable source");
        let mut paths = crate_paths(&src);
        let name = r.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "mod.rs" || (name == "lib.rs" && from.is_empty()) {
            paths.extend(relative_reexports(&src, &from));
        }
        for (p, line) in paths {
            let to = resolve(&p, &modules);
            if to != from {
                out.entry((from.clone(), to))
                    .or_insert_with(|| (r.display().to_string(), line));
            }
        }
    }
    out
}

/// A cycle of the graph, as its edges, if there is one.
fn find_cycle(edges: &BTreeSet<(Module, Module)>) -> Option<Vec<(Module, Module)>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    // 0 unvisited, 1 on the current path, 2 done.
    let mut mark: BTreeMap<&str, u8> = next.keys().map(|k| (*k, 0)).collect();
    fn visit<'a>(
        n: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        mark: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        mark.insert(n, 1);
        path.push(n);
        for &m in &next[n] {
            match mark[m] {
                1 => {
                    let at = path.iter().position(|p| *p == m).expect("on the path");
                    let mut c = path[at..].to_vec();
                    c.push(m);
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, next, mark, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        mark.insert(n, 2);
        None
    }
    let nodes: Vec<&str> = next.keys().copied().collect();
    for n in nodes {
        if mark[n] == 0 {
            if let Some(c) = visit(n, &next, &mut mark, &mut Vec::new()) {
                return Some(
                    c.windows(2)
                        .map(|w| (w[0].to_owned(), w[1].to_owned()))
                        .collect(),
                );
            }
        }
    }
    None
}

#[test]
fn headers_stay_headers_and_modules_form_no_cycle() {
    // The reader first, on a sample of every shape it must understand.
    let sample = "use crate::a::{b::C, d::{self, E}, f::*};\n/// [`X`]: crate::g::X\nlet x = my_crate::h::Y; crate::i::j(crate::k::L);";
    let got: Vec<String> = crate_paths(sample)
        .into_iter()
        .map(|(p, _)| p.join("::"))
        .collect();
    assert_eq!(
        got,
        ["a::b::C", "a::d", "a::d::E", "a::f", "g::X", "i::j", "k::L"],
        "the path reader"
    );

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = edges(root);
    let by_module: BTreeMap<&str, Vec<&str>> =
        found.keys().fold(BTreeMap::new(), |mut m, (a, b)| {
            m.entry(show(a)).or_insert_with(Vec::new).push(show(b));
            m
        });
    println!("module edges ({}):", found.len());
    for (a, bs) in &by_module {
        println!("  {a} -> {}", bs.join(", "));
    }
    // Not vacuous: the edges every version of the split has.
    for (a, b) in [
        ("replication::decode", "replication::snapbuild"),
        ("replication::snapbuild", "replication::reorderbuffer"),
        ("replication::snapbuild", "include::transam"),
    ] {
        assert!(
            found.contains_key(&(a.to_owned(), b.to_owned())),
            "expected edge {a} -> {b} not found: the reader is broken"
        );
    }

    let header_violations: Vec<String> = found
        .iter()
        .filter(|((a, b), _)| is_header(a) && !is_header(b))
        .map(|((a, b), (f, l))| format!("{} -> {} ({f}:{l})", show(a), show(b)))
        .collect();
    assert!(
        header_violations.is_empty(),
        "header modules refer to non-header modules:\n  {}",
        header_violations.join("\n  ")
    );

    let keys: BTreeSet<(Module, Module)> = found.keys().cloned().collect();
    if let Some(cycle) = find_cycle(&keys) {
        let text: Vec<String> = cycle
            .iter()
            .map(|e| {
                let (f, l) = &found[e];
                format!("{} -> {} ({f}:{l})", show(&e.0), show(&e.1))
            })
            .collect();
        panic!("import cycle between modules:\n  {}", text.join("\n  "));
    }
}

/// The extension around the core (`src/` beside this crate) calls only downwards:
/// `sql` → `context` → `adapter` → core. A file of a lower layer naming a higher one
/// (`crate::sql`, `crate::context`) fails the test with the line; the core must not name
/// pgrx or `pg_sys` at all.
#[test]
fn extension_layers_call_only_downwards() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = core.parent().expect("src/");
    let rules: [(&str, &[&str]); 2] = [
        ("adapter", &["crate::sql", "crate::context"]),
        ("context", &["crate::sql"]),
    ];
    let mut bad = Vec::new();
    let mut files_read = 0;
    for (layer, forbidden) in rules {
        let mut files = Vec::new();
        rs_files(&src.join(layer), false, &mut files);
        for f in files {
            files_read += 1;
            let text = std::fs::read_to_string(&f).expect("read");
            for (i, line) in text.lines().enumerate() {
                if forbidden.iter().any(|p| line.contains(p)) {
                    bad.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
        }
    }
    let mut core_files = Vec::new();
    rs_files(core, true, &mut core_files);
    for f in core_files {
        let text = std::fs::read_to_string(&f).expect("read");
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("pgrx") || code.contains("pg_sys") {
                bad.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        files_read >= 8,
        "only {files_read} files of src/adapter and src/context read"
    );
    assert!(
        bad.is_empty(),
        "references against the layering:\n{}",
        bad.join("\n")
    );
}
