//! The book under `docs/` holds together: every page is in `docs/SUMMARY.md` and every
//! entry there is a page; every relative link of the README and the book reaches a file,
//! and every `#anchor` a heading of its page (GitHub's anchors); no table cell is long
//! enough to need prose instead; names only the Cambridge background explains are used
//! nowhere else; and the package ships every directory of the book.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use common::*;

/// The longest table cell a page may have, in characters: longer is prose or a list.
const MAX_CELL: usize = 300;

/// The text of a page outside its fenced blocks, line by line with line numbers, inline
/// code spans blanked.
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, without_code(line)));
        }
    }
    out
}

/// `line` with each inline code span replaced by spaces of its length.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    for c in line.chars() {
        if c == '`' {
            code = !code;
            out.push(' ');
        } else {
            out.push(if code { ' ' } else { c });
        }
    }
    out
}

/// The link targets of a line: `[text](target)` (images too).
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].trim().to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, inline code marks and every character but
/// letters, digits, `-`, `_` and spaces dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .flat_map(char::to_lowercase)
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings, a repeated one numbered as GitHub numbers it (`-1`,
/// `-2`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let h = h.trim_start_matches('#');
        if !h.starts_with(' ') {
            continue;
        }
        let base = anchor(h.trim());
        let mut a = base.clone();
        let mut n = 0;
        while out.contains(&a) {
            n += 1;
            a = format!("{base}-{n}");
        }
        out.insert(a);
    }
    out
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(
        anchor("A limit of each key's own"),
        "a-limit-of-each-keys-own"
    );
    assert_eq!(anchor("`[upstream.high_risk]`"), "upstreamhigh_risk");
    assert_eq!(
        anchor("Graded answers: reroute and pace"),
        "graded-answers-reroute-and-pace"
    );
    let a = anchors("# T\n## Same\n```\n# not a heading\n```\n## Same\n#nope\n");
    assert_eq!(a.into_iter().collect::<Vec<_>>(), ["same", "same-1", "t"]);
    assert_eq!(
        links("see [a](x.md#y) and ![b](../p.png), `[c](not)`"),
        ["x.md#y", "../p.png", "not"]
    );
    assert_eq!(
        prose("a `[c](not)` b\n```\n[d](e)\n```\n")
            .into_iter()
            .flat_map(|(_, l)| links(&l))
            .count(),
        0
    );
}

/// `base/rel` with `.` and `..` resolved, or `None` when it leaves the repository.
fn resolve(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out)
}

#[test]
fn every_page_is_in_the_summary_and_every_entry_is_a_page() {
    let summary = book::page("docs/SUMMARY.md");
    let listed: BTreeSet<String> = prose(&summary)
        .iter()
        .flat_map(|(_, l)| links(l))
        .map(|l| format!("docs/{l}"))
        .collect();
    let pages: BTreeSet<String> = book::pages()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with("docs/") && p != "docs/SUMMARY.md")
        .collect();
    assert!(pages.len() >= 40, "{pages:?}");
    let unlisted: Vec<&String> = pages.difference(&listed).collect();
    let missing: Vec<&String> = listed.difference(&pages).collect();
    assert!(
        unlisted.is_empty(),
        "pages not in docs/SUMMARY.md: {unlisted:?}"
    );
    assert!(
        missing.is_empty(),
        "docs/SUMMARY.md entries that are no page: {missing:?}"
    );
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = repo_root();
    let pages = book::pages();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (page, text) in &pages {
        let dir = Path::new(page).parent().unwrap_or(Path::new(""));
        for (line, l) in prose(text) {
            for target in links(&l) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, frag) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    Some(PathBuf::from(page))
                } else {
                    resolve(dir, file)
                };
                let Some(path) = path.filter(|p| root.join(p).exists()) else {
                    broken.push(format!("{page}:{line}: {target}: no such file"));
                    continue;
                };
                if let Some(frag) = frag {
                    let text = std::fs::read_to_string(root.join(&path)).unwrap_or_default();
                    if !anchors(&text).contains(frag) {
                        broken.push(format!(
                            "{page}:{line}: {target}: {} has no heading #{frag}",
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} links");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn no_table_cell_is_over_the_bound() {
    let mut long = Vec::new();
    for (page, text) in book::pages() {
        for (line, l) in prose(&text) {
            if !l.trim_start().starts_with('|') {
                continue;
            }
            // Escaped bars are inside a cell.
            let row = l.replace("\\|", "  ");
            for cell in row.trim().trim_matches('|').split('|') {
                let n = cell.trim().chars().count();
                if n > MAX_CELL {
                    long.push(format!("{page}:{line}: a cell of {n} characters"));
                }
            }
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn the_cambridge_names_are_explained_where_they_are_used() {
    // ppswitch, Hermes and "the seed" (the proposal behind Exim's ratelimit) are explained
    // on one page; no other page leans on them.
    let home = "docs/concepts/equivalence.md";
    let explained = book::page(home);
    for word in ["ppsw", "hermes"] {
        assert!(
            explained.to_lowercase().contains(word),
            "{home} lacks {word}"
        );
    }
    for (page, text) in book::pages().into_iter().filter(|(p, _)| p != home) {
        let lower = text.to_lowercase();
        for word in ["hermes-per-user", "ppsw", "the seed"] {
            assert!(!lower.contains(word), "{page} uses {word:?} unexplained");
        }
    }
}

#[test]
fn the_package_ships_every_directory_of_the_book() {
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap()).unwrap();
    let assets = manifest["package"]["metadata"]["deb"]["assets"]
        .as_array()
        .unwrap();
    let shipped: BTreeSet<(String, String)> = assets
        .iter()
        .map(|a| {
            let a = a.as_array().unwrap();
            (
                a[0].as_str().unwrap().to_string(),
                a[1].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let dirs: BTreeSet<String> = book::pages()
        .into_iter()
        .filter_map(|(p, _)| {
            p.starts_with("docs/")
                .then(|| Path::new(&p).parent().unwrap().display().to_string())
        })
        .collect();
    for dir in &dirs {
        let asset = (
            format!("{dir}/*.md"),
            format!("usr/share/doc/floodgate/{dir}/"),
        );
        assert!(
            shipped.contains(&asset),
            "Cargo.toml's [package.metadata.deb] assets lack {asset:?}"
        );
    }
    assert!(shipped.contains(&(
        "README.md".to_string(),
        "usr/share/doc/floodgate/README.md".to_string()
    )));
}
