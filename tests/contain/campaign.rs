//! One message, many accounts, through the real binary and the recording upstream: eight
//! stolen accounts each send two copies of one phishing template (a personal greeting, a
//! random token in each link's path, the same link host, a random number in the Subject) to
//! five recipients, interleaved with ten ordinary accounts sending distinct messages of
//! 50–300 words; every account stays far under any per-account limit. The README's policy
//! ("Spam runs across accounts") relays at most the first three accounts' copies, holds the
//! later ones, restricts all eight on their own part (each sent two copies to five
//! recipients), holds no ordinary message, tells of the campaign in one alert, and
//! `floodgate campaigns` lists it once with its true totals.
//! Bad config: a message key at the RCPT stage, in `unique=`, `restrict_senders` without one.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::campaign::*;
use common::restrict::{alerts, notices, wait_notices};
use common::*;

const PHISHERS: usize = 8;
const TOKEN: &str = "campaign-console-token-0123456789";
const ORDINARY: usize = 10;

#[test]
fn a_campaign_across_eight_accounts_is_stopped_at_the_third() {
    let dir = tempfile::tempdir().unwrap();
    let phishers: Vec<String> = (1..=PHISHERS).map(|i| format!("stolen{i}")).collect();
    let normals: Vec<String> = (1..=ORDINARY).map(|i| format!("user{i}")).collect();
    let rec = Recorder::start(RecorderOptions {
        users: phishers
            .iter()
            .chain(&normals)
            .map(|u| (u.clone(), password(u)))
            .collect(),
        ..RecorderOptions::default()
    });
    let alert_file = dir.path().join("alerts.jsonl");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let console = closed_port();
    let admin = format!(
        "\n[admin]\nsocket = \"admin.sock\"\naddress = \"{console}\"\ntoken_file = \"{}\"\n",
        token_file.display()
    );
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .log_level("info")
            .extra(&format!(
                "{}{}{admin}",
                readme_policy(dir.path()),
                alerts(&alert_file)
            )),
    );
    let sock = fg.admin_socket();
    let addr = fg.addr("plain");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut relayed_phish = Vec::new();
    let mut held_phish = 0;
    let mut ordinary_refused = 0;
    // Two rounds: each stolen account sends a copy, each ordinary account a message, in
    // turn.
    for round in 0..2 {
        for i in 0..PHISHERS.max(ORDINARY) {
            if let Some(p) = phishers.get(i) {
                let rcpts: Vec<String> = (0..5)
                    .map(|r| format!("victim{round}{i}{r}@example.net"))
                    .collect();
                let (code, mail) = send(addr, p, &rcpts, &phishing(&mut rng, i));
                assert!(code == 250 || mail == 250, "{p}: {code} {mail}");
                assert_eq!(code, 250, "{p} round {round}: held mail is answered 250");
                let delivered = rec.messages().iter().any(|m| {
                    m.rcpts
                        .iter()
                        .any(|r| r.contains(&format!("victim{round}{i}0")))
                });
                if delivered {
                    relayed_phish.push((round, p.clone()));
                } else {
                    held_phish += 1;
                }
            }
            if let Some(u) = normals.get(i) {
                let (code, _) = send(
                    addr,
                    u,
                    &[format!("friend{i}@example.com")],
                    &ordinary(&mut rng, i, round),
                );
                if code != 250 {
                    ordinary_refused += 1;
                }
            }
        }
    }
    let log = fg.stderr();
    // At most the first three accounts' first copies went out; every later copy is held.
    assert!(relayed_phish.len() <= 3, "{relayed_phish:?}\n{log}");
    assert!(
        relayed_phish
            .iter()
            .all(|(round, p)| *round == 0 && phishers[..3].contains(p)),
        "{relayed_phish:?}"
    );
    assert_eq!(held_phish, 2 * PHISHERS - relayed_phish.len());
    // No ordinary message was held or refused.
    assert_eq!(ordinary_refused, 0);
    let ordinary_out = rec
        .messages()
        .iter()
        .filter(|m| m.rcpts.iter().any(|r| r.contains("friend")))
        .count();
    assert_eq!(ordinary_out, 2 * ORDINARY, "{log}");
    let held = admin_json(&sock, &["held", "list"]);
    let held = held["held"].as_array().unwrap();
    assert_eq!(held.len(), held_phish, "{held:?}");
    assert!(held
        .iter()
        .all(|h| h["key"].as_str().unwrap().starts_with("stolen")));
    // All eight accounts are restricted, the first three through restrict_senders.
    let restricted = admin_json(&sock, &["restricted"]);
    let mut keys: Vec<&str> = restricted["restricted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    keys.sort();
    let mut want: Vec<&str> = phishers.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(keys, want, "{restricted}");
    for r in restricted["restricted"].as_array().unwrap() {
        assert_eq!(r["limit"], "campaign", "{r}");
        assert!(r["reason"].as_str().unwrap().contains("campaign"), "{r}");
    }
    // One campaign alert, when it was found (the fourth account); no update within the
    // hour, and no per-key alert of the limit beside it.
    let n = wait_notices(&alert_file, "floodgate.campaign", 1);
    assert_eq!(n[0]["limit"], "campaign");
    assert_eq!(n[0]["update"], false);
    assert_eq!(
        n[0]["link_domains"][0], "secure-billing.example",
        "{}",
        n[0]
    );
    assert!(n[0]["subject"]
        .as_str()
        .unwrap()
        .starts_with("Your invoice #"));
    assert_eq!(n[0]["accounts"].as_array().unwrap().len(), 4, "{}", n[0]);
    assert_eq!(notices(&alert_file, "floodgate.campaign").len(), 1);
    assert!(notices(&alert_file, "floodgate.alert")
        .iter()
        .all(|a| a["limit"] != "campaign"));
    // floodgate campaigns lists it once, with its true totals, accounts and held messages.
    let v = admin_json(&sock, &["campaigns"]);
    let list = v["campaigns"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    let c = &list[0];
    assert_eq!(c["copies"], 2 * PHISHERS as u64, "{c}");
    assert_eq!(c["recipients"], 10 * PHISHERS as u64, "{c}");
    assert_eq!(c["accounts"].as_array().unwrap().len(), PHISHERS, "{c}");
    assert!(c["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["restricted"] == true));
    assert!(!c["held"].as_array().unwrap().is_empty(), "{c}");
    // inspect takes the message key value as a key: the campaign limit's distinct
    // accounts under it.
    let mk = c["message_key"].as_str().unwrap();
    let v = admin_json(&sock, &["inspect", mk]);
    let row = v["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["limit"] == "campaign")
        .cloned()
        .unwrap();
    assert!(row["value"].as_f64().unwrap() > 2.9, "{v}");
    // The console's Campaigns page, fetched as a browser would (curl, the admin token).
    let page = run_with_timeout(
        Command::new("curl")
            .args(["-sS", "--max-time", "20", "-H"])
            .arg(format!("Authorization: Bearer {TOKEN}"))
            .arg(format!("http://{console}/console/campaigns")),
        Duration::from_secs(30),
    );
    assert!(page.ok(), "{page}");
    for want in [
        "data-campaign=\"c:b",
        "<h2>Your invoice #",
        "/console/key/stolen1",
        "/console/key/stolen8",
        "/console/held?key=stolen4",
        "secure-billing.example",
    ] {
        assert!(
            page.stdout.contains(want),
            "{want} not on the page:\n{}",
            page.stdout
        );
    }
    let table = admin_verb(&sock, &["campaigns"]);
    assert!(
        table.ok() && table.stdout.contains("stolen1") && table.stdout.contains("campaign "),
        "{table}"
    );
}

#[test]
fn fingerprint_prints_the_keys_of_a_message_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    let (subject, body) = phishing(&mut rng, 1);
    let a = dir.path().join("a.eml");
    std::fs::write(
        &a,
        format!("Subject: {subject}\n\n{}", body.replace("\r\n", "\n")),
    )
    .unwrap();
    let (subject2, body2) = phishing(&mut rng, 2);
    let b = dir.path().join("b.eml");
    std::fs::write(&b, format!("Subject: {subject2}\r\n\r\n{body2}")).unwrap();
    let keys = |p: &Path| {
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(["fingerprint", "--json"])
                .arg(p),
            Duration::from_secs(30),
        );
        assert!(out.ok(), "{out}");
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (ka, kb) = (keys(&a), keys(&b));
    assert_eq!(ka["link_domain"][0], "secure-billing.example", "{ka}");
    assert_eq!(ka["subject_shape"], kb["subject_shape"], "{ka} {kb}");
    let fa: Vec<&serde_json::Value> = ka["fingerprint"].as_array().unwrap().iter().collect();
    assert!(
        kb["fingerprint"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| fa.contains(&f)),
        "two copies share a band: {ka} {kb}"
    );
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("fingerprint")
            .arg(dir.path().join("missing.eml")),
        Duration::from_secs(30),
    );
    assert!(!out.ok() && out.stderr.contains("cannot read"), "{out}");
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("fingerprint")
            .arg(&a),
        Duration::from_secs(30),
    );
    assert!(
        out.ok() && out.stdout.contains("link_domain secure-billing.example"),
        "{out}"
    );
}

#[test]
fn check_says_which_message_keys_are_computed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let text = FloodgateConfig::new(closed_port())
        .extra(&format!(
            "{}\n[message_keys]\nexempt_link_domains = [\"Example.org\"]\n",
            readme_policy(dir.path())
        ))
        .toml();
    std::fs::write(&path, text).unwrap();
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path),
        Duration::from_secs(30),
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout.contains(
            "message keys: fingerprint, link_domain at the end of data; exempt_link_domains=example.org include_automatic=false budget=50ms"
        ),
        "{out}"
    );
}

