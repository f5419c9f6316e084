//! The campaign corpus: lure families built with every trick spammers use to make copies
//! differ (spinning, hidden words, look-alike letters, invisible characters, rotating link
//! hosts, transfer encodings and charsets, an inline image before the text), and the
//! ordinary mail that must never look like a campaign (forwards in every client's style,
//! Outlook-quoted threads, notes with one shared disclaimer, meeting invitations, web
//! application password resets, distinct mail). Deterministic: one seed, one corpus.

use super::b64_encode;
use super::campaign::Rng;

/// Common English words the lure templates and personal notes are drawn from.
pub const ENGLISH: &[&str] = &[
    "account",
    "access",
    "action",
    "address",
    "agree",
    "allow",
    "amount",
    "answer",
    "apply",
    "approve",
    "area",
    "arrive",
    "attach",
    "attention",
    "available",
    "balance",
    "bank",
    "before",
    "benefit",
    "bill",
    "billing",
    "board",
    "bonus",
    "book",
    "branch",
    "brief",
    "budget",
    "business",
    "call",
    "cancel",
    "card",
    "case",
    "cash",
    "change",
    "charge",
    "check",
    "claim",
    "clear",
    "client",
    "close",
    "code",
    "company",
    "complete",
    "confirm",
    "contact",
    "contract",
    "cost",
    "credit",
    "customer",
    "daily",
    "data",
    "date",
    "deadline",
    "deal",
    "debit",
    "delay",
    "delivery",
    "department",
    "deposit",
    "detail",
    "device",
    "direct",
    "document",
    "donate",
    "download",
    "due",
    "early",
    "email",
    "end",
    "enter",
    "error",
    "event",
    "exclusive",
    "expire",
    "extra",
    "fast",
    "fee",
    "file",
    "final",
    "find",
    "follow",
    "form",
    "free",
    "fund",
    "gift",
    "global",
    "grant",
    "group",
    "guarantee",
    "help",
    "hold",
    "home",
    "hour",
    "immediate",
    "important",
    "include",
    "income",
    "inform",
    "invoice",
    "issue",
    "item",
    "join",
    "keep",
    "key",
    "last",
    "late",
    "legal",
    "letter",
    "limit",
    "link",
    "list",
    "loan",
    "lock",
    "login",
    "lose",
    "mail",
    "manage",
    "market",
    "member",
    "message",
    "method",
    "money",
    "month",
    "notice",
    "number",
    "offer",
    "office",
    "online",
    "open",
    "order",
    "package",
    "page",
    "paid",
    "parcel",
    "partner",
    "password",
    "pay",
    "payment",
    "pending",
    "period",
    "personal",
    "phone",
    "place",
    "plan",
    "please",
    "policy",
    "portal",
    "post",
    "price",
    "prize",
    "process",
    "profile",
    "program",
    "protect",
    "provide",
    "purchase",
    "quick",
    "rate",
    "receive",
    "record",
    "refund",
    "register",
    "release",
    "remain",
    "remove",
    "renew",
    "reply",
    "report",
    "request",
    "require",
    "reserve",
    "reset",
    "restore",
    "review",
    "reward",
    "risk",
    "safe",
    "save",
    "secure",
    "security",
    "send",
    "service",
    "session",
    "share",
    "shipment",
    "sign",
    "simple",
    "special",
    "staff",
    "statement",
    "status",
    "stock",
    "submit",
    "support",
    "suspend",
    "system",
    "tax",
    "team",
    "temporary",
    "terms",
    "today",
    "total",
    "track",
    "transfer",
    "trial",
    "unlock",
    "update",
    "upgrade",
    "urgent",
    "user",
    "valid",
    "value",
    "verify",
    "view",
    "visit",
    "wallet",
    "warning",
    "week",
    "welcome",
    "winner",
    "within",
    "work",
    "the",
    "a",
    "to",
    "of",
    "and",
    "your",
    "we",
    "you",
    "is",
    "in",
    "for",
    "on",
    "this",
    "that",
    "with",
    "be",
    "will",
    "our",
    "by",
    "at",
    "from",
    "has",
    "have",
    "not",
    "are",
];

