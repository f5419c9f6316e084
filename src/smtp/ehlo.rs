//! EHLO capabilities: reading upstream's list and filtering what floodgate
//! passes on to its client (an allow-list, reference §1.8).

use super::reply::Reply;

/// What an EHLO reply advertises.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// PIPELINING (RFC 2920).
    pub pipelining: bool,
    /// SIZE (RFC 1870): `Some(0)` when advertised without a limit.
    pub size: Option<u64>,
    /// 8BITMIME (RFC 6152).
    pub eight_bit_mime: bool,
    /// SMTPUTF8 (RFC 6531).
    pub smtputf8: bool,
    /// DSN (RFC 3461).
    pub dsn: bool,
    /// ENHANCEDSTATUSCODES (RFC 2034).
    pub enhanced_status_codes: bool,
    /// AUTH mechanisms (RFC 4954), upper-cased, in advertised order.
    pub auth: Vec<String>,
    /// CHUNKING (RFC 3030).
    pub chunking: bool,
    /// STARTTLS (RFC 3207).
    pub starttls: bool,
    /// XCLIENT attribute names (Postfix), upper-cased.
    pub xclient: Vec<String>,
}

/// The keywords floodgate reads or passes on, in their canonical upper case.
const KNOWN: [&str; 10] = [
    "PIPELINING",
    "SIZE",
    "8BITMIME",
    "SMTPUTF8",
    "DSN",
    "ENHANCEDSTATUSCODES",
    "CHUNKING",
    "STARTTLS",
    "AUTH",
    "XCLIENT",
];

/// Splits an EHLO line into its keyword, in canonical upper case, and its parameters;
/// `None` for an empty line or a keyword floodgate neither reads nor passes on.
fn keyword_line(line: &str) -> Option<(&'static str, Params<'_>)> {
    let mut words = params(line);
    let word = words.next()?;
    let kw = KNOWN.iter().find(|k| k.eq_ignore_ascii_case(word))?;
    Some((kw, words))
}

/// The words of an EHLO line's parameters.
type Params<'a> = std::iter::Filter<std::str::Split<'a, [char; 2]>, fn(&&'a str) -> bool>;

fn params(text: &str) -> Params<'_> {
    text.split([' ', '\t']).filter(|w| !w.is_empty())
}

/// The limit of a SIZE line: `Some(0)` without a parameter (no fixed
/// limit), `None` if the parameter is not a decimal number (line ignored).
fn size_value(mut params: Params<'_>) -> Option<u64> {
    match (params.next(), params.next()) {
        (None, _) => Some(0),
        (Some(n), None) if n.bytes().all(|b| b.is_ascii_digit()) => n.parse().ok(),
        _ => None,
    }
}

/// Reads the capabilities of an EHLO reply (nothing if it is not 250).
pub fn parse_ehlo(reply: &Reply) -> Capabilities {
    let mut caps = Capabilities::default();
    if reply.code != 250 {
        return caps;
    }
    for line in reply.lines.iter().skip(1) {
        let Some((kw, params)) = keyword_line(line) else {
            continue;
        };
        match kw {
            "PIPELINING" => caps.pipelining = true,
            // The first SIZE line counts, as in filter_ehlo.
            "SIZE" if caps.size.is_none() => caps.size = size_value(params),
            "8BITMIME" => caps.eight_bit_mime = true,
            "SMTPUTF8" => caps.smtputf8 = true,
            "DSN" => caps.dsn = true,
            "ENHANCEDSTATUSCODES" => caps.enhanced_status_codes = true,
            "CHUNKING" => caps.chunking = true,
            "STARTTLS" => caps.starttls = true,
            "AUTH" => {
                for m in params {
                    let m = m.to_ascii_uppercase();
                    if !caps.auth.contains(&m) {
                        caps.auth.push(m);
                    }
                }
            }
            "XCLIENT" => {
                for a in params {
                    let a = a.to_ascii_uppercase();
                    if !caps.xclient.contains(&a) {
                        caps.xclient.push(a);
                    }
                }
            }
            _ => {}
        }
    }
    caps
}

/// Whether an EHLO reply offers PIPELINING and CHUNKING, the two extensions floodgate's own
/// commands use, read as [`parse_ehlo`] reads them but without building the whole list.
pub fn pipelining_and_chunking(reply: &Reply) -> (bool, bool) {
    let (mut pipelining, mut chunking) = (false, false);
    if reply.code == 250 {
        for line in reply.lines.iter().skip(1) {
            // The keyword is the line's first word, as `keyword_line` takes it.
            let Some(word) = params(line).next() else {
                continue;
            };
            if word.eq_ignore_ascii_case("PIPELINING") {
                pipelining = true;
            } else if word.eq_ignore_ascii_case("CHUNKING") {
                chunking = true;
            }
        }
    }
    (pipelining, chunking)
}

