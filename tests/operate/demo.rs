//! `floodgate demo --once`: the shipped policy played end to end in one process, a normal
//! user's mail relayed by the stand-in smart host, a stolen account restricted and its
//! further mail held, the postmaster alerted, the scratch directory removed at exit.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

/// The number after `what` in `text` (up to the first character that is not a digit).
fn number_after(text: &str, what: &str) -> Option<usize> {
    let at = text.find(what)? + what.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[test]
fn demo_once_relays_the_normal_user_and_restricts_and_holds_the_stolen_account() {
    let started = Instant::now();
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["demo", "--once"])
            .current_dir(repo_root())
            .env_remove("RUST_LOG"),
        Duration::from_secs(120),
    );
    let took = started.elapsed();
    let all = format!("{}\n--- stderr ---\n{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "{all}");

    // It says it runs the shipped policy, sped up, and where its state lives.
    assert!(
        out.stdout
            .contains("floodgate demo: the policy of conf/floodgate.toml"),
        "{all}"
    );
    assert!(out.stdout.contains("its clock runs 360x faster"), "{all}");

    // The stand-in's tally lines, one a second, sum to the normal user's six messages, and
    // name her first Subject once.
    let tallies: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("stand-in smart host: queued ") && !l.contains(" from <> "))
        .collect();
    let queued_from = |sender: &str| -> usize {
        tallies
            .iter()
            .filter_map(|l| number_after(l, &format!("from <{sender}> ")))
            .sum()
    };
    assert_eq!(queued_from("alice@example.org"), 6, "{all}");
    assert_eq!(
        out.stdout
            .matches("(first: Subject: Minutes of the meeting, part 1)")
            .count(),
        1,
        "the first Subject is named once: {all}"
    );
    assert!(
        tallies.len() < 60,
        "a line a second, not a line a message: {} lines: {all}",
        tallies.len()
    );
    assert!(
        out.stdout
            .contains("alice (normal user): 6 messages relayed\n"),
        "{all}"
    );

    // The stolen account was deferred by the hourly limit, then restricted by the daily one.
    assert!(out.stdout.contains("carol (stolen account): "), "{all}");
    assert!(
        out.stdout.contains("deferred: 450 4.7.1 carol sent to "),
        "{all}"
    );
    let held = number_after(&out.stdout, "restricted account: carol; held messages: ")
        .unwrap_or_else(|| panic!("no summary line: {all}"));
    let held_lines = out
        .stdout
        .matches("answered 250 but held by floodgate as")
        .count();
    assert!(
        held >= 1 && held == held_lines,
        "{held} held, {held_lines} lines: {all}"
    );
    let carol_relayed = queued_from("carol@example.org");
    let relayed = number_after(&out.stdout, "carol (stolen account): ").expect("carol's count");
    assert_eq!(carol_relayed, relayed, "{all}");

    // The postmaster's alert of the restriction, with its evidence.
    assert!(
        out.stdout
            .contains("postmaster alert (floodgate.restricted): "),
        "{all}"
    );
    assert!(
        out.stdout.contains("\"event\": \"floodgate.restricted\""),
        "{all}"
    );
    assert!(out.stdout.contains("\"evidence\": {"), "{all}");
    // Its evidence counts the recipients relayed, as the stolen account's client saw them
    // accepted, not those it offered.
    let spray_rcpts = number_after(
        &out.stdout,
        &format!("carol (stolen account): {relayed} messages relayed to "),
    )
    .unwrap_or_else(|| panic!("no recipient count: {all}"));
    let ev = out
        .stdout
        .split("\"evidence\": {")
        .nth(1)
        .unwrap_or_default();
    let ev_rcpts = number_after(ev, "\"recipients\": ").unwrap_or_else(|| panic!("{all}"));
    assert_eq!(ev_rcpts, spray_rcpts, "{all}");
    assert!(
        out.stdout.contains("\"limit\": \"user-recipients-day\""),
        "{all}"
    );
    // And by mail: floodgate's alert mail, from the null sender to the shipped postmaster
    // address, went through the stand-in smart host.
    assert!(
        out.stdout.lines().any(|l| l.starts_with("stand-in smart host: queued ")
            && l.ends_with(" from <> to <postmaster@example.org>: Subject: floodgate: carol restricted (user-recipients-day)")),
        "{all}"
    );

    // The scratch directory is gone at exit.
    let dir = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("  state, event log, hold spool and admin socket in "))
        .unwrap_or_else(|| panic!("no scratch directory printed: {all}"));
    assert!(!Path::new(dir).exists(), "{dir} left behind");
    eprintln!("floodgate demo --once took {took:?}");
}
