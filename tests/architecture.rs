//! The layering that ARCHITECTURE.md declares, checked against the sources.
//!
//! Three rules, read from the code itself (no compiler involved):
//! 1. a top-level module imports only modules on a lower floor of the table in
//!    ARCHITECTURE.md (never one on its own floor or above);
//! 2. no two source files import each other, directly or through others (no import circle);
//! 3. ARCHITECTURE.md's map names every module down to the second level (`proxy::session`,
//!    `generation`) and names none that does not exist.
//!
//! Imports are the `crate::…`, `super::…` and `self::…` paths of `use` declarations (`pub use`
//! included) and of paths written inline; a parent's `pub use child::Item` names no
//! `crate`/`super`/`self` and is not one. Comments, string literals and test modules
//! (`#[cfg(test)]` items and `tests.rs` files) are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One source file: its module path (`["store", "redis", "mod"]` is stored as `["store",
/// "redis"]`), and whether it is a `mod.rs`/`lib.rs` (its `super` is one level higher).
#[derive(Debug, Clone)]
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    is_mod_root: bool,
}

fn collect(dir: &Path, root: &Path, out: &mut Vec<SourceFile>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, root, out);
            continue;
        }
        if p.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let rel = p.strip_prefix(root).expect("under src");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        let last = parts.last().cloned().unwrap_or_default();
        if last == "tests" || parts == ["main"] {
            continue;
        }
        let is_mod_root = last == "mod" || parts == ["lib"];
        if is_mod_root {
            parts.pop();
        }
        out.push(SourceFile {
            path: p,
            module: parts,
            is_mod_root,
        });
    }
}

/// The source with comments, string and char literals blanked out, and `#[cfg(test)]`
/// items removed.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
            continue;
        }
        if c == b'r' && matches!(b.get(i + 1), Some(b'#') | Some(b'"')) && !ident_byte_before(b, i)
        {
            // raw string r"…" or r#"…"#
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) == Some(&b'"') {
                j += 1;
                loop {
                    if j >= b.len() {
                        break;
                    }
                    if b[j] == b'"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&b'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
                continue;
            }
        }
        if c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                if b[j] == b'\\' {
                    j += 1;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + 1;
            continue;
        }
        if c == b'\'' {
            // a char literal ('a', '\n', '\u{..}'); a lifetime has no closing quote nearby
            let close = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .take(10)
                    .position(|&x| x == b'\'')
                    .map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                None
            };
            if let Some(end) = close {
                out.push_str("' '");
                i = end + 1;
                continue;
            }
        }
        out.push(c as char);
        i += 1;
    }
    strip_cfg_test(&out)
}

fn ident_byte_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// Removes every item that follows a `#[cfg(test)]` attribute (up to its `;` or its
/// balanced `{…}`).
fn strip_cfg_test(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let b = after.as_bytes();
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, &c) in b.iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Expands one `use` tree (`a::{b, c::{d, e}}`) into its full paths.
fn expand_use(tree: &str) -> Vec<String> {
    // `a as b` keeps its meaning as `a@b`; every other space goes.
    let spaced: Vec<&str> = tree.split_whitespace().collect();
    let tree = spaced.join(" ").replace(" as ", "@").replace(' ', "");
    let mut out = Vec::new();
    expand_into("", &tree, &mut out);
    out
}

fn expand_into(prefix: &str, tree: &str, out: &mut Vec<String>) {
    if let Some(open) = tree.find('{') {
        let head = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut depth = 0;
        let mut start = 0;
        let mut parts = Vec::new();
        for (k, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[start..k]);
                    start = k + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        for p in parts.into_iter().filter(|p| !p.is_empty()) {
            expand_into(&format!("{prefix}{head}"), p, out);
        }
    } else {
        let path = tree.split('@').next().unwrap_or(tree);
        out.push(
            format!("{prefix}{path}")
                .trim_end_matches("::self")
                .to_string(),
        );
    }
}

