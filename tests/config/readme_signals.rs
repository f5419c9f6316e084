//! The book's "Signals of compromise" policy (`docs/containment/signals.md`), as printed
//! there, passes `floodgate check` and is explained limit by limit (its paths pointed into a
//! temporary directory).

#[allow(unused_imports)]
use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// The first TOML block after the page's heading `# Signals of compromise`.
fn readme_policy() -> String {
    book::first_toml_after("docs/containment/signals.md", "# Signals of compromise")
}

#[test]
fn the_readme_policy_passes_check_and_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let held = dir.path().join("held");
    std::fs::create_dir(&held).unwrap();
    let policy = readme_policy()
        .replace(
            "/var/lib/floodgate/events.jsonl",
            &dir.path().join("events.jsonl").display().to_string(),
        )
        .replace("/var/spool/floodgate/held", &held.display().to_string())
        .replace(
            "/var/log/postfix.log",
            &dir.path().join("postfix.log").display().to_string(),
        );
    let text = FloodgateConfig::new(closed_port()).extra(&policy).toml();
    let path = dir.path().join("signals.toml");
    std::fs::write(&path, &text).unwrap();
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("check")
            .arg("--config")
            .arg(&path),
        Duration::from_secs(30),
    );
    assert!(out.ok(), "{text}\n{out}");
    for name in [
        "external-per-day",
        "networks-per-login",
        "foreign-sender",
        "bounce-ratio",
        "own-baseline",
    ] {
        assert!(out.stdout.contains(name), "{name} not explained\n{out}");
    }
    // The networks are counted as distinct values, not as the key.
    let networks = out
        .stdout
        .lines()
        .find(|l| l.contains("networks-per-login"))
        .unwrap();
    assert!(
        networks.contains("counts=distinct values")
            && networks.contains("key=\"${authenticated_id}\""),
        "{out}"
    );
}