#[test]
fn message_keys_are_refused_where_they_cannot_be() {
    let cases = [
        (
            "[[limit]]\nname = \"c\"\nstage = \"rcpt\"\nkey = \"${fingerprint}\"\nratelimit = \"3 / 1h / per_rcpt\"\n",
            "exists only at the end of data",
        ),
        (
            "[[limit]]\nname = \"c\"\nkey = \"${fingerprint}:${link_domain}\"\nratelimit = \"3 / 1h / per_mail\"\n",
            "at most one message key",
        ),
        (
            "[[limit]]\nname = \"c\"\nkey = \"${authenticated_id}\"\nratelimit = \"3 / 1h / per_mail / unique=${fingerprint}\"\n",
            "unique=${fingerprint}",
        ),
        (
            "[[limit]]\nname = \"c\"\nkey = \"${authenticated_id}\"\nratelimit = \"3 / 1h / per_mail\"\naction = \"defer\"\nrestrict_senders = true\n",
            "restrict_senders is for limits keyed on a message key",
        ),
        (
            "[[limit]]\nname = \"c\"\nkey = \"${link_domain}\"\nratelimit = \"3 / 1h / per_mail\"\naction = \"restrict\"\n",
            "would stop nobody",
        ),
        (
            "[[limit]]\nname = \"c\"\nkey = \"${subject_shape}\"\nmax = 3\n",
            "is for rate limits",
        ),
        (
            "[message_keys]\nexempt_link_domains = [\"https://example.org/\"]\n",
            "is not a domain name",
        ),
        ("[message_keys]\ncolour = 1\n", "unknown field `colour`"),
        (
            "[message_keys]\nbudget = \"0ms\"\n",
            "[message_keys] budget: 0ms is out of range (write from 1ms to 10s",
        ),
        (
            "[message_keys]\nbudget = \"1h\"\n",
            "[message_keys] budget: 3600000ms is out of range",
        ),
        ("[message_keys]\nbudget = \"fast\"\n", "bad duration \"fast\""),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, (extra, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("c{i}.toml"));
        std::fs::write(
            &path,
            FloodgateConfig::new(closed_port()).extra(extra).toml(),
        )
        .unwrap();
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(["check", "--config"])
                .arg(&path),
            Duration::from_secs(30),
        );
        assert!(!out.ok(), "{extra}\n{out}");
        assert!(out.stderr.contains(want), "{extra}: want {want:?}\n{out}");
        assert!(out.stderr.contains(&format!("c{i}.toml:")), "{out}");
    }
}
