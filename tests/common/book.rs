//! The README and the book under `docs/`: their pages, and the first TOML block of a
//! section, for the tests that check what the documentation shows.

use super::repo_root;

/// Every page: `README.md` first, then each `docs/**/*.md` by path, as
/// (path from the repository root, text).
pub fn pages() -> Vec<(String, String)> {
    let root = repo_root();
    let mut files = Vec::new();
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    files.sort();
    std::iter::once("README.md".to_string())
        .chain(files)
        .map(|p| {
            let text = page(&p);
            (p, text)
        })
        .collect()
}

/// One page's text, by its path from the repository root.
pub fn page(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The first ```` ```toml ```` block after the heading line `heading` (its exact text, `#`s
/// included) of the page `path`.
pub fn first_toml_after(path: &str, heading: &str) -> String {
    let text = page(path);
    let section = text
        .split_once(&format!("\n{heading}\n"))
        .or_else(|| text.strip_prefix(&format!("{heading}\n")).map(|s| ("", s)))
        .unwrap_or_else(|| panic!("{path} has no heading {heading:?}"))
        .1;
    let block = section
        .split_once("```toml\n")
        .unwrap_or_else(|| panic!("{path}: no TOML block after {heading:?}"))
        .1;
    block
        .split_once("```")
        .unwrap_or_else(|| panic!("{path}: the TOML block after {heading:?} is not closed"))
        .0
        .to_string()
}