/// What floodgate offers its client on top of upstream's filtered list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EhloFilter {
    /// Add STARTTLS (floodgate has a certificate and the session is not TLS yet).
    pub offer_starttls: bool,
    /// Pass AUTH on (typically only once the session is TLS).
    pub offer_auth: bool,
    /// Offer CHUNKING: floodgate takes BDAT itself (relaying it as BDAT or as DATA), so
    /// it is offered whether or not upstream offers it.
    pub chunking: bool,
}

/// AUTH mechanisms [`crate::smtp::sasl`] can read an identity from.
pub const OBSERVABLE_MECHANISMS: [&str; 4] = ["PLAIN", "LOGIN", "XOAUTH2", "CRAM-MD5"];

/// The reply floodgate gives its client: the first line (greeting text)
/// kept, then only the allow-listed keywords in upstream's order
/// (PIPELINING, SIZE n, 8BITMIME, SMTPUTF8, DSN, ENHANCEDSTATUSCODES; AUTH
/// with only observable mechanisms when `offer_auth`; CHUNKING only if
/// `chunking`, and then also when upstream lacks it, after upstream's keywords),
/// plus STARTTLS last when `offer_starttls`. Drops XCLIENT,
/// XFORWARD, STARTTLS from upstream, unknown keywords and `AUTH=` legacy
/// lines. Keywords are written in canonical upper case, each at most once.
/// A reply other than 250 is returned unchanged.
pub fn filter_ehlo(reply: &Reply, filter: &EhloFilter) -> Reply {
    if reply.code != 250 {
        return reply.clone();
    }
    let mut lines = vec![reply.lines.first().cloned().unwrap_or_default()];
    let mut seen: Vec<&str> = Vec::new();
    for line in reply.lines.iter().skip(1) {
        let Some((kw, params)) = keyword_line(line) else {
            continue;
        };
        if seen.contains(&kw) {
            continue;
        }
        let out = match kw {
            "PIPELINING" | "8BITMIME" | "SMTPUTF8" | "DSN" | "ENHANCEDSTATUSCODES" => {
                Some(kw.to_string())
            }
            "CHUNKING" if filter.chunking => Some(kw.to_string()),
            "SIZE" => match size_value(params.clone()) {
                None => None,
                Some(_) if params.clone().next().is_none() => Some(kw.to_string()),
                Some(n) => Some(format!("SIZE {n}")),
            },
            "AUTH" if filter.offer_auth => {
                let mut mechs: Vec<String> = Vec::new();
                for m in params {
                    let m = m.to_ascii_uppercase();
                    if OBSERVABLE_MECHANISMS.contains(&m.as_str()) && !mechs.contains(&m) {
                        mechs.push(m);
                    }
                }
                (!mechs.is_empty()).then(|| format!("AUTH {}", mechs.join(" ")))
            }
            _ => None,
        };
        if let Some(out) = out {
            seen.push(kw);
            lines.push(out);
        }
    }
    if filter.chunking && !seen.contains(&"CHUNKING") {
        lines.push("CHUNKING".to_string());
    }
    if filter.offer_starttls {
        lines.push("STARTTLS".to_string());
    }
    Reply { code: 250, lines }
}

/// The SIZE limit floodgate advertises to its client: the smaller of upstream's limit and
/// its own `own` (`[smtp] max_message_size`), so a client never plans a message floodgate
/// itself would refuse. `upstream` is what upstream's EHLO said: `Some(0)` for SIZE without
/// a limit (RFC 1870: no fixed maximum), when floodgate's own limit is the only one. With no
/// SIZE line upstream (`None`) there is none for the client either: a `SIZE=` parameter
/// would reach an upstream that never offered the extension. `own = 0` means floodgate has
/// no limit of its own.
pub fn advertised_size(upstream: Option<u64>, own: u64) -> Option<u64> {
    let up = upstream?;
    Some(match (up, own) {
        (0, o) => o,
        (u, 0) => u,
        (u, o) => u.min(o),
    })
}

