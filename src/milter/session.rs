//! One milter connection's state: the facts of the SMTP session Postfix describes, the
//! transaction under way, and the policy's verdict at each stage turned into milter
//! answers. No socket here: [`super::conn`] reads the packets and writes the answers.
//!
//! Mail from Postfix's `smtpd` (`smtpd_milters`) is judged stage by stage as it comes:
//! a recipient over a limit gets its own `450 4.7.1` through the reply-code answer. Mail
//! handed to the local `sendmail` (`non_smtpd_milters`) has no SMTP client: Postfix's
//! `cleanup` makes up the connect, HELO, MAIL and RCPT events (client `localhost`,
//! `127.0.0.1`, port 0) and cannot refuse one recipient of it (it defers the whole message
//! then, as a configuration error). Such mail is judged whole at the end of the message,
//! stage after stage. Its user is the envelope sender: Postfix's `sendmail` makes it the
//! submitting user's login at `$myorigin` unless the program names another with `-f`; the
//! `Received: … (Postfix, from userid N)` line Postfix's pickup writes is not handed to
//! milters (Postfix keeps its own `Received:` line from them).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use crate::exchange::{continued, Act, After, Exchange};
use crate::policy::identity::Identity;
use crate::policy::{Facts, Policy, Stage, TakeOrder};
use crate::postfix::milter::{macro_value, steps, ClientAddress, Wanted};
use crate::smtp::address::{AddressRole, Path};
use crate::smtp::reply::Reply;

use super::message::Assembled;

/// An answer to Postfix, owned (encoded by [`super::conn`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Go on.
    Continue,
    /// This SMTP reply (`4NN x.y.z text`, `5NN …`).
    Reply(String),
    /// Put the message in Postfix's hold queue, with this reason.
    Quarantine(String),
    /// Add this header field.
    AddHeader(String, String),
}

/// A message held in Postfix's hold queue on floodgate's word, for the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Postfix's queue id (the `i` macro).
    pub queue_id: String,
    /// The limit and key that held it.
    pub order: TakeOrder,
    /// The envelope sender.
    pub sender: String,
    /// The recipients.
    pub recipients: Vec<String>,
    /// The message's size.
    pub size: u64,
    /// The client's address; `None` for mail from the local `sendmail`.
    pub client: Option<IpAddr>,
    /// The user (SASL login folded, or local user).
    pub user: Option<String>,
}

/// What the end of a message gives: the answers (modifications first, the final answer
/// last) and the message held, if it was.
#[derive(Debug, Default)]
pub struct Ending {
    /// The answers in order.
    pub answers: Vec<Answer>,
    /// The message held in Postfix's hold queue, when it was.
    pub held: Option<Held>,
}

/// What the milter session shares with the rest of floodgate.
#[derive(Clone)]
pub struct Context {
    /// The policy.
    pub policy: Arc<dyn Policy>,
    /// How logins fold into accounts.
    pub identity: Identity,
    /// Most octets of a message kept for the Message stage.
    pub max_message_size: u64,
    /// The milter's name (the listener name the policy sees).
    pub name: Arc<str>,
    /// Postfix's hold queue (`[postfix]`): its ledger records each message held.
    pub postfix: Option<Arc<crate::hold::postfix::PostfixHold>>,
    /// What the negotiation asks of Postfix for the limits in force
    /// ([`super::events::wanted`]).
    pub wanted: Wanted<'static>,
}

/// One milter connection: one SMTP session of Postfix's at a time, driven through the
/// exchange ([`crate::exchange`]): each event asked about at its stage, Postfix going on
/// heard as the answer of what came after.
pub struct MilterSession {
    ctx: Context,
    exchange: Exchange,
    /// The connect event said port 0 on 127.0.0.1: mail from the local `sendmail`.
    local: bool,
    /// The transaction's recipients, as addresses.
    recipients: Vec<String>,
    /// The message under way.
    message: Assembled,
}

