//! The one per-stage choreography of every front end, without I/O: ask the policy at a
//! stage, act on its verdict, hear the answer of what came after, note it, answer.
//!
//! floodgate meets mail through three front ends: the proxy (an SMTP server in front of a
//! smart host), Postfix's policy service (`check_policy_service`) and the milter. Each reads
//! and writes its own wire; none decides anything. An [`Exchange`] is one session's view of
//! the policy (its [`SessionPolicy`] and the [`Facts`] it is asked about) and the rules of
//! the choreography, in one place:
//!
//! 1. **Ask.** The front end puts what it learnt into [`Exchange::facts_mut`] and calls
//!    [`Exchange::ask`] (or [`Exchange::ask_through`] when it sits inside an MTA's path and
//!    may not be asked at every stage). The answer is an [`Act`]: go on, wait then go on,
//!    refuse, close, or go on and take the message at its end.
//! 2. **Act.** The front end carries the act out on its wire: the proxy relays or answers;
//!    the policy service answers `DUNNO`, `DEFER_IF_PERMIT`, `REJECT`, `421` or `HOLD`; the
//!    milter answers continue, a reply code, or quarantine. A message refused at the
//!    message stage ends the transaction here ([`Exchange::ask`] abandons it).
//! 3. **Hear.** What came after a command that went on is heard with [`Exchange::hear`]:
//!    upstream's reply for the proxy; for the front ends inside Postfix, Postfix going on
//!    ([`continued`]: the reply Postfix itself gives, with the queue id where known).
//!    **The policy always hears first**, with the facts as they were when it was asked;
//!    then the exchange notes the answer (a recipient counted, a transaction opened or
//!    ended) and hands back an [`After`] for the front end's own dialogue, which hears
//!    last. This order is decided here and nowhere else.
//! 4. **Abandon.** A transaction that ends without an answer to its message (RSET, a new
//!    MAIL or `instance`, the end of the session) is abandoned with [`Exchange::abandon`]:
//!    the policy releases what it reserved for it, so only what the MTA accepted is
//!    charged.
//!
//! An order to take the message (hold, pace, reroute) is kept only when the front end can
//! carry it out ([`Exchange::taking`], [`Takes`]); a stronger order of the transaction
//! replaces a milder one (pace, then reroute, then hold). A front end whose own dialogue
//! ends a transaction (RSET, a new greeting, STARTTLS) says so with [`Exchange::ended`].
//!
//! How the proxy's stages map onto it. `judge` is `proxy::stage`'s `Session::judge`
//! ([`Exchange::ask`] plus the act carried out); `hear` is its `Session::hear`
//! ([`Exchange::hear`] plus the [`After`] carried out, then the dialogue hears):
//!
//! | proxy | exchange |
//! |---|---|
//! | `session::serve`: `judge(Connect)` | `ask(Connect)` |
//! | `commands::helo`: `judge(Helo)`, then greet upstream | `ask(Helo)`; the greeting is not heard by the policy |
//! | `auth`: `judge(Auth)`, the exchange relayed, `hear(Auth)` | `ask(Auth)`, `hear(Auth, reply)` |
//! | `commands::mail`: `judge(Mail)`, relayed and `hear(Mail)`, or pipelined and heard with the next command (`hear_policy`) | `ask(Mail)`, `hear(Mail, reply)` |
//! | `commands::rcpt`: `judge(Rcpt)`, relayed, `hear(Rcpt)` | `ask(Rcpt)`, `hear(Rcpt, reply)` |
//! | `data` / `bdat` (first chunk): `judge(Data)`, 354 | `ask(Data)` (nothing is heard) |
//! | `data::finish_message`: `judge(Message)`, relayed (`relay`) or taken (`taken`: held, paced, rerouted), `hear(Message)` | `ask(Message)`, [`Exchange::taken`], [`Exchange::headers`], `hear(Message, reply)` (a taken message is heard with floodgate's own `250 … queued as ID`, or the second smart host's answer) |
//! | `stage::forget_txn` (RSET, EHLO, STARTTLS, a refused message), the session's end | [`Exchange::ended`] |
//!
//! The policy service maps Postfix's `protocol_state` to the same stages (see
//! `policy_service`); the milter maps its commands.

