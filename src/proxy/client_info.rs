//! What the session tells upstream about its client: XCLIENT before the first HELO/EHLO,
//! floodgate's Received line, the client's names; and what the session does when upstream
//! did not take the client's identity ([`IdentityProblem`]).

use tracing::{error, warn};

use crate::config::{ClientIdentity, OnIdentityRefused};
use crate::smtp::received::{received_header, ReceivedInfo};
use crate::smtp::xclient::XclientAttrs;

use super::identity::{received_tls, refusal_reply, xclient_reply_problem, IdentityProblem};
use super::names::ClientNames;
use super::session::{Flow, Session};
use super::upstream::UpstreamError;

impl Session {
    /// floodgate's Received line for the message being received, when `[smtp] add_received`
    /// asks for one.
    pub(super) async fn received_header(&mut self) -> Option<Vec<u8>> {
        let cfg = self.shared.config.clone();
        if !cfg.smtp.add_received {
            return None;
        }
        let names = self.client_names().await;
        let tls = self.client.conn.tls_info().map(received_tls);
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let info = ReceivedInfo {
            helo: self.policy.facts.helo.as_deref(),
            name: names.name.known(),
            addr: self.client.peer.ip(),
            by: &cfg.server.hostname,
            ehlo: self.dialogue.ehlo(),
            tls: tls.as_ref().map(|(v, c)| (v.as_str(), c.as_str())),
            authenticated: self.policy.facts.user.is_some(),
            user: self
                .policy
                .facts
                .user
                .as_deref()
                .filter(|_| cfg.smtp.received_show_user),
            time,
        };
        Some(received_header(&info))
    }

    /// Starts the client's name lookup when something will use it (XCLIENT, the Received
    /// line) and lookups are on; it runs while upstream is reached and the client greeted.
    pub(super) fn start_name_lookup(&mut self) {
        let cfg = &self.shared.config;
        let used = cfg.upstream.client_identity == ClientIdentity::Xclient || cfg.smtp.add_received;
        if !used || !cfg.server.resolve_client_names {
            return;
        }
        let ip = self.client.peer.ip();
        // A client seen within the cache's lifetime (most connections) needs no task.
        if let Some(names) = self.shared.names.cached(ip) {
            self.client.names = Some(names);
            return;
        }
        let resolver = self.shared.names.clone();
        self.client.names_task = Some(tokio::spawn(async move { resolver.lookup(ip).await }));
    }

    /// The client's names: the lookup's outcome (waiting for it if needed, never past its
    /// timeout), or none when lookups are off.
    pub(super) async fn client_names(&mut self) -> ClientNames {
        if let Some(task) = self.client.names_task.take() {
            let names = task
                .await
                .unwrap_or_else(|_| ClientNames::temp_unavailable());
            self.client.names = Some(names);
        }
        self.client.names.clone().unwrap_or_default()
    }

    /// Handles an identity upstream did not take: `Ok` to go on with floodgate's own
    /// address (the operator asked for it), `Err(Flow::Close)` after queueing the refusal.
    pub(super) fn identity_refused(&mut self, problem: IdentityProblem) -> Result<(), Flow> {
        self.shared.metrics.identity_refused(problem.kind());
        let relay = self.shared.config.upstream.on_identity_refused == OnIdentityRefused::Relay;
        if relay && problem.relayable() {
            warn!(client = %self.client.ip_text, problem = %problem,
                "relaying with floodgate's own address (on_identity_refused = \"relay\")");
            return Ok(());
        }
        error!(client = %self.client.ip_text, port = self.client.peer.port(), problem = %problem,
            "upstream did not take the client's identity: refusing the client");
        self.client
            .conn
            .queue(&refusal_reply(&self.shared.config.server.hostname));
        Err(Flow::Close)
    }

    /// Sends XCLIENT before the client's first HELO/EHLO is relayed. `Ok(Some(flow))`: the
    /// session ends (refusal queued).
    pub(super) async fn send_xclient(
        &mut self,
        helo: &str,
        ehlo: bool,
    ) -> Result<Option<Flow>, UpstreamError> {
        let names = self.client_names().await;
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
                return Ok(self
                    .identity_refused(IdentityProblem::XclientNotOffered { offered })
                    .err());
            }
        };
        let Some(problem) = xclient_reply_problem(&reply) else {
            return Ok(None);
        };
        Ok(self.identity_refused(problem).err())
    }
}
