//! One message, many accounts, through the real binary and the recording upstream: eight
//! stolen accounts each send two copies of one phishing template (a personal greeting, a
//! random token in each link's path, the same link host, a random number in the Subject) to
//! five recipients, interleaved with ten ordinary accounts sending distinct messages of
//! 50–300 words; every account stays far under any per-account limit. The README's policy
//! ("Spam runs across accounts") relays at most the first three accounts' copies, holds the
//! later ones, restricts all eight (the first three through `restrict_senders`), holds no
//! ordinary message, tells of the campaign in one alert, and `floodgate campaigns` lists it.
//! Bad config: a message key at the RCPT stage, in `unique=`, `restrict_senders` without one.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::restrict::{alerts, notices, wait_notices};
use common::*;

/// The README's campaign policy (`### Spam runs across accounts`), its spool in `dir`.
fn policy(dir: &Path) -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let section = readme
        .split_once("### Spam runs across accounts")
        .expect("the README section")
        .1;
    let block = section.split_once("```toml\n").expect("a toml block").1;
    let block = block.split_once("```").unwrap().0;
    let held = dir.join("held");
    std::fs::create_dir(&held).unwrap();
    block.replace("/var/lib/floodgate/hold", &held.display().to_string())
}

const PHISHERS: usize = 8;
const ORDINARY: usize = 10;

fn password(user: &str) -> String {
    format!("{user}-pw")
}

/// A small deterministic generator (the test must not depend on luck).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn token(&mut self, len: usize) -> String {
        const A: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        (0..len)
            .map(|_| A[(self.next() % A.len() as u64) as usize] as char)
            .collect()
    }
}

const NAMES: &[&str] = &[
    "Anna", "Ben", "Chloe", "David", "Emma", "Felix", "Greta", "Hugo",
];

/// One copy of the phishing template, as a stolen account `n` sends it.
fn phishing(rng: &mut Rng, n: usize) -> (String, String) {
    let subject = format!(
        "Your invoice #{} is overdue",
        100_000 + rng.next() % 900_000
    );
    let body = format!(
        "Dear {name},\r\n\r\nwe could not process the payment for your last order. \
         To avoid the suspension of your account please confirm your billing details \
         within 24 hours using the secure link below. If the details are not confirmed \
         in time the order will be cancelled and a fee of {fee} EUR will be charged to \
         your card.\r\n\r\nhttps://secure-billing.example/confirm/{t1}?ref={t2}\r\n\r\n\
         Thank you for your prompt attention to this matter.\r\nCustomer Service Team\r\n\
         https://secure-billing.example/help/{t3}\r\n",
        name = NAMES[n % NAMES.len()],
        fee = 10 + rng.next() % 90,
        t1 = rng.token(24),
        t2 = rng.token(16),
        t3 = rng.token(20),
    );
    (subject, body)
}

const WORDS: &[&str] = &[
    "meeting",
    "project",
    "budget",
    "report",
    "schedule",
    "garden",
    "holiday",
    "train",
    "weather",
    "coffee",
    "library",
    "concert",
    "recipe",
    "bicycle",
    "invoice",
    "team",
    "quarter",
    "design",
    "review",
    "draft",
    "friday",
    "morning",
    "lunch",
    "kitchen",
    "window",
    "mountain",
    "river",
    "letter",
    "school",
    "teacher",
    "parents",
    "football",
    "museum",
    "ticket",
    "flight",
    "hotel",
    "dinner",
    "birthday",
    "present",
    "music",
    "printer",
    "server",
    "backup",
    "update",
    "contract",
    "office",
    "parking",
    "doctor",
    "appointment",
    "insurance",
    "painting",
    "theatre",
    "cinema",
    "novel",
    "chapter",
    "summer",
    "winter",
    "autumn",
    "spring",
    "market",
    "bakery",
    "village",
    "harbour",
];

/// A distinct ordinary message of 50–300 words.
fn ordinary(rng: &mut Rng, n: usize, m: usize) -> (String, String) {
    let words = 50 + (rng.next() % 251) as usize;
    let mut body = format!("Hello,\r\n\r\nnote {n}.{m}: ");
    for i in 0..words {
        body.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
        body.push(if i % 12 == 11 { '\n' } else { ' ' });
    }
    (format!("Notes {n}.{m}"), body.replace('\n', "\r\n"))
}

/// One authenticated session sending one message to `rcpts`; the end-of-data reply code
/// (0 when MAIL was refused: its code is in the second field).
fn send(
    addr: std::net::SocketAddr,
    user: &str,
    rcpts: &[String],
    (subject, body): &(String, String),
) -> (u16, u16) {
    let mut c = RawClient::connect_greeted(addr);
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{user}\0{}", password(user)).as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let mail = c.cmd(&format!("MAIL FROM:<{user}@example.org>"));
    if mail.code != 250 {
        return (0, mail.code);
    }
    for r in rcpts {
        assert_eq!(c.cmd(&format!("RCPT TO:<{r}>")).code, 250);
    }
    assert_eq!(c.cmd("DATA").code, 354);
    let text = format!(
        "From: {user}@example.org\r\nSubject: {subject}\r\nMessage-ID: <{}@example.org>\r\n\r\n{}\r\n.\r\n",
        subject.len() * 7919 + body.len(),
        body.replace("\r\n.", "\r\n..")
    );
    c.send(text.as_bytes());
    let code = c.reply().code;
    assert_eq!(c.cmd("QUIT").code, 221);
    (code, 250)
}

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
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .log_level("info")
            .extra(&format!("{}{}", policy(dir.path()), alerts(&alert_file))),
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
    // One campaign alert told of the first four accounts; later ones in later alerts.
    let n = wait_notices(&alert_file, "floodgate.campaign", 1);
    assert_eq!(n[0]["limit"], "campaign");
    assert_eq!(
        n[0]["link_domains"][0], "secure-billing.example",
        "{}",
        n[0]
    );
    assert!(n[0]["subject"]
        .as_str()
        .unwrap()
        .starts_with("Your invoice #"));
    assert!(n[0]["accounts"].as_array().unwrap().len() >= 4, "{}", n[0]);
    let told: usize = notices(&alert_file, "floodgate.campaign")
        .iter()
        .flat_map(|n| n["accounts"].as_array().unwrap().clone())
        .filter(|a| a["restricted"] == true)
        .count();
    assert_eq!(told, PHISHERS, "each account restricted once, told once");
    // floodgate campaigns lists it with its accounts and held messages.
    let v = admin_json(&sock, &["campaigns"]);
    let list = v["campaigns"].as_array().unwrap();
    assert!(!list.is_empty(), "{v}");
    let c = &list[0];
    assert_eq!(c["accounts"].as_array().unwrap().len(), PHISHERS, "{c}");
    assert!(c["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["restricted"] == true));
    assert!(!c["held"].as_array().unwrap().is_empty(), "{c}");
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
