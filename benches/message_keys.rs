//! Criterion benchmark of `message_keys::compute`: µs per message for a 4 KiB message
//! (plain and HTML alternatives with links), a 100 KiB HTML newsletter, a 100 KiB plain
//! text of a small vocabulary and one whose shingles are nearly all distinct (as in real
//! text), a 100 KiB message that is mostly an attachment, and a 5 MiB message (text and a large attachment), with
//! every key wanted; and the same 100 KiB newsletter with no key wanted, which must do
//! nothing.
//!
//! Then the worst cases (group `message_keys_worst`): crafted messages up to
//! `message_keys::MAX_PARSED` that aim at one loop each: a base64 text part of blank lines
//! and then `>` lines (the quote pass), deep multipart nesting, many parts, a huge header
//! section, one long line, thousands of encoded words, tags and references, links and
//! blockquotes by the hundred thousand, words that each need the Unicode fold, short lines
//! that each look like a header field, and styled elements open by the hundred thousand.
//!
//! Run: `cargo bench --bench message_keys -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floodgate::message_keys::{compute, Wanted};

/// Prose-like words for the bodies: a fixed cycle through a small vocabulary with numbers
/// and a link now and then.
fn prose(bytes: usize, salt: usize) -> String {
    const WORDS: [&str; 24] = [
        "your",
        "account",
        "offer",
        "limited",
        "please",
        "confirm",
        "details",
        "today",
        "exclusive",
        "members",
        "receive",
        "discount",
        "shipping",
        "free",
        "order",
        "delivery",
        "we",
        "have",
        "noticed",
        "unusual",
        "activity",
        "click",
        "below",
        "now",
    ];
    let mut out = String::with_capacity(bytes + 64);
    let mut i = salt;
    while out.len() < bytes {
        match i % 37 {
            0 => out.push_str(&format!("{} ", 1000 + i)),
            1 => out.push_str(&format!(
                "https://t{}.example.com/c/8f3k2ja9d8s7{i} ",
                i % 5
            )),
            2 => out.push_str(".\r\n"),
            _ => {
                out.push_str(WORDS[(i * 7 + i / 24) % WORDS.len()]);
                out.push(' ');
            }
        }
        i += 1;
    }
    out
}

/// Prose of about `bytes` whose words rarely repeat in sequence: each word drawn from a
/// vocabulary of 3,000 made-up words by a fixed pseudo-random sequence, sentences of 12
/// words, a paragraph break every 8 sentences. Unlike [`prose`], nearly every 3-word
/// shingle is distinct, as in real text: the MinHash reads as many shingles as there are.
fn distinct_prose(bytes: usize) -> String {
    const C: &[u8] = b"bcdfghjklmnprstvwz";
    const V: &[u8] = b"aeiou";
    let syllable = |k: usize| {
        format!(
            "{}{}",
            C[k % C.len()] as char,
            V[(k / C.len()) % V.len()] as char
        )
    };
    let vocabulary: Vec<String> = (0..3000)
        .map(|k| {
            format!(
                "{}{}{}",
                syllable(k),
                syllable(k / 90 + 7),
                if k % 3 == 0 {
                    syllable(k / 7)
                } else {
                    String::new()
                }
            )
        })
        .collect();
    let mut out = String::with_capacity(bytes + 64);
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut n = 0;
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push_str(&vocabulary[(state % 3000) as usize]);
        n += 1;
        out.push_str(match (n % 96, n % 12) {
            (0, _) => ".\r\n\r\n",
            (_, 0) => ". ",
            _ => " ",
        });
    }
    out
}

/// A plain and HTML alternative of about `bytes` in all.
fn alternative(bytes: usize) -> Vec<u8> {
    let text = prose(bytes / 2, 1);
    let html: String = text
        .split(".\r\n")
        .map(|p| format!("<p style=\"margin:0\">{p}</p>\r\n"))
        .collect();
    format!(
        "From: a@example.org\r\nTo: b@example.net\r\nSubject: Your order 12345 is waiting\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"b1\"\r\n\r\n--b1\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{text}\r\n--b1\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<html><head><style>p{{color:red}}</style></head><body>{html}</body></html>\r\n--b1--\r\n"
    )
    .into_bytes()
}

