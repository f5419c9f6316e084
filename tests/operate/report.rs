//! `floodgate report` over a recorded run: real SMTP sessions (Python's smtplib) through
//! floodgate in warn mode with the event log on, several senders with different volumes;
//! peaks checked independently with `floodgate simulate`.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

const LIMITS: &str = r#"
[report]
events = "events.jsonl"

[[limit]]
name = "per-sender"
ratelimit = "100 / 1h / per_mail / ${sender_address}"
action = "warn"

[[limit]]
name = "rcpt-bucket"
count = "recipients"
key = "${sender_address}"
rate = "10 / 1h"
burst = "50"
action = "warn"
"#;

/// Senders and their message counts: four ordinary ones and a flood.
const SENDERS: [(&str, u32); 5] = [
    ("ann@example.org", 2),
    ("bob@example.org", 3),
    ("cat@example.org", 5),
    ("dan@example.org", 4),
    ("flood@example.org", 60),
];

fn floodgate_bin() -> &'static str {
    env!("CARGO_BIN_EXE_floodgate")
}

fn run(args: &[&str]) -> Output {
    run_with_timeout(
        Command::new(floodgate_bin()).args(args),
        Duration::from_secs(60),
    )
}

/// Sends the recorded run, each message to two recipients: the first sender byte by byte
/// (RawClient), the others in one smtplib session.
fn send_all(fg: &Floodgate) {
    let (first, n) = SENDERS[0];
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("raw.test").code, 250);
    for _ in 0..n {
        assert_eq!(c.cmd(&format!("MAIL FROM:<{first}>")).code, 250);
        assert_eq!(c.cmd("RCPT TO:<r1@example.com>").code, 250);
        assert_eq!(c.cmd("RCPT TO:<r2@example.com>").code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(b"Subject: t\r\n\r\nhi\r\n.\r\n");
        assert_eq!(c.reply().code, 250);
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    let mut script = String::from("s = smtplib.SMTP(HOST, PORT, timeout=30)\n");
    for (sender, n) in &SENDERS[1..] {
        script.push_str(&format!(
            "for i in range({n}):\n    s.sendmail('{sender}', ['r1@example.com', 'r2@example.com'], b'Subject: t\\r\\n\\r\\nhi\\r\\n')\n"
        ));
    }
    script.push_str("s.quit()\nout('done', 1)\n");
    let out = smtplib(fg.addr("plain"), &script, Duration::from_secs(120));
    assert!(out.ok() && out.field("done").is_some(), "{out}");
}

fn read_events(path: &Path, want: usize) -> Vec<Value> {
    wait_until(
        Duration::from_secs(20),
        "the event log to be written",
        || {
            let text = std::fs::read_to_string(path).ok()?;
            // Evaluations only: the log's other lines (`{"event":"message",...}` per
            // message) say what happened to each message.
            let lines: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).expect("event line is JSON"))
                .filter(|v| v.get("event").is_none())
                .collect();
            (lines.len() >= want).then_some(lines)
        },
    )
}

/// Per key, the highest `rate` `floodgate simulate --limit spec` gives for `events`, the
/// event log's own lines fed to it unchanged (`limit` and `own_limit` included).
fn simulate_peaks(spec: &str, events: &[&Value], dir: &Path) -> BTreeMap<String, f64> {
    let input = dir.join(format!("sim-{}.jsonl", events.len()));
    let mut text = String::new();
    for e in events {
        assert!(e["limit"].is_string(), "an event log line: {e}");
        text.push_str(&format!("{e}\n"));
    }
    std::fs::write(&input, text).unwrap();
    let out = run(&["simulate", "--limit", spec, input.to_str().unwrap()]);
    assert!(out.ok(), "{out}");
    let mut peaks = BTreeMap::new();
    for (line, e) in out.stdout.lines().zip(events) {
        let v: Value = serde_json::from_str(line).unwrap();
        let key = e["key"].as_str().unwrap().to_string();
        let rate = v["rate"].as_f64().unwrap();
        let p = peaks.entry(key).or_insert(f64::NEG_INFINITY);
        *p = f64::max(*p, rate);
    }
    peaks
}

fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn report_over_a_recorded_run() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .extra(LIMITS),
    );
    send_all(&fg);
    let messages: u32 = SENDERS.iter().map(|(_, n)| n).sum();
    assert_eq!(
        rec.messages().len(),
        messages as usize,
        "warn mode relays all"
    );
    let events_path = fg.dir().join("events.jsonl");
    // One per_mail event per message, one bucket event per recipient.
    let events = read_events(&events_path, (messages * 3) as usize);
    assert_eq!(events.len(), (messages * 3) as usize);
    let of =
        |limit: &str| -> Vec<&Value> { events.iter().filter(|e| e["limit"] == limit).collect() };
    assert_eq!(of("per-sender").len(), messages as usize);
    assert_eq!(of("rcpt-bucket").len(), (messages * 2) as usize);
    let cfg = fg.config_path().to_str().unwrap().to_string();

    let out = run(&["report", "--config", &cfg, "--json", "--top", "3"]);
    assert!(out.ok(), "{out}");
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["events"], messages * 3);
    let limits = r["limits"].as_array().unwrap();

    // The Exim limit: peaks are demand (strict), as simulate computes them.
    let exim = &limits[0];
    assert_eq!(exim["name"], "per-sender");
    let peaks = simulate_peaks("100 / 1h / per_mail / strict", &of("per-sender"), fg.dir());
    assert_eq!(peaks.len(), SENDERS.len());
    assert_eq!(exim["keys"], SENDERS.len());
    let mut sorted: Vec<f64> = peaks.values().copied().collect();
    sorted.sort_by(f64::total_cmp);
    for (field, p) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
        let got = exim[field].as_f64().unwrap();
        assert!(
            close(got, nearest_rank(&sorted, p)),
            "{field}: {got} vs {sorted:?}"
        );
    }
    let top = exim["top"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    assert_eq!(top[0]["key"], "flood@example.org");
    assert_eq!(top[1]["key"], "cat@example.org");
    assert_eq!(top[2]["key"], "dan@example.org");
    for k in top {
        let want = peaks[k["key"].as_str().unwrap()];
        assert!(close(k["peak"].as_f64().unwrap(), want), "{k}");
    }
    let suggested = exim["suggested"].as_f64().unwrap();
    for (sender, _) in &SENDERS[..4] {
        assert!(
            peaks[*sender] < suggested,
            "{sender}: {} >= {suggested}",
            peaks[*sender]
        );
    }
    let limited = exim["would_limit"].as_array().unwrap();
    assert_eq!(limited.len(), 1, "{exim}");
    assert_eq!(limited[0]["key"], "flood@example.org");
    assert!(peaks["flood@example.org"] >= suggested);

    // The bucket: levels as a GCRA with an unlimited burst (sim: gcra with a huge burst).
    let bucket = &limits[1];
    assert_eq!(bucket["name"], "rcpt-bucket");
    let bpeaks = simulate_peaks(
        "gcra: burst=1000000000, rate=10 / 1h",
        &of("rcpt-bucket"),
        fg.dir(),
    );
    let flood = bucket["top"][0]["peak"].as_f64().unwrap();
    assert!(
        close(flood, bpeaks["flood@example.org"]),
        "{flood} {bpeaks:?}"
    );
    let bsuggested = bucket["suggested"].as_f64().unwrap();
    for (sender, _) in &SENDERS[..4] {
        assert!(bpeaks[*sender] <= bsuggested, "{sender}");
    }
    assert_eq!(bucket["would_limit"][0]["key"], "flood@example.org");

    // Text form.
    let out = run(&["report", "--config", &cfg, "--limit", "per-sender"]);
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("limit per-sender (exim 100, period 1h, action warn)"),
        "{out}"
    );
    assert!(out.stdout.contains("suggested limit:"), "{out}");
    assert!(!out.stdout.contains("rcpt-bucket"), "{out}");

    // --since/--until select: the second half of the per-sender events.
    let times: Vec<f64> = of("per-sender")
        .iter()
        .map(|e| e["t"].as_f64().unwrap())
        .collect();
    let mid = times[times.len() / 2];
    let since = format!("{}", mid);
    let since_rfc = rfc3339(mid);
    let want = times.iter().filter(|&&t| t >= mid).count();
    let out = run(&[
        "report",
        "--config",
        &cfg,
        "--json",
        "--limit",
        "per-sender",
        "--since",
        &since_rfc,
    ]);
    assert!(out.ok(), "{out}");
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        r["events"].as_u64().unwrap() as usize,
        want,
        "since {since}"
    );
    let out = run(&[
        "report",
        "--config",
        &cfg,
        "--json",
        "--limit",
        "per-sender",
        "--until",
        &since_rfc,
    ]);
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["events"].as_u64().unwrap() as usize, times.len() - want);
    // Relative: the last hour holds everything; an hour ago and before holds nothing.
    let out = run(&["report", "--config", &cfg, "--json", "--since", "1h"]);
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["events"], messages * 3);
    let out = run(&["report", "--config", &cfg, "--until", "1h"]);
    assert!(out.ok(), "{out}");
    assert!(out.stdout.contains("no events in this period"), "{out}");
}

