//! Helpers of the campaign tests: stolen accounts sending copies of one phishing template
//! (a personal greeting, random tokens in the links, a random number in the Subject),
//! ordinary accounts sending distinct messages, and a deterministic generator for both.

use super::*;

/// The book's campaign policy (the first TOML block of `docs/containment/campaigns.md`,
/// "Spam runs across accounts"), its spool in `dir`.
pub fn readme_policy(dir: &std::path::Path) -> String {
    let block = super::book::first_toml_after(
        "docs/containment/campaigns.md",
        "# Spam runs across accounts",
    );
    let held = dir.join("held");
    std::fs::create_dir(&held).unwrap();
    block.replace("/var/lib/floodgate/hold", &held.display().to_string())
}

pub fn password(user: &str) -> String {
    format!("{user}-pw")
}

/// A small deterministic generator (the test must not depend on luck).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn token(&mut self, len: usize) -> String {
        const A: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        (0..len)
            .map(|_| A[(self.next() % A.len() as u64) as usize] as char)
            .collect()
    }
}

pub const NAMES: &[&str] = &[
    "Anna", "Ben", "Chloe", "David", "Emma", "Felix", "Greta", "Hugo",
];

/// One copy of the phishing template, as a stolen account `n` sends it.
pub fn phishing(rng: &mut Rng, n: usize) -> (String, String) {
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

pub const WORDS: &[&str] = &[
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
pub fn ordinary(rng: &mut Rng, n: usize, m: usize) -> (String, String) {
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
pub fn send(
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

/// The fingerprint bands of a message with `subject` and `body`, as floodgate computes them.
pub fn bands(subject: &str, body: &str) -> Vec<String> {
    let text = format!("Subject: {subject}\r\n\r\n{body}\r\n");
    let wanted = ::floodgate::message_keys::Wanted {
        fingerprint: true,
        ..Default::default()
    };
    ::floodgate::message_keys::compute(text.as_bytes(), wanted, &[]).fingerprint
}

/// A `[message_keys]` budget no copy of [`spun_campaign`] reaches: its last copy's Subject
/// of megabytes takes mail-parser longer than the default 50 ms of a debug build, which
/// would leave that copy without keys (the budget has tests of its own,
/// tests/proxy/message_keys_stall.rs); here every copy must be counted.
pub const UNHURRIED_KEYS: &str = "\n[message_keys]\nbudget = \"10s\"\n";

/// `n` spun copies of one lure: copy `i` is a window of 100 words of one long text,
/// shifted by 25 words from copy `i - 1`, so that each copy shares a band with the one
/// before it and no band is shared by more than three copies (checked here, with the
/// bands floodgate computes; among a bounded number of word lists the first that has both).
/// Counted per band, no band ever sees a fourth account; grouped, they are one campaign.
pub fn spun_copies(n: usize) -> Vec<(String, String)> {
    for seed in 1..=40u64 {
        let mut rng = Rng(0x5eed_0000 + seed);
        let words: Vec<String> = (0..(n * 25 + 100))
            .map(|i| format!("{}{}", WORDS[(rng.next() % WORDS.len() as u64) as usize], i))
            .collect();
        let copies: Vec<(String, String)> = (0..n)
            .map(|i| {
                let body = words[i * 25..i * 25 + 100].join(" ");
                (format!("Invoice {}", 1000 + i), body)
            })
            .collect();
        let sets: Vec<Vec<String>> = copies.iter().map(|(s, b)| bands(s, b)).collect();
        let chained = sets
            .windows(2)
            .all(|w| w[0].iter().any(|b| w[1].contains(b)));
        let widest = sets
            .iter()
            .flatten()
            .map(|b| sets.iter().filter(|s| s.contains(b)).count())
            .max()
            .unwrap_or(0);
        if chained && widest <= 3 {
            return copies;
        }
    }
    panic!("no word list gave spun copies that chain with at most three copies per band");
}

/// The outcome of [`spun_campaign`].
pub struct SpunRun {
    /// Accounts whose copies went out (each once at most).
    pub relayed: Vec<String>,
    /// `floodgate restricted` after the run.
    pub restricted: Vec<String>,
    /// The one campaign `floodgate campaigns --json` lists.
    pub campaign: serde_json::Value,
    /// Copies sent in all.
    pub copies: u64,
}

/// Eight accounts each send one spun copy ([`spun_copies`]) to one recipient; then
/// `stolen1` sends a second copy and `stolen2` one to twelve recipients; then `stolen1` is
/// released and sends one more copy (to one recipient, with a Subject of `long_subject`
/// characters, folded, through the second node when there are two). Node `i % nodes.len()`
/// takes account `i`'s first copy; the admin verbs go to the first node. Answers what happened for the caller's assertions.
pub fn spun_campaign(rec: &Recorder, nodes: &[&Floodgate], long_subject: usize) -> SpunRun {
    let accounts: Vec<String> = (1..=8).map(|i| format!("stolen{i}")).collect();
    let copies = spun_copies(accounts.len());
    let node = |i: usize| nodes[i % nodes.len()].addr("plain");
    let delivered = |tag: &str| {
        rec.messages()
            .iter()
            .any(|m| m.rcpts.iter().any(|r| r.starts_with(tag)))
    };
    let mut relayed = Vec::new();
    let mut sent = 0;
    for (i, a) in accounts.iter().enumerate() {
        let tag = format!("colleague{i}@");
        let (code, _) = send(node(i), a, &[format!("{tag}example.net")], &copies[i]);
        assert_eq!(code, 250, "{a}");
        sent += 1;
        if delivered(&tag) {
            relayed.push(a.clone());
        }
    }
    // Evidence: a second copy, and one copy to twelve recipients.
    let (code, _) = send(
        node(0),
        &accounts[0],
        &["again0@example.net".into()],
        &copies[0],
    );
    assert_eq!(code, 250);
    let many: Vec<String> = (0..12).map(|r| format!("many{r}@example.net")).collect();
    let (code, _) = send(node(1), &accounts[1], &many, &copies[1]);
    assert_eq!(code, 250);
    sent += 2;
    let sock = nodes[0].admin_socket();
    let out = admin_verb(
        &sock,
        &["release", &accounts[0], "--reason", "password changed"],
    );
    assert!(out.ok(), "{out}");
    // After the release: one more copy, to one recipient, with a long Subject.
    let folded: Vec<String> = (0..long_subject.div_ceil(70))
        .map(|_| "x".repeat(70))
        .collect();
    let subject = format!("Invoice {}", folded.join("\r\n "));
    let (code, mail) = send(
        node(1),
        &accounts[0],
        &["after@example.net".into()],
        &(subject, copies[0].1.clone()),
    );
    assert_eq!((code, mail), (250, 250));
    sent += 1;
    let v = admin_json(&sock, &["restricted"]);
    let mut restricted: Vec<String> = v["restricted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    restricted.sort();
    let c = admin_json(&sock, &["campaigns"]);
    let list = c["campaigns"].as_array().unwrap();
    assert_eq!(list.len(), 1, "one campaign: {c}");
    SpunRun {
        relayed,
        restricted,
        campaign: list[0].clone(),
        copies: sent,
    }
}

/// The assertions both stores answer alike for [`spun_campaign`].
pub fn check_spun(run: &SpunRun, log: &str) {
    // Grouped: the fourth account trips the limit though no band has four accounts.
    assert_eq!(run.relayed, ["stolen1", "stolen2", "stolen3"], "{log}");
    // Evidence, not company: stolen1 (two copies) and stolen2 (twelve recipients) were
    // restricted; stolen1 was released and its later single copy did not restrict it
    // again; the others, one copy to one recipient each, are not restricted (their copies
    // from the fourth on were held).
    assert_eq!(run.restricted, ["stolen2"], "{log}");
    let c = &run.campaign;
    assert_eq!(c["copies"], run.copies, "true totals: {c}");
    assert_eq!(c["recipients"], 8 + 1 + 12 + 1, "{c}");
    let accounts = c["accounts"].as_array().unwrap();
    assert_eq!(accounts.len(), 8, "{c}");
    assert!(c["message_key"].as_str().unwrap().starts_with("c:b"), "{c}");
    let s1 = accounts.iter().find(|a| a["key"] == "stolen1").unwrap();
    assert_eq!(s1["copies"], 3, "{c}");
    // The Subject kept is capped.
    let subject = c["subject"].as_str().unwrap();
    assert!(subject.starts_with("Invoice x"), "{c}");
    assert_eq!(subject.chars().count(), 200, "{c}");
}
