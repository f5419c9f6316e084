//! One campaign is one campaign, through the real binary and the recording upstream: spun
//! copies that pairwise share different bands are grouped (the limit trips on the fourth
//! account, one entry in `floodgate campaigns` with true totals, one alert and one mail);
//! accounts are restricted on their own part only, and not again after a release for
//! copies sent before it; the Subject kept is capped; 400 logins each sending one copy
//! cannot flood the postmaster past `[alerts] max_per_minute`.

use crate::common;

use std::time::{Duration, Instant};

use common::campaign::*;
use common::restrict::{alerts, notices, wait_notices};
use common::*;

fn mail_alerts(file: &std::path::Path, per_minute: u32) -> String {
    format!(
        "{}mail_to = [\"postmaster@alerts.test\"]\nmax_per_minute = {per_minute}\n",
        alerts(file)
    )
}

fn postmaster_mails(rec: &Recorder, subject: &str) -> usize {
    rec.messages()
        .iter()
        .filter(|m| m.rcpts.iter().any(|r| r.contains("postmaster@alerts.test")))
        .filter(|m| String::from_utf8_lossy(&m.data).contains(subject))
        .count()
}

#[test]
fn spun_copies_are_one_campaign_and_only_evidence_restricts() {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::start(RecorderOptions {
        users: (1..=8)
            .map(|i| format!("stolen{i}"))
            .map(|u| (u.clone(), password(&u)))
            .collect(),
        ..RecorderOptions::default()
    });
    let alert_file = dir.path().join("alerts.jsonl");
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .log_level("info")
            .extra(&format!(
                "{}{}{UNHURRIED_KEYS}",
                readme_policy(dir.path()),
                mail_alerts(&alert_file, 60)
            )),
    );
    let run = spun_campaign(&rec, &[&fg], 3_000_000);
    let log = fg.stderr();
    check_spun(&run, &log);
    // One alert, when the campaign was found, and one mail to the postmaster.
    let n = wait_notices(&alert_file, "floodgate.campaign", 1);
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0]["message_key"], run.campaign["message_key"]);
    wait_until(Duration::from_secs(20), "the campaign mail", || {
        (postmaster_mails(&rec, "campaign from") >= 1).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(postmaster_mails(&rec, "campaign from"), 1);
    assert_eq!(notices(&alert_file, "floodgate.campaign").len(), 1);
}

#[test]
fn four_hundred_logins_cannot_flood_the_postmaster() {
    const LOGINS: usize = 400;
    const PER_MINUTE: u32 = 5;
    let dir = tempfile::tempdir().unwrap();
    let users: Vec<String> = (0..LOGINS).map(|i| format!("login{i}")).collect();
    let rec = Recorder::start(RecorderOptions {
        users: users.iter().map(|u| (u.clone(), password(u))).collect(),
        ..RecorderOptions::default()
    });
    let alert_file = dir.path().join("alerts.jsonl");
    // Besides the campaign limit, a per-account limit every message crosses (one alert
    // per account).
    let every = "\n[[limit]]\nname = \"every-message\"\nstage = \"mail\"\n\
                 ratelimit = \"0 / 1h / per_mail / ${authenticated_id}\"\naction = \"warn\"\n";
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .log_level("info")
            .extra(&format!(
                "{}{every}{}",
                readme_policy(dir.path()),
                mail_alerts(&alert_file, PER_MINUTE)
            )),
    );
    let mut rng = Rng(0x400);
    let started = Instant::now();
    let mut sent = 0;
    // Each login sends one copy of the lure to ten recipients (its own part: restricted).
    for (i, u) in users.iter().enumerate() {
        if started.elapsed() > Duration::from_secs(240) {
            break;
        }
        let rcpts: Vec<String> = (0..10).map(|r| format!("v{i}x{r}@example.net")).collect();
        let (code, _) = send(fg.addr("plain"), u, &rcpts, &phishing(&mut rng, i));
        assert_eq!(code, 250, "{u}");
        sent += 1;
    }
    assert_eq!(sent, LOGINS, "the loop ran out of time");
    let restricted = admin_json(&fg.admin_socket(), &["restricted"]);
    assert!(
        restricted["restricted"].as_array().unwrap().len() > LOGINS / 2,
        "{restricted}"
    );
    let c = admin_json(&fg.admin_socket(), &["campaigns"]);
    assert_eq!(c["campaigns"].as_array().unwrap().len(), 1, "{c}");
    // Every channel got at most max_per_minute notices of each kind (limit crossings;
    // restrictions and releases; campaigns: three budgets), the run taking well under the
    // minutes it would take to refill them several times over.
    std::thread::sleep(Duration::from_secs(2));
    let lines = std::fs::read_to_string(&alert_file).unwrap_or_default();
    let minutes = started.elapsed().as_secs() / 60 + 1;
    let per_kind = PER_MINUTE as usize * minutes as usize;
    for event in [
        "floodgate.alert",
        "floodgate.restricted",
        "floodgate.campaign",
    ] {
        let n = notices(&alert_file, event).len();
        assert!(n <= per_kind, "{n} {event} notices > {per_kind}");
    }
    assert!(!notices(&alert_file, "floodgate.alert").is_empty());
    let delivered = lines
        .lines()
        .filter(|l| !l.contains("floodgate.alert.suppressed"))
        .count();
    let budget = 3 * per_kind;
    assert!(delivered <= budget, "{delivered} > {budget}");
    let mails = rec
        .messages()
        .iter()
        .filter(|m| m.rcpts.iter().any(|r| r.contains("postmaster@alerts.test")))
        .count();
    assert!(mails <= budget, "{mails} alert mails");
    eprintln!("{LOGINS} logins: {delivered} notices by command, {mails} alert mails");
    assert_eq!(notices(&alert_file, "floodgate.campaign").len(), 1);
    let log = fg.stderr();
    assert!(
        log.contains("alerts suppressed: max_per_minute reached"),
        "{log}"
    );
    let log_lines = log
        .lines()
        .filter(|l| l.contains("floodgate::alert"))
        .count();
    assert!(
        log_lines <= budget + minutes as usize,
        "{log_lines} alert log lines"
    );
}