/// Look-alike letters from other scripts (Cyrillic, Greek) for Latin ones.
const LOOK_ALIKES: &[(char, char)] = &[
    ('a', 'а'),
    ('e', 'е'),
    ('o', 'о'),
    ('p', 'р'),
    ('c', 'с'),
    ('x', 'х'),
    ('y', 'у'),
    ('i', 'і'),
    ('s', 'ѕ'),
    ('o', 'ο'),
];

/// Invisible characters put inside words, among them the ones outside the five older
/// versions dropped.
const INVISIBLES: &[char] = &[
    '\u{034F}', '\u{2062}', '\u{2063}', '\u{2064}', '\u{180E}', '\u{200B}', '\u{FEFF}', '\u{2060}',
    '\u{00AD}',
];

/// One message as a test reads it: its account and its bytes.
pub struct Mail {
    pub account: String,
    pub raw: Vec<u8>,
}

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[(rng.next() % from.len() as u64) as usize]
}

fn chance(rng: &mut Rng, percent: u64) -> bool {
    rng.next() % 100 < percent
}

/// A lure family's template: `words` words in sentences, each word position a spin slot
/// with four alternatives at the chance `spin_percent` (so the share spun varies around it
/// from family to family).
pub struct Lure {
    /// Per position: the alternatives (one word where nothing is spun).
    slots: Vec<Vec<&'static str>>,
    /// The family's three rotating link hosts.
    hosts: [String; 3],
    subject: String,
}

/// How the copies of a lure family differ.
#[derive(Clone, Copy, Debug)]
pub struct Tricks {
    /// The chance in percent of a word position being spun (each copy picks one of four
    /// words there).
    pub spin_percent: u64,
    /// Hidden random words, in percent of the visible words.
    pub hidden_percent: u64,
}

impl Lure {
    /// Family `f`'s template.
    pub fn new(rng: &mut Rng, f: usize, tricks: Tricks) -> Lure {
        let words = 70 + (rng.next() % 60) as usize;
        let slots = (0..words)
            .map(|_| {
                let n = if chance(rng, tricks.spin_percent) {
                    4
                } else {
                    1
                };
                (0..n).map(|_| pick(rng, ENGLISH)).collect()
            })
            .collect();
        Lure {
            slots,
            hosts: [0, 1, 2].map(|h| format!("{}-{f}-{h}.example", pick(rng, ENGLISH))),
            subject: format!("{} {} #{f}", pick(rng, ENGLISH), pick(rng, ENGLISH)),
        }
    }

