//! `floodgate report --html`: the page opened in Debian's real chromium (headless), which
//! must show one histogram and one rate chart per limit in its rendered DOM; a screenshot
//! for the book (docs/measuring/before-limiting.md); and the time a report takes over a fraction of a day's events (printed,
//! never asserted).

use crate::common;

use std::fmt::Write as _;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const CONFIG: &str = r#"
[[listener]]
name = "plain"
address = "127.0.0.1:0"

[upstream]
address = "127.0.0.1:25"

[[limit]]
name = "per-user"
ratelimit = "100 / 1h / per_rcpt / ${authenticated_id}"
action = "defer"

[[limit]]
name = "user-bucket"
count = "messages"
key = "${authenticated_id}"
rate = "60 / 1h"
burst = "40"
action = "defer"

[[limit]]
name = "per-ip"
ratelimit = "500 / 1d / per_mail / ${client_ip}"
action = "warn"
"#;

/// Events of `users` keys over `secs` seconds at `per_sec` events a second, spread over
/// the three limits; user 7 floods in the middle of the period.
fn events(start: f64, secs: u64, per_sec: u64, users: u64) -> String {
    let mut s = String::new();
    let total = secs * per_sec;
    let limits = ["per-user", "user-bucket", "per-ip"];
    for i in 0..total {
        let t = start + i as f64 / per_sec as f64;
        // A skewed spread: low numbers are busier.
        let u = (i * 2_654_435_761 % (users * users)).isqrt();
        let flood = i > total / 2 && i < total / 2 + total / 20 && i % 3 == 0;
        let key = if flood { 7 } else { users - 1 - u };
        let limit = limits[(i % 3) as usize];
        let key = if limit == "per-ip" {
            format!("10.0.{}.{}", key / 250, key % 250)
        } else {
            format!("user{key}@example.org")
        };
        let _ = writeln!(
            s,
            "{{\"t\":{t:.3},\"limit\":\"{limit}\",\"key\":\"{key}\",\"count\":1}}"
        );
    }
    s
}

fn floodgate(args: &[&str]) -> Output {
    run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate")).args(args),
        Duration::from_secs(600),
    )
}

/// A process group killed when dropped (chromium starts helpers of its own).
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's process group; no memory involved.
        unsafe {
            libc::kill(-(self.0 as i32), libc::SIGKILL);
        }
    }
}

/// Runs Debian's chromium headless with `args` and then `url`; returns its stdout.
fn chromium(dir: &Path, args: &[&str], url: &str) -> String {
    let profile = dir.join(format!("profile-{}", args.len()));
    fs::create_dir_all(&profile).unwrap();
    let out = dir.join("chromium.out");
    let err = dir.join("chromium.err");
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .expect("start chromium (Debian package chromium)");
    let _group = Group(child.id());
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "chromium did not finish in 120 s: {}",
            fs::read_to_string(&err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "chromium failed ({status}): {}",
        fs::read_to_string(&err).unwrap_or_default()
    );
    fs::read_to_string(&out).unwrap()
}

fn setup(dir: &Path, secs: u64, per_sec: u64, users: u64) -> (PathBuf, PathBuf) {
    let config = dir.join("floodgate.toml");
    fs::write(&config, CONFIG).unwrap();
    let log = dir.join("events.jsonl");
    fs::write(&log, events(1_767_225_600.0, secs, per_sec, users)).unwrap();
    (config, log)
}