/// A colleague's message: a few lines of their own, then the company footer all share.
fn with_footer(rng: &mut Rng, n: usize) -> (String, String) {
    let own: Vec<&str> = (0..25)
        .map(|_| WORDS[(rng.next() % WORDS.len() as u64) as usize])
        .collect();
    let footer = "Example Widgets GmbH, Registered office Musterstadt, Commercial register \
                  HRB 12345, Managing directors Anna Example and Ben Example. This message \
                  and any attachment are confidential and intended solely for the addressee. \
                  If you received it in error please notify the sender and delete it. Our \
                  privacy notice explains how we process personal data in our customer and \
                  supplier relationships and is available on request from our office.";
    (
        format!("Notes {n}"),
        format!("Hello,\r\n\r\n{}\r\n\r\n-- \r\n{footer}\r\n", own.join(" ")),
    )
}

#[test]
fn colleagues_sharing_a_footer_are_not_restricted_the_bulk_sender_is() {
    let dir = tempfile::tempdir().unwrap();
    let people: Vec<String> = (1..=5)
        .map(|i| format!("colleague{i}"))
        .chain(["bulk".to_string()])
        .collect();
    let rec = Recorder::start(RecorderOptions {
        users: people.iter().map(|u| (u.clone(), password(u))).collect(),
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .extra(&readme_policy(dir.path())),
    );
    let mut rng = Rng(0xf007);
    let texts: Vec<(String, String)> = (0..5).map(|i| with_footer(&mut rng, i)).collect();
    // Which copies this fingerprint links into one campaign, message by message (a
    // fingerprint that leaves the footer out links none): a copy whose campaign reaches a
    // fourth account is held.
    let sets: Vec<Vec<String>> = texts.iter().map(|(s, b)| bands(s, b)).collect();
    let mut groups: Vec<(Vec<String>, usize)> = Vec::new();
    let mut held = 0;
    for set in &sets {
        let (mut merged, mut accounts) = (set.clone(), 1);
        groups.retain(|(g, n)| {
            if g.iter().any(|b| set.contains(b)) {
                merged.extend(g.iter().cloned());
                accounts += n;
                false
            } else {
                true
            }
        });
        if accounts > 3 {
            held += 1;
        }
        groups.push((merged, accounts));
    }
    let linked = held > 0;
    for (i, c) in people[..5].iter().enumerate() {
        let (code, _) = send(
            fg.addr("plain"),
            c,
            &[format!("friend{i}@example.net")],
            &texts[i],
        );
        assert_eq!(code, 250, "{c}");
    }
    let out = |tag: &str| {
        rec.messages()
            .iter()
            .filter(|m| m.rcpts.iter().any(|r| r.starts_with(tag)))
            .count()
    };
    assert_eq!(out("friend"), 5 - held, "{held} held of five");
    // The bulk sender sends the last colleague's text three times, to twelve recipients.
    let rcpts: Vec<String> = (0..12).map(|r| format!("bulk{r}@example.net")).collect();
    for _ in 0..3 {
        let (code, mail) = send(fg.addr("plain"), "bulk", &rcpts, &texts[4]);
        assert!(code == 250 || mail != 250, "{code} {mail}");
    }
    let v = admin_json(&fg.admin_socket(), &["restricted"]);
    let keys: Vec<&str> = v["restricted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    // No colleague is restricted, whatever the fingerprint links; the bulk sender is when
    // its copies belong to a found campaign.
    assert!(keys.iter().all(|k| !k.starts_with("colleague")), "{v}");
    if linked {
        assert_eq!(keys, ["bulk"], "{v}");
        assert_eq!(out("bulk"), 0, "the bulk sender's copies are held");
    }
}
