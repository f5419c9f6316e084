//! XCLIENT before the client's first HELO/EHLO is relayed: upstream learns the real client
//! (address, port, names, HELO, protocol) instead of floodgate's own address.

use crate::smtp::xclient::XclientAttrs;

use super::identity::{xclient_reply_problem, IdentityProblem};
use super::session::{Flow, Session};
use super::upstream::UpstreamError;

impl Session {
    /// Sends XCLIENT before the client's first HELO/EHLO is relayed. `Ok(Some(flow))`: the
    /// session ends (refusal queued).
    pub(super) async fn send_xclient(
        &mut self,
        helo: &str,
        ehlo: bool,
    ) -> Result<Option<Flow>, UpstreamError> {
        let names = self.client.names.get().await;
        let attrs = XclientAttrs {
            addr: self.client.peer.ip(),
            port: self.client.peer.port(),
            name: &names.name,
            reverse_name: &names.reverse,
            helo: Some(helo),
            proto: if ehlo { "ESMTP" } else { "SMTP" },
            dest: self.client.local,
            login: None,
        };
        let up = self.up()?;
        let reply = match up.xclient(&attrs).await? {
            Some(r) => r,
            None => {
                let offered = up.caps.xclient.join(" ");
                return Ok(self.identity_refused(IdentityProblem::XclientNotOffered { offered }));
            }
        };
        let Some(problem) = xclient_reply_problem(&reply) else {
            return Ok(None);
        };
        Ok(self.identity_refused(problem))
    }
}
