//! Sending floodgate's own mail (the `notify_user` notices, alert mail): floodgate's own
//! upstream transaction, from the null sender, with the TLS and PROXY settings of relaying
//! (no XCLIENT: floodgate is the client). Sent off the session path; a failure is logged
//! and counted (`floodgate_restrictions_total{event="user_notice_failed"}`,
//! `floodgate_alert_mail_total{result="failed"}`), never the session's.

use std::sync::Arc;

use tracing::{info, warn};

use crate::policy::notice::{Notifier, UserNotice};
use crate::report::mail::OutMail;
use crate::report::mailer::{MailError, MailTransport, SendFuture};
use crate::smtp::reply::Reply;

use super::release::{bdat_after, end_session, refused, send_transaction, ReleaseError};
use super::upstream::{Upstream, UpstreamSettings};
use super::Shared;

/// Sends `notice` through upstream: `Ok` with upstream's answer to the message once it
/// accepted it.
pub async fn send_notice(
    settings: &UpstreamSettings,
    notice: &UserNotice,
) -> Result<Reply, ReleaseError> {
    send_mail(settings, std::slice::from_ref(&notice.to), &notice.message).await
}

/// Sends `message` (CRLF lines, not dot-stuffed) from the null sender to `to` through
/// upstream: `Ok` with upstream's answer once it accepted it for every recipient.
pub async fn send_mail(
    settings: &UpstreamSettings,
    to: &[String],
    message: &[u8],
) -> Result<Reply, ReleaseError> {
    let (mut up, greeting) = Upstream::connect_own(settings).await?;
    if greeting.code != 220 {
        up.quit().await;
        return Err(refused("the session (greeting)", &greeting));
    }
    let outcome = transaction(&mut up, settings, to, message).await;
    end_session(up, outcome).await
}

async fn transaction(
    up: &mut Upstream,
    settings: &UpstreamSettings,
    to: &[String],
    message: &[u8],
) -> Result<Reply, ReleaseError> {
    let ehlo = format!("EHLO {}\r\n", settings.helo_name());
    let r = up.command(ehlo.as_bytes()).await?;
    if r.code != 250 {
        return Err(refused("EHLO", &r));
    }
    let bdat = bdat_after(settings, &r);
    let mail = if message.is_ascii() {
        "MAIL FROM:<>"
    } else {
        "MAIL FROM:<> BODY=8BITMIME"
    };
    let rcpts: Vec<String> = to.iter().map(|a| format!("RCPT TO:<{a}>")).collect();
    send_transaction(up, mail, &rcpts, message, bdat).await
}

/// The [`MailTransport`] of alert mail: each mail is sent through the upstream settings in
/// force (read from `shared` when it is sent, so reloads apply); before sessions are served
/// there is none ([`MailError::NoTransport`]).
pub struct UpstreamMailer {
    shared: Box<dyn Fn() -> Option<Arc<Shared>> + Send + Sync>,
}

impl UpstreamMailer {
    /// A transport sending through the upstream of `shared()`, once it gives one.
    pub fn new(shared: impl Fn() -> Option<Arc<Shared>> + Send + Sync + 'static) -> UpstreamMailer {
        UpstreamMailer {
            shared: Box::new(shared),
        }
    }
}

impl MailTransport for UpstreamMailer {
    fn send<'a>(&'a self, mail: &'a OutMail) -> SendFuture<'a> {
        Box::pin(async move {
            let sh = (self.shared)().ok_or(MailError::NoTransport)?;
            match send_mail(&sh.upstream, &mail.to, &mail.message).await {
                Ok(reply) => Ok(reply.lines.last().cloned().unwrap_or_default()),
                Err(e) => Err(MailError::Send(e.to_string())),
            }
        })
    }
}

/// The [`Notifier`] of a running floodgate: each notice is sent by its own task through the
/// upstream settings in force (read from `shared` when it is sent, so reloads apply).
pub struct UpstreamNotifier {
    shared: Box<dyn Fn() -> Option<Arc<Shared>> + Send + Sync>,
}

impl UpstreamNotifier {
    /// A notifier sending through the upstream of `shared()`; none is sent while it gives
    /// nothing (before floodgate serves).
    pub fn new(
        shared: impl Fn() -> Option<Arc<Shared>> + Send + Sync + 'static,
    ) -> UpstreamNotifier {
        UpstreamNotifier {
            shared: Box::new(shared),
        }
    }
}

impl Notifier for UpstreamNotifier {
    fn notify(&self, notice: UserNotice) {
        let Some(sh) = (self.shared)() else {
            warn!(to = %notice.to, key = %notice.key, "restriction notice not sent: not serving yet");
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            sh.metrics.restriction("user_notice_failed");
            warn!(to = %notice.to, key = %notice.key, "restriction notice not sent: no runtime");
            return;
        };
        rt.spawn(async move {
            match send_notice(&sh.upstream, &notice).await {
                Ok(reply) => {
                    sh.metrics.restriction("user_notified");
                    info!(to = %notice.to, key = %notice.key, limit = %notice.limit,
                        upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
                        "restriction notice sent");
                }
                Err(e) => {
                    sh.metrics.restriction("user_notice_failed");
                    warn!(to = %notice.to, key = %notice.key, limit = %notice.limit, error = %e,
                        "restriction notice not sent");
                }
            }
        });
    }
}