/// A `limit_list` gives the flood sender a limit of its own: its events carry it, and the
/// report sets it apart from the ordinary senders instead of calling it an outlier.
#[test]
fn keys_with_their_own_limit_are_reported_against_it() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(
        r#"
[report]
events = "events.jsonl"

[lists]
bulk = { entries = ["flood@example.org 1000"] }

[[limit]]
name = "per-sender"
ratelimit = "100 / 1h / per_mail / ${sender_address}"
action = "warn"
limit_list = "bulk"
limit_by = "sender"
"#,
    ));
    send_all(&fg);
    let messages: u32 = SENDERS.iter().map(|(_, n)| n).sum();
    let events = read_events(&fg.dir().join("events.jsonl"), messages as usize);
    for e in &events {
        let own = e.get("own_limit").and_then(Value::as_f64);
        if e["key"] == "flood@example.org" {
            assert_eq!(own, Some(1000.0), "{e}");
        } else {
            assert_eq!(own, None, "{e}");
        }
    }
    let cfg = fg.config_path().to_str().unwrap().to_string();
    let out = run(&["report", "--config", &cfg, "--json"]);
    assert!(out.ok(), "{out}");
    let r: Value = serde_json::from_str(&out.stdout).unwrap();
    let l = &r["limits"][0];
    assert_eq!(l["keys"], SENDERS.len());
    assert_eq!(l["own_limit_keys"], 1);
    assert_eq!(l["over_own_limit"], 0);
    assert_eq!(l["own_limit_top"][0]["key"], "flood@example.org");
    assert_eq!(l["own_limit_top"][0]["own_limit"], 1000.0);
    assert!(l["would_limit"].as_array().unwrap().is_empty(), "{l}");
    assert!(
        l["top"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["key"] != "flood@example.org"),
        "{l}"
    );
    let out = run(&["report", "--config", &cfg]);
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("keys with their own limit (limit_list): 1, over it: 0"),
        "{out}"
    );
}

/// RFC 3339 (UTC, microseconds) of seconds since the epoch, written the long way round
/// (days from civil), independently of floodgate's formatter.
fn rfc3339(t: f64) -> String {
    let us = (t * 1e6).round() as i64;
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (mut y, mut d) = (1970i64, days);
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    while d >= if leap(y) { 366 } else { 365 } {
        d -= if leap(y) { 366 } else { 365 };
        y += 1;
    }
    let months = [
        31,
        if leap(y) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let mut m = 0;
    while d >= months[m] {
        d -= months[m];
        m += 1;
    }
    format!(
        "{y:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        m + 1,
        d + 1,
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

fn write_config(dir: &Path, extra: &str) -> String {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[upstream]\naddress = \"127.0.0.1:25\"\n\n[[limit]]\nname = \"l\"\nratelimit = \"10 / 1h / ${{sender_address}}\"\n{extra}"
    );
    let p = dir.join("c.toml");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn bad_arguments_and_corrupt_lines() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "");
    let events = dir.path().join("e.jsonl");
    std::fs::write(
        &events,
        "{\"t\":1,\"limit\":\"l\",\"key\":\"a\",\"count\":1}\n\n{\"t\":2,\"limit\":\"l\",\"key\":\"a\"}\n{\"t\":3,\"limit\":\"l\",\"key\":\n",
    )
    .unwrap();
    let ev = events.to_str().unwrap();
    let out = run(&["report", "--config", &cfg, "--events", ev]);
    assert!(!out.ok(), "{out}");
    assert!(out.stderr.contains(&format!("{ev}:4: ")), "{out}");
    let cases: [(&[&str], &str); 5] = [
        (&["--since", "yesterday"], "RFC 3339"),
        (&["--since", "2025-02-30T00:00:00Z"], "no such date"),
        (
            &["--since", "2h", "--until", "3h"],
            "--since must be before --until",
        ),
        (&["--limit", "other"], "no limit called \"other\""),
        (&["--top", "many"], "invalid value"),
    ];
    for (args, want) in cases {
        let mut a = vec!["report", "--config", &cfg, "--events", ev];
        a.extend_from_slice(args);
        let out = run(&a);
        assert!(!out.ok() && out.stderr.contains(want), "{args:?}: {out}");
    }
    // No event log configured or given.
    let out = run(&["report", "--config", &cfg]);
    assert!(!out.ok() && out.stderr.contains("no event log"), "{out}");
    let out = run(&[
        "report",
        "--config",
        &cfg,
        "--events",
        dir.path().join("missing").to_str().unwrap(),
    ]);
    assert!(!out.ok() && out.stderr.contains("cannot open"), "{out}");
    // An empty log is an empty period, not an error.
    std::fs::write(&events, "").unwrap();
    let out = run(&["report", "--config", &cfg, "--events", ev]);
    assert!(
        out.ok() && out.stdout.contains("no events in this period"),
        "{out}"
    );
}

#[test]
fn report_config_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, line, col, word) in [
        ("[report]\nevents = \"\"\n", 11, 10, "events"),
        (
            "[report]\nevents = \"e\"\nmax_size = \"1x\"\n",
            12,
            12,
            "max_size",
        ),
        ("[report]\nqueue = 0\n", 11, 9, "queue"),
        ("[report]\nevent = \"e\"\n", 11, 1, "event"),
        ("[report]\nevents = \".\"\n", 11, 10, "directory"),
    ] {
        let cfg = write_config(dir.path(), extra);
        let out = run(&["check", "--config", &cfg]);
        assert!(!out.ok(), "{extra}: {out}");
        let want = format!("{cfg}:{line}:{col}: ");
        assert!(out.stderr.contains(&want), "{extra}: want {want}\n{out}");
        assert!(out.stderr.contains(word), "{extra}: {out}");
    }
    let cfg = write_config(
        dir.path(),
        "[report]\nevents = \"ev.jsonl\"\nmax_size = \"10M\"\n",
    );
    let out = run(&["check", "--config", &cfg]);
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout.contains("report: events=") && out.stdout.contains("max_size=10485760"),
        "{out}"
    );
}
