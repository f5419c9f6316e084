//! conf/prometheus/floodgate-rules.yml and conf/grafana/floodgate.json against the real
//! thing: `promtool check rules` passes, and a real Prometheus (Debian's package) scraping
//! two running floodgates (one with the memory store, one with Redis) after some traffic
//! knows every metric name the rules and the dashboard use.

use crate::common;
use crate::common::redis as redis_server;

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::*;
use redis_server::RedisServer;

const RULES: &str = "conf/prometheus/floodgate-rules.yml";
const DASHBOARD: &str = "conf/grafana/floodgate.json";

/// Every `floodgate_…` metric name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("floodgate_") {
        // A name starts the token (not `x_floodgate_…`).
        if text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            continue;
        }
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        names.insert(name);
    }
    names
}

/// The metric names of the rules' and the dashboard's queries.
fn used_names() -> BTreeSet<String> {
    let rules = fs::read_to_string(repo_root().join(RULES)).unwrap();
    let dash: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(repo_root().join(DASHBOARD)).unwrap())
            .expect("the dashboard is JSON");
    let mut exprs = String::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            exprs.push_str(t["expr"].as_str().expect("expr"));
            exprs.push('\n');
        }
    }
    for v in dash["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = v["definition"].as_str() {
            exprs.push_str(q);
            exprs.push('\n');
        }
    }
    let dash_names = metric_names(&exprs);
    assert!(dash_names.len() >= 20, "dashboard names: {dash_names:?}");
    let rule_names = metric_names(&rules);
    assert!(rule_names.len() >= 8, "rule names: {rule_names:?}");
    dash_names.union(&rule_names).cloned().collect()
}

#[test]
fn the_name_extraction_finds_whole_names() {
    let n = metric_names("rate(floodgate_a_total[5m]) / x_floodgate_b + floodgate_c{x=\"1\"}");
    assert_eq!(
        n.into_iter().collect::<Vec<_>>(),
        ["floodgate_a_total", "floodgate_c"]
    );
}

#[test]
fn promtool_checks_the_rules() {
    let out = run_with_timeout(
        Command::new("promtool")
            .args(["check", "rules", RULES])
            .current_dir(repo_root()),
        Duration::from_secs(60),
    );
    assert!(out.ok(), "promtool check rules failed:\n{}", out.text());
    assert!(
        out.stdout.contains("SUCCESS: 9 rules found"),
        "{}",
        out.text()
    );
}

/// One `GET` of Prometheus's HTTP API; the JSON body.
fn api(addr: SocketAddr, path: &str) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: prometheus\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let text = String::from_utf8_lossy(&out);
    let (_, body) = text.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

const LIMIT: &str = r#"
[[limit]]
name = "per-sender"
count = "messages"
key = "${sender_address}"
algorithm = "bucket"
rate = "1 / 1h"
burst = "1"
action = "defer"
"#;

/// Three messages from one sender: the first relayed, the others deferred by the limit.
fn traffic(fg: &Floodgate) {
    let out = smtplib(
        fg.addr("plain"),
        r#"
s = smtplib.SMTP(HOST, PORT, timeout=30)
codes = []
for i in range(3):
    try:
        s.sendmail("ann@example.org", ["r@example.com"], b"Subject: t\r\n\r\nhi\r\n")
        codes.append("250")
    except smtplib.SMTPException as e:
        codes.append(str(getattr(e, "smtp_code", "x")))
s.quit()
out("codes", ",".join(codes))
"#,
        Duration::from_secs(60),
    );
    assert!(out.ok(), "{out}");
    let codes = out.field("codes").unwrap_or_default();
    assert!(codes.starts_with("250,4"), "codes {codes}: {out}");
}

#[test]
fn prometheus_scrape_has_every_metric_of_the_rules_and_the_dashboard() {
    let wanted = used_names();
    let rec = Recorder::plain();
    let redis = RedisServer::start();
    let memory_metrics = closed_port();
    let redis_metrics = closed_port();
    let memory = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(&format!(
        "[metrics]\naddress = \"{memory_metrics}\"\n{LIMIT}"
    )));
    let shared = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(&format!(
        "[metrics]\naddress = \"{redis_metrics}\"\n\n[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n{LIMIT}",
        redis.url()
    )));
    traffic(&memory);
    traffic(&shared);

    let dir = tempfile::tempdir().unwrap();
    let web = closed_port();
    let config = dir.path().join("prometheus.yml");
    fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: floodgate\n    static_configs:\n      - targets: ['{memory_metrics}', '{redis_metrics}']\n",
            repo_root().join(RULES).display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .current_dir(dir.path());
    let log = dir.path().join("prometheus.log");
    let mut prom = Daemon::spawn("prometheus", cmd, &log);

    let deadline = Instant::now() + Duration::from_secs(90);
    let mut missing: Vec<String>;
    loop {
        let known: BTreeSet<String> = api(web, "/api/v1/label/__name__/values")
            .and_then(|v| {
                v["data"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default();
        missing = wanted.difference(&known).cloned().collect();
        if missing.is_empty() || Instant::now() >= deadline || prom.exited().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // Both targets were up, and the rules were loaded.
    let targets = api(web, "/api/v1/targets").unwrap_or_default();
    let up = targets["data"]["activeTargets"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|t| t["health"] == "up").count());
    let groups = api(web, "/api/v1/rules").unwrap_or_default();
    let rules = groups["data"]["groups"][0]["rules"]
        .as_array()
        .map_or(0, Vec::len);
    prom.stop();
    assert!(
        missing.is_empty(),
        "metrics used by the rules or the dashboard but not scraped: {missing:?}\nprometheus log:\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(up, 2, "targets: {targets}");
    assert_eq!(rules, 9, "rules: {groups}");
    println!("prometheus knows all {} metric names used", wanted.len());
}
