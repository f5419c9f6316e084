//! Message keys end to end: whole messages in, keys out; and the properties the
//! fingerprint is for.

use super::minhash::{BANDS, SUBJECT_BANDS};

/// The values of a message with a Subject: its text's bands and its Subject-joined bands.
const ALL_BANDS: usize = BANDS + SUBJECT_BANDS;
use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

/// A vocabulary of 3,000 distinct made-up words of two syllables (letters only, so none is
/// masked).
fn vocabulary() -> Vec<String> {
    const CONSONANTS: &[u8] = b"bcdfghjklmnprstvwz";
    const VOWELS: &[u8] = b"aeiou";
    let syllables: Vec<String> = CONSONANTS
        .iter()
        .flat_map(|&c| {
            VOWELS
                .iter()
                .map(move |&v| format!("{}{}", c as char, v as char))
        })
        .collect();
    syllables
        .iter()
        .flat_map(|a| syllables.iter().map(move |b| format!("{a}{b}")))
        .take(3000)
        .collect()
}

fn message(subject: &str, body: &str) -> Vec<u8> {
    format!("From: a@example.org\r\nTo: b@example.net\r\nSubject: {subject}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n").into_bytes()
}

fn shared(a: &MessageKeys, b: &MessageKeys) -> usize {
    let a: HashSet<&String> = a.fingerprint.iter().collect();
    b.fingerprint.iter().filter(|k| a.contains(k)).count()
}

fn keys(raw: &[u8]) -> MessageKeys {
    compute(raw, Wanted::ALL, &[])
}

