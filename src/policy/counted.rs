//! What a limit counts, and at which stage each count is known.

use super::Stage;

/// What a limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Connections (one per session).
    Connections,
    /// Commands.
    Commands,
    /// Messages.
    Messages,
    /// Recipients.
    Recipients,
    /// Distinct recipient addresses (per_addr).
    DistinctRecipients,
    /// Distinct values of a template (Exim `unique=`).
    Distinct,
    /// Message bytes.
    Bytes,
    /// Failed AUTH attempts.
    AuthFailures,
    /// Sessions at once (a concurrency limit).
    Sessions,
    /// Recipients upstream refused with a 5xx at RCPT TO (charged when refused).
    RefusedRecipients,
    /// Messages upstream refused with a 5xx after the end of data (charged when refused).
    RefusedMessages,
    /// Recipients whose delivery upstream reported bounced after queueing (charged from
    /// the smart host's log or `floodgate outcome`).
    BouncedRecipients,
    /// Recipients whose delivery upstream reported deferred after queueing (each once).
    DeferredRecipients,
}

impl Counted {
    pub(super) fn parse(w: &str) -> Option<Counted> {
        Some(match w {
            "connections" => Counted::Connections,
            "commands" => Counted::Commands,
            "messages" => Counted::Messages,
            "recipients" => Counted::Recipients,
            "distinct_recipients" => Counted::DistinctRecipients,
            "bytes" => Counted::Bytes,
            "auth_failures" => Counted::AuthFailures,
            "sessions" => Counted::Sessions,
            "refused_recipients" => Counted::RefusedRecipients,
            "refused_messages" => Counted::RefusedMessages,
            "bounced_recipients" => Counted::BouncedRecipients,
            "deferred_recipients" => Counted::DeferredRecipients,
            _ => return None,
        })
    }

    /// The config word.
    pub fn as_str(self) -> &'static str {
        match self {
            Counted::Connections => "connections",
            Counted::Commands => "commands",
            Counted::Messages => "messages",
            Counted::Recipients => "recipients",
            Counted::DistinctRecipients => "distinct_recipients",
            Counted::Distinct => "distinct values",
            Counted::Bytes => "bytes",
            Counted::AuthFailures => "auth_failures",
            Counted::Sessions => "sessions",
            Counted::RefusedRecipients => "refused_recipients",
            Counted::RefusedMessages => "refused_messages",
            Counted::BouncedRecipients => "bounced_recipients",
            Counted::DeferredRecipients => "deferred_recipients",
        }
    }

    /// Whether upstream's answer is the event counted (refused, bounced or deferred): the
    /// check asks whether one more would be over, the charge comes when it happens.
    pub fn outcome(self) -> bool {
        matches!(
            self,
            Counted::RefusedRecipients
                | Counted::RefusedMessages
                | Counted::BouncedRecipients
                | Counted::DeferredRecipients
        )
    }

    /// Whether it is known only after upstream queued the message (bounced, deferred).
    pub fn after_queueing(self) -> bool {
        matches!(
            self,
            Counted::BouncedRecipients | Counted::DeferredRecipients
        )
    }

    /// Whether upstream's acceptance decides the charge (recipients and bytes).
    pub fn reserved(self) -> bool {
        matches!(
            self,
            Counted::Recipients | Counted::DistinctRecipients | Counted::Bytes
        )
    }

    pub(super) fn default_stage(self) -> Stage {
        match self {
            Counted::Connections | Counted::Sessions => Stage::Connect,
            Counted::Commands => Stage::Command,
            Counted::Messages => Stage::Mail,
            Counted::Recipients | Counted::DistinctRecipients | Counted::Distinct => Stage::Rcpt,
            Counted::Bytes => Stage::Message,
            Counted::AuthFailures => Stage::Auth,
            Counted::RefusedRecipients => Stage::Rcpt,
            Counted::RefusedMessages | Counted::BouncedRecipients | Counted::DeferredRecipients => {
                Stage::Mail
            }
        }
    }
}
