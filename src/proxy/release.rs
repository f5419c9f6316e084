//! Releasing a held message: a new upstream session carrying the original client's
//! identity (XCLIENT with address, HELO and login, or a PROXY v2 header), the original
//! envelope, and the held octets with one trace header on top. Releasing or deleting one
//! message of the spool (for the admin API, the pacer and the expiry), each a log event and
//! a metric.

use std::sync::Arc;

use tracing::{info, warn};

use crate::config::ClientIdentity;
use crate::hold::{HeldEnvelope, HeldMessage, Spool, SpoolError};
use crate::smtp::data::{encode_data, unstuffed};
use crate::smtp::ehlo::parse_ehlo;
use crate::smtp::reply::Reply;
use crate::smtp::xclient::{ClientName, XclientAttrs, TEMPUNAVAIL};

use super::identity::quote_reply;
use super::upstream::{Upstream, UpstreamError, UpstreamSettings};
use super::Shared;

/// Why a release did not deliver; the message stays held.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// Upstream could not be reached or failed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// Upstream refused a step.
    #[error("upstream refused {step}: {reply}")]
    Refused {
        /// What floodgate sent.
        step: String,
        /// Upstream's answer, quoted.
        reply: String,
        /// Upstream's answer itself, when it gave one (not for a missing extension).
        answer: Option<Box<Reply>>,
    },
}

/// Who released a message and why, for its trace header.
#[derive(Clone, Debug)]
pub struct ReleaseBy {
    /// Who: an operator's text, or `expiry`.
    pub by: String,
    /// Why.
    pub reason: String,
    /// What the trace header says in place of the reason (the reference of the audit line
    /// that keeps it); `None`: the reason itself.
    pub note: Option<String>,
    /// When (seconds since the Unix epoch).
    pub at: i64,
}

