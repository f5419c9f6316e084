//! `floodgate generate-docs DIR`: a man page for floodgate and for every subcommand its
//! help lists, and bash, zsh and fish completions naming every subcommand.

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
    // One page per subcommand and floodgate.1: nothing else.
    let pages = std::fs::read_dir(dir.path().join("man")).unwrap().count();
    assert_eq!(pages, subs.len() + 1);
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