pub mod act;

use std::time::Duration;

pub use act::{Act, After};

use crate::policy::{Facts, SessionPolicy, Stage, TakeOrder, TakenAnswer};
use crate::smtp::reply::Reply;

/// The stages of one session and of one transaction asked so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Asked {
    connect: bool,
    helo: bool,
    mail: bool,
    data: bool,
}

/// The ways of taking a message a front end can carry out; an order it cannot carry out is
/// not kept (the message goes on as if no check had asked to take it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Takes {
    /// Hold it (a hold spool, Postfix's hold queue).
    pub hold: bool,
    /// Pace it (a hold spool that releases it at the limit's rate).
    pub pace: bool,
    /// Reroute it (a second smart host).
    pub reroute: bool,
}

impl Takes {
    /// Every way: a front end inside Postfix takes each into Postfix's hold queue.
    pub const ALL: Takes = Takes {
        hold: true,
        pace: true,
        reroute: true,
    };

    /// Whether `answer` can be carried out.
    fn can(self, answer: &TakenAnswer) -> bool {
        match answer {
            TakenAnswer::Hold => self.hold,
            TakenAnswer::Pace(_) => self.pace,
            TakenAnswer::Reroute => self.reroute,
        }
    }
}

/// How strong a way of taking a message is: a stronger order of the same transaction
/// replaces a milder one (pace, then reroute, then hold).
fn strength(a: &TakenAnswer) -> u8 {
    match a {
        TakenAnswer::Pace(_) => 0,
        TakenAnswer::Reroute => 1,
        TakenAnswer::Hold => 2,
    }
}

/// One session's choreography: its policy, the facts it is asked about, and what the
/// transaction under way has been told and has heard.
pub struct Exchange {
    policy: Box<dyn SessionPolicy>,
    facts: Facts,
    asked: Asked,
    /// The MAIL of a transaction was heard accepted (the policy keeps charges for it).
    open: bool,
    /// The exchange ended the last transaction itself (answered or abandoned): nothing of it
    /// is left to release when the front end's dialogue ends it too.
    settled: bool,
    /// The transaction's message is taken at its end (hold, pace, reroute).
    order: Option<TakeOrder>,
    /// The ways of taking a message the front end carries out.
    takes: Takes,
    /// Emptied strings of the last transaction's facts, reused by the next one.
    strings: Vec<String>,
}

/// The answer an MTA gives by going on after a command floodgate let through: `250` with
/// the text Postfix writes, `queued as ID` at the end of a message whose queue id is known
/// (so the queued message's later outcomes can be followed like the proxy's).
pub fn continued(stage: Stage, queue_id: Option<&str>) -> Reply {
    match (stage, queue_id.filter(|q| !q.is_empty())) {
        (Stage::Message, Some(id)) => Reply::new(250, format!("2.0.0 Ok: queued as {id}")),
        _ => Reply::new(250, "2.0.0 Ok"),
    }
}

impl Exchange {
    /// The exchange of a new session: `policy` is the session's policy
    /// ([`crate::policy::Policy::session`]), `facts` what is known at connect.
    pub fn new(policy: Box<dyn SessionPolicy>, facts: Facts) -> Exchange {
        Exchange {
            policy,
            facts,
            asked: Asked::default(),
            open: false,
            settled: false,
            order: None,
            takes: Takes::ALL,
            strings: Vec::new(),
        }
    }

    /// The exchange, keeping only orders to take a message that `takes` can carry out.
    pub fn taking(mut self, takes: Takes) -> Exchange {
        self.takes = takes;
        self
    }

    /// Sets the transaction's sender (in a string from the exchange's pool).
    pub fn set_sender(&mut self, sender: &str) {
        let s = pooled(&mut self.strings, sender);
        let old = self.facts.sender.replace(s);
        pool_string(&mut self.strings, old);
    }

