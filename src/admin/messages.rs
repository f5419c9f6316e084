//! A key's messages from the event log (`[report] events`): its recent ones paged back in
//! time, and what was delivered for it before its restriction.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/v1/messages?key=KEY&page=N` | the key's messages, newest first, [`PER_PAGE`] a page (page 1: the newest) |
//! | GET | `/v1/delivered?key=KEY&format=json\|csv` | the messages relayed for a restricted key before its restriction, and their recipients |
//!
//! "Delivered before containment" is what was relayed in the window before the key's
//! restriction that starts at the earlier of its first over-limit event (as this node's
//! evidence saw it) and the restricting limit's period before the restriction (an hour for
//! a restriction by hand): all the limit measured, and everything since a limit first
//! said the key was over. The event log is read backwards from its end, at most
//! [`MAX_BYTES`] bytes; `complete` says whether the window's start was reached.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::api::AdminState;
use super::http::{Request, Response};
use crate::report::transactions::{self, MessageLine, Relayed};
use crate::store::Restriction;
use crate::time::rfc3339;

/// Messages a page of `/v1/messages`.
pub const PER_PAGE: usize = 50;
/// Most pages back (so a request reads at most this many of the key's lines).
pub const MAX_PAGE: usize = 10_000;
/// The most bytes read from the end of the event log for one answer.
pub const MAX_BYTES: u64 = 256 * 1024 * 1024;
/// The window before a restriction by hand when the evidence has no over-limit event.
const BY_HAND_US: i64 = 3_600_000_000;

/// The page a `page=` asks for: 1 when absent; an error for anything but a whole number
/// from 1 to [`MAX_PAGE`].
pub fn page_of(param: Option<&str>) -> Result<usize, String> {
    match param {
        None => Ok(1),
        Some(p) => match p.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
            _ => Err(format!(
                "page must be a whole number from 1 to {MAX_PAGE} (got {p:?})"
            )),
        },
    }
}

/// The window of "delivered before containment" of `r` in µs: from, to, and what `from`
/// is (`first over a limit` or `the limit's period`).
pub fn window(
    r: &Restriction,
    first_over_us: Option<i64>,
    period_us: Option<i64>,
) -> (i64, i64, &'static str) {
    let to = r.since_us;
    let by_period = to - period_us.unwrap_or(BY_HAND_US);
    match first_over_us {
        Some(t) if t < by_period => (t, to, "first over a limit"),
        _ => (by_period, to, "the limit's period before the restriction"),
    }
}

/// `v` as one CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break;
/// a leading `=`, `+`, `-` or `@` (a formula to a spreadsheet) is preceded by `'`.
pub fn csv_field(v: &str) -> String {
    let v = if v.starts_with(['=', '+', '-', '@']) {
        format!("'{v}")
    } else {
        v.to_string()
    };
    if v.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v
    }
}