/// A plain-text message of about `bytes`.
fn alternative_text(bytes: usize) -> Vec<u8> {
    raw(
        "Subject: Your order 12345\r\nContent-Type: text/plain; charset=utf-8",
        &prose(bytes, 1),
    )
}

/// A plain-text message of about `bytes` of [`distinct_prose`].
fn distinct_text(bytes: usize) -> Vec<u8> {
    raw(
        "Subject: Minutes of the meeting\r\nContent-Type: text/plain; charset=utf-8",
        &distinct_prose(bytes),
    )
}

/// An HTML-only newsletter of about `bytes`: tables, inline styles, links.
fn newsletter(bytes: usize) -> Vec<u8> {
    let mut html = String::from(
        "<html><head><title>News</title><style>td{padding:4px}</style></head><body><table>",
    );
    let mut i = 0;
    while html.len() < bytes {
        html.push_str(&format!(
            "<tr><td style=\"font-family:Arial;font-size:14px;color:#333333\"><a href=\"https://click.example{}.com/ls/{i}x8f3k2ja9d8s7\">{}</a></td></tr>\r\n",
            i % 7,
            prose(120, i)
        ));
        i += 1;
    }
    html.push_str("</table></body></html>");
    format!("From: news@example.org\r\nSubject: Weekly news 42\r\nContent-Type: text/html; charset=utf-8\r\n\r\n{html}\r\n").into_bytes()
}

/// A short text and a base64 attachment, about `bytes` in all.
fn with_attachment(bytes: usize) -> Vec<u8> {
    let text = prose(1500, 3);
    let line = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0\r\n";
    let attachment = line.repeat(bytes.saturating_sub(text.len()) / line.len());
    format!(
        "From: a@example.org\r\nSubject: Invoice 2024-88213\r\nContent-Type: multipart/mixed; boundary=\"m\"\r\n\r\n--m\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{text}\r\n--m\r\nContent-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\n\r\n{attachment}--m--\r\n"
    )
    .into_bytes()
}

/// A message of `head` fields and a `body`, as sent.
fn raw(head: &str, body: &str) -> Vec<u8> {
    format!("From: a@example.org\r\nTo: b@example.net\r\n{head}\r\n\r\n{body}\r\n").into_bytes()
}

/// `text` base64-encoded in lines of 76.
fn base64_lines(text: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(text);
    b64.as_bytes()
        .chunks(76)
        .map(|l| format!("{}\r\n", std::str::from_utf8(l).unwrap_or("")))
        .collect()
}

