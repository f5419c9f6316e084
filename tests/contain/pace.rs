//! `action = "pace"` through the real binary and the recording upstream: every message of a
//! burst gets 250; those over the limit, and every later one of the key while some wait,
//! are kept in the hold spool and released automatically at the limit's rate, in the order
//! they came; `held list` shows them as paced; they outlive a restart; a release that
//! fails (upstream gone) is logged and tried again until it goes through.

use crate::common;

use std::path::Path;
use std::time::Duration;

use crate::support::send_numbered;
use common::*;
use serde_json::Value;
use tempfile::TempDir;

/// alice's messages, paced at `rate` (GCRA, burst 1: the first passes, the rest of a
/// burst are over).
fn config(upstream: std::net::SocketAddr, spool: &Path, rate: &str) -> FloodgateConfig {
    FloodgateConfig::new(upstream)
        .identity("xclient")
        .auth_without_tls(true)
        .log_level("info")
        .extra(&format!(
            r#"
[[limit]]
name = "invoice-run"
when = "authenticated"
count = "messages"
key = "${{authenticated_id}}"
rate = "{rate}"
burst = "1"
action = "pace"

[hold]
dir = "{}"
"#,
            spool.display()
        ))
}

/// One authenticated session sending `n` messages as fast as the replies come, message
/// `i` to `r{i}@…` with Subject `paced {i}`; the final reply code of each.
fn send(fg: &Floodgate, n: usize) -> Vec<u16> {
    let body = |i| format!("Subject: paced {i}\r\n\r\nmonth-end invoice {i}\r\n").into_bytes();
    send_numbered(fg, n, body)
        .into_iter()
        .map(|(code, _)| code)
        .collect()
}

/// The recipient index of each message upstream got, in arrival order, with its arrival
/// time (the recorder's clock, seconds).
fn arrivals(rec: &Recorder) -> Vec<(usize, f64)> {
    rec.events_of("message")
        .iter()
        .map(|e| {
            let rcpt = e["rcpts"][0].as_str().unwrap_or("").to_string();
            let i = rcpt
                .strip_prefix('r')
                .and_then(|r| r.split('@').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("recipient {rcpt:?}"));
            (i, e["time"].as_f64().unwrap_or(0.0))
        })
        .collect()
}

fn wait_arrivals(rec: &Recorder, n: usize, limit: Duration) -> Vec<(usize, f64)> {
    wait_until(limit, &format!("{n} messages upstream"), || {
        let a = arrivals(rec);
        (a.len() >= n).then_some(a)
    })
}

fn held(socket: &Path) -> Vec<Value> {
    let out = admin_verb(socket, &["held", "list", "--json"]);
    assert!(out.ok(), "{out}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["held"].as_array().cloned().unwrap_or_default()
}

#[test]
fn sixty_messages_against_thirty_a_minute_all_get_250_and_leave_in_order_over_minutes() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let fg = Floodgate::start(&config(rec.addr(), spool.path(), "30 / 1m"));
    let codes = send(&fg, 60);
    assert!(codes.iter().all(|c| *c == 250), "{codes:?}");
    // The paced ones wait in the spool, shown as paced.
    let sock = fg.admin_socket();
    let list = held(&sock);
    assert!(
        list.len() >= 50,
        "most of the burst is paced: {}",
        list.len()
    );
    assert!(
        list.iter().all(|m| m["paced"] == "30/60s messages"),
        "{list:?}"
    );
    let text = admin_verb(&sock, &["held", "list"]);
    assert!(text.stdout.contains("paced 30/60s messages"), "{text}");

    // 59 paced at one every 2 s: about two minutes; the wait is bounded well above it.
    let got = wait_arrivals(&rec, 60, Duration::from_secs(240));
    let order: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..60).collect::<Vec<_>>(), "in the order sent");
    // Not all at once: spread over most of the two minutes, never a burst.
    let spread = got[59].1 - got[0].1;
    assert!(spread >= 90.0, "arrivals spread over {spread:.1} s only");
    for w in got.windows(9) {
        let span = w[8].1 - w[0].1;
        assert!(
            span >= 10.0,
            "9 messages within {span:.1} s: not paced at 30/min"
        );
    }
    assert!(held(&sock).is_empty(), "the spool is empty again");
    let log = fg.stderr();
    assert!(log.contains("message paced"), "{log}");
    assert!(log.contains("paced message released"), "{log}");
    let m = admin_get(&sock, "/metrics");
    for line in [
        "floodgate_paced_waiting 0",
        "floodgate_paced_total{event=\"released\"} 59",
        "floodgate_paced_total{event=\"retry\"} 0",
    ] {
        assert!(m.contains(line), "{line} not in\n{m}");
    }
}

#[test]
fn paced_messages_outlive_a_restart_and_leave_in_order() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    // One every 10 s: nothing paced leaves before the restart.
    let cfg = config(rec.addr(), spool.path(), "6 / 1m");
    let mut fg = Floodgate::start(&cfg);
    assert_eq!(send(&fg, 4), [250; 4]);
    fg.terminate();
    assert_eq!(rec.messages().len(), 1, "only the first went at once");
    let files: Vec<String> = std::fs::read_dir(spool.path())
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
        .collect();
    assert_eq!(files.len(), 3);
    assert!(
        files.iter().all(|f| f.contains("\npaced 6/60s messages\n")),
        "{files:?}"
    );

    let fg = Floodgate::start(&cfg);
    let got = wait_arrivals(&rec, 4, Duration::from_secs(90));
    let order: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 2, 3]);
    assert!(fg
        .stderr()
        .contains("paced messages waiting in the hold spool"));
}

#[test]
fn upstream_gone_during_a_paced_release_keeps_the_message_and_retries() {
    let first = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    // One every 3 s.
    let cfg = config(first.addr(), spool.path(), "20 / 1m");
    let fg = Floodgate::start(&cfg);
    assert_eq!(send(&fg, 3), [250; 3]);
    first.wait_events("message", 1);
    drop(first);
    fg.wait_stderr(
        "paced message not released: it stays held",
        Duration::from_secs(30),
    );
    assert_eq!(held(&fg.admin_socket()).len(), 2, "nothing lost");
    // Upstream back (as a new host, by reload): the next try delivers, in order.
    let second = Recorder::start(RecorderOptions::default());
    let mut moved = cfg.clone();
    moved.upstream = second.addr();
    fg.write_config(&moved.toml());
    fg.sighup();
    let got = wait_arrivals(&second, 2, Duration::from_secs(60));
    let order: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [1, 2]);
    let log = fg.stderr();
    assert!(log.contains("retry_in_s=5"), "{log}");
    assert!(held(&fg.admin_socket()).is_empty());
}

#[test]
fn check_explains_pace() {
    let spool = TempDir::new().unwrap();
    let cfg = config("127.0.0.1:2525".parse().unwrap(), spool.path(), "30 / 1m");
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(&path, cfg.toml()).unwrap();
    let out = run_with_timeout(
        std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path),
        Duration::from_secs(20),
    );
    assert!(out.ok(), "{out}");
    for want in [
        "action=pace",
        "released automatically to [upstream] at the limit's rate (30/60s messages: one message every 2s per key)",
        "hold: paced messages (action = \"pace\") are released automatically",
    ] {
        assert!(out.stdout.contains(want), "{want:?} in {out}");
    }
}