/// One header value word: printable ASCII, no `;` or `"` (they delimit the header's
/// parts); anything else becomes `_`.
fn clean(s: &str, max: usize) -> String {
    s.chars()
        .take(max)
        .map(|c| {
            if c.is_ascii_graphic() && c != ';' && c != '"' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The trace header line (with CRLF) added to a released message.
pub fn trace_header(id: &str, by: &ReleaseBy) -> Vec<u8> {
    format!(
        "X-Floodgate-Released: id={id}; by=\"{}\"; reason=\"{}\"; at={}\r\n",
        clean(&by.by, 100),
        clean(by.note.as_deref().unwrap_or(&by.reason), 200),
        crate::smtp::received::rfc5322_date(by.at)
    )
    .into_bytes()
}

/// A client name as the held file keeps it (see [`HeldEnvelope::name`]), for XCLIENT.
pub fn client_name(kept: Option<&str>) -> ClientName {
    match kept {
        None | Some("") => ClientName::Unavailable,
        Some(TEMPUNAVAIL) => ClientName::TempUnavailable,
        Some(n) => ClientName::Known(n.to_string()),
    }
}

/// The refusal of `step` by upstream's reply `r`.
pub(super) fn refused(step: &str, r: &Reply) -> ReleaseError {
    ReleaseError::Refused {
        step: step.to_string(),
        reply: quote_reply(r),
        answer: Some(Box::new(r.clone())),
    }
}

/// Relays `m` through upstream. `Ok` with upstream's final reply only when every recipient
/// and the message were accepted; otherwise upstream's transaction is reset and the reason
/// returned.
pub async fn relay_held(
    settings: &UpstreamSettings,
    m: &HeldMessage,
    by: &ReleaseBy,
) -> Result<Reply, ReleaseError> {
    let trace = trace_header(&m.envelope.id, by);
    relay_with_trace(settings, &m.envelope, &m.body, &trace).await
}

/// Relays the message of envelope `m` and octets `body` through the smart host of
/// `settings` as [`relay_held`] does, with `trace` (one header line with its CRLF) on top
/// of its octets.
pub async fn relay_with_trace(
    settings: &UpstreamSettings,
    m: &HeldEnvelope,
    body: &[u8],
    trace: &[u8],
) -> Result<Reply, ReleaseError> {
    let (mut up, greeting) = Upstream::connect(settings, m.client, m.local).await?;
    if greeting.code != 220 {
        up.quit().await;
        return Err(refused("the session (greeting)", &greeting));
    }
    let outcome = transaction(&mut up, settings, m, body, trace).await;
    end_session(up, outcome).await
}

/// Ends floodgate's own upstream session: an unfinished transaction is reset, then QUIT.
pub(super) async fn end_session(
    mut up: Upstream,
    outcome: Result<Reply, ReleaseError>,
) -> Result<Reply, ReleaseError> {
    if outcome.is_err() {
        let _ = up.command(b"RSET\r\n").await;
    }
    up.quit().await;
    outcome
}

/// Whether a message goes as one `BDAT n LAST` in a session whose hello upstream answered
/// with `hello`: it was EHLO, upstream offered CHUNKING and `[upstream] chunking` allows it.
pub(super) fn bdat_after(settings: &UpstreamSettings, hello: &Reply) -> bool {
    settings.chunking() && parse_ehlo(hello).chunking
}

/// Sends one transaction after the greeting and hello: `mail` and each of `rcpts` (command
/// lines without CRLF), then `body` as one `BDAT n LAST` when `bdat` (see [`bdat_after`]),
/// else DATA and `body` dot-stuffed; `Ok` with upstream's answer to the message once it
/// accepted every step. Either way a bare CR or LF in `body` goes as CRLF.
pub(super) async fn send_transaction(
    up: &mut Upstream,
    mail: &str,
    rcpts: &[String],
    body: &[u8],
    bdat: bool,
) -> Result<Reply, ReleaseError> {
    let r = up.command(format!("{mail}\r\n").as_bytes()).await?;
    if !r.is_completion() {
        return Err(refused(mail, &r));
    }
    for rcpt in rcpts {
        let r = up.command(format!("{rcpt}\r\n").as_bytes()).await?;
        if !r.is_completion() {
            return Err(refused(rcpt, &r));
        }
    }
    let mut wire = Vec::with_capacity(body.len() + body.len() / 64 + 5);
    encode_data(body, &mut wire);
    let r = if bdat {
        // The canonical message: the wire form without its end-of-data line, unstuffed.
        let message = unstuffed(&wire[..wire.len() - 3]);
        let mut out = format!("BDAT {} LAST\r\n", message.len()).into_bytes();
        out.extend_from_slice(&message);
        up.command(&out).await?
    } else {
        let r = up.command(b"DATA\r\n").await?;
        if r.code != 354 {
            return Err(refused("DATA", &r));
        }
        up.command(&wire).await?
    };
    if !r.is_completion() {
        return Err(refused("the message", &r));
    }
    Ok(r)
}

async fn transaction(
    up: &mut Upstream,
    settings: &UpstreamSettings,
    m: &HeldEnvelope,
    body: &[u8],
    trace: &[u8],
) -> Result<Reply, ReleaseError> {
    if settings.identity() == ClientIdentity::Xclient {
        let name = client_name(m.name.as_deref());
        let reverse = client_name(m.reverse_name.as_deref());
        let attrs = XclientAttrs {
            addr: m.client.ip(),
            port: m.client.port(),
            name: &name,
            reverse_name: &reverse,
            helo: m.helo.as_deref(),
            proto: &m.proto,
            dest: m.local,
            login: m.user.as_deref(),
        };
        match up.xclient(&attrs).await? {
            None => {
                return Err(ReleaseError::Refused {
                    step: "XCLIENT".into(),
                    reply: "upstream does not offer XCLIENT".into(),
                    answer: None,
                })
            }
            Some(r) if r.code != 220 => return Err(refused("XCLIENT", &r)),
            Some(_) => {}
        }
    }
    let helo = m.helo.as_deref().unwrap_or("floodgate.invalid");
    let (ehlo, r) = up
        .greet(helo, m.proto != "SMTP", settings.always_ehlo())
        .await?;
    if r.code != 250 {
        return Err(refused(if ehlo { "EHLO" } else { "HELO" }, &r));
    }
    let bdat = ehlo && bdat_after(settings, &r);
    let mut plain = trace.to_vec();
    plain.extend_from_slice(body);
    send_transaction(
        up,
        &format!("MAIL FROM:{}", m.mail),
        &m.rcpts
            .iter()
            .map(|r| format!("RCPT TO:{r}"))
            .collect::<Vec<_>>(),
        &plain,
        bdat,
    )
    .await
}

/// The trace header line (with CRLF) of a message rerouted to the second smart host.
pub fn reroute_header(limit: &str, at: i64) -> Vec<u8> {
    format!(
        "X-Floodgate-Rerouted: limit=\"{}\"; at={}\r\n",
        clean(limit, 100),
        crate::smtp::received::rfc5322_date(at)
    )
    .into_bytes()
}

/// Runs blocking spool work off the event loop.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SpoolError> + Send + 'static,
) -> Result<T, SpoolError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(SpoolError::Io {
            path: "hold spool".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

/// Why a release or delete did not happen; the message stays held.
#[derive(Debug, thiserror::Error)]
pub enum HeldError {
    /// No message is held with this id (released or deleted meanwhile).
    #[error("{}", SpoolError::NotFound(.0.clone()))]
    NotFound(String),
    /// Another release or delete has the message right now.
    #[error("{}", SpoolError::Busy(.0.clone()))]
    Busy(String),
    /// The spool failed otherwise (I/O, an unreadable file set aside).
    #[error(transparent)]
    Spool(SpoolError),
    /// Upstream did not take the message.
    #[error("{0}; the message stays held")]
    Release(#[from] ReleaseError),
    /// A message in Postfix's hold queue could not be shown, released or deleted.
    #[error(transparent)]
    Postfix(#[from] crate::hold::postfix::PostfixError),
}

impl From<SpoolError> for HeldError {
    fn from(e: SpoolError) -> Self {
        match e {
            SpoolError::NotFound(id) => HeldError::NotFound(id),
            SpoolError::Busy(id) => HeldError::Busy(id),
            e => HeldError::Spool(e),
        }
    }
}

/// Releases one held message: claimed (so a concurrent release cannot take it), read whole
/// (the only message whose body is read), relayed, removed only after upstream accepted it
/// for every recipient, else given back.
pub async fn release_one(
    shared: &Arc<Shared>,
    spool: &Arc<Spool>,
    id: &str,
    by: &ReleaseBy,
) -> Result<(), HeldError> {
    let s = spool.clone();
    let owned = id.to_string();
    let m = blocking(move || {
        s.claim(&owned)?;
        match s.claimed(&owned) {
            Ok(m) => Ok(m),
            // Set aside: nothing to give back.
            Err(e @ SpoolError::Corrupt { .. }) => Err(e),
            Err(e) => {
                let _ = s.unclaim(&owned);
                Err(e)
            }
        }
    })
    .await?;
    let (key, limit) = (&m.envelope.key, &m.envelope.limit);
    match relay_held(&shared.upstream, &m, by).await {
        Ok(reply) => {
            let s = spool.clone();
            let owned = id.to_string();
            blocking(move || s.remove_claimed(&owned)).await?;
            shared.metrics.hold.released.inc();
            info!(id, key = %key, limit = %limit, by = %by.by, reason = %by.reason,
                upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
                "held message released");
            Ok(())
        }
        Err(e) => {
            let s = spool.clone();
            let owned = id.to_string();
            blocking(move || s.unclaim(&owned)).await?;
            warn!(id, key = %key, error = %e, "held message not released: it stays held");
            Err(e.into())
        }
    }
}

/// Deletes one held message (its envelope is read for the log line, never its body).
pub async fn delete_one(
    shared: &Arc<Shared>,
    spool: &Arc<Spool>,
    id: &str,
    by: &ReleaseBy,
) -> Result<(), HeldError> {
    let s = spool.clone();
    let owned = id.to_string();
    let m = blocking(move || {
        let m = s.claim(&owned)?;
        s.remove_claimed(&owned)?;
        Ok(m)
    })
    .await?;
    shared.metrics.hold.deleted.inc();
    info!(id, key = %m.envelope.key, limit = %m.envelope.limit, by = %by.by,
        reason = %by.reason, "held message deleted");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reroute_header_is_one_clean_line() {
        let h = String::from_utf8(reroute_header("high\r\nBcc: x;\"y\"", 0)).unwrap();
        assert_eq!(
            h,
            "X-Floodgate-Rerouted: limit=\"high__Bcc: x__y_\"; at=Thu, 01 Jan 1970 00:00:00 +0000\r\n"
        );
    }

    #[test]
    fn kept_names_read_back() {
        assert_eq!(client_name(None), ClientName::Unavailable);
        assert_eq!(client_name(Some("")), ClientName::Unavailable);
        assert_eq!(
            client_name(Some("[TEMPUNAVAIL]")),
            ClientName::TempUnavailable
        );
        assert_eq!(
            client_name(Some("mx.example.org")),
            ClientName::Known("mx.example.org".into())
        );
    }

    #[test]
    fn trace_header_is_one_clean_line() {
        let by = ReleaseBy {
            by: "ops\r\nBcc: x@y".into(),
            reason: "said \"ok\"; fine".into(),
            note: None,
            at: 0,
        };
        let h = String::from_utf8(trace_header("abc-1", &by)).unwrap();
        assert_eq!(
            h,
            "X-Floodgate-Released: id=abc-1; by=\"ops__Bcc: x@y\"; reason=\"said _ok__ fine\"; \
             at=Thu, 01 Jan 1970 00:00:00 +0000\r\n"
        );
        // The reason kept out of the header: its audit reference instead.
        let by = ReleaseBy {
            note: Some("audit 1a2b-0".into()),
            ..by
        };
        let h = String::from_utf8(trace_header("abc-1", &by)).unwrap();
        assert!(h.contains("reason=\"audit 1a2b-0\";"), "{h}");
        assert!(!h.contains("said"), "{h}");
    }
}
