//! Whether upstream took the real client's identity (XCLIENT or a PROXY v2 header), and
//! what the session does when it did not.
//!
//! A smart host that does not learn who the client is sees floodgate's own address, which
//! is usually trusted (`mynetworks`): relaying then would turn every client into a trusted
//! one. So a refused identity refuses the client (421 4.3.5, "system incorrectly
//! configured": the fault is the mail system's, the client should retry later), unless the
//! operator wrote `on_identity_refused = "relay"` (XCLIENT only: a connection whose PROXY
//! header was misread is unusable).

use tracing::{error, warn};

use crate::config::{Config, OnIdentityRefused};
use crate::logs::text::IpText;
use crate::metrics::Metrics;
use crate::smtp::reply::Reply;
use crate::smtp::xclient::xclient_carries_addr;

/// Most characters of upstream's reply quoted in a log line or error.
const QUOTE_MAX: usize = 200;

/// Why upstream did not take the client's identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityProblem {
    /// EHLO lists no XCLIENT (or one without ADDR).
    #[error("upstream does not offer XCLIENT with ADDR (its EHLO lists {offered:?}); Postfix offers it only to smtpd_authorized_xclient_hosts, Exim has none (use client_identity = \"proxy-v2\" with hosts_proxy)")]
    XclientNotOffered {
        /// What upstream lists after XCLIENT (empty: no XCLIENT at all).
        offered: String,
    },
    /// XCLIENT was answered with something other than 220.
    #[error("upstream refused XCLIENT with \"{reply}\" (Postfix: 550 5.7.0 means floodgate is not in smtpd_authorized_xclient_hosts; 501 Bad ADDR or DESTADDR syntax for an IPv6 address means upstream runs without IPv6: inet_protocols)")]
    XclientRefused {
        /// Upstream's reply, quoted.
        reply: String,
    },
    /// The first reply after the greeting was not the one to floodgate's own command:
    /// upstream read the PROXY header as SMTP commands.
    #[error("upstream answered the PROXY v2 header as SMTP commands (\"{reply}\"): it does not expect one (Postfix: smtpd_upstream_proxy_protocol = haproxy; Exim: hosts_proxy)")]
    ProxyHeaderNotExpected {
        /// Upstream's reply, quoted.
        reply: String,
    },
    /// Upstream greeted, then refused floodgate's or the client's EHLO with 503: what Exim
    /// answers to every command when `hosts_proxy` lists floodgate and no header came.
    #[error("upstream refuses EHLO with \"{reply}\": it expects a PROXY header (Exim: floodgate is in hosts_proxy; Postfix: smtpd_upstream_proxy_protocol); set client_identity = \"proxy-v2\" or stop upstream from expecting one")]
    ProxyHeaderExpected {
        /// Upstream's reply, quoted.
        reply: String,
    },
    /// The greeting was no SMTP greeting (220, 421 or 554).
    #[error("upstream greeted with \"{reply}\", which is no SMTP greeting: does it expect a PROXY header (Postfix smtpd_upstream_proxy_protocol, Exim hosts_proxy)? Then set client_identity = \"proxy-v2\"")]
    BadGreeting {
        /// Upstream's greeting, quoted.
        reply: String,
    },
}

impl IdentityProblem {
    /// The metric label of this problem.
    pub fn kind(&self) -> &'static str {
        match self {
            IdentityProblem::XclientNotOffered { .. } => "xclient_not_offered",
            IdentityProblem::XclientRefused { .. } => "xclient_refused",
            IdentityProblem::ProxyHeaderNotExpected { .. } => "proxy_header_not_expected",
            IdentityProblem::ProxyHeaderExpected { .. } => "proxy_header_expected",
            IdentityProblem::BadGreeting { .. } => "bad_greeting",
        }
    }

    /// Whether the session may go on (with floodgate's own address) when the operator asked
    /// for it: only after a refused XCLIENT, where upstream's session is still sound.
    /// A 421 to XCLIENT closes upstream's side: nothing is left to relay to.
    pub fn relayable(&self) -> bool {
        match self {
            IdentityProblem::XclientNotOffered { .. } => true,
            IdentityProblem::XclientRefused { reply } => !reply.starts_with("421"),
            _ => false,
        }
    }
}

