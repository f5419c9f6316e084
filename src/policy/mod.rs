//! The policy hook: at each SMTP stage the session asks for a verdict before relaying.
//!
//! The proxy core only needs [`Policy`]; the rate-limit policy (limits, keys, lookups,
//! countermeasures) implements it on top of the rate engine and the store:
//!
//! * [`template`]: key and message templates (`${authenticated_id}`, `${client_ip/24}`);
//! * [`condition`]: `when` conditions (`!`, `&&`, `||`, lists);
//! * [`lists`]: `[lists]` of CIDRs, users, addresses and domains with values;
//! * [`model`]: `[[limit]]` compiled and checked ([`compile`]); [`check_sections`]: the
//!   limits checked against the other sections of the config their countermeasures need
//!   (`[hold]`, `[upstream.high_risk]`);
//! * [`engine`]: [`RatePolicy`], deciding all limits of a stage as one;
//! * [`action`]: countermeasures and reply texts;
//! * [`alert`]: alerts when a key first crosses a limit, and the engine's [`alert::Observer`] hook;
//! * [`authdelay`]: timeouts, not lockouts, after failed AUTH;
//! * [`baseline`]: per-key limits from each key's own history;
//! * [`concurrency`]: sessions at once;
//! * [`describe`]: what `floodgate check` prints, and its warnings.

pub mod action;
pub mod alert;
pub mod authdelay;
pub mod baseline;
pub mod charge;
mod compile;
pub mod concurrency;
pub mod condition;
pub mod counted;
mod cross_checks;
pub mod describe;
pub mod engine;
pub mod evidence;
pub mod expiry;
pub mod held;
pub mod identity;
pub mod lists;
pub mod model;
pub mod notice;
pub mod outcomes;
pub mod ratio;
mod replay;
mod request;
pub mod template;

pub use compile::compile;
#[cfg(test)]
pub(crate) use compile::postfix_path_model;
pub use cross_checks::check_sections;
pub use engine::RatePolicy;

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::smtp::reply::Reply;

/// Where in the SMTP dialogue a check happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// A client connected (before the greeting).
    Connect,
    /// HELO or EHLO.
    Helo,
    /// An AUTH exchange ended (see [`Facts::auth_succeeded`]).
    Auth,
    /// MAIL FROM.
    Mail,
    /// Each RCPT TO.
    Rcpt,
    /// The DATA (or BDAT) command, before any content.
    Data,
    /// The whole message has arrived, before it is relayed.
    Message,
    /// Every command, before its own stage.
    Command,
}

impl Stage {
    /// The config word for this stage.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Connect => "connect",
            Stage::Helo => "helo",
            Stage::Auth => "auth",
            Stage::Mail => "mail",
            Stage::Rcpt => "rcpt",
            Stage::Data => "data",
            Stage::Message => "message",
            Stage::Command => "command",
        }
    }
}

/// What the session knows when it asks.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The client's address (from PROXY when a trusted load balancer sent one).
    pub client_ip: Option<IpAddr>,
    /// The client's port.
    pub client_port: u16,
    /// The listener's name.
    pub listener: Arc<str>,
    /// Whether the client session is encrypted.
    pub tls: bool,
    /// The HELO/EHLO name.
    pub helo: Option<String>,
    /// The authenticated user (only after upstream said 235): the login folded into its
    /// account (`[identity]`, see [`identity`]).
    pub user: Option<String>,
    /// The login as the client typed it, when the fold changed it (`None` otherwise): for
    /// logs and evidence only, never a key.
    pub login: Option<String>,
    /// The user name the client gave in its latest AUTH exchange, accepted or not (`None`
    /// before any, and in the check that precedes each exchange), folded like a login
    /// ([`identity`]) so that failures of every spelling count together: the client's
    /// choice, never the user (that is [`Facts::user`]).
    pub auth_attempt: Option<String>,
    /// Whether the AUTH attempt succeeded (stage Auth).
    pub auth_succeeded: bool,
    /// The envelope sender ("" for the null sender), from MAIL on.
    pub sender: Option<String>,
    /// The recipient being judged (stage Rcpt).
    pub recipient: Option<String>,
    /// Exim's per_addr value of the recipient: lower-cased local part @ lower-cased domain.
    pub recipient_normalized: Option<String>,
    /// Recipients accepted so far in this transaction.
    pub recipients_count: usize,
    /// Message size: the SIZE= hint until the data arrives, then the real size.
    pub message_size: u64,
    /// The header From address (stage Message).
    pub header_from: Option<String>,
    /// The header Subject (stage Message), when the header is read (see
    /// [`Policy::reads_header_from`]).
    pub subject: Option<String>,
    /// The command verb (stage Command).
    pub command: Option<&'static str>,
    /// The message has an `Auto-Submitted:` header other than `no` (stage Message), when
    /// the header is read.
    pub auto_submitted: bool,
    /// The message keys (`${fingerprint}`, `${link_domain}`, `${subject_shape}`; stage
    /// Message), computed when a limit uses one and the message is neither from the null
    /// sender nor automatic or list mail (unless `[message_keys] include_automatic`).
    pub message_keys: Option<std::sync::Arc<crate::message_keys::MessageKeys>>,
}

/// The answer to a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Go on as if floodgate were not there.
    Continue,
    /// Wait this long, then go on.
    Delay(Duration),
    /// Answer the client with this reply instead of relaying; the session goes on.
    Reply(Reply),
    /// Answer with this reply (a 421) and close the session.
    Disconnect(Reply),
    /// Go on, but take the transaction's message at its end instead of relaying it to the
    /// main smart host: held, paced or rerouted, as its [`TakeOrder::answer`] says.
    Take(TakeOrder),
}