/// The recipients of `messages` as CSV: `time,sender,recipient`, one row per recipient.
pub fn csv(messages: &[MessageLine<'_>]) -> String {
    let mut out = String::from("time,sender,recipient\r\n");
    for m in messages {
        let t = rfc3339((m.t * 1e6) as i64);
        for r in &m.recipients {
            let _ = write!(
                out,
                "{},{},{}\r\n",
                csv_field(&t),
                csv_field(&m.sender),
                csv_field(r)
            );
        }
    }
    out
}

/// A message line as JSON.
fn message_json(m: &MessageLine<'_>) -> Value {
    json!({
        "time": rfc3339((m.t * 1e6) as i64),
        "client": m.client,
        "user": m.user,
        "sender": m.sender,
        "recipients": m.recipients,
        "subject": m.subject,
        "verdict": m.verdict,
    })
}

impl AdminState {
    /// The event log's path, or the answer saying there is none.
    fn events_path(&self) -> Result<std::path::PathBuf, Response> {
        self.control
            .generation()
            .report
            .events
            .clone()
            .ok_or_else(|| {
                Response::error(
                    404,
                    "no event log: the configuration has no [report] events",
                )
            })
    }

    /// `GET /v1/messages`.
    pub(super) async fn messages(&self, req: &Request) -> Response {
        let Some(key) = req.param("key").filter(|k| !k.is_empty()) else {
            return Response::error(400, "messages needs ?key=KEY");
        };
        let page = match page_of(req.param("page")) {
            Ok(p) => p,
            Err(e) => return Response::error(400, &e),
        };
        let path = match self.events_path() {
            Ok(p) => p,
            Err(r) => return r,
        };
        let k = key.to_string();
        let read = tokio::task::spawn_blocking(move || {
            transactions::recent_page(&path, &k, (page - 1) * PER_PAGE, PER_PAGE, MAX_BYTES)
        })
        .await;
        match read {
            Ok(Ok((r, more))) => Response::json(
                200,
                &json!({
                    "key": key,
                    "page": page,
                    "per_page": PER_PAGE,
                    "messages": r.messages.iter().map(message_json).collect::<Vec<_>>(),
                    "more": more,
                    "read": r.read,
                    "whole_file": r.whole_file,
                }),
            ),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Response::json(
                200,
                &json!({"key": key, "page": page, "per_page": PER_PAGE, "messages": [],
                        "more": false, "read": 0, "whole_file": true}),
            ),
            Ok(Err(e)) => Response::error(500, &format!("the event log: {e}")),
            Err(e) => Response::error(500, &e.to_string()),
        }
    }

    /// What was relayed for restricted `key` before its restriction: the window (from, to,
    /// what `from` is) and the messages; `Err` with the answer when it cannot be said.
    pub async fn delivered_before(
        &self,
        key: &str,
    ) -> Result<((i64, i64, &'static str), Relayed), Response> {
        let path = self.events_path()?;
        let list = self
            .store
            .as_store()
            .restrictions()
            .await
            .map_err(|e| Response::error(503, &e.to_string()))?;
        let Some(r) = list.into_iter().find(|r| r.key == key) else {
            return Err(Response::error(
                404,
                &format!(
                    "{key:?} is not restricted: what was delivered is counted up to a restriction"
                ),
            ));
        };
        let live = self.policy.as_ref().map(|p| p.evidence(&[key]));
        let first_over = |e: &Value| {
            e["first_over"]
                .as_str()
                .and_then(|t| crate::time::parse_rfc3339(t).ok())
        };
        let first = live
            .as_ref()
            .and_then(first_over)
            .or_else(|| first_over(&r.evidence));
        let period = self
            .control
            .generation()
            .policy
            .limits
            .iter()
            .find(|d| d.name == r.limit)
            .map(crate::policy::model::LimitDef::period_us);
        let w = window(&r, first, period);
        let k = key.to_string();
        let (from, to) = (w.0 as f64 / 1e6, w.1 as f64 / 1e6);
        let read = tokio::task::spawn_blocking(move || {
            transactions::relayed_between(&path, &k, from, to, MAX_BYTES)
        })
        .await;
        match read {
            Ok(Ok(d)) => Ok((w, d)),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok((
                w,
                Relayed {
                    complete: true,
                    ..Relayed::default()
                },
            )),
            Ok(Err(e)) => Err(Response::error(500, &format!("the event log: {e}"))),
            Err(e) => Err(Response::error(500, &e.to_string())),
        }
    }

    /// `GET /v1/delivered`.
    pub(super) async fn delivered(&self, req: &Request) -> Response {
        let Some(key) = req.param("key").filter(|k| !k.is_empty()) else {
            return Response::error(400, "delivered needs ?key=KEY");
        };
        let as_csv = match req.param("format") {
            None | Some("json") => false,
            Some("csv") => true,
            Some(other) => {
                return Response::error(400, &format!("format must be json or csv (got {other:?})"))
            }
        };
        let ((from, to, from_is), d) = match self.delivered_before(key).await {
            Ok(v) => v,
            Err(r) => return r,
        };
        if as_csv {
            let mut r = Response::text(200, "text/csv; charset=utf-8", csv(&d.messages));
            let name: String = key
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "._-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            r.headers.push((
                "Content-Disposition",
                format!("attachment; filename=\"delivered-{name}.csv\""),
            ));
            return r;
        }
        let recipients: usize = d.messages.iter().map(|m| m.recipients.len()).sum();
        Response::json(
            200,
            &json!({
                "key": key,
                "from": rfc3339(from),
                "to": rfc3339(to),
                "from_is": from_is,
                "messages": d.messages.len(),
                "recipients": recipients,
                "complete": d.complete,
                "list": d.messages.iter().map(message_json).collect::<Vec<_>>(),
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn pages_are_whole_numbers_from_one() {
        assert_eq!(page_of(None), Ok(1));
        assert_eq!(page_of(Some("3")), Ok(3));
        for bad in ["0", "-1", "x", "", "1.5", "99999999999999999999999"] {
            let e = page_of(Some(bad)).unwrap_err();
            assert!(
                e.starts_with("page must be a whole number from 1 to"),
                "{e}"
            );
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(page_of(Some(&(MAX_PAGE + 1).to_string())).is_err());
    }

    fn restriction(since_us: i64) -> Restriction {
        Restriction {
            key: "k".into(),
            limit: "l".into(),
            since_us,
            until_us: None,
            rate: None,
            limit_text: String::new(),
            by: String::new(),
            reason: String::new(),
            evidence: Value::Null,
        }
    }

    #[test]
    fn the_window_starts_at_the_earlier_of_the_first_over_event_and_the_period() {
        let r = restriction(10_000_000_000);
        assert_eq!(
            window(&r, Some(9_000_000_000), Some(60_000_000)),
            (9_000_000_000, 10_000_000_000, "first over a limit")
        );
        // None known, or one within the period: the period.
        for first in [None, Some(9_990_000_000), Some(10_000_000_001)] {
            let w = window(&r, first, Some(60_000_000));
            assert_eq!(w.0, 10_000_000_000 - 60_000_000);
            assert_eq!(w.2, "the limit's period before the restriction");
        }
        assert_eq!(window(&r, None, None).0, 10_000_000_000 - BY_HAND_US);
    }

    #[test]
    fn csv_rows_are_quoted_and_formulas_defused() {
        assert_eq!(csv_field("a@b"), "a@b");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=HYPERLINK(1)"), "'=HYPERLINK(1)");
        assert_eq!(csv_field("@x,y"), "\"'@x,y\"");
        assert_eq!(csv_field("a\r\nb"), "\"a\r\nb\"");
        let m = MessageLine {
            event: Cow::Borrowed("message"),
            t: 1.5,
            key: Cow::Borrowed("k"),
            client: None,
            name: None,
            user: None,
            auth_login: None,
            sender: Cow::Borrowed("s@x"),
            recipients: vec!["a@y".into(), "b,c@z".into()],
            subject: None,
            verdict: Cow::Borrowed("relayed 250"),
        };
        assert_eq!(
            csv(&[m]),
            "time,sender,recipient\r\n1970-01-01T00:00:01.500000Z,s@x,a@y\r\n\
             1970-01-01T00:00:01.500000Z,s@x,\"b,c@z\"\r\n"
        );
    }

    proptest::proptest! {
        /// A page is accepted exactly when it is a whole number from 1 to MAX_PAGE.
        #[test]
        fn any_page_text_is_a_page_or_a_clear_error(p in "\\PC{0,12}|[0-9]{1,6}") {
            let want = p.trim().parse::<usize>().ok().filter(|n| (1..=MAX_PAGE).contains(n));
            match page_of(Some(&p)) {
                Ok(n) => proptest::prop_assert_eq!(Some(n), want),
                Err(e) => {
                    proptest::prop_assert!(want.is_none());
                    proptest::prop_assert!(e.starts_with("page must be a whole number"));
                }
            }
        }

        /// A CSV field reads back as the value (after the formula guard), one field.
        #[test]
        fn any_csv_field_reads_back(v in "\\PC{0,40}|[,\"\r\n=@a-z]{0,20}") {
            let f = csv_field(&v);
            let back = match f.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
                Some(inner) => {
                    proptest::prop_assert!(!inner.replace("\"\"", "").contains('"'));
                    inner.replace("\"\"", "\"")
                }
                None => {
                    proptest::prop_assert!(!f.contains([',', '"', '\r', '\n']));
                    f.clone()
                }
            };
            let unguarded = back.strip_prefix('\'').filter(|_| v.starts_with(['=', '+', '-', '@']));
            proptest::prop_assert_eq!(unguarded.unwrap_or(&back), v.as_str());
        }
    }
}