/// The labels of [`IdentityProblem::kind`], in a fixed order: the `reason` values the metrics
/// count ([`crate::metrics::IDENTITY_REASONS`]).
pub const PROBLEM_KINDS: [&str; 5] = [
    "xclient_not_offered",
    "xclient_refused",
    "proxy_header_not_expected",
    "proxy_header_expected",
    "bad_greeting",
];

/// `code text` of a reply, on one line, cut to a length fit for a log line.
pub fn quote_reply(reply: &Reply) -> String {
    let mut text = format!("{} {}", reply.code, reply.text());
    text.retain(|c| !c.is_control());
    if text.chars().count() > QUOTE_MAX {
        text = text.chars().take(QUOTE_MAX).collect::<String>() + "...";
    }
    text
}

/// What a greeting says about the identity setup: a code other than 220, 421 and 554 is no
/// greeting (RFC 5321 §4.3.2); a server that waited in vain for a PROXY header may answer
/// so.
pub fn greeting_problem(greeting: &Reply) -> Option<IdentityProblem> {
    match greeting.code {
        220 | 421 | 554 => None,
        _ => Some(IdentityProblem::BadGreeting {
            reply: quote_reply(greeting),
        }),
    }
}

/// What a 503 to EHLO or HELO means: they are never out of sequence after a greeting, so
/// upstream refuses every command, as Exim does for a host in `hosts_proxy` that sent no
/// PROXY header.
pub fn helo_problem(reply: &Reply) -> Option<IdentityProblem> {
    (reply.code == 503).then(|| IdentityProblem::ProxyHeaderExpected {
        reply: quote_reply(reply),
    })
}

/// The reply to floodgate's first command after a PROXY header (NOOP, or EHLO when it needs
/// upstream's extensions): upstream that read the header as commands answers those first
/// (Postfix: `500 5.5.2 Error: bad syntax` three times; Exim 4.96: `500 unrecognized
/// command` twice, `501 NUL characters are not allowed`; both then 221 to the `QUIT` of
/// the signature), so anything but 250 here means the header was not expected.
pub fn proxy_probe_problem(reply: &Reply) -> Option<IdentityProblem> {
    (reply.code != 250).then(|| IdentityProblem::ProxyHeaderNotExpected {
        reply: quote_reply(reply),
    })
}

/// Whether upstream's EHLO list (`Capabilities::xclient`) lets floodgate pass the client on.
pub fn xclient_offer_problem(offered: &[String]) -> Option<IdentityProblem> {
    (!xclient_carries_addr(offered)).then(|| IdentityProblem::XclientNotOffered {
        offered: offered.join(" "),
    })
}

/// What upstream answered to XCLIENT: 220 (back at the greeting stage) or a refusal.
pub fn xclient_reply_problem(reply: &Reply) -> Option<IdentityProblem> {
    (reply.code != 220).then(|| IdentityProblem::XclientRefused {
        reply: quote_reply(reply),
    })
}

/// The reply a refused client gets: the session cannot go on, the fault is the mail
/// system's configuration (RFC 3463 X.3.5), and the message should be retried later.
pub fn refusal_reply(hostname: &str) -> Reply {
    Reply::new(
        421,
        format!("4.3.5 {hostname} Service not available (mail system configuration error), try again later"),
    )
}