    /// Sets the recipient asked about, and its normalized form as `normalize` writes it
    /// (into an emptied string), both in strings from the exchange's pool.
    pub fn set_recipient(&mut self, recipient: &str, normalize: impl FnOnce(&mut String)) {
        let s = pooled(&mut self.strings, recipient);
        let old = self.facts.recipient.replace(s);
        pool_string(&mut self.strings, old);
        let mut n = match self.facts.recipient_normalized.take() {
            Some(n) => n,
            None => pooled(&mut self.strings, ""),
        };
        n.clear();
        normalize(&mut n);
        self.facts.recipient_normalized = Some(n);
    }

    /// The facts the policy is asked about.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// The facts, for the front end to fill before it asks.
    pub fn facts_mut(&mut self) -> &mut Facts {
        &mut self.facts
    }

    /// The order to take the transaction's message, when a check gave one.
    pub fn taken(&self) -> Option<&TakeOrder> {
        self.order.as_ref()
    }

    /// Whether a transaction is open (its MAIL asked or heard accepted).
    pub fn in_transaction(&self) -> bool {
        self.open || self.asked.mail
    }

    /// Whether `stage` was asked already in this session (Connect, Helo) or transaction
    /// (Mail, Data); always false for the stages asked once per event.
    pub fn was_asked(&self, stage: Stage) -> bool {
        match stage {
            Stage::Connect => self.asked.connect,
            Stage::Helo => self.asked.helo,
            Stage::Mail => self.asked.mail,
            Stage::Data => self.asked.data,
            _ => false,
        }
    }

    /// Asks the policy about `stage` and hands back what to do. A new MAIL starts the
    /// transaction afresh (no order kept); a command that does not go on is acted on here:
    /// a refused MAIL leaves no sender, a refused message ends its transaction.
    pub async fn ask(&mut self, stage: Stage) -> Act {
        match stage {
            Stage::Connect => self.asked.connect = true,
            Stage::Helo => self.asked.helo = true,
            Stage::Mail => {
                self.asked.mail = true;
                self.settled = false;
                self.order = None;
            }
            Stage::Data => self.asked.data = true,
            _ => {}
        }
        let verdict = match self.policy.check_now(stage, &self.facts) {
            Some(v) => v,
            None => self.policy.check(stage, &self.facts).await,
        };
        let act = Act::of(verdict);
        if let Act::Take(order) = &act {
            self.keep_order(order);
        }
        if !act.goes_on() {
            match stage {
                Stage::Mail => {
                    self.asked.mail = false;
                    self.facts.sender = None;
                }
                Stage::Message => self.abandon(),
                _ => {}
            }
        }
        act
    }

    /// Keeps `order` when the front end can carry it out and no stronger order of the
    /// transaction is kept already (a hold stays a hold when a pace is asked after it).
    fn keep_order(&mut self, order: &TakeOrder) {
        let stronger = self
            .order
            .as_ref()
            .is_none_or(|kept| strength(&kept.answer) < strength(&order.answer));
        if self.takes.can(&order.answer) && stronger {
            self.order = Some(order.clone());
        }
    }

    /// For a front end inside an MTA's path, asked at `stage` but maybe not at the stages
    /// before it (Postfix calls the policy service only from the restrictions it is listed
    /// in): asks each earlier stage not yet asked in this session or transaction (Connect,
    /// Helo, Mail, and Data before the message), hearing [`continued`] for the MAIL (the MTA
    /// went on from it), then `stage`. The first earlier stage that does not go on answers
    /// for `stage`; waits of earlier stages add up.
    pub async fn ask_through(&mut self, stage: Stage) -> Act {
        const ORDER: [Stage; 4] = [Stage::Connect, Stage::Helo, Stage::Mail, Stage::Data];
        let rank = |s: Stage| match s {
            Stage::Connect => 0,
            Stage::Helo => 1,
            Stage::Mail => 2,
            Stage::Auth | Stage::Command => 2,
            Stage::Rcpt => 3,
            Stage::Data => 3,
            Stage::Message => 4,
        };
        let mut wait = Duration::ZERO;
        for earlier in ORDER {
            if rank(earlier) >= rank(stage) || earlier == stage || self.was_asked(earlier) {
                continue;
            }
            match self.ask(earlier).await {
                Act::Go | Act::Take(_) => {}
                Act::Wait(d) => wait += d,
                refused => return refused,
            }
            if earlier == Stage::Mail {
                self.hear(Stage::Mail, &continued(Stage::Mail, None)).await;
            }
        }
        match self.ask(stage).await {
            Act::Go if !wait.is_zero() => Act::Wait(wait),
            Act::Wait(d) => Act::Wait(d + wait),
            act => act,
        }
    }