    /// Copy `n` of the family for `account`, with its own spin choices, look-alike letters,
    /// invisible characters, hidden words (in HTML), link host and token, and encoding.
    pub fn copy(&self, rng: &mut Rng, n: usize, account: &str, tricks: Tricks) -> Mail {
        let mut visible: Vec<String> = self
            .slots
            .iter()
            .map(|alts| alts[(rng.next() % alts.len() as u64) as usize].to_string())
            .collect();
        let charset_ok = n % 4 != 3;
        for w in visible.iter_mut() {
            if charset_ok && chance(rng, 10) {
                *w = look_alike(rng, w);
            }
            if charset_ok && chance(rng, 10) && w.len() > 2 {
                let c = INVISIBLES[(rng.next() % INVISIBLES.len() as u64) as usize];
                let at = w.char_indices().nth(1).map_or(1, |(i, _)| i);
                w.insert(at, c);
            }
        }
        let host = &self.hosts[n % 3];
        let link = format!("https://{host}/{}?id={}", rng.token(20), rng.token(12));
        let greeting = format!("Dear {},", super::campaign::NAMES[n % 8]);
        let html = n % 2 == 0;
        let body = if html {
            self.html_body(rng, &greeting, &visible, &link, tricks, n)
        } else {
            format!(
                "{greeting}\r\n\r\n{}\r\n\r\n{link}\r\n",
                wrap(&visible.join(" "))
            )
        };
        let subject = format!("{} {}", self.subject, 1000 + rng.next() % 9000);
        let raw = match n % 4 {
            // An inline image part before the text, the text base64.
            0 => {
                let image = b64_encode(&vec![0x89u8; 300_000]);
                format!(
                    "From: {account}@example.org\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\nContent-Type: multipart/related; boundary=\"rel\"\r\n\r\n--rel\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\nContent-ID: <logo>\r\n\r\n{}\r\n--rel\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n--rel--\r\n",
                    lines76(&image),
                    lines76(&b64_encode(body.as_bytes()))
                )
            }
            // Plain text, quoted-printable UTF-8.
            1 => format!(
                "From: {account}@example.org\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n{}\r\n",
                quoted_printable(body.as_bytes())
            ),
            // HTML, 8-bit UTF-8.
            2 => format!(
                "From: {account}@example.org\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n{body}\r\n"
            ),
            // Plain text in ISO-8859-1, quoted-printable (Latin letters only).
            _ => {
                let latin1: Vec<u8> = body
                    .chars()
                    .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
                    .collect();
                format!(
                    "From: {account}@example.org\r\nSubject: {subject}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n{}\r\n",
                    quoted_printable(&latin1)
                )
            }
        };
        Mail {
            account: account.to_string(),
            raw: raw.into_bytes(),
        }
    }

    /// The HTML of a copy: a huge `data:` image before the text, and random words hidden
    /// among the visible ones (`display:none`, `font-size:0`, white on white, a zero box).
    fn html_body(
        &self,
        rng: &mut Rng,
        greeting: &str,
        visible: &[String],
        link: &str,
        tricks: Tricks,
        n: usize,
    ) -> String {
        let hidden = visible.len() * tricks.hidden_percent as usize / 100;
        let mut every = visible.len().max(1) / hidden.max(1);
        every = every.max(1);
        let mut out = format!(
            "<html><head><title>{}</title><style>.x{{color:red}}</style></head><body>\
             <img src=\"data:image/png;base64,{}\" alt=\"\"><p>{greeting}</p><p>",
            self.subject,
            "iVBORw0KGgo".repeat(if n % 4 == 0 { 120_000 } else { 10 })
        );
        let mut placed = 0;
        for (i, w) in visible.iter().enumerate() {
            out.push_str(w);
            out.push(' ');
            if placed < hidden && i % every == every - 1 {
                let junk = format!(
                    "{} {}",
                    pick(rng, ENGLISH),
                    rng.token(6).replace(|c: char| c.is_ascii_digit(), "q")
                );
                let style = match (placed + n) % 5 {
                    0 => "display:none",
                    1 => "font-size:0px",
                    2 => "color:#ffffff",
                    3 => "max-height:0;overflow:hidden",
                    _ => "font-size:0",
                };
                out.push_str(&format!("<span style=\"{style}\">{junk}</span> "));
                placed += 1;
            }
        }
        out.push_str(&format!(
            "</p><!-- {} --><p><a href=\"{link}\">{link}</a></p></body></html>",
            rng.token(30)
        ));
        out
    }
}

/// `word` with one or two letters swapped for look-alikes.
fn look_alike(rng: &mut Rng, word: &str) -> String {
    let mut swapped = 0;
    word.chars()
        .map(|c| {
            if swapped < 2 && chance(rng, 50) {
                if let Some(&(_, l)) = LOOK_ALIKES.iter().find(|(latin, _)| *latin == c) {
                    swapped += 1;
                    return l;
                }
            }
            c
        })
        .collect()
}