/// What the session does with an identity upstream did not take, counted and logged:
/// `None` to relay with floodgate's own address (`on_identity_refused = "relay"`, for a
/// problem that allows it), else the refusal the client gets before the session ends.
pub(super) fn refused_identity(
    problem: &IdentityProblem,
    config: &Config,
    metrics: &Metrics,
    client: &IpText,
    port: u16,
) -> Option<Reply> {
    metrics.identity_refused(problem.kind());
    let relay = config.upstream.on_identity_refused == OnIdentityRefused::Relay;
    if relay && problem.relayable() {
        warn!(client = %client, problem = %problem,
            "relaying with floodgate's own address (on_identity_refused = \"relay\")");
        return None;
    }
    error!(client = %client, port = port, problem = %problem,
        "upstream did not take the client's identity: refusing the client");
    Some(refusal_reply(&config.server.hostname))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(code: u16, text: &str) -> Reply {
        Reply::new(code, text)
    }

    #[test]
    fn greetings() {
        assert_eq!(greeting_problem(&r(220, "pf.test ESMTP Postfix")), None);
        assert_eq!(
            greeting_problem(&r(421, "4.3.0 pf.test Server local error")),
            None
        );
        assert_eq!(greeting_problem(&r(554, "5.7.1 go away")), None);
        let p = greeting_problem(&r(503, "Command refused")).unwrap();
        assert_eq!(p.kind(), "bad_greeting");
        assert!(p.to_string().contains("\"503 Command refused\""), "{p}");
        assert!(!p.relayable());
    }

    #[test]
    fn helo_refused_with_503_means_a_proxy_header_was_expected() {
        let exim = r(503, "Command refused, required Proxy negotiation failed");
        let p = helo_problem(&exim).unwrap();
        assert_eq!(p.kind(), "proxy_header_expected");
        assert!(!p.relayable());
        assert!(p.to_string().contains("hosts_proxy"), "{p}");
        assert_eq!(helo_problem(&r(250, "ok")), None);
        assert_eq!(helo_problem(&r(501, "5.5.4 Syntax: EHLO hostname")), None);
    }

    #[test]
    fn proxy_probe() {
        assert_eq!(proxy_probe_problem(&r(250, "2.0.0 Ok")), None);
        assert_eq!(
            proxy_probe_problem(&Reply::multi(250, ["pf.test", "PIPELINING"])),
            None
        );
        let p = proxy_probe_problem(&r(500, "5.5.2 Error: bad syntax")).unwrap();
        assert_eq!(p.kind(), "proxy_header_not_expected");
        assert!(!p.relayable());
        let text = p.to_string();
        assert!(text.contains("\"500 5.5.2 Error: bad syntax\""), "{text}");
        assert!(text.contains("smtpd_upstream_proxy_protocol") && text.contains("hosts_proxy"));
        assert!(proxy_probe_problem(&r(221, "2.0.0 Bye")).is_some());
    }

    #[test]
    fn xclient_offer() {
        let list = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(xclient_offer_problem(&list("NAME ADDR PORT")), None);
        let p = xclient_offer_problem(&[]).unwrap();
        assert_eq!(p.kind(), "xclient_not_offered");
        assert!(p.relayable());
        assert!(p.to_string().contains("smtpd_authorized_xclient_hosts"));
        let p = xclient_offer_problem(&list("NAME HELO")).unwrap();
        assert!(p.to_string().contains("\"NAME HELO\""), "{p}");
    }

    #[test]
    fn xclient_replies() {
        assert_eq!(
            xclient_reply_problem(&r(220, "pf.test ESMTP Postfix")),
            None
        );
        for (code, text) in [
            (550, "5.7.0 Error: insufficient authorization"),
            (501, "5.5.4 Bad ADDR syntax: IPV6:2001:db8::1"),
            (250, "2.0.0 Ok"),
            (421, "4.4.2 bye"),
        ] {
            let p = xclient_reply_problem(&r(code, text)).unwrap();
            assert_eq!(p.kind(), "xclient_refused");
            assert!(p.to_string().contains(&format!("\"{code} {text}\"")), "{p}");
            assert_eq!(p.relayable(), code != 421);
        }
    }

    #[test]
    fn quoting_is_one_bounded_line() {
        let long = Reply::multi(500, ["a\tb".to_string(), "x".repeat(500)]);
        let q = quote_reply(&long);
        assert!(q.starts_with("500 ab "), "{q}");
        assert!(q.chars().count() <= QUOTE_MAX + 3);
        assert!(q.ends_with("..."));
        assert!(!q.chars().any(char::is_control));
    }

    #[test]
    fn kinds_are_listed() {
        let all = [
            IdentityProblem::XclientNotOffered {
                offered: String::new(),
            },
            IdentityProblem::XclientRefused {
                reply: String::new(),
            },
            IdentityProblem::ProxyHeaderNotExpected {
                reply: String::new(),
            },
            IdentityProblem::ProxyHeaderExpected {
                reply: String::new(),
            },
            IdentityProblem::BadGreeting {
                reply: String::new(),
            },
        ];
        let kinds: Vec<&str> = all.iter().map(IdentityProblem::kind).collect();
        assert_eq!(kinds, PROBLEM_KINDS);
    }

    #[test]
    fn problem_kinds_are_the_metrics_reasons() {
        assert_eq!(PROBLEM_KINDS, crate::metrics::IDENTITY_REASONS);
    }

    #[test]
    fn refusal_is_421_4_3_5() {
        let r = refusal_reply("fg.test");
        assert_eq!(r.code, 421);
        assert!(r.text().starts_with("4.3.5 fg.test "));
    }
}
