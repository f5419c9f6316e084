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