/// Which limit takes a transaction's message, for which key, and what becomes of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakeOrder {
    /// The limit's name.
    pub limit: String,
    /// The key it counted.
    pub key: String,
    /// What happens to the message once taken.
    pub answer: TakenAnswer,
}

/// What happens to a message floodgate takes from the client instead of relaying it to the
/// main smart host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TakenAnswer {
    /// Kept in the hold spool until an operator releases or deletes it, or it expires.
    #[default]
    Hold,
    /// Relayed at the end of data to the high-risk smart host; its answer goes to the
    /// client.
    Reroute,
    /// Kept in the hold spool and released automatically at this rate.
    Pace(crate::hold::pace::PaceRate),
}

impl TakenAnswer {
    /// The config word of the action that takes the message.
    pub fn as_str(&self) -> &'static str {
        match self {
            TakenAnswer::Hold => "hold",
            TakenAnswer::Reroute => "reroute",
            TakenAnswer::Pace(_) => "pace",
        }
    }
}

/// A message shared with the thread that reads it ([`Policy::message_keys`]): the session
/// keeps it to relay while its keys are computed elsewhere.
pub type SharedMessage = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A boxed future, so that policies can be async (a shared store) and still be objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Decides what happens at each stage: a factory of per-session policies.
pub trait Policy: Send + Sync {
    /// The policy of one new session (it may keep per-session state: Exim's caches,
    /// reservations, concurrency slots, released when it is dropped).
    fn session(&self) -> Box<dyn SessionPolicy>;

    /// Whether the policy reads the message header ([`Facts::header_from`],
    /// [`Facts::subject`]): if not, and nothing logs it, the session does not parse the
    /// message header for it. The default says yes.
    fn reads_header_from(&self) -> bool {
        true
    }

    /// The message keys of `message` (the whole message as received, header section first)
    /// that some limit uses (see [`crate::message_keys`]); `None` when no limit uses one,
    /// or the message is from the null sender (`null_sender`) or automatic or list mail and
    /// `[message_keys] include_automatic` is off, or every link of it goes to an exempt
    /// domain. `account` (the authenticated id, or the client address without AUTH) is
    /// what the organisation's boilerplate is learnt from. They are computed off the
    /// session's worker, within `[message_keys] budget`. The default computes none.
    fn message_keys(
        &self,
        message: SharedMessage,
        null_sender: bool,
        account: Option<String>,
    ) -> BoxFuture<'_, Option<crate::message_keys::MessageKeys>> {
        let _ = (message, null_sender, account);
        Box::pin(std::future::ready(None))
    }

    /// A new generation is in force (SIGHUP): later checks, in new and running sessions,
    /// use its limits and lists. The default ignores them.
    fn reload(&self, _model: Arc<model::PolicyModel>) {}

    /// A message reached the end of its data and was relayed, refused, held or rerouted:
    /// told to the observer (the event log's message lines). The default ignores it.
    fn record_message(&self, _t: &alert::MessageRecord<'_>) {}

    /// A notice for the alerts (log, webhook, command, mail) that no limit gives, such as
    /// `floodgate.spool_full`; passed on like a restriction's, never suppressed. The
    /// default ignores it.
    fn notice(&self, _notice: &serde_json::Value) {}
}

/// The policy of one session, asked by the session at every stage.
pub trait SessionPolicy: Send {
    /// Judges one event before floodgate acts on it.
    fn check<'a>(&'a mut self, stage: Stage, facts: &'a Facts) -> BoxFuture<'a, Verdict>;

    /// The verdict of [`check`](Self::check) when it can be given without waiting (no limit
    /// at this stage, say), with the same effect on the policy's state; `None` when `check`
    /// must be asked. The session asks this first on every event, which spares the boxed
    /// future of `check` on the common path. The default always defers to `check`.
    fn check_now(&mut self, _stage: Stage, _facts: &Facts) -> Option<Verdict> {
        None
    }

    /// Like [`check_now`](Self::check_now) for [`after_upstream`](Self::after_upstream).
    fn after_upstream_now(
        &mut self,
        _stage: Stage,
        _facts: &Facts,
        _reply: &Reply,
    ) -> Option<Verdict> {
        None
    }

    /// Learns what upstream answered to something this policy let through (to commit or
    /// refund reservations, feed dynamic multipliers, or slow down failed AUTH). `Delay`
    /// delays the relayed answer; `Reply` and `Disconnect` replace upstream's answer only when
    /// it was not a completion (floodgate never hides a success that changed upstream's
    /// state). The default continues.
    fn after_upstream<'a>(
        &'a mut self,
        _stage: Stage,
        _facts: &'a Facts,
        _reply: &'a Reply,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async { Verdict::Continue })
    }

    /// Header lines (without CRLF) to add at the top of the message being relayed; asked
    /// once per message, after the Message stage let it through.
    fn message_headers(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// The transaction was abandoned (RSET, refusal, end of session before end of data):
    /// reservations for it are to be released.
    fn transaction_abandoned(&mut self) {}
}

/// A policy that always continues: the proxy alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

impl Policy for AllowAll {
    fn session(&self) -> Box<dyn SessionPolicy> {
        Box::new(AllowAll)
    }

    fn reads_header_from(&self) -> bool {
        false
    }
}

impl SessionPolicy for AllowAll {
    fn check<'a>(&'a mut self, _stage: Stage, _facts: &'a Facts) -> BoxFuture<'a, Verdict> {
        Box::pin(async { Verdict::Continue })
    }

    fn check_now(&mut self, _stage: Stage, _facts: &Facts) -> Option<Verdict> {
        Some(Verdict::Continue)
    }

    fn after_upstream_now(&mut self, _: Stage, _: &Facts, _: &Reply) -> Option<Verdict> {
        Some(Verdict::Continue)
    }
}
