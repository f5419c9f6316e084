//! AUTH observation: every line goes to upstream, which decides; a copy of the client's
//! responses is decoded only to learn the user name, recorded when upstream answers 235.
//! No AUTH line is ever logged.

use tracing::info;

use crate::policy::Stage;
use crate::smtp::dialogue::{self, replies};
use crate::smtp::line::LineEvent;
use crate::smtp::sasl::{Mechanism, SaslObserver};

use super::session::{Flow, Session};
use super::upstream::UpstreamError;

impl Session {
    /// One AUTH exchange with `mech`, the dialogue having allowed it.
    pub(super) async fn auth(
        &mut self,
        mech: Mechanism,
        mechanism: String,
        initial: Option<String>,
    ) -> Result<Flow, UpstreamError> {
        self.exchange.facts_mut().auth_attempt = None;
        self.exchange.facts_mut().auth_succeeded = false;
        if let Some(flow) = self.judge(Stage::Auth).await {
            return Ok(flow);
        }
        let mut observer = SaslObserver::new(mech, initial.as_deref());
        let mut line = format!("AUTH {mechanism}").into_bytes();
        if let Some(ir) = &initial {
            line.push(b' ');
            line.extend_from_slice(ir.as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        let mut reply = self.up()?.command(&line).await?;
        // Wipe our copy of the initial response: it may hold a password.
        line.iter_mut().for_each(|b| *b = 0);
        let max_cmd = self.shared.config().smtp.max_command_line;
        self.client
            .framer
            .set_max_len(self.shared.config().smtp.max_auth_line);
        let result = loop {
            if reply.code != 334 {
                break Ok(reply);
            }
            self.client.conn.queue(&reply);
            let event = match self.next_event().await {
                Ok(e) => e,
                Err(_end) => {
                    self.client.framer.set_max_len(max_cmd);
                    // The client went away mid-exchange; cancel it upstream before QUIT.
                    let _ = self.up()?.command(b"*\r\n").await;
                    return Ok(Flow::Close);
                }
            };
            match event {
                LineEvent::Line(mut resp) => {
                    observer.client_line(&resp);
                    let mut wire = Vec::with_capacity(resp.len() + 2);
                    wire.extend_from_slice(&resp);
                    wire.extend_from_slice(b"\r\n");
                    reply = self.up()?.command(&wire).await?;
                    wire.iter_mut().for_each(|b| *b = 0);
                    // `resp` is a shared Bytes; drop our handle promptly.
                    resp.clear();
                }
                LineEvent::TooLong | LineEvent::BareLineEnding => {
                    // Cancel upstream's exchange and swallow its 501.
                    let _ = self.up()?.command(b"*\r\n").await?;
                    break Err(replies::bad_auth_line());
                }
            }
        };
        self.client.framer.set_max_len(max_cmd);
        let reply = match result {
            Ok(r) => r,
            Err(local) => {
                self.client.conn.queue(&local);
                return Ok(self.error_flow());
            }
        };
        // One account, one key: the login as the back-end folds it, from here on; the
        // spelling the client typed is kept beside it when it differs.
        let typed = observer.username();
        let identity = &self.shared.generation.policy.identity;
        let user = typed.map(|t| identity.fold(t).into_owned());
        let login = typed.filter(|t| user.as_deref() != Some(*t));
        // The dialogue takes a 235 as the session's authentication (a second AUTH never
        // reaches upstream): the facts the policy hears the answer with say so already.
        let accepted = reply.code == 235 && !self.dialogue.authenticated();
        let facts = self.exchange.facts_mut();
        facts.auth_attempt = user.clone();
        facts.auth_succeeded = reply.code == 235;
        if accepted {
            facts.user = user.clone();
            facts.login = login.map(str::to_string);
        }
        self.shared.metrics.auth(reply.code == 235);
        let user_text = user.as_deref().unwrap_or("");
        match (accepted, login) {
            (true, Some(typed)) => {
                info!(client = %self.client.ip_text, user = user_text, login = typed, mechanism = %mechanism, "authenticated")
            }
            (true, None) => {
                info!(client = %self.client.ip_text, user = user_text, mechanism = %mechanism, "authenticated")
            }
            (false, _) => {
                info!(client = %self.client.ip_text, user = user_text, login = typed.unwrap_or(""), mechanism = %mechanism, code = reply.code, "authentication failed");
            }
        }
        let Some((reply, _)) = self
            .hear(Stage::Auth, dialogue::Exchange::Auth, reply)
            .await
        else {
            return Ok(Flow::Close);
        };
        self.client.conn.queue(&reply);
        Ok(Flow::Next)
    }
}
