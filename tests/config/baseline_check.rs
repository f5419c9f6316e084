//! `floodgate check` on limits with a baseline: each bad setting is refused naming file,
//! line and what is wrong; a good one is explained.

#[allow(unused_imports)]
use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// Writes a config with `limit` (plus an event log unless `no_events`) and runs check.
fn check(limit: &str, no_events: bool) -> (Output, String, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let events = if no_events {
        String::new()
    } else {
        format!(
            "[report]\nevents = \"{}\"\n",
            dir.path().join("e.jsonl").display()
        )
    };
    let text = FloodgateConfig::new(closed_port())
        .extra(&format!("{events}\n[[limit]]\nname = \"own\"\n{limit}"))
        .toml();
    let path = dir.path().join("f.toml");
    std::fs::write(&path, &text).unwrap();
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("check")
            .arg("--config")
            .arg(&path),
        Duration::from_secs(30),
    );
    (out, text, path, dir)
}

/// Check fails with `message` at the line starting with `at`.
fn refused(limit: &str, at: &str, message: &str) {
    let (out, text, path, _dir) = check(limit, false);
    assert_eq!(out.code, Some(1), "{limit}\n{out}");
    let line = text.lines().position(|l| l.starts_with(at)).unwrap() + 1;
    let want = format!("{}:{line}:", path.display());
    assert!(out.stderr.contains(&want), "want {want}\n{out}");
    assert!(out.stderr.contains(message), "want {message}\n{out}");
}

const GOOD: &str =
    "count = \"messages\"\nkey = \"${authenticated_id}\"\nrate = \"50 / 1d\"\nburst = \"50\"\n";

#[test]
fn a_good_baseline_is_explained() {
    let (out, ..) = check(
        &format!("{GOOD}baseline = \"p95 / 14d\"\nfactor = 5\nfloor = 50\n"),
        false,
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout.contains("baseline=\"p95 / 14d\": each key's limit is max(50 (the configured limit), 5 × its p95 daily peak over the 14 days before today); a daily peak is the most the key was offered in one 1d window of a UTC day"),
        "{out}"
    );
    assert!(
        out.stdout.contains("a key with no history gets 50"),
        "{out}"
    );
    // factor and floor have defaults: 5 and the configured limit.
    let (out, ..) = check(
        "ratelimit = \"20 / 1h / per_rcpt / strict / ${authenticated_id}\"\nbaseline = \"p90/30d\"\nfloor = 0\n",
        false,
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("max(0, 5 × its p90 daily peak over the 30 days before today)"),
        "{out}"
    );
    assert!(out.stdout.contains("one 1h window"), "{out}");
}

#[test]
fn bad_baselines_are_refused_with_the_reason() {
    let b = |v: &str| format!("{GOOD}baseline = \"{v}\"\n");
    refused(
        &b("p95"),
        "baseline =",
        "baseline \"p95\" is not \"PERCENTILE / WINDOW\"",
    );
    refused(&b("q95 / 14d"), "baseline =", "unknown percentile \"q95\"");
    refused(&b("p0 / 14d"), "baseline =", "unknown percentile \"p0\"");
    refused(
        &b("p95 / 2w"),
        "baseline =",
        "bad window \"2w\": write a whole number of days",
    );
    refused(&b("p95 / 0d"), "baseline =", "bad window \"0d\"");
    refused(
        &format!("{}factor = 0\n", b("p95 / 14d")),
        "factor =",
        "factor must be a number above 0, got 0",
    );
    refused(
        &format!("{}factor = -2\n", b("p95 / 14d")),
        "factor =",
        "factor must be a number above 0, got -2",
    );
    refused(
        &format!("{}floor = -1\n", b("p95 / 14d")),
        "floor =",
        "floor must be a number of 0 or more, got -1",
    );
    refused(
        &format!("{}floor = 0\n", b("p95 / 14d")),
        "floor =",
        "floor = 0 needs a ratelimit limit",
    );
    refused(
        &format!("{GOOD}factor = 5\n"),
        "factor =",
        "`factor` goes with `baseline`",
    );
    refused(
        &format!("{GOOD}floor = 5\n"),
        "floor =",
        "`floor` goes with `baseline`",
    );
}

#[test]
fn baselines_where_they_make_no_sense_are_refused() {
    refused(
        "count = \"sessions\"\nmax = 3\nbaseline = \"p95 / 14d\"\n",
        "baseline =",
        "baseline is for rate limits (ratelimit or rate/burst), not for sessions at once (max)",
    );
    refused(
        "ratelimit = \"10 / 1d / per_addr\"\nbaseline = \"p95 / 14d\"\n",
        "baseline =",
        "a limit on distinct values (per_addr, unique=) has none to count",
    );
    refused(
        "ratelimit = \"10 / 1d / per_mail / readonly\"\nbaseline = \"p95 / 14d\"\n",
        "baseline =",
        "a readonly limit logs no events",
    );
    refused(
        "count = \"messages\"\nrate = \"10 / 7d\"\nburst = \"10\"\nbaseline = \"p95 / 14d\"\n",
        "baseline =",
        "baseline needs a period of at most 1d (daily peaks), this limit's is 7d",
    );
    let (out, text, path, _dir) = check(&format!("{GOOD}baseline = \"p95 / 14d\"\n"), true);
    assert_eq!(out.code, Some(1), "{out}");
    let line = text
        .lines()
        .position(|l| l.starts_with("baseline ="))
        .unwrap()
        + 1;
    assert!(
        out.stderr.contains(&format!(
            "{}:{line}:12: limit own: baseline reads each key's history from the event log: set [report] events",
            path.display()
        )),
        "{out}"
    );
}

#[test]
fn baseline_and_limit_list_are_not_both_allowed() {
    let (out, ..) = check(
        &format!("{GOOD}limit_list = \"bulk\"\nlimit_by = \"user\"\nbaseline = \"p95 / 14d\"\n"),
        false,
    );
    // The list does not exist: that is found first.
    assert_eq!(out.code, Some(1), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let text = FloodgateConfig::new(closed_port())
        .extra(&format!(
            "[report]\nevents = \"{}\"\n[lists]\nbulk = {{ entries = [\"alice 500\"] }}\n[[limit]]\nname = \"own\"\n{GOOD}limit_list = \"bulk\"\nlimit_by = \"user\"\nbaseline = \"p95 / 14d\"\n",
            dir.path().join("e.jsonl").display()
        ))
        .toml();
    let path = dir.path().join("f.toml");
    std::fs::write(&path, &text).unwrap();
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("check")
            .arg("--config")
            .arg(&path),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr
            .contains("limit own: baseline and limit_list both give per-key limits: use one"),
        "{out}"
    );
}