/// Text wrapped at about 72 columns, CRLF.
pub fn wrap(text: &str) -> String {
    let mut out = String::new();
    let mut col = 0;
    for w in text.split(' ') {
        if col > 0 && col + w.len() > 72 {
            out.push_str("\r\n");
            col = 0;
        } else if col > 0 {
            out.push(' ');
            col += 1;
        }
        out.push_str(w);
        col += w.chars().count();
    }
    out
}

fn lines76(s: &str) -> String {
    s.as_bytes()
        .chunks(76)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// Quoted-printable, soft line breaks at 76.
pub fn quoted_printable(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut col = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
            out.push_str("\r\n");
            col = 0;
            i += 2;
            continue;
        }
        let piece = if (33..=126).contains(&b) && b != b'=' || b == b' ' {
            (b as char).to_string()
        } else {
            format!("={b:02X}")
        };
        if col + piece.len() > 75 {
            out.push_str("=\r\n");
            col = 0;
        }
        col += piece.len();
        out.push_str(&piece);
        i += 1;
    }
    out
}

/// A plain UTF-8 message.
pub fn plain(account: &str, subject: &str, body: &str) -> Mail {
    Mail {
        account: account.to_string(),
        raw: format!(
            "From: {account}@example.org\r\nSubject: {subject}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{}\r\n",
            body.replace('\n', "\r\n").replace("\r\r\n", "\r\n")
        )
        .into_bytes(),
    }
}

/// An HTML UTF-8 message.
pub fn html(account: &str, subject: &str, body: &str) -> Mail {
    Mail {
        account: account.to_string(),
        raw: format!(
            "From: {account}@example.org\r\nSubject: {subject}\r\nContent-Type: text/html; charset=utf-8\r\n\r\n{body}\r\n"
        )
        .into_bytes(),
    }
}

/// `n` words of ordinary prose (a personal note), drawn at random.
pub fn note(rng: &mut Rng, n: usize) -> String {
    (0..n)
        .map(|_| pick(rng, ENGLISH))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The announcement colleagues forward: one text, 150 words.
pub fn announcement(rng: &mut Rng) -> String {
    wrap(&format!("Dear all, {}.", note(rng, 150)))
}

/// The header lines of a forwarded or quoted message, by style.
fn header_block(style: usize) -> &'static str {
    match style % 6 {
        0 => "---------- Forwarded message ---------\nFrom: Communications <comms@example.org>\nDate: Mon, 3 Mar 2025 at 10:00\nSubject: Office move\nTo: <all@example.org>\n",
        1 => "-----Original Message-----\nFrom: Communications\nSent: Monday, March 3, 2025 10:00 AM\nTo: All Staff\nSubject: Office move\n",
        2 => "________________________________\nFrom: Communications <comms@example.org>\nSent: Monday, March 3, 2025 10:00\nTo: All Staff <all@example.org>\nSubject: Office move\n",
        3 => "Von: Kommunikation <comms@example.org>\nGesendet: Montag, 3. März 2025 10:00\nAn: Alle <all@example.org>\nBetreff: Umzug\n",
        4 => "De : Communication <comms@example.org>\nEnvoyé : lundi 3 mars 2025 10:00\nÀ : Tous <all@example.org>\nObjet : Déménagement\n",
        _ => "Begin forwarded message:\n\nFrom: Communications <comms@example.org>\nSubject: Office move\nDate: 3 March 2025 at 10:00:00 CET\nTo: all@example.org\n",
    }
}

/// Colleagues forwarding one announcement, each with a note of their own, in plain-text
/// forward styles (Gmail, Outlook desktop, new Outlook, German and French Outlook, Apple
/// Mail, Thunderbird), `n` accounts.
pub fn plain_forwards(rng: &mut Rng, announcement: &str, n: usize) -> Vec<Mail> {
    (0..n)
        .map(|i| {
            let head = if i % 7 == 6 {
                "-------- Forwarded Message --------\nSubject: Office move\nDate: Mon, 3 Mar 2025 10:00:00 +0100\nFrom: Communications <comms@example.org>\nTo: all@example.org\n"
            } else {
                header_block(i)
            };
            let body = format!(
                "FYI {}\n\n{head}\n{announcement}\n",
                note(rng, 5 + i % 30)
            );
            plain(&format!("fwd{i}"), "Fwd: Office move", &body)
        })
        .collect()
}

