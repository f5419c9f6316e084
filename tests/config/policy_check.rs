//! `floodgate check`: the shipped configs pass and print their limits; pitfalls are warned
//! about; a broken policy exits 1 naming file and line.

#[allow(unused_imports)]
use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn check(path: &std::path::Path) -> Output {
    run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("check")
            .arg("--config")
            .arg(path),
        Duration::from_secs(30),
    )
}

#[test]
fn shipped_configs_pass() {
    let out = check(&repo_root().join("conf/cambridge.toml"));
    assert!(out.ok(), "{out}");
    let s = &out.stdout;
    assert!(s.contains("list bulk_senders: 3 entries"), "{s}");
    assert!(
        s.contains("limit hermes-per-user: stage=mail key=\"${authenticated_id}\" ratelimit m=100 per 1h (3600s, EWMA, burst ~m) counts=messages mode=leaky action=warn"),
        "{s}"
    );
    assert!(
        s.contains("limit ppsw-per-ip: stage=rcpt key=\"${sender_host_address}\" ratelimit m=200 per 1h (3600s, EWMA, burst ~m) counts=recipients mode=strict action=warn per-key-limit-from=bulk_senders by=client_ip"),
        "{s}"
    );
    assert!(!s.contains("warning:"), "{s}");
    let out = check(&repo_root().join("conf/floodgate.toml"));
    assert!(out.ok(), "{out}");
    assert!(out.stdout.contains("auth_failures: delay 1000ms"), "{out}");
}

#[test]
fn pitfalls_are_warned_about() {
    let rec_addr = closed_port();
    let cfg = FloodgateConfig::new(rec_addr).extra(
        r#"
[[limit]]
name = "one"
ratelimit = "1 / 1h / per_rcpt"
[[limit]]
name = "typo"
ratelimit = "10 / 60m / per_rcpt / leakey"
[[limit]]
name = "hour"
ratelimit = "10 / 1h / per_mail / gcra-like / ${authenticated_id}"
[[limit]]
name = "fine"
count = "messages"
rate = "10 / 1m"
burst = "10"
"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(&path, cfg.toml()).unwrap();
    let out = check(&path);
    assert!(out.ok(), "{out}");
    let warnings: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 4, "{warnings:#?}");
    assert!(warnings[0].contains("limit one") && warnings[0].contains("refuses every event"));
    assert!(warnings[1].contains("\"leakey\" is not an option, so it is key text"));
    assert!(
        warnings[2].contains("limit typo")
            && warnings[2].contains("period \"60m\" is the same time as \"1h\"")
    );
    assert!(warnings[3].contains("\"gcra-like\" is not an option"));
    assert!(out.stdout.contains("limit fine: stage=mail key=\"${sender_host_address}\" gcra rate=10/60s burst=10 counts=messages mode=leaky action=defer"), "{out}");
}

/// The `warning:` lines `floodgate check` prints for a config with `limits` (which it
/// must accept).
fn check_warnings(limits: &str) -> Vec<String> {
    let cfg = FloodgateConfig::new(closed_port()).extra(limits);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(&path, cfg.toml()).unwrap();
    let out = check(&path);
    assert!(out.ok(), "{out}");
    out.stdout
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_leaky_warn_listed_before_its_defer_on_one_record_is_warned_about() {
    let limit = |name: &str, spec: &str, action: &str| {
        format!("[[limit]]\nname = \"{name}\"\nratelimit = \"{spec}\"\naction = \"{action}\"\n")
    };
    // Leaky warn at 50 first: once over 50 it stops storing, the defer at 100 never fires.
    let w = check_warnings(
        &(limit("soft", "50 / 1h / per_mail", "warn")
            + &limit("hard", "100 / 1h / per_mail", "defer")),
    );
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].contains("limit hard")
            && w[0].contains("shares its record with limit soft")
            && w[0].contains("make soft strict or list hard first"),
        "{w:#?}"
    );
    // The defer first, a strict warn, or another period: nothing to say.
    for ok in [
        limit("hard", "100 / 1h / per_mail", "defer")
            + &limit("soft", "50 / 1h / per_mail", "warn"),
        limit("soft", "50 / 1h / per_mail / strict", "warn")
            + &limit("hard", "100 / 1h / per_mail", "defer"),
        limit("soft", "50 / 60m / per_mail", "warn")
            + &limit("hard", "100 / 1h / per_mail", "defer"),
        limit("soft", "50 / 1h / per_mail / ${sender_address}", "warn")
            + &limit("hard", "100 / 1h / per_mail", "defer"),
    ] {
        let w = check_warnings(&ok);
        assert!(
            !w.iter().any(|l| l.contains("shares its record")),
            "{ok}\n{w:#?}"
        );
    }
}

#[test]
fn a_limit_answered_from_an_earlier_stage_cache_is_warned_about() {
    let warnings_for = |limits: &str| -> Vec<String> {
        check_warnings(limits)
            .into_iter()
            .filter(|l| l.contains("reads the same record"))
            .collect()
    };
    let limit = |name: &str, stage: &str, spec: &str| {
        format!("[[limit]]\nname = \"{name}\"\nstage = \"{stage}\"\nratelimit = \"{spec}\"\n")
    };
    // Exim test 0038: per_byte in DATA after per_mail in MAIL (same record: per_byte is
    // stored under per_mail) is answered from the message cache and never counts a byte.
    let w = warnings_for(
        &(limit("mails", "mail", "100 / 1h / per_mail")
            + &limit("bytes", "message", "10M / 1h / per_byte")),
    );
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].contains("limit bytes")
            && w[0].contains("limit mails")
            && w[0].contains("same message at mail"),
        "{w:#?}"
    );
    // Another period text, the byte limit first, or the same count: nothing to say.
    for ok in [
        limit("mails", "mail", "100 / 1h / per_mail")
            + &limit("bytes", "message", "10M / 60m / per_byte"),
        limit("bytes", "message", "10M / 1h / per_byte")
            + &limit("mails", "message", "100 / 2h / per_mail"),
        limit("a", "mail", "100 / 1h / per_mail") + &limit("b", "rcpt", "200 / 1h / per_mail"),
    ] {
        let w = warnings_for(&ok);
        assert!(w.is_empty(), "{ok}\n{w:#?}");
    }
}

#[test]
fn a_broken_policy_exits_1_naming_file_and_line() {
    let cfg = FloodgateConfig::new(closed_port())
        .extra("[[limit]]\nname = \"x\"\nratelimit = \"10 / 1h\"\nwhen = \"autenticated\"\n");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.toml");
    let text = cfg.toml();
    std::fs::write(&path, &text).unwrap();
    let out = check(&path);
    assert_eq!(out.code, Some(1), "{out}");
    let line = text.lines().position(|l| l.starts_with("when =")).unwrap() + 1;
    let want = format!(
        "{}:{line}:9: limit x: when: unknown word `autenticated`",
        path.display()
    );
    assert!(out.stderr.contains(&want), "want {want}\n{out}");
}