/// Rewrites the SIZE line of an EHLO reply (the first valid one, the one [`parse_ehlo`]
/// reads) to [`advertised_size`] of upstream's value and `own`; everything else is kept.
/// Meant for the output of [`filter_ehlo`], where SIZE appears at most once. A reply other
/// than 250, or one without a valid SIZE line, is left as it is.
pub fn cap_size(reply: &mut Reply, own: u64) {
    if reply.code != 250 {
        return;
    }
    let found = reply
        .lines
        .iter()
        .enumerate()
        .skip(1)
        .find_map(|(i, line)| {
            let (kw, params) = keyword_line(line)?;
            (kw == "SIZE")
                .then(|| size_value(params))
                .flatten()
                .map(|n| (i, n))
        });
    let Some((i, up)) = found else {
        return;
    };
    if let Some(n) = advertised_size(Some(up), own) {
        reply.lines[i] = if n == 0 {
            "SIZE".to_string()
        } else {
            format!("SIZE {n}")
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn upstream() -> Reply {
        Reply::multi(
            250,
            [
                "smtp.example.org Hello client [192.0.2.1]",
                "SIZE 52428800",
                "8BITMIME",
                "PIPELINING",
                "PIPE_CONNECT",
                "CHUNKING",
                "XCLIENT NAME ADDR PORT PROTO HELO LOGIN",
                "XFORWARD NAME ADDR PROTO HELO",
                "STARTTLS",
                "AUTH PLAIN LOGIN GSSAPI cram-md5 SCRAM-SHA-256 xoauth2",
                "AUTH=PLAIN LOGIN",
                "DSN",
                "SMTPUTF8",
                "ENHANCEDSTATUSCODES",
                "ETRN",
                "HELP",
            ],
        )
    }

    #[test]
    fn parse_capabilities() {
        let c = parse_ehlo(&upstream());
        assert!(c.pipelining && c.eight_bit_mime && c.smtputf8 && c.dsn);
        assert!(c.enhanced_status_codes && c.chunking && c.starttls);
        assert_eq!(c.size, Some(52428800));
        assert_eq!(
            c.auth,
            [
                "PLAIN",
                "LOGIN",
                "GSSAPI",
                "CRAM-MD5",
                "SCRAM-SHA-256",
                "XOAUTH2"
            ]
        );
        assert_eq!(
            c.xclient,
            ["NAME", "ADDR", "PORT", "PROTO", "HELO", "LOGIN"]
        );
    }

    #[test]
    fn parse_edge_cases() {
        assert_eq!(parse_ehlo(&Reply::new(550, "no")), Capabilities::default());
        let c = parse_ehlo(&Reply::multi(250, ["x", "size x", "SIZE", "SIZE 5", ""]));
        assert_eq!(c.size, Some(0));
        let c = parse_ehlo(&Reply::multi(250, ["x", "SIZE 1 2", "SIZE 07"]));
        assert_eq!(c.size, Some(7));
        // The greeting line is never read as a keyword.
        let c = parse_ehlo(&Reply::new(250, "PIPELINING"));
        assert!(!c.pipelining);
    }

    #[test]
    fn filter_with_everything_offered() {
        let f = EhloFilter {
            offer_starttls: true,
            offer_auth: true,
            chunking: true,
        };
        let r = filter_ehlo(&upstream(), &f);
        assert_eq!(
            r.lines,
            [
                "smtp.example.org Hello client [192.0.2.1]",
                "SIZE 52428800",
                "8BITMIME",
                "PIPELINING",
                "CHUNKING",
                "AUTH PLAIN LOGIN CRAM-MD5 XOAUTH2",
                "DSN",
                "SMTPUTF8",
                "ENHANCEDSTATUSCODES",
                "STARTTLS",
            ]
        );
    }

    #[test]
    fn filter_minimal() {
        let f = EhloFilter {
            offer_starttls: false,
            offer_auth: false,
            chunking: false,
        };
        let r = filter_ehlo(&upstream(), &f);
        assert_eq!(
            r.lines,
            [
                "smtp.example.org Hello client [192.0.2.1]",
                "SIZE 52428800",
                "8BITMIME",
                "PIPELINING",
                "DSN",
                "SMTPUTF8",
                "ENHANCEDSTATUSCODES"
            ]
        );
        let caps = parse_ehlo(&r);
        assert!(
            !caps.starttls && caps.auth.is_empty() && caps.xclient.is_empty() && !caps.chunking
        );
    }

    #[test]
    fn filter_drops_auth_without_observable_mechanisms_and_bad_size() {
        let f = EhloFilter {
            offer_starttls: false,
            offer_auth: true,
            chunking: false,
        };
        let r = filter_ehlo(
            &Reply::multi(
                250,
                [
                    "hi",
                    "AUTH GSSAPI NTLM",
                    "SIZE 12x",
                    "pipelining",
                    "PIPELINING",
                ],
            ),
            &f,
        );
        assert_eq!(r.lines, ["hi", "PIPELINING"]);
    }

    #[test]
    fn filter_non_250_unchanged_and_single_line() {
        let f = EhloFilter {
            offer_starttls: true,
            offer_auth: true,
            chunking: false,
        };
        let e = Reply::new(554, "5.7.1 go away");
        assert_eq!(filter_ehlo(&e, &f), e);
        assert_eq!(
            filter_ehlo(&Reply::new(250, "hi"), &f).lines,
            ["hi", "STARTTLS"]
        );
    }

    #[test]
    fn chunking_is_offered_with_or_without_upstream() {
        let f = EhloFilter {
            offer_starttls: true,
            offer_auth: false,
            chunking: true,
        };
        assert_eq!(
            filter_ehlo(&Reply::multi(250, ["hi", "PIPELINING"]), &f).lines,
            ["hi", "PIPELINING", "CHUNKING", "STARTTLS"]
        );
        // Upstream's own line stays where it was, once.
        assert_eq!(
            filter_ehlo(&Reply::multi(250, ["hi", "chunking", "PIPELINING"]), &f).lines,
            ["hi", "CHUNKING", "PIPELINING", "STARTTLS"]
        );
        let off = EhloFilter {
            chunking: false,
            ..f
        };
        assert_eq!(
            filter_ehlo(&Reply::multi(250, ["hi", "CHUNKING"]), &off).lines,
            ["hi", "STARTTLS"]
        );
    }

    /// Found by `filter_only_narrows` (once kept in proptest-regressions): with several SIZE
    /// lines, the first valid one wins both before and after filtering.
    #[test]
    fn first_valid_size_line_wins_before_and_after_filtering() {
        let f = EhloFilter {
            offer_starttls: false,
            offer_auth: false,
            chunking: false,
        };
        for lines in [
            ["hi", "PIPELINING", "SIZE", "SIZE 1"],
            ["hi", "PIPELINING", "SIZE x", "SIZE 1"],
        ] {
            let up = Reply::multi(250, lines);
            let before = parse_ehlo(&up);
            let after = parse_ehlo(&filter_ehlo(&up, &f));
            assert_eq!(after.size, before.size, "{lines:?}");
        }
    }

    #[test]
    fn advertised_size_is_the_smaller_limit() {
        assert_eq!(
            advertised_size(Some(52_428_800), 1_048_576),
            Some(1_048_576)
        );
        assert_eq!(advertised_size(Some(1000), 1_048_576), Some(1000));
        assert_eq!(advertised_size(Some(4096), 4096), Some(4096));
        // SIZE without a limit upstream: floodgate's own is the only one.
        assert_eq!(advertised_size(Some(0), 1_048_576), Some(1_048_576));
        // No SIZE upstream: none for the client.
        assert_eq!(advertised_size(None, 1_048_576), None);
        // No limit of floodgate's own: upstream's stands.
        assert_eq!(advertised_size(Some(1000), 0), Some(1000));
        assert_eq!(advertised_size(Some(0), 0), Some(0));
    }

    #[test]
    fn cap_size_rewrites_only_the_size_line() {
        let f = EhloFilter {
            offer_starttls: true,
            offer_auth: false,
            chunking: false,
        };
        let mut r = filter_ehlo(&upstream(), &f);
        let before = r.clone();
        cap_size(&mut r, 1_048_576);
        assert_eq!(r.lines[1], "SIZE 1048576");
        assert_eq!(r.lines.len(), before.lines.len());
        for (i, (a, b)) in r.lines.iter().zip(&before.lines).enumerate() {
            if i != 1 {
                assert_eq!(a, b);
            }
        }
        // Upstream's smaller limit stays.
        let mut r = Reply::multi(250, ["hi", "PIPELINING", "SIZE 1000"]);
        cap_size(&mut r, 1_048_576);
        assert_eq!(r.lines, ["hi", "PIPELINING", "SIZE 1000"]);
        // SIZE with no number, and SIZE 0: floodgate's limit.
        for line in ["SIZE", "SIZE 0", "size 000"] {
            let mut r = Reply::multi(250, ["hi", line, "8BITMIME"]);
            cap_size(&mut r, 4096);
            assert_eq!(r.lines, ["hi", "SIZE 4096", "8BITMIME"], "{line}");
        }
        // The first valid SIZE line is the one rewritten, as parse_ehlo reads it.
        let mut r = Reply::multi(250, ["hi", "SIZE x", "SIZE 9000"]);
        cap_size(&mut r, 4096);
        assert_eq!(r.lines, ["hi", "SIZE x", "SIZE 4096"]);
        // No SIZE line, a refusal, or no own limit with an open upstream: unchanged.
        for mut r in [
            Reply::multi(250, ["hi", "PIPELINING"]),
            Reply::new(554, "5.7.1 SIZE 1"),
        ] {
            let before = r.clone();
            cap_size(&mut r, 4096);
            assert_eq!(r, before);
        }
        let mut r = Reply::multi(250, ["hi", "SIZE"]);
        cap_size(&mut r, 0);
        assert_eq!(r.lines, ["hi", "SIZE"]);
    }

    fn ehlo_line() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("PIPELINING".to_string()),
            Just("STARTTLS".to_string()),
            Just("CHUNKING".to_string()),
            Just("XCLIENT NAME ADDR".to_string()),
            "(?i)[ \t]?(pipelining|chunking)([ \t][a-z]{0,3})?",
            "SIZE( [0-9x]{0,12})?",
            "(?i)auth( (plain|login|gssapi|cram-md5|xoauth2|ntlm)){0,4}",
            "[ -~]{0,20}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Filtering never adds a capability upstream lacks (except STARTTLS and
        /// CHUNKING, which floodgate itself offers), and never passes XCLIENT on.
        #[test]
        fn filter_only_narrows(lines in proptest::collection::vec(ehlo_line(), 1..10),
                               tls in any::<bool>(), auth in any::<bool>(), chunking in any::<bool>()) {
            let up = Reply::multi(250, lines);
            let f = EhloFilter { offer_starttls: tls, offer_auth: auth, chunking };
            let before = parse_ehlo(&up);
            let after = parse_ehlo(&filter_ehlo(&up, &f));
            prop_assert!(after.xclient.is_empty());
            prop_assert_eq!(after.starttls, tls);
            prop_assert!(!after.pipelining || before.pipelining);
            // CHUNKING is floodgate's own offer, with or without upstream's.
            prop_assert_eq!(after.chunking, chunking);
            prop_assert!(after.size.is_none() || after.size == before.size);
            prop_assert!(auth || after.auth.is_empty());
            for m in &after.auth {
                prop_assert!(before.auth.contains(m) && OBSERVABLE_MECHANISMS.contains(&m.as_str()));
            }
        }

        /// The two extensions floodgate's own commands use read as the whole list reads them.
        #[test]
        fn pipelining_and_chunking_agree_with_the_whole_list(
            lines in proptest::collection::vec(ehlo_line(), 1..10),
            code in prop_oneof![Just(250u16), Just(220u16), Just(502u16)],
        ) {
            let up = Reply::multi(code, lines);
            let whole = parse_ehlo(&up);
            prop_assert_eq!(pipelining_and_chunking(&up), (whole.pipelining, whole.chunking));
        }

        /// After capping, the client sees upstream's SIZE or floodgate's, whichever is
        /// smaller, never more than floodgate's own limit, never "no limit", and every
        /// other line as the filter left it.
        #[test]
        fn capped_size_never_exceeds_floodgates_limit(
            lines in proptest::collection::vec(ehlo_line(), 1..10),
            own in 1u64..=u64::MAX,
        ) {
            let f = EhloFilter { offer_starttls: false, offer_auth: true, chunking: true };
            let filtered = filter_ehlo(&Reply::multi(250, lines), &f);
            let mut capped = filtered.clone();
            cap_size(&mut capped, own);
            let before = parse_ehlo(&filtered);
            let after = parse_ehlo(&capped);
            prop_assert_eq!(after.size, advertised_size(before.size, own));
            if let Some(n) = after.size {
                prop_assert!(n >= 1 && n <= own);
            }
            prop_assert_eq!(capped.lines.len(), filtered.lines.len());
            let changed = capped.lines.iter().zip(&filtered.lines).filter(|(a, b)| a != b).count();
            prop_assert!(changed <= 1);
            prop_assert_eq!(Capabilities { size: None, ..after }, Capabilities { size: None, ..before });
        }
    }
}