/// The same forwards as HTML, marked the ways mail clients mark them (`gmail_quote`,
/// `divRplyFwdMsg`, Outlook's top border, `moz-cite-prefix`).
pub fn html_forwards(rng: &mut Rng, announcement: &str, n: usize) -> Vec<Mail> {
    let ann = announcement.replace("\r\n", " ");
    (0..n)
        .map(|i| {
            let marker = match i % 4 {
                0 => "<div class=\"gmail_quote\"><div dir=\"ltr\" class=\"gmail_attr\">---------- Forwarded message ---------<br>From: Communications &lt;comms@example.org&gt;<br>Date: Mon, 3 Mar 2025<br>Subject: Office move<br></div><br>",
                1 => "<hr style=\"display:inline-block;width:98%\" tabindex=\"-1\"><div id=\"divRplyFwdMsg\" dir=\"ltr\"><font face=\"Calibri\"><b>From:</b> Communications<br><b>Sent:</b> Monday<br><b>To:</b> All Staff<br><b>Subject:</b> Office move</font><div>&nbsp;</div></div><div>",
                2 => "<div style=\"border:none;border-top:solid #E1E1E1 1.0pt;padding:3.0pt 0cm 0cm 0cm\"><p class=\"MsoNormal\"><b>From:</b> Communications<br><b>Sent:</b> Monday<br><b>To:</b> All<br><b>Subject:</b> Office move</p></div><div>",
                _ => "<div class=\"moz-cite-prefix\">-------- Forwarded Message --------<br>Subject: Office move</div><div>",
            };
            let body = format!(
                "<html><body><div dir=\"ltr\">{} {}</div><br>{marker}<p>{ann}</p></div></body></html>",
                note(rng, 10),
                note(rng, 3 + i % 20)
            );
            html(&format!("hfwd{i}"), "Fwd: Office move", &body)
        })
        .collect()
}

/// Replies in a thread quoted the Outlook way: no `>`, a header block, then the old text
/// (the same thread under every reply), `n` accounts.
pub fn outlook_thread(rng: &mut Rng, n: usize) -> Vec<Mail> {
    let thread = format!(
        "{}\n\nFrom: Ann Example\nSent: Tuesday, March 4, 2025 9:12 AM\nTo: Team\nSubject: RE: plans\n\n{}\n",
        wrap(&note(rng, 80)),
        wrap(&note(rng, 120))
    );
    (0..n)
        .map(|i| {
            let body = format!(
                "{}\n\n{}\n{thread}",
                wrap(&note(rng, 8 + i % 40)),
                header_block(1 + i % 4)
            );
            plain(&format!("thread{i}"), "RE: plans", &body)
        })
        .collect()
}

/// The organisation's disclaimer: 60 words.
pub const DISCLAIMER: &str = "This e-mail and any attachments are confidential and may be privileged. They are intended solely for the use of the individual or entity to whom they are addressed. If you are not the intended recipient, please notify the sender immediately and delete this e-mail. Any disclosure, copying or distribution of this message is strictly prohibited. Example Holdings Ltd, registered in England.";

/// Short notes of `n` employees, each signed, each with the disclaimer.
pub fn disclaimer_notes(rng: &mut Rng, n: usize, prefix: &str) -> Vec<Mail> {
    (0..n)
        .map(|i| {
            let sign = match i % 3 {
                0 => format!(
                    "\n\nBest regards,\n{}\nAccounts\n",
                    super::campaign::NAMES[i % 8]
                ),
                1 => format!("\n\nThanks\n{}\n", super::campaign::NAMES[i % 8]),
                _ => "\n".to_string(),
            };
            let body = format!(
                "Hi,\n\n{}{sign}\n{}\n",
                wrap(&note(rng, 6 + i % 25)),
                wrap(DISCLAIMER)
            );
            plain(&format!("{prefix}{i}"), "Quick note", &body)
        })
        .collect()
}