/// The paths one file imports: `use` declarations and inline
/// `crate::`/`super::`/`self::` paths, each as written.
fn imported_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    let mut without_uses = String::new();
    loop {
        let Some(at) = find_use(rest) else {
            without_uses.push_str(rest);
            break;
        };
        let before = &rest[..at];
        without_uses.push_str(before);
        let stmt_end = rest[at..].find(';').map(|e| at + e).unwrap_or(rest.len());
        let tree = rest[at + 4..stmt_end].trim();
        paths.extend(expand_use(tree));
        rest = &rest[(stmt_end + 1).min(rest.len())..];
    }
    let b = without_uses.as_bytes();
    for anchor in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(k) = without_uses[from..].find(anchor) {
            let start = from + k;
            from = start + anchor.len();
            if ident_byte_before(b, start) || (start >= 2 && &b[start - 2..start] == b"::") {
                continue;
            }
            let mut end = start;
            while end < b.len()
                && (b[end].is_ascii_alphanumeric() || b[end] == b'_' || b[end] == b':')
            {
                end += 1;
            }
            paths.push(without_uses[start..end].trim_end_matches(':').to_string());
        }
    }
    paths
}

/// The paths that start with a module name in scope (`pages::held::page`), each with its
/// crate-absolute segments.
fn alias_paths(code: &str, aliases: &BTreeMap<String, Vec<String>>) -> Vec<(String, Vec<String>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (name, abs) in aliases {
        let needle = format!("{name}::");
        let mut from = 0;
        while let Some(k) = code[from..].find(&needle) {
            let start = from + k;
            from = start + needle.len();
            if ident_byte_before(b, start) || (start >= 2 && &b[start - 2..start] == b"::") {
                continue;
            }
            let mut end = from;
            while end < b.len()
                && (b[end].is_ascii_alphanumeric() || b[end] == b'_' || b[end] == b':')
            {
                end += 1;
            }
            let written = code[start..end].trim_end_matches(':').to_string();
            let mut full = abs.clone();
            full.extend(
                written
                    .split("::")
                    .skip(1)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            out.push((written, full));
        }
    }
    out
}

/// The byte offset of the next `use` keyword that starts a declaration.
fn find_use(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(k) = s[from..].find("use ") {
        let at = from + k;
        if !ident_byte_before(b, at) {
            return Some(at);
        }
        from = at + 4;
    }
    None
}

/// Resolves a path as written in `file` to the crate-absolute segments.
fn absolute(file: &SourceFile, path: &str) -> Option<Vec<String>> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let first = *segs.first()?;
    // The module a `super`/`self` path starts from: a mod.rs is its module; a leaf file
    // `a/b.rs` is module a::b too, and `super` of both is the parent module.
    let mut base: Vec<String> = file.module.clone();
    let mut rest = &segs[..];
    match first {
        "crate" => {
            base.clear();
            rest = &segs[1..];
        }
        "self" => rest = &segs[1..],
        "super" => {
            while rest.first() == Some(&"super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let _ = file.is_mod_root;
    base.extend(rest.iter().map(|s| s.to_string()));
    Some(base)
}

/// The file that defines the longest prefix of `abs`.
fn target_file(files: &BTreeMap<Vec<String>, usize>, abs: &[String]) -> Option<usize> {
    (1..=abs.len())
        .rev()
        .find_map(|n| files.get(&abs[..n].to_vec()).copied())
}

/// The floors declared in ARCHITECTURE.md: rows `| N | `module` | …`.
fn declared_floors(doc: &str) -> BTreeMap<String, u32> {
    let mut floors = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[0].is_empty() {
            continue;
        }
        let Ok(floor) = cells[1].parse::<u32>() else {
            continue;
        };
        for m in cells[2].split(',') {
            let m = m.trim().trim_matches('`');
            if !m.is_empty() {
                floors.insert(m.to_string(), floor);
            }
        }
    }
    floors
}

/// The modules the map of ARCHITECTURE.md names: the first cell of each table row under
/// `## Map`, a module path in backticks (`proxy::session`).
fn mapped_modules(doc: &str) -> BTreeSet<String> {
    let mut mapped = BTreeSet::new();
    let mut in_map = false;
    for line in doc.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            in_map = title.trim() == "Map";
            continue;
        }
        if !in_map {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 3 || !cells[0].is_empty() {
            continue;
        }
        let name = cells[1];
        if name.len() > 2 && name.starts_with('`') && name.ends_with('`') {
            mapped.insert(name.trim_matches('`').to_string());
        }
    }
    mapped
}

/// Every module down to the second level, as the map names them (`store::redis`, `time`).
fn modules_to_map(files: &[SourceFile]) -> BTreeSet<String> {
    files
        .iter()
        .filter(|f| !f.module.is_empty())
        .map(|f| {
            f.module
                .iter()
                .take(2)
                .cloned()
                .collect::<Vec<_>>()
                .join("::")
        })
        .collect()
}

struct Graph {
    files: Vec<SourceFile>,
    /// file → (imported file, the path as written).
    edges: Vec<Vec<(usize, String)>>,
}

fn read_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    collect(src, src, &mut files);
    let index: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let mut edges = vec![Vec::new(); files.len()];
    for (i, f) in files.iter().enumerate() {
        let text = fs::read_to_string(&f.path).expect("source file");
        let code = code_only(&text);
        let mut seen = BTreeSet::new();
        // Imported module names (`use super::pages;`), through which later paths
        // (`pages::held::page`) reach files. A parent naming its own child modules
        // (`mod routes;` then `routes::route`) is containment, not an import.
        let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut found = Vec::new();
        for p in imported_paths(&code) {
            let Some(abs) = absolute(f, &p) else { continue };
            if index.contains_key(&abs) {
                if let Some(last) = abs.last() {
                    aliases.insert(last.clone(), abs.clone());
                }
            }
            found.push((p, abs));
        }
        found.extend(alias_paths(&code, &aliases));
        for (p, abs) in found {
            let Some(t) = target_file(&index, &abs) else {
                continue;
            };
            // A file naming itself is not an import.
            if t != i && seen.insert(t) {
                edges[i].push((t, p));
            }
        }
    }
    Graph { files, edges }
}