#[test]
fn chromium_shows_one_chart_per_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (config, log) = setup(dir.path(), 3 * 3600, 1, 60);
    let page = dir.path().join("report.html");
    let out = floodgate(&[
        "report",
        "--config",
        config.to_str().unwrap(),
        "--events",
        log.to_str().unwrap(),
        "--top",
        "5",
        "--html",
        page.to_str().unwrap(),
    ]);
    assert!(out.ok(), "{}", out.text());
    assert!(out.stdout.contains("3 limit(s)"), "{}", out.stdout);
    let url = format!("file://{}", page.display());

    let dom = chromium(dir.path(), &["--dump-dom"], &url);
    for name in ["per-user", "user-bucket", "per-ip"] {
        for class in ["histogram", "rates"] {
            let tag = format!("<svg class=\"{class}\" data-limit=\"{name}\"");
            assert_eq!(dom.matches(&tag).count(), 1, "{tag} in\n{dom}");
        }
        assert!(
            dom.contains(&format!("<section class=\"limit\" data-limit=\"{name}\"")),
            "{name}"
        );
    }
    assert_eq!(dom.matches("<svg class=\"histogram\"").count(), 3);
    // The browser drew bars, the markers and a line per top key.
    assert!(dom.matches("<rect class=\"bar\"").count() >= 3);
    assert_eq!(dom.matches("class=\"marker suggested\"").count(), 3);
    assert_eq!(dom.matches("<polyline class=\"series\"").count(), 15);
    assert!(dom.contains("user7@example.org"));

    // A screenshot for the book, kept only when small.
    let shot = dir.path().join("report.png");
    chromium(
        dir.path(),
        &[
            "--window-size=800,830",
            &format!("--screenshot={}", shot.display()),
        ],
        &url,
    );
    let png = fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let keep = repo_root().join("target/tmp/report-html.png");
    fs::create_dir_all(keep.parent().unwrap()).unwrap();
    fs::write(&keep, &png).unwrap();
    println!("screenshot: {} ({} bytes)", keep.display(), png.len());
}

/// The report's time over a fraction of a day at 100 events a second
/// (`FLOODGATE_REPORT_DAY_FRACTION`, 0.01 by default: 86,400 events; 1 is the whole day,
/// 8.64 M events). Printed, never asserted; the test binary is a debug build.
#[test]
fn report_time_for_a_day_fraction() {
    let fraction: f64 = std::env::var("FLOODGATE_REPORT_DAY_FRACTION")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.01);
    let secs = (86_400.0 * fraction.clamp(0.0001, 1.0)).round() as u64;
    let dir = tempfile::tempdir().unwrap();
    let (config, log) = setup(dir.path(), secs, 100, 5_000);
    let events = secs * 100;
    let size = fs::metadata(&log).unwrap().len();
    let base = [
        "report",
        "--config",
        config.to_str().unwrap(),
        "--events",
        log.to_str().unwrap(),
    ];
    let t = Instant::now();
    let text = floodgate(&base);
    let text_time = t.elapsed();
    assert!(text.ok(), "{}", text.text());
    let page = dir.path().join("r.html");
    let mut html_args = base.to_vec();
    html_args.extend(["--html", page.to_str().unwrap()]);
    let t = Instant::now();
    let html = floodgate(&html_args);
    let html_time = t.elapsed();
    assert!(html.ok(), "{}", html.text());
    let line = format!(
        "report over {events} events ({:.1} MB, {:.4} of a day at 100/s, 5000 keys): text {:.2} s, html {:.2} s, page {} bytes; a whole day (8.64 M events) scales to about text {:.0} s, html {:.0} s (debug build)\n",
        size as f64 / 1e6,
        secs as f64 / 86_400.0,
        text_time.as_secs_f64(),
        html_time.as_secs_f64(),
        fs::metadata(&page).unwrap().len(),
        text_time.as_secs_f64() * 86_400.0 / secs as f64,
        html_time.as_secs_f64() * 86_400.0 / secs as f64,
    );
    print!("{line}");
    let figures = repo_root().join("target/tmp/report-figures.txt");
    fs::create_dir_all(figures.parent().unwrap()).unwrap();
    fs::write(figures, line).unwrap();
}

#[test]
fn bad_html_arguments_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (config, log) = setup(dir.path(), 60, 1, 5);
    let base = [
        "report",
        "--config",
        config.to_str().unwrap(),
        "--events",
        log.to_str().unwrap(),
    ];
    let mut both = base.to_vec();
    both.extend(["--json", "--html", "x.html"]);
    let out = floodgate(&both);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(
        out.stderr
            .contains("'--json' cannot be used with '--html <FILE>'"),
        "{}",
        out.stderr
    );
    let missing = dir.path().join("no/such/dir/r.html");
    let mut unwritable = base.to_vec();
    unwritable.extend(["--html", missing.to_str().unwrap()]);
    let out = floodgate(&unwritable);
    assert_eq!(out.code, Some(1), "{}", out.text());
    assert!(
        out.stderr
            .contains(&format!("cannot write {}", missing.display())),
        "{}",
        out.stderr
    );
}