/// A Microsoft Teams or Zoom invitation of one organiser: a short note and the block.
pub fn invitation(rng: &mut Rng, account: &str, i: usize) -> Mail {
    let block = if i % 2 == 0 {
        format!(
            "________________________________________________________________________________\n\
             Microsoft Teams meeting\n\
             Join on your computer, mobile app or room device\n\
             Click here to join the meeting<https://teams.microsoft.com/l/meetup-join/19%3ameeting_{}%40thread.v2/0?context={}>\n\
             Meeting ID: {} {} {} {}\n\
             Passcode: {}\n\
             Download Teams<https://www.microsoft.com/en-us/microsoft-teams/download-app> | Join on the web<https://www.microsoft.com/microsoft-teams/join-a-meeting>\n\
             Learn More<https://aka.ms/JoinTeamsMeeting> | Meeting options<https://teams.microsoft.com/meetingOptions/?organizerId={}>\n\
             ________________________________________________________________________________\n",
            rng.token(40),
            rng.token(30),
            100 + rng.next() % 900,
            100 + rng.next() % 900,
            100 + rng.next() % 900,
            100 + rng.next() % 900,
            rng.token(6),
            rng.token(24),
        )
    } else {
        let id = format!(
            "{} {} {}",
            800 + rng.next() % 100,
            1000 + rng.next() % 9000,
            1000 + rng.next() % 9000
        );
        let pass = 100_000 + rng.next() % 900_000;
        format!(
            "Join Zoom Meeting\nhttps://us02web.zoom.us/j/{}?pwd={}\n\nMeeting ID: {id}\nPasscode: {pass}\n\n---\n\n\
             One tap mobile\n+13017158592,,{}#,,,,*{pass}# US (Washington DC)\n+13126266799,,{}#,,,,*{pass}# US (Chicago)\n\n---\n\n\
             Dial by your location\n        +1 301 715 8592 US (Washington DC)\n        +1 312 626 6799 US (Chicago)\n        +1 646 931 3860 US\n\n\
             Meeting ID: {id}\nPasscode: {pass}\n\nFind your local number: https://us02web.zoom.us/u/{}\n",
            rng.next() % 100_000_000_000,
            rng.token(32),
            rng.next() % 100_000_000_000,
            rng.next() % 100_000_000_000,
            rng.token(10),
        )
    };
    let body = format!("{}\n\n{block}", wrap(&note(rng, 4 + i % 16)));
    plain(account, "Invitation: weekly sync", &body)
}

/// A WordPress password reset of site `i`, sent under the site's own account.
pub fn wordpress_reset(rng: &mut Rng, account: &str, i: usize) -> Mail {
    let site = format!("{} {} blog", pick(rng, ENGLISH), pick(rng, ENGLISH));
    let host = format!("site{i}-{}.example", rng.token(5));
    let body = format!(
        "Someone has requested a password reset for the following account:\n\n\
         Site Name: {site}\n\n\
         Username: {}\n\n\
         If this was a mistake, ignore this email and nothing will happen.\n\n\
         To reset your password, visit the following address:\n\n\
         https://{host}/wp-login.php?action=rp&key={}&login={}&wp_lang=en_US\n\n\
         This password reset request originated from the IP address {}.{}.{}.{}.\n",
        pick(rng, ENGLISH),
        rng.token(20),
        pick(rng, ENGLISH),
        rng.next() % 256,
        rng.next() % 256,
        rng.next() % 256,
        rng.next() % 256,
    );
    plain(account, &format!("[{site}] Password Reset"), &body)
}