/// Words 0..n of the vocabulary from `start`, as text.
fn prose(vocabulary: &[String], start: usize, n: usize) -> String {
    (0..n)
        .map(|i| vocabulary[(start + i * 7) % vocabulary.len()].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn nothing_wanted_computes_nothing() {
    let raw = message("Hello 123", &prose(&vocabulary(), 0, 100));
    assert_eq!(
        compute(&raw, Wanted::default(), &[]),
        MessageKeys::default()
    );
    assert!(Wanted::default().is_none());
}

#[test]
fn only_the_wanted_keys_are_computed() {
    let raw = message(
        "Hello 123",
        &format!("{} https://x.example.com/", prose(&vocabulary(), 0, 100)),
    );
    let subject_only = Wanted {
        subject_shape: true,
        ..Wanted::default()
    };
    let k = compute(&raw, subject_only, &[]);
    assert_eq!(k.subject_shape.as_deref(), Some("hello 0"));
    assert!(k.fingerprint.is_empty() && k.link_domains.is_empty());
    let all = keys(&raw);
    assert_eq!(all.fingerprint.len(), ALL_BANDS);
    assert_eq!(all.link_domains, ["example.com"]);
}

#[test]
fn copies_of_a_template_share_a_band_and_other_texts_do_not() {
    let v = vocabulary();
    let body = |name: &str, token: &str, n: u32| {
        format!(
            "Hi {name},\r\n\r\n{}\r\nYour order {n} is waiting: https://track.example.com/c/{token}?u={n}\r\n{}\r\n",
            prose(&v, 10, 40),
            prose(&v, 500, 30)
        )
    };
    let a = keys(&message(
        "Order 123",
        &body("Ann", "8f3k2ja9d8s7f6g5h4", 123),
    ));
    let b = keys(&message(
        "Order 98765",
        &body("Bob", "zz1x2c3v4b5n6m7q8w", 98765),
    ));
    assert_eq!(a.fingerprint.len(), ALL_BANDS);
    assert!(shared(&a, &b) > 0);
    assert_eq!(a.subject_shape, b.subject_shape);
    let c = keys(&message("Order 1", &prose(&v, 1000, 70)));
    assert_eq!(c.fingerprint.len(), ALL_BANDS);
    assert_eq!(shared(&a, &c), 0);
}

#[test]
fn replies_quoting_the_same_original_do_not_match() {
    let v = vocabulary();
    let original: String = prose(&v, 0, 200)
        .split(' ')
        .collect::<Vec<_>>()
        .chunks(10)
        .map(|line| format!("> {}\r\n", line.join(" ")))
        .collect();
    let reply = |start: usize| {
        message(
            "Re: plans",
            &format!(
                "{}\r\n\r\nOn Mon, 3 Mar 2025 at 10:00, Ann <ann@example.org> wrote:\r\n{original}",
                prose(&v, start, 30)
            ),
        )
    };
    let (a, b) = (keys(&reply(1000)), keys(&reply(2000)));
    assert_eq!(a.fingerprint.len(), ALL_BANDS);
    assert_eq!(b.fingerprint.len(), ALL_BANDS);
    assert_eq!(shared(&a, &b), 0);
    // The same replies with the quote kept would match: the test can tell.
    let unquoted = |start: usize| {
        message(
            "Re: plans",
            &format!("{}\r\n{}", prose(&v, start, 30), original.replace("> ", "")),
        )
    };
    assert!(shared(&keys(&unquoted(1000)), &keys(&unquoted(2000))) > 0);
}

#[test]
fn html_replies_leave_their_blockquote_out() {
    let v = vocabulary();
    let reply = |start: usize| {
        let html = format!(
            "<div>{}</div><div class=gmail_attr>On Mon, Ann wrote:<br></div><blockquote class=gmail_quote><p>{}</p></blockquote>",
            prose(&v, start, 30),
            prose(&v, 0, 200)
        );
        format!("Subject: Re: x\r\nContent-Type: text/html\r\n\r\n{html}\r\n").into_bytes()
    };
    let (a, b) = (keys(&reply(1000)), keys(&reply(2000)));
    assert_eq!(a.fingerprint.len(), ALL_BANDS);
    assert_eq!(shared(&a, &b), 0);
}

#[test]
fn short_texts_have_no_fingerprint() {
    let k = keys(&message("Hi", "See you at 10, bring the slides. Thanks!"));
    assert!(k.fingerprint.is_empty());
    assert_eq!(k.subject_shape.as_deref(), Some("hi"));
}

#[test]
fn link_domains_come_from_hrefs_and_text() {
    let raw = b"Subject: Deals\r\nContent-Type: multipart/alternative; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nShop at https://WWW.Shop.Example.co.uk/deals?id=1 or http://198.51.100.7/x.\r\n--b\r\nContent-Type: text/html\r\n\r\n<a href=\"https://click.tracker.example/abc\">go</a> <a href=\"https://cdn.mycompany.example/u\">unsubscribe</a>\r\n--b--\r\n";
    let k = compute(raw, Wanted::ALL, &["mycompany.example".to_string()]);
    assert_eq!(
        k.link_domains,
        ["198.51.100.7", "example.co.uk", "tracker.example"]
    );
}

#[test]
fn bad_input_gives_fewer_keys_and_no_panic() {
    let v = vocabulary();
    // No header section at all, only bytes.
    let _ = keys(b"");
    let _ = keys(b"\r\n\r\n");
    let _ = keys(&[0xff; 1000]);
    // Only an image.
    let image = b"Subject: pic\r\nContent-Type: image/jpeg\r\nContent-Transfer-Encoding: base64\r\n\r\n/9j/4AAQSkZJRgABAQEASABIAAD/\r\n";
    let k = keys(image);
    assert!(k.fingerprint.is_empty() && k.link_domains.is_empty());
    assert_eq!(k.subject_shape.as_deref(), Some("pic"));
    // Broken MIME: a multipart whose boundary never comes.
    let broken = format!(
        "Subject: x\r\nContent-Type: multipart/mixed; boundary=\"nope\"\r\n\r\n{}\r\n--other\r\n",
        prose(&v, 0, 50)
    );
    let _ = keys(broken.as_bytes());
    // 8-bit text in a charset nobody knows.
    let mut odd = b"Subject: \xe9t\xe9\r\nContent-Type: text/plain; charset=x-unknown-42\r\nContent-Transfer-Encoding: 8bit\r\n\r\n".to_vec();
    for w in prose(&v, 0, 40).split(' ') {
        odd.extend_from_slice(w.as_bytes());
        odd.extend_from_slice(b"\xe9\xfc ");
    }
    let k = keys(&odd);
    assert_eq!(k.fingerprint.len(), ALL_BANDS);
}

#[test]
fn huge_messages_are_read_in_bounded_time_and_memory() {
    // Larger than MAX_PARSED: the tail is never read. Sized to stay quick in debug builds.
    let one_word = message("x", &"spam ".repeat(2 * MAX_PARSED / 5));
    let k = keys(&one_word);
    assert_eq!(k.fingerprint.len(), ALL_BANDS);
    let links = message(
        "x",
        &(0..200_000)
            .map(|i| format!("https://h{i}.example{}.com/t ", i % 50))
            .collect::<String>(),
    );
    assert!(links.len() > MAX_PARSED);
    let k = keys(&links);
    assert_eq!(k.link_domains.len(), links::MAX_LINK_DOMAINS);
    assert_eq!(k.fingerprint.len(), ALL_BANDS);
}

#[test]
fn a_message_of_many_parts_is_parsed_up_to_its_boundary_lines() {
    let v = vocabulary();
    let part = "--p\r\nContent-Type: application/octet-stream\r\n\r\nw w\r\n";
    let raw = format!(
        "Subject: p\r\nContent-Type: multipart/mixed; boundary=\"p\"\r\n\r\n--p\r\nContent-Type: text/plain\r\n\r\n{}\r\n{}--p--\r\n",
        prose(&v, 0, 100),
        part.repeat(3 * MAX_BOUNDARY_LINES)
    );
    let window = parse_window(raw.as_bytes());
    assert!(window.len() < raw.len() / 2);
    assert_eq!(
        memchr::memmem::find_iter(window, b"\n--").count(),
        MAX_BOUNDARY_LINES
    );
    assert!(window.ends_with(b"\r\n"), "cut at the start of a line");
    // The text part comes first: its keys are those of the whole message.
    let whole = keys(&message("p", &prose(&v, 0, 100)));
    assert_eq!(keys(raw.as_bytes()).fingerprint, whole.fingerprint);
    // A message of fewer boundary lines is parsed whole.
    let few = message("x", "--\nsignature\n");
    assert_eq!(parse_window(&few), &few[..]);
}

#[test]
fn a_huge_header_section_is_cut_and_the_body_still_read() {
    let v = vocabulary();
    let field = "X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let body = prose(&v, 0, 100);
    let raw = format!(
        "Subject: Hello 123\r\n{}Content-Type: text/plain\r\n\r\n{body}\r\n",
        field.repeat(2 * MAX_HEADER / field.len())
    );
    let part = parsed_part(raw.as_bytes());
    assert!(part.len() < raw.len() - MAX_HEADER / 2);
    assert!(part.starts_with(b"Subject: Hello 123\r\n"));
    assert!(part.ends_with(format!("\r\n\r\n{body}\r\n").as_bytes()));
    let k = keys(raw.as_bytes());
    assert_eq!(k.subject_shape.as_deref(), Some("hello 0"));
    assert_eq!(
        k.fingerprint,
        keys(&message("Hello 456", &body)).fingerprint
    );
    // A Subject of megabytes is read up to the cut (its adjacent encoded words joined, as
    // RFC 2047 reads them); an ordinary message is not copied.
    let long = format!(
        "Subject: {}\r\n\r\nbody\r\n",
        "=?utf-8?B?w6k=?= ".repeat(MAX_HEADER)
    );
    assert_eq!(parsed_part(long.as_bytes()).len(), MAX_HEADER + 4 + 6);
    assert!(keys(long.as_bytes())
        .subject_shape
        .is_some_and(|s| s.starts_with("éé")));
    let ordinary = message("x", &body);
    assert!(matches!(
        parsed_part(&ordinary),
        std::borrow::Cow::Borrowed(_)
    ));
}

#[test]
fn automatic_mail_is_told_from_the_header_section() {
    assert!(is_automatic(b"Subject: x\r\nPrecedence: bulk\r\n\r\n"));
    assert!(!is_automatic(&message("x", "Precedence: bulk")));
}

/// A name, a token and a number that differ between copies of a template.
fn variable_parts() -> impl Strategy<Value = (String, String, u32)> {
    (
        "[A-Z][a-z]{2,9}",
        // Letters and digits mixed, 16 to 40 long: a tracking token.
        "[a-z][0-9][a-zA-Z0-9]{14,38}",
        any::<u32>(),
    )
}

/// One copy of a template: `words` (indices into the vocabulary) with a greeting, the name
/// again in the text, a numbered order, and a tracked link.
fn template_copy(
    v: &[String],
    words: &[usize],
    (name, token, n): &(String, String, u32),
) -> Vec<u8> {
    let text: Vec<&str> = words.iter().map(|&i| v[i].as_str()).collect();
    let half = text.len() / 2;
    message(
        &format!("Your order {n}"),
        &format!(
            "Dear {name},\r\n{}\r\nas promised, {name}, order {n} ships today: https://t.example.com/{token}?n={n}\r\n{}\r\n",
            text[..half].join(" "),
            text[half..].join(" ")
        ),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Copies of one template with another name, token and number share a band. With at
    /// least 60 words the name touches at most 6 of ≥ 60 shingles: Jaccard ≥ 0.8, a band
    /// shared with probability ≥ 1 − 10⁻⁴ (in fact the masked copies differ only there).
    #[test]
    fn template_copies_share_a_band(
        words in prop::collection::vec(0usize..3000, 60..250),
        first in variable_parts(),
        second in variable_parts(),
    ) {
        let v = vocabulary();
        let a = keys(&template_copy(&v, &words, &first));
        let b = keys(&template_copy(&v, &words, &second));
        prop_assert_eq!(a.fingerprint.len(), ALL_BANDS);
        prop_assert!(shared(&a, &b) > 0, "{:?} / {:?}", first, second);
        prop_assert_eq!(a.subject_shape, b.subject_shape);
        prop_assert_eq!(a.link_domains, vec!["example.com".to_string()]);
    }

    /// Texts of random words from a 3,000-word vocabulary share no band. They share a
    /// 4-word shingle with probability below 300² / 3000⁴ ≈ 10⁻⁹, and without one a band
    /// agrees only by four equal 32-bit minima or a 64-bit band hash collision: far below
    /// 10⁻⁵ per case.
    #[test]
    fn unrelated_texts_share_no_band(
        a in prop::collection::vec(0usize..3000, 50..300),
        b in prop::collection::vec(0usize..3000, 50..300),
    ) {
        let v = vocabulary();
        let text = |w: &[usize]| w.iter().map(|&i| v[i].as_str()).collect::<Vec<_>>().join(" ");
        let ka = keys(&message("Hello", &text(&a)));
        let kb = keys(&message("Hello", &text(&b)));
        prop_assert_eq!(ka.fingerprint.len(), ALL_BANDS);
        prop_assert_eq!(kb.fingerprint.len(), ALL_BANDS);
        prop_assert_eq!(shared(&ka, &kb), 0);
    }

    /// Any bytes: no panic, and the keys keep their bounds.
    #[test]
    fn arbitrary_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..4096)) {
        let k = keys(&raw);
        prop_assert!([0, BANDS, ALL_BANDS].contains(&k.fingerprint.len()));
        prop_assert!(k.link_domains.len() <= links::MAX_LINK_DOMAINS);
        prop_assert!(k.subject_shape.map_or(0, |s| s.len()) <= subject::MAX_SHAPE);
    }

    /// Message-like input (headers, MIME boundaries, HTML, links, encodings in random
    /// order): no panic.
    #[test]
    fn message_like_input_never_panics(
        pieces in prop::collection::vec(prop_oneof![
            Just("Subject: =?utf-8?B?w6k=?= 12\r\n".to_string()),
            Just("Content-Type: multipart/alternative; boundary=\"b\"\r\n".to_string()),
            Just("Content-Type: text/html; charset=utf-8\r\n".to_string()),
            Just("Content-Transfer-Encoding: quoted-printable\r\n".to_string()),
            Just("Content-Transfer-Encoding: base64\r\n".to_string()),
            Just("\r\n".to_string()),
            Just("--b\r\n".to_string()),
            Just("--b--\r\n".to_string()),
            Just("<a href='https://x.example.co.uk/y'>".to_string()),
            Just("<blockquote><script>".to_string()),
            Just("<span style=\"display:none;color:#fff\">".to_string()),
            Just("<div class=gmail_quote><font color=fefefe></div></p><p hidden>".to_string()),
            Just("-----Original Message-----\r\nFrom: a\r\nSent: b\r\nTo: c\r\n".to_string()),
            Just("Best regards,\r\n-- \r\nconfidential intended recipient\r\n".to_string()),
            Just("\u{34F}\u{2062}\u{180E}раураl".to_string()),
            Just("<img src=\"data:image/png;base64,AAAA\">".to_string()),
            Just("> quoted\r\nOn x wrote:\r\n".to_string()),
            Just("&#x1F600;&amp;&#99999999;".to_string()),
            Just("https://[::1]:80/ http://a..b/ https://@/".to_string()),
            "[ -~]{0,40}",
            "\\PC{0,20}",
        ], 0..40),
    ) {
        let raw = pieces.concat();
        let _ = keys(raw.as_bytes());
        let _ = is_automatic(raw.as_bytes());
    }
}