/// Strongly connected components with more than one file (Tarjan, iterative).
fn circles(g: &Graph) -> Vec<Vec<usize>> {
    let n = g.files.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut ei)) = work.last_mut() {
            if *ei == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&(w, _)) = g.edges[v].get(*ei) {
                *ei += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = stack.pop().expect("on stack");
                    on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    out.push(comp);
                }
            }
        }
    }
    out
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_module_imports_only_lower_floors() {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let floors = declared_floors(&doc);
    assert!(
        floors.len() >= 5,
        "ARCHITECTURE.md declares floors: {floors:?}"
    );
    let g = read_graph(&root().join("src"));
    let mut wrong = Vec::new();
    for (i, f) in g.files.iter().enumerate() {
        let Some(top) = f.module.first() else {
            continue;
        };
        let Some(&mine) = floors.get(top) else {
            wrong.push(format!(
                "module `{top}` ({}) has no floor in ARCHITECTURE.md",
                f.path.display()
            ));
            continue;
        };
        for (t, written) in &g.edges[i] {
            let Some(other) = g.files[*t].module.first() else {
                continue;
            };
            if other == top {
                continue;
            }
            let theirs = floors.get(other).copied().unwrap_or(u32::MAX);
            if theirs >= mine {
                wrong.push(format!(
                    "{} (`{top}`, floor {mine}) imports `{written}` (`{other}`, floor {theirs})",
                    f.path.strip_prefix(root()).unwrap_or(&f.path).display()
                ));
            }
        }
    }
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_import_circles_between_files() {
    let g = read_graph(&root().join("src"));
    let found = circles(&g);
    let text: Vec<String> = found
        .iter()
        .map(|c| {
            let names: Vec<String> = c
                .iter()
                .map(|&i| {
                    let f = &g.files[i];
                    let arrows: Vec<String> = g.edges[i]
                        .iter()
                        .filter(|(t, _)| c.contains(t))
                        .map(|(_, p)| p.clone())
                        .collect();
                    format!(
                        "  {} -> {}",
                        f.path.strip_prefix(root()).unwrap_or(&f.path).display(),
                        arrows.join(", ")
                    )
                })
                .collect();
            names.join("\n")
        })
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", text.join("\n--\n"));
}

#[test]
fn the_map_names_every_module_and_no_other() {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mapped = mapped_modules(&doc);
    let mut files = Vec::new();
    let src = root().join("src");
    collect(&src, &src, &mut files);
    let present = modules_to_map(&files);
    let unmapped: Vec<_> = present.difference(&mapped).collect();
    let stale: Vec<_> = mapped.difference(&present).collect();
    assert!(
        unmapped.is_empty(),
        "modules the map in ARCHITECTURE.md (## Map) does not name: {unmapped:?}"
    );
    assert!(
        stale.is_empty(),
        "modules the map in ARCHITECTURE.md (## Map) names that do not exist: {stale:?}"
    );
}

#[test]
fn the_map_is_read_from_its_section_only() {
    let doc = "## Floors\n| `elsewhere` | x |\n## Map\n| module | holds |\n|---|---|\n| `proxy` | the session |\n| `proxy::session` | its state |\n## Where to look\n| `not::this` | y |\n";
    let m = mapped_modules(doc);
    assert_eq!(
        m.into_iter().collect::<Vec<_>>(),
        vec!["proxy".to_string(), "proxy::session".to_string()]
    );
    let f = |m: &[&str]| SourceFile {
        path: PathBuf::new(),
        module: m.iter().map(|s| s.to_string()).collect(),
        is_mod_root: false,
    };
    let present = modules_to_map(&[f(&["store", "redis", "failover"]), f(&["time"]), f(&[])]);
    assert_eq!(
        present.into_iter().collect::<Vec<_>>(),
        vec!["store::redis".to_string(), "time".to_string()]
    );
}

#[test]
fn use_trees_expand_to_full_paths() {
    assert_eq!(
        expand_use("crate::a::{b, c::{d, e as f}, self}"),
        vec![
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "crate::a"
        ]
    );
    assert_eq!(expand_use("super::x::Y"), vec!["super::x::Y"]);
}

#[test]
fn comments_strings_and_tests_are_not_imports() {
    let code = code_only(
        "// use crate::a;\nlet s = \"crate::b\";\n#[cfg(test)]\nmod tests { use crate::c; }\nuse crate::d::E;\npub use crate::f::G;\n",
    );
    assert_eq!(imported_paths(&code), vec!["crate::d::E", "crate::f::G"]);
}

#[test]
fn a_circle_is_found() {
    let f = |m: &str| SourceFile {
        path: PathBuf::from(m),
        module: vec![m.to_string()],
        is_mod_root: false,
    };
    let g = Graph {
        files: vec![f("a"), f("b"), f("c")],
        edges: vec![
            vec![(1, "crate::b".into())],
            vec![(0, "crate::a".into())],
            vec![(0, "crate::a".into())],
        ],
    };
    assert_eq!(circles(&g), vec![vec![0, 1]]);
}

#[test]
fn floors_are_read_from_the_table() {
    let doc = "| floor | modules | owns |\n|---|---|---|\n| 1 | `smtp`, `limit` | x |\n| 2 | `store` | y |\n";
    let f = declared_floors(doc);
    assert_eq!(f.get("smtp"), Some(&1));
    assert_eq!(f.get("limit"), Some(&1));
    assert_eq!(f.get("store"), Some(&2));
}

#[test]
fn paths_through_an_imported_module_reach_its_files() {
    let mut aliases = BTreeMap::new();
    aliases.insert(
        "pages".to_string(),
        vec!["console".to_string(), "pages".to_string()],
    );
    let found = alias_paths(
        "let r = pages::held::page(c); let x = mypages::y;",
        &aliases,
    );
    assert_eq!(
        found,
        vec![(
            "pages::held::page".to_string(),
            vec![
                "console".into(),
                "pages".into(),
                "held".into(),
                "page".into()
            ]
        )]
    );
}
