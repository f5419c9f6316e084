//! `floodgate generate-docs DIR`: a man page for floodgate and for every subcommand its
//! help lists (and theirs: `floodgate-held-list.1`), so every page a page names is there;
//! `floodgate.toml(5)` with every key of the book's configuration reference; and bash, zsh
//! and fish completions naming every subcommand.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn floodgate(args: &[&str]) -> Output {
    run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate")).args(args),
        Duration::from_secs(60),
    )
}

/// The subcommands `floodgate --help` lists (clap's `help` left out).
fn subcommands() -> Vec<String> {
    let help = floodgate(&["--help"]);
    assert!(help.ok(), "{}", help.text());
    let list: Vec<String> = help
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(list.len() >= 10, "{list:?} from\n{}", help.stdout);
    list
}

#[test]
fn every_subcommand_has_its_man_page_and_completions() {
    let subs = subcommands();
    assert!(
        !subs.iter().any(|s| s == "generate-docs"),
        "hidden: {subs:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = floodgate(&["generate-docs", dir.path().to_str().unwrap()]);
    assert!(out.ok(), "{}", out.text());
    let main = std::fs::read_to_string(dir.path().join("man/floodgate.1")).unwrap();
    assert!(main.contains(".TH floodgate 1"));
    for s in &subs {
        let page = dir.path().join(format!("man/floodgate-{s}.1"));
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        assert!(text.contains(&format!(".TH floodgate-{s} 1")), "{s}");
        assert!(main.contains(s.as_str()), "floodgate.1 lacks {s}");
    }
    for file in ["floodgate", "_floodgate", "floodgate.fish"] {
        let text = std::fs::read_to_string(dir.path().join("completions").join(file)).unwrap();
        for s in &subs {
            assert!(text.contains(s.as_str()), "{file} lacks {s}");
        }
    }
    // One page per subcommand at every level, floodgate.1 and floodgate.toml.5.
    let pages: Vec<String> = std::fs::read_dir(dir.path().join("man"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    let held = floodgate(&["held", "--help"]);
    let held_subs = held
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| !l.trim_start().starts_with("help"))
        .count();
    assert!(held_subs >= 4, "{}", held.stdout);
    assert!(
        pages.contains(&"floodgate-held-list.1".to_string()),
        "{pages:?}"
    );
    assert!(pages.contains(&"floodgate.toml.5".to_string()), "{pages:?}");
    assert_eq!(pages.len(), subs.len() + held_subs + 2, "{pages:?}");
}

/// The man page references `name(N)` in a page's text (roff's `\-` read as `-`).
fn references(page: &str) -> Vec<(String, String)> {
    let text = page
        .replace("\\-", "-")
        .replace("\\fB", "")
        .replace("\\fR", "");
    let mut out = Vec::new();
    for (i, _) in text.match_indices("floodgate") {
        let rest = &text[i..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .collect();
        let after = &rest[name.len()..];
        if let Some(section) = after
            .strip_prefix('(')
            .and_then(|a| a.split_once(')'))
            .map(|(s, _)| s)
            .filter(|s| s.len() == 1 && s.chars().all(|c| c.is_ascii_digit()))
        {
            out.push((name, section.to_string()));
        }
    }
    out
}

#[test]
fn references_are_read_from_roff() {
    assert_eq!(
        references("see floodgate\\-held\\-list(1), floodgate.toml(5) and floodgate (the tool)"),
        [
            ("floodgate-held-list".to_string(), "1".to_string()),
            ("floodgate.toml".to_string(), "5".to_string())
        ]
    );
}

#[test]
fn every_page_a_man_page_names_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let out = floodgate(&["generate-docs", dir.path().to_str().unwrap()]);
    assert!(out.ok(), "{}", out.text());
    let man = dir.path().join("man");
    let mut named = 0;
    let mut dangling = Vec::new();
    for entry in std::fs::read_dir(&man).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (name, section) in references(&text) {
            named += 1;
            if !man.join(format!("{name}.{section}")).exists() {
                dangling.push(format!("{}: {name}({section})", path.display()));
            }
        }
    }
    // floodgate.1 names each subcommand's page, floodgate-held.1 each of its own.
    assert!(named >= 20, "only {named} references");
    assert!(dangling.is_empty(), "{dangling:?}");
}

#[test]
fn the_configuration_page_has_every_key_of_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let out = floodgate(&["generate-docs", dir.path().to_str().unwrap()]);
    assert!(out.ok(), "{}", out.text());
    let page = std::fs::read_to_string(dir.path().join("man/floodgate.toml.5")).unwrap();
    assert!(page.starts_with(".TH floodgate.toml 5"), "{page}");
    let mut keys = 0;
    for file in std::fs::read_dir(repo_root().join("docs/configuration")).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        for row in text.lines().filter(|l| l.starts_with("| `")) {
            let key = row.split('`').nth(1).unwrap();
            let roff = format!("\\fB{}\\fR", key.replace('-', "\\-"));
            assert!(page.contains(&roff), "floodgate.toml.5 lacks {key}");
            keys += 1;
        }
    }
    assert!(keys > 150, "only {keys} keys");
}

#[test]
fn an_unwritable_directory_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let out = floodgate(&["generate-docs", file.to_str().unwrap()]);
    assert!(!out.ok());
    assert!(
        out.stderr.contains(&format!("{}/man", file.display())),
        "{}",
        out.text()
    );
}