    /// The policy hears what came after a command at `stage` that went on (upstream's
    /// reply, or [`continued`]); then the exchange notes it: a MAIL accepted opens the
    /// transaction, a recipient accepted is counted, a message answered ends the
    /// transaction (its charges settled by the policy), a refused MAIL leaves no sender.
    /// The front end's own dialogue hears the answer after this, and carries out the
    /// [`After`].
    pub async fn hear(&mut self, stage: Stage, reply: &Reply) -> After {
        let verdict = match self.policy.after_upstream_now(stage, &self.facts, reply) {
            Some(v) => v,
            None => self.policy.after_upstream(stage, &self.facts, reply).await,
        };
        let accepted = reply.is_completion();
        match stage {
            Stage::Mail if accepted => self.open = true,
            Stage::Mail => {
                self.asked.mail = false;
                self.facts.sender = None;
            }
            Stage::Rcpt if accepted => self.facts.recipients_count += 1,
            Stage::Message => self.forget_transaction(),
            _ => {}
        }
        After::of(verdict, reply)
    }

    /// Header lines (without CRLF) the policy adds to the message; asked once the message
    /// stage let it through (the proxy), or as soon as a check added one (a front end that
    /// must add headers before the message arrives, as Postfix's `PREPEND`).
    pub fn headers(&mut self) -> Vec<String> {
        self.policy.message_headers()
    }

    /// The transaction ended without an answer to its message (RSET, a new transaction, the
    /// end of the session): the policy releases what it reserved for it, and its facts are
    /// forgotten. Nothing happens when no transaction is open.
    pub fn abandon(&mut self) {
        if self.in_transaction() {
            self.policy.transaction_abandoned();
        }
        self.forget_transaction();
    }

    /// The front end's own dialogue ended the transaction (RSET, a new greeting, STARTTLS,
    /// a message it refused, the end of the session); `abandoned`: the dialogue had it open.
    /// The policy releases what it reserved unless the exchange ended the transaction
    /// itself (its message answered or refused), and the facts of the transaction are
    /// forgotten.
    pub fn ended(&mut self, abandoned: bool) {
        if self.in_transaction() || (abandoned && !self.settled) {
            self.policy.transaction_abandoned();
        }
        self.forget_transaction();
    }

    /// Forgets the transaction: its facts, its order, what it asked.
    fn forget_transaction(&mut self) {
        self.open = false;
        self.settled = true;
        self.asked.mail = false;
        self.asked.data = false;
        self.order = None;
        let f = &mut self.facts;
        pool_string(&mut self.strings, f.sender.take());
        pool_string(&mut self.strings, f.recipient.take());
        pool_string(&mut self.strings, f.recipient_normalized.take());
        f.recipients_count = 0;
        f.message_size = 0;
        f.header_from = None;
        f.subject = None;
        f.auto_submitted = false;
        f.message_keys = None;
    }
}

/// Most strings a session's pool of emptied strings keeps (reused for the facts of the
/// next transaction: no allocation per command once the pool is warm), and the largest.
const POOLED_STRINGS: usize = 8;
const POOLED_STRING_CAPACITY: usize = 1024;

/// Keeps an emptied `s` for reuse, up to the pool's bounds.
fn pool_string(pool: &mut Vec<String>, s: Option<String>) {
    if let Some(mut s) = s {
        if pool.len() < POOLED_STRINGS && s.capacity() <= POOLED_STRING_CAPACITY {
            s.clear();
            pool.push(s);
        }
    }
}

/// `text` in a string from `pool` (no allocation once the pool is warm).
fn pooled(pool: &mut Vec<String>, text: &str) -> String {
    let mut s = pool.pop().unwrap_or_default();
    s.push_str(text);
    s
}

impl Drop for Exchange {
    fn drop(&mut self) {
        self.abandon();
    }
}

#[cfg(test)]
mod tests;
