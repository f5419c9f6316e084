//! A recording policy: it answers MAIL, RCPT, DATA and end-of-message checks as a script of
//! decision bytes says (continue, a local 450, or a 421 and close) and records every check
//! and every upstream answer it is told about, with the facts of the moment.

use std::sync::{Arc, Mutex};

use floodgate::policy::{BoxFuture, Facts, Policy, SessionPolicy, Stage, Verdict};
use floodgate::smtp::Reply;

/// One thing the policy was asked or told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A check and the verdict given (`"continue"`, `"reply"`, `"disconnect"`).
    Check(Stage, &'static str),
    /// Upstream's answer to something the policy let through.
    After {
        /// The stage.
        stage: Stage,
        /// Upstream's reply code.
        code: u16,
        /// `Facts::sender`.
        sender: Option<String>,
        /// `Facts::recipient`.
        recipient: Option<String>,
        /// `Facts::recipients_count`.
        recipients_count: usize,
        /// `Facts::message_size`.
        size: u64,
    },
    /// The open transaction was abandoned.
    Abandoned,
}

/// The shared log and script of the current case.
#[derive(Default)]
pub struct Log {
    script: Vec<u8>,
    pos: usize,
    /// Everything recorded since [`Recording::reset`].
    pub events: Vec<Event>,
}

/// The policy factory; every session it makes writes to the same log.
#[derive(Clone, Default)]
pub struct Recording {
    log: Arc<Mutex<Log>>,
}

impl Recording {
    /// Starts a new case: empty log, a new script.
    pub fn reset(&self, script: &[u8]) {
        let mut log = self.log.lock().expect("policy log");
        log.script = script.to_vec();
        log.pos = 0;
        log.events.clear();
    }

    /// The events recorded since the last reset.
    pub fn events(&self) -> Vec<Event> {
        self.log.lock().expect("policy log").events.clone()
    }
}

impl Policy for Recording {
    fn session(&self) -> Box<dyn SessionPolicy> {
        Box::new(self.clone())
    }
}

impl SessionPolicy for Recording {
    fn check<'a>(&'a mut self, stage: Stage, _facts: &'a Facts) -> BoxFuture<'a, Verdict> {
        let mut log = self.log.lock().expect("policy log");
        let steered = matches!(
            stage,
            Stage::Mail | Stage::Rcpt | Stage::Data | Stage::Message
        );
        let byte = if steered {
            let b = log.script.get(log.pos).copied();
            log.pos += 1;
            b
        } else {
            None
        };
        let (verdict, name) = match byte.map(|b| (b % 8, b & 0x80 != 0)) {
            Some((0, _)) => (
                Verdict::Reply(Reply::new(450, "4.7.1 Recording policy: slow down")),
                "reply",
            ),
            Some((1, true)) => (
                Verdict::Disconnect(Reply::new(421, "4.7.0 Recording policy: goodbye")),
                "disconnect",
            ),
            _ => (Verdict::Continue, "continue"),
        };
        log.events.push(Event::Check(stage, name));
        Box::pin(async move { verdict })
    }

    fn after_upstream<'a>(
        &'a mut self,
        stage: Stage,
        facts: &'a Facts,
        reply: &'a Reply,
    ) -> BoxFuture<'a, Verdict> {
        self.log
            .lock()
            .expect("policy log")
            .events
            .push(Event::After {
                stage,
                code: reply.code,
                sender: facts.sender.clone(),
                recipient: facts.recipient.clone(),
                recipients_count: facts.recipients_count,
                size: facts.message_size,
            });
        Box::pin(async { Verdict::Continue })
    }

    fn transaction_abandoned(&mut self) {
        self.log
            .lock()
            .expect("policy log")
            .events
            .push(Event::Abandoned);
    }
}