/// Crafted messages, each aimed at one loop of the computation.
fn worst_cases() -> Vec<(&'static str, Vec<u8>)> {
    const MAX: usize = floodgate::message_keys::MAX_PARSED;
    let mut quoted = "\n".repeat(180_000).into_bytes();
    quoted.extend("> q\n".repeat(22_000).into_bytes());
    let quoted = raw(
        "Subject: re\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64",
        &base64_lines(&quoted),
    );
    let depth = 3_000;
    let mut nested = String::new();
    for i in 0..depth {
        nested.push_str(&format!(
            "--b{i}\r\nContent-Type: multipart/mixed; boundary=\"b{}\"\r\n\r\n",
            i + 1
        ));
    }
    nested.push_str(&format!(
        "--b{depth}\r\nContent-Type: text/plain\r\n\r\nhello\r\n"
    ));
    let nested = raw(
        "Subject: n\r\nContent-Type: multipart/mixed; boundary=\"b0\"",
        &nested,
    );
    let part = "--p\r\nContent-Type: text/plain\r\n\r\nw w\r\n";
    let many_parts = raw(
        "Subject: p\r\nContent-Type: multipart/mixed; boundary=\"p\"",
        &part.repeat(MAX / part.len()),
    );
    let field = "X-F: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let mut head = field.repeat(MAX / field.len() / 2);
    head.push_str("Subject: s");
    head.push_str(&"\r\n a".repeat(MAX / 8));
    let huge_header = raw(&head, "short");
    let long_line = raw(
        "Subject: l\r\nContent-Type: text/plain",
        &"a".repeat(MAX - 200),
    );
    let word = "=?utf-8?B?w6k=?= ";
    let encoded_words = raw(
        &format!("Subject: {}", word.repeat(MAX / word.len())),
        "body",
    );
    let tag = "<a b='1' c=\"2\">&amp;&#233;&bogus x ";
    let tags = raw(
        "Subject: t\r\nContent-Type: text/html",
        &tag.repeat(MAX / tag.len()),
    );
    let link = "http://a.b.c.d.example.com/x ";
    let links = raw(
        "Subject: k\r\nContent-Type: text/plain",
        &link.repeat(MAX / link.len()),
    );
    let blockquotes = raw(
        "Subject: q\r\nContent-Type: text/html",
        &format!(
            "{}{}",
            "<blockquote>".repeat(MAX / 24),
            "<p>x</p>".repeat(MAX / 16)
        ),
    );
    let cyrillic = "\u{0430}\u{0431}\u{0432}\u{0433}\u{0434}\u{0435}\u{0436}\u{0437}";
    let non_ascii: String = (0..MAX / 24)
        .map(|i| {
            let c: Vec<char> = cyrillic.chars().collect();
            format!(
                "{}{}{}\u{200B}x{i} ",
                c[i % 8],
                c[(i / 8) % 8],
                c[(i / 64) % 8]
            )
        })
        .collect();
    let non_ascii = raw(
        "Subject: u\r\nContent-Type: text/plain; charset=utf-8",
        &non_ascii,
    );
    let short_lines = raw(
        "Subject: s\r\nContent-Type: text/plain",
        &"From: x\r\n".repeat(MAX / 9),
    );
    let span = "<span style=\"color:#333;font-size:14px;background:#fff\" class=\"c\" id=\"i\">w ";
    let styled = raw(
        "Subject: y\r\nContent-Type: text/html",
        &format!(
            "{}{}",
            span.repeat(MAX / span.len() / 2),
            "</span>".repeat(MAX / 14)
        ),
    );
    vec![
        ("quoted-base64-357KB", quoted),
        ("non-ascii-words", non_ascii),
        ("short-lines", short_lines),
        ("styled-spans", styled),
        ("nested-3000", nested),
        ("many-parts", many_parts),
        ("huge-header", huge_header),
        ("long-line", long_line),
        ("encoded-words", encoded_words),
        ("tags-references", tags),
        ("links", links),
        ("blockquotes", blockquotes),
    ]
}

fn bench(c: &mut Criterion) {
    let messages = [
        ("4KiB-alternative", alternative(4 * 1024)),
        ("100KiB-html", newsletter(100 * 1024)),
        ("100KiB-text", alternative_text(100 * 1024)),
        ("100KiB-distinct-text", distinct_text(100 * 1024)),
        ("100KiB-attachment", with_attachment(100 * 1024)),
        ("5MiB-attachment", with_attachment(5 * 1024 * 1024)),
        ("5MiB-text", alternative(5 * 1024 * 1024)),
    ];
    let mut g = c.benchmark_group("message_keys");
    for (name, raw) in &messages {
        g.throughput(Throughput::Bytes(raw.len() as u64));
        g.bench_with_input(BenchmarkId::new("all", name), raw, |b, raw| {
            b.iter(|| compute(black_box(raw), Wanted::ALL, &[]))
        });
    }
    let (name, raw) = &messages[1];
    g.throughput(Throughput::Bytes(raw.len() as u64));
    g.bench_with_input(BenchmarkId::new("none", name), raw, |b, raw| {
        b.iter(|| compute(black_box(raw), Wanted::default(), &[]))
    });
    g.finish();
    let mut g = c.benchmark_group("message_keys_worst");
    g.sample_size(10);
    for (name, raw) in &worst_cases() {
        g.throughput(Throughput::Bytes(raw.len() as u64));
        g.bench_with_input(BenchmarkId::new("all", name), raw, |b, raw| {
            b.iter(|| compute(black_box(raw), Wanted::ALL, &[]))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
