//! Sending the mail of `notify_user`: floodgate's own upstream transaction, from the null
//! sender, with the TLS and PROXY settings of relaying (no XCLIENT: floodgate is the
//! client). Sent off the session path; a failure is logged and counted
//! (`floodgate_restrictions_total{event="user_notice_failed"}`), never the session's.

use std::sync::Arc;

use tracing::{info, warn};

use crate::policy::notice::{Notifier, UserNotice};
use crate::smtp::data::encode_data;
use crate::smtp::reply::Reply;

use super::release::{refused, ReleaseError};
use super::upstream::{Upstream, UpstreamSettings};
use super::Shared;

/// Sends `notice` through upstream: `Ok` with upstream's answer to the message once it
/// accepted it.
pub async fn send_notice(
    settings: &UpstreamSettings,
    notice: &UserNotice,
) -> Result<Reply, ReleaseError> {
    let (mut up, greeting) = Upstream::connect_own(settings).await?;
    if greeting.code != 220 {
        up.quit().await;
        return Err(refused("the session (greeting)", &greeting));
    }
    let outcome = transaction(&mut up, settings, notice).await;
    if outcome.is_err() {
        let _ = up.command(b"RSET\r\n").await;
    }
    up.quit().await;
    outcome
}

async fn transaction(
    up: &mut Upstream,
    settings: &UpstreamSettings,
    notice: &UserNotice,
) -> Result<Reply, ReleaseError> {
    let ehlo = format!("EHLO {}\r\n", settings.helo_name());
    let r = up.command(ehlo.as_bytes()).await?;
    if r.code != 250 {
        return Err(refused("EHLO", &r));
    }
    let mail = if notice.message.is_ascii() {
        "MAIL FROM:<>\r\n"
    } else {
        "MAIL FROM:<> BODY=8BITMIME\r\n"
    };
    let r = up.command(mail.as_bytes()).await?;
    if !r.is_completion() {
        return Err(refused(mail.trim_end(), &r));
    }
    let rcpt = format!("RCPT TO:<{}>\r\n", notice.to);
    let r = up.command(rcpt.as_bytes()).await?;
    if !r.is_completion() {
        return Err(refused(rcpt.trim_end(), &r));
    }
    let r = up.command(b"DATA\r\n").await?;
    if r.code != 354 {
        return Err(refused("DATA", &r));
    }
    let mut out = Vec::with_capacity(notice.message.len() + 64);
    encode_data(&notice.message, &mut out);
    let r = up.command(&out).await?;
    if !r.is_completion() {
        return Err(refused("the message", &r));
    }
    Ok(r)
}

/// The [`Notifier`] of a running floodgate: each notice is sent by its own task through the
/// upstream settings in force (read from `shared` when it is sent, so reloads apply).
pub struct UpstreamNotifier {
    shared: Box<dyn Fn() -> Arc<Shared> + Send + Sync>,
}

impl UpstreamNotifier {
    /// A notifier sending through the upstream of `shared()`.
    pub fn new(shared: impl Fn() -> Arc<Shared> + Send + Sync + 'static) -> UpstreamNotifier {
        UpstreamNotifier {
            shared: Box::new(shared),
        }
    }
}

impl Notifier for UpstreamNotifier {
    fn notify(&self, notice: UserNotice) {
        let sh = (self.shared)();
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
