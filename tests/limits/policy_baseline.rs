//! A limit of each key's own: floodgate reads a synthetic event log of the past 14 days at
//! start, and a user who sent 10 a day is refused at the 51st message of the day while one
//! who sent 500 a day is not.

use crate::common;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use common::*;

const DAY: i64 = 86_400;

fn users() -> RecorderOptions {
    RecorderOptions {
        users: vec![
            ("quiet".into(), "qpass".into()),
            ("bulk".into(), "bpass".into()),
            ("newcomer".into(), "npass".into()),
        ],
        ..RecorderOptions::default()
    }
}

/// Event lines for `key`: `per_day` messages on each of the 14 days before today.
fn history(key: &str, per_day: u32) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let today = now - now.rem_euclid(DAY);
    let mut out = String::new();
    for d in 1..=14 {
        let day = today - d * DAY;
        for i in 0..per_day {
            // Spread over the day's working hours.
            let t = day + 8 * 3600 + i64::from(i) * 60;
            out.push_str(&format!(
                "{{\"t\":{t}.000000,\"limit\":\"own-baseline\",\"key\":\"{key}\",\"count\":1}}\n"
            ));
        }
    }
    out
}

fn start(rec: &Recorder, events: &Path) -> Floodgate {
    Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .log_level("info")
            .extra(&format!(
                r#"
[report]
events = "{}"

[[limit]]
name = "own-baseline"
when = "authenticated"
count = "messages"
key = "${{authenticated_id}}"
rate = "50 / 1d"
burst = "50"
baseline = "p95 / 14d"
factor = 5
floor = 50
action = "defer"
"#,
                events.display()
            )),
    )
}

/// Sends `n` messages as `user`; the MAIL FROM reply codes.
fn send(fg: &Floodgate, user: &str, password: &str, n: usize) -> Vec<u16> {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{user}\0{password}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let mut codes = Vec::new();
    for i in 0..n {
        let code = c.cmd(&format!("MAIL FROM:<{user}@example.org>")).code;
        codes.push(code);
        if code != 250 {
            assert_eq!(c.cmd("RSET").code, 250);
            continue;
        }
        assert_eq!(c.cmd(&format!("RCPT TO:<r{i}@example.com>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(b"Subject: t\r\n\r\nhi\r\n.\r\n");
        assert_eq!(c.reply().code, 250);
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    codes
}

#[test]
fn a_quiet_user_trips_at_51_and_a_bulk_user_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, history("quiet", 10) + &history("bulk", 500)).unwrap();
    let rec = Recorder::start(users());
    let fg = start(&rec, &events);
    fg.wait_stderr("baselines computed", std::time::Duration::from_secs(10));

    let quiet = send(&fg, "quiet", "qpass", 52);
    assert!(quiet[..50].iter().all(|&c| c == 250), "{quiet:?}");
    assert_eq!(&quiet[50..], &[450, 450], "{}", fg.stderr());
    let bulk = send(&fg, "bulk", "bpass", 60);
    assert!(bulk.iter().all(|&c| c == 250), "{bulk:?}\n{}", fg.stderr());
    // A key with no history gets the floor.
    let newcomer = send(&fg, "newcomer", "npass", 51);
    assert_eq!(newcomer.iter().filter(|&&c| c == 250).count(), 50);
    assert_eq!(newcomer[50], 450);
    assert_eq!(rec.messages().len(), 50 + 60 + 50);

    // inspect shows where each limit comes from.
    let sock = fg.admin_socket();
    let v = admin_json(&sock, &["inspect", "bulk"]);
    let l = &v["limits"][0];
    assert_eq!(l["limit_value"], 2500.0, "{v}");
    assert_eq!(l["baseline"]["peak"], 500.0, "{v}");
    assert_eq!(l["baseline"]["baseline"], "p95 / 14d", "{v}");
    let v = admin_json(&sock, &["inspect", "newcomer"]);
    assert_eq!(v["limits"][0]["limit_value"], 50.0, "{v}");
    assert!(v["limits"][0]["baseline"]["peak"].is_null(), "{v}");
    let table = admin_verb(&sock, &["inspect", "quiet"]);
    assert!(
        table.stdout.contains(
            "own-baseline: baseline p95 / 14d: daily peak 10, limit max(50, 5 x peak) = 50"
        ),
        "{table}"
    );

    // floodgate report shows the same limits, from the same log.
    let report = |json: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"));
        cmd.arg("report").arg("--config").arg(fg.config_path());
        if json {
            cmd.arg("--json");
        }
        run_with_timeout(&mut cmd, std::time::Duration::from_secs(30))
    };
    let out = report(true);
    assert!(out.ok(), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let b = &v["baselines"][0];
    assert_eq!(b["limit"], "own-baseline", "{v}");
    assert_eq!(b["keys"], 2, "{v}");
    assert_eq!(b["at_floor"], 1, "{v}");
    assert_eq!(b["top"][0]["key"], "bulk", "{v}");
    assert_eq!(b["top"][0]["limit"], 2500.0, "{v}");
    assert_eq!(b["top"][1]["key"], "quiet", "{v}");
    let out = report(false);
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout.contains("limit = max(50, 5 x the key's daily peak); 2 keys with history, 1 of them at the floor; any other key: 50"),
        "{out}"
    );
    assert!(
        out.stdout.contains("keys with their own limit (baseline)"),
        "{out}"
    );
}

#[test]
fn baselines_survive_a_restart_in_the_snapshot_and_follow_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, history("bulk", 500)).unwrap();
    let state = dir.path().join("state.bin");
    let rec = Recorder::start(users());
    let extra = |factor: u32| {
        format!(
            r#"
[store]
path = "{}"

[report]
events = "{}"

[[limit]]
name = "own-baseline"
count = "messages"
key = "${{authenticated_id}}"
rate = "50 / 1d"
burst = "50"
baseline = "p95 / 14d"
factor = {factor}
floor = 50
"#,
            state.display(),
            events.display()
        )
    };
    let cfg = |factor| {
        FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .log_level("info")
            .extra(&extra(factor))
    };
    let mut fg = Floodgate::start(&cfg(5));
    fg.wait_stderr("baselines computed", std::time::Duration::from_secs(10));
    fg.terminate();
    // The restart finds today's baselines in the snapshot and does not read the log.
    let fg = Floodgate::start(&cfg(5));
    let v = admin_json(&fg.admin_socket(), &["inspect", "bulk"]);
    assert_eq!(
        v["limits"][0]["limit_value"],
        2500.0,
        "{v}\n{}",
        fg.stderr()
    );
    assert!(
        fg.stderr().contains("baselines loaded from the store"),
        "{}",
        fg.stderr()
    );
    assert!(
        !fg.stderr().contains("baselines computed"),
        "{}",
        fg.stderr()
    );
    // A reload takes the new factor and computes the baselines again.
    fg.write_config(&cfg(2).toml());
    fg.sighup();
    fg.wait_stderr("baselines computed", std::time::Duration::from_secs(10));
    let v = admin_json(&fg.admin_socket(), &["inspect", "bulk"]);
    assert_eq!(v["limits"][0]["limit_value"], 1000.0, "{v}");
    // Without history (the log emptied), the next computation gives the floor.
    std::fs::write(&events, "").unwrap();
    fg.sighup();
    fg.wait_stderr_count("baselines computed", 2, std::time::Duration::from_secs(10));
    let v = admin_json(&fg.admin_socket(), &["inspect", "bulk"]);
    assert_eq!(v["limits"][0]["limit_value"], 50.0, "{v}");
}