/// Whether a connect event is Postfix's made-up one for local submissions.
pub fn is_local_submission(address: &ClientAddress) -> bool {
    matches!(address, ClientAddress::Inet(ip, 0) if *ip == IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The address between `<` and `>` of a MAIL or RCPT argument (as Postfix sends it).
fn bare_address(arg: &[u8]) -> String {
    let text = String::from_utf8_lossy(arg);
    let t = text.trim();
    t.strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or(t)
        .to_string()
}

/// A verdict's reply as the reply-code answer wants it: one line, `NNN text`.
fn reply_text(r: &Reply) -> String {
    let text = r.lines.first().map(String::as_str).unwrap_or("");
    let text: String = text
        .chars()
        .filter(|c| !matches!(c, '\r' | '\n' | '\0'))
        .collect();
    format!("{} {}", r.code, text)
}

/// A header line from the policy (`Name: value`) as an add-header answer; the value keeps
/// one leading space, since the header values of this negotiation keep theirs
/// (`SMFIP_HDR_LEADSPC`) both ways.
fn header_answer(line: &str) -> Option<Answer> {
    let (name, value) = line.split_once(':')?;
    let name = name.trim();
    let valid = !name.is_empty() && name.bytes().all(|b| b > b' ' && b <= b'~' && b != b':');
    valid.then(|| {
        let value: String = value
            .chars()
            .filter(|c| !matches!(c, '\r' | '\n' | '\0'))
            .collect();
        Answer::AddHeader(name.to_string(), format!(" {}", value.trim_start()))
    })
}

impl MilterSession {
    /// A new session of `ctx`'s policy.
    pub fn new(ctx: Context) -> MilterSession {
        let facts = Facts {
            listener: ctx.name.clone(),
            ..Facts::default()
        };
        let exchange = Exchange::new(ctx.policy.session(), facts);
        let message = Assembled::new(ctx.max_message_size);
        MilterSession {
            ctx,
            exchange,
            local: false,
            recipients: Vec::new(),
            message,
        }
    }

    fn facts(&mut self) -> &mut Facts {
        self.exchange.facts_mut()
    }

    /// Whether this session is mail from the local `sendmail`.
    pub fn is_local(&self) -> bool {
        self.local
    }

    /// Asks the policy at `stage` through the exchange: a refusal becomes the reply-code
    /// answer, a wait is served, a hold is kept by the exchange for the end of the message;
    /// `None` means go on.
    async fn judge(&mut self, stage: Stage) -> Option<Answer> {
        let act = self.exchange.ask(stage).await;
        self.carry_out(act).await
    }

    /// An act carried out: a wait served, a refusal as the reply-code answer.
    async fn carry_out(&mut self, act: Act) -> Option<Answer> {
        match act {
            Act::Go | Act::Take(_) => None,
            Act::Wait(d) => {
                tokio::time::sleep(d).await;
                None
            }
            Act::Refuse(r) | Act::Close(r) => Some(Answer::Reply(reply_text(&r))),
        }
    }

    /// As [`Self::judge`], with the stages before `stage` not yet asked asked first
    /// ([`Exchange::ask_through`]).
    async fn judge_through(&mut self, stage: Stage) -> Option<Answer> {
        let act = self.exchange.ask_through(stage).await;
        self.carry_out(act).await
    }

    /// Postfix went on after floodgate let `stage` through (a recipient accepted, the
    /// message queued as `queue_id`): heard by the exchange. Nothing Postfix did is undone;
    /// a wait is served.
    async fn went_on(&mut self, stage: Stage, queue_id: Option<&str>) {
        let heard = continued(stage, queue_id);
        if let After::WaitThenPass(d) = self.exchange.hear(stage, &heard).await {
            tokio::time::sleep(d).await;
        }
    }

    /// The connect event.
    pub async fn connect(&mut self, hostname: &[u8], address: &ClientAddress) -> Answer {
        self.local = is_local_submission(address);
        if let ClientAddress::Inet(ip, port) = address {
            self.facts().client_ip = Some(*ip);
            self.facts().client_port = *port;
        }
        let _ = hostname;
        if self.local {
            return Answer::Continue;
        }
        self.judge(Stage::Connect).await.unwrap_or(Answer::Continue)
    }

    /// HELO or EHLO; `tls` from the `{tls_version}` macro.
    pub async fn helo(&mut self, name: &[u8], tls: bool) -> Answer {
        self.facts().helo = Some(String::from_utf8_lossy(name).into_owned());
        self.facts().tls = tls;
        if self.local {
            return Answer::Continue;
        }
        self.judge(Stage::Helo).await.unwrap_or(Answer::Continue)
    }

    /// MAIL; `macros` are the ones sent with it (`{auth_authen}`).
    pub async fn mail(&mut self, args: &[&[u8]], macros: &[(&[u8], &[u8])]) -> Answer {
        self.abort();
        let sender = args.first().map(|a| bare_address(a)).unwrap_or_default();
        self.facts().sender = Some(sender);
        if let Some(login) = macro_value(macros, "{auth_authen}").filter(|l| !l.is_empty()) {
            let login = String::from_utf8_lossy(login);
            let user = self.ctx.identity.fold(&login).into_owned();
            self.facts().login = (user != login).then(|| login.into_owned());
            self.facts().user = Some(user);
        }
        if self.local {
            return Answer::Continue;
        }
        if let Some(a) = self.judge(Stage::Mail).await {
            return a;
        }
        self.went_on(Stage::Mail, None).await;
        Answer::Continue
    }

    fn set_recipient(&mut self, rcpt: &str) {
        self.facts().recipient = Some(rcpt.to_string());
        self.facts().recipient_normalized = Some(
            Path::parse(rcpt, AddressRole::Recipient)
                .map(|p| p.normalized())
                .unwrap_or_else(|_| rcpt.to_ascii_lowercase()),
        );
    }

    /// One RCPT.
    pub async fn rcpt(&mut self, args: &[&[u8]]) -> Answer {
        let rcpt = args.first().map(|a| bare_address(a)).unwrap_or_default();
        if self.local {
            self.recipients.push(rcpt);
            return Answer::Continue;
        }
        self.set_recipient(&rcpt);
        if let Some(a) = self.judge(Stage::Rcpt).await {
            return a;
        }
        self.went_on(Stage::Rcpt, None).await;
        self.recipients.push(rcpt);
        Answer::Continue
    }

    /// DATA.
    pub async fn data(&mut self) -> Answer {
        if self.local {
            return Answer::Continue;
        }
        self.judge(Stage::Data).await.unwrap_or(Answer::Continue)
    }

    /// One header field.
    pub fn header(&mut self, name: &[u8], value: &[u8]) {
        self.message.header(name, value);
    }

    /// A body chunk.
    pub fn body(&mut self, chunk: &[u8]) {
        self.message.body(chunk);
    }

    /// The transaction was abandoned (RSET, a refusal, the client gone).
    pub fn abort(&mut self) {
        self.exchange.abandon();
        self.reset_transaction();
    }

    /// Forgets the milter's own part of the transaction (the exchange forgets its facts).
    fn reset_transaction(&mut self) {
        self.recipients.clear();
        self.message = Assembled::new(self.ctx.max_message_size);
    }

    /// Local mail's stages up to the Message stage, judged at its end as the local user:
    /// each recipient asked through the exchange (the stages before it asked first, as for
    /// any front end not asked at every stage), then the message; the first refusal
    /// answers the whole message.
    async fn local_judged(&mut self) -> Option<Answer> {
        let recipients = std::mem::take(&mut self.recipients);
        for rcpt in &recipients {
            self.set_recipient(rcpt);
            if let Some(a) = self.judge_through(Stage::Rcpt).await {
                return Some(a);
            }
            self.went_on(Stage::Rcpt, None).await;
            self.recipients.push(rcpt.clone());
        }
        self.judge_through(Stage::Message).await
    }

    /// The local user who handed the message to `sendmail`: the envelope sender (the
    /// user's login at `$myorigin` unless the program gave another), folded like a login;
    /// none for the null sender.
    fn local_user(&self) -> Option<String> {
        let sender = self
            .exchange
            .facts()
            .sender
            .as_deref()
            .filter(|s| !s.is_empty())?;
        Some(self.ctx.identity.fold(sender).into_owned())
    }

    /// Reads the message's facts for the Message stage: size, header From, Subject,
    /// `Auto-Submitted:`, message keys.
    async fn message_facts(&mut self) {
        self.message.finish();
        let size = self.message.size();
        let fields = crate::smtp::header_fields::read(self.message.bytes());
        let head_end = crate::smtp::header_fields::header_end(self.message.bytes());
        let automatic =
            crate::smtp::auto_submitted::is_automatic(&self.message.bytes()[..head_end]);
        let facts = self.exchange.facts_mut();
        facts.message_size = size;
        facts.header_from = fields.from;
        facts.subject = fields.subject;
        facts.auto_submitted = automatic;
        if self.ctx.wanted.steps & steps::NO_BODY != 0 {
            // The body was not asked for: no limit is keyed on a message key.
            facts.message_keys = None;
            return;
        }
        let null_sender = facts.sender.as_deref() == Some("");
        let account = facts
            .user
            .clone()
            .or_else(|| facts.client_ip.map(|ip| ip.to_string()));
        let shared: crate::policy::SharedMessage = Arc::new(self.message.take());
        self.exchange.facts_mut().message_keys = self
            .ctx
            .policy
            .message_keys(shared, null_sender, account)
            .await
            .map(Arc::new);
    }

    /// The end of the message: judged (for local mail, every stage), then answered:
    /// refused with the limit's reply, held in Postfix's hold queue, or let through with
    /// the policy's header fields. `queue_id` is Postfix's (the `i` macro).
    pub async fn end_of_message(&mut self, queue_id: Option<&str>) -> Ending {
        if self.local {
            self.facts().user = self.local_user();
        }
        self.message_facts().await;
        let refusal = if self.local {
            self.local_judged().await
        } else {
            self.judge(Stage::Message).await
        };
        if let Some(answer) = refusal {
            self.tell("refused by floodgate");
            self.abort();
            return Ending {
                answers: vec![answer],
                held: None,
            };
        }
        let mut ending = Ending::default();
        for line in self.exchange.headers() {
            ending.answers.extend(header_answer(&line));
        }
        if let Some(order) = self.exchange.taken().cloned() {
            ending.answers.push(Answer::Quarantine(format!(
                "floodgate: limit {} for {}",
                order.limit, order.key
            )));
            self.tell("held");
            let facts = self.exchange.facts();
            ending.held = Some(Held {
                queue_id: queue_id.unwrap_or("").to_string(),
                order,
                sender: facts.sender.clone().unwrap_or_default(),
                recipients: self.recipients.clone(),
                size: facts.message_size,
                client: facts.client_ip.filter(|_| !self.local),
                user: facts.user.clone(),
            });
        } else {
            self.tell("relayed 250");
        }
        // Postfix queues the message (in its hold queue when held): heard as its answer.
        self.went_on(Stage::Message, queue_id).await;
        ending.answers.push(Answer::Continue);
        self.reset_transaction();
        ending
    }

    /// Tells the event log how the transaction ended.
    fn tell(&self, verdict: &str) {
        let facts = self.exchange.facts();
        let key = crate::policy::alert::incident_key(facts);
        self.ctx
            .policy
            .record_message(&crate::policy::alert::MessageRecord {
                time_us: crate::store::now_micros(),
                key: &key,
                client: facts.client_ip,
                name: None,
                user: facts.user.as_deref(),
                login: facts.login.as_deref(),
                sender: facts.sender.as_deref().unwrap_or(""),
                recipients: &self.recipients,
                subject: facts.subject.as_deref(),
                verdict,
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_submission_is_port_zero_on_loopback() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert!(is_local_submission(&ClientAddress::Inet(lo, 0)));
        assert!(!is_local_submission(&ClientAddress::Inet(lo, 40000)));
        assert!(!is_local_submission(&ClientAddress::Inet(
            "192.0.2.1".parse().unwrap(),
            0
        )));
        assert!(!is_local_submission(&ClientAddress::Unknown));
    }

    #[test]
    fn addresses_lose_their_brackets() {
        assert_eq!(bare_address(b"<a@b.example>"), "a@b.example");
        assert_eq!(bare_address(b"<>"), "");
        assert_eq!(bare_address(b"a@b"), "a@b");
    }

    #[test]
    fn replies_are_one_line() {
        let r = Reply::new(450, "4.7.1 too fast\r\nsecond");
        assert_eq!(reply_text(&r), "450 4.7.1 too fastsecond");
    }

    #[test]
    fn policy_header_lines_become_add_header() {
        assert_eq!(
            header_answer("X-Floodgate: over limit a"),
            Some(Answer::AddHeader(
                "X-Floodgate".into(),
                " over limit a".into()
            ))
        );
        assert_eq!(header_answer("no colon"), None);
        assert_eq!(header_answer("bad name: x"), None);
    }
}
