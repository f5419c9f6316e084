//! Conditions (`when = "..."`): which events a limit applies to.
//!
//! ```text
//! expr    := and ( "||" and )*
//! and     := unary ( "&&" unary )*
//! unary   := "!" unary | "(" expr ")" | atom
//! atom    := "true" | "false" | "authenticated" | "tls" | "bounce"
//!          | subject "in" LIST            (a [lists] name)
//!          | subject "==" "text" | subject "!=" "text"
//!          | subject "==" subject | subject "!=" subject
//! subject := client_ip | user | user_domain | sender | sender_domain | recipient
//!          | recipient_domain | helo | header_from | listener
//! ```
//! Text after `==` and `!=` is always in double quotes: a bare word there is an error unless
//! it names a subject, which compares the two subjects' values (`sender != user`: the envelope
//! sender is not the login). `user_domain` is the part after the last `@` of the login, when
//! it has one. A comparison of two subjects is false, with `==` and with `!=` alike, when
//! either value is missing or empty (no login, no recipient yet, the null sender): there is
//! nothing to compare, so `sender != user` never counts unauthenticated or bounce messages.
//! The values are compared whole (a login `alice` is not the sender `alice@example.org`).
//! `bounce` is a null sender or a sender whose local part is `postmaster` or
//! `mailer-daemon`. A missing value (no user yet, no recipient at MAIL) is never in a list
//! and never equal to any text. Text comparisons ignore case.

use std::net::IpAddr;

use super::lists::Lists;
use super::Facts;

/// What a condition looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// The client address.
    ClientIp,
    /// The authenticated user.
    User,
    /// The authenticated user's domain (after the last `@` of the login, if any).
    UserDomain,
    /// The envelope sender.
    Sender,
    /// The envelope sender's domain.
    SenderDomain,
    /// The recipient being judged.
    Recipient,
    /// The recipient's domain.
    RecipientDomain,
    /// The HELO name.
    Helo,
    /// The header From address.
    HeaderFrom,
    /// The listener's name.
    Listener,
}

impl Subject {
    /// The condition word of this subject.
    pub fn as_str(self) -> &'static str {
        match self {
            Subject::ClientIp => "client_ip",
            Subject::User => "user",
            Subject::UserDomain => "user_domain",
            Subject::Sender => "sender",
            Subject::SenderDomain => "sender_domain",
            Subject::Recipient => "recipient",
            Subject::RecipientDomain => "recipient_domain",
            Subject::Helo => "helo",
            Subject::HeaderFrom => "header_from",
            Subject::Listener => "listener",
        }
    }

    /// The subject named by a condition word (`client_ip`, `user`, ...).
    pub fn parse_word(word: &str) -> Option<Subject> {
        Subject::parse(word)
    }

    fn parse(word: &str) -> Option<Subject> {
        Some(match word {
            "client_ip" | "sender_host_address" => Subject::ClientIp,
            "user" | "authenticated_id" => Subject::User,
            "user_domain" => Subject::UserDomain,
            "sender" | "sender_address" => Subject::Sender,
            "sender_domain" => Subject::SenderDomain,
            "recipient" => Subject::Recipient,
            "recipient_domain" | "domain" => Subject::RecipientDomain,
            "helo" => Subject::Helo,
            "header_from" => Subject::HeaderFrom,
            "listener" => Subject::Listener,
            _ => return None,
        })
    }

    /// The subject's text value in `facts`, if known.
    pub fn value(self, facts: &Facts) -> Option<String> {
        let domain = |a: &Option<String>| {
            a.as_deref()
                .and_then(|a| a.rsplit_once('@'))
                .map(|(_, d)| d.to_string())
        };
        match self {
            Subject::ClientIp => facts.client_ip.map(|ip| ip.to_string()),
            Subject::User => facts.user.clone(),
            Subject::UserDomain => domain(&facts.user),
            Subject::Sender => facts.sender.clone(),
            Subject::SenderDomain => domain(&facts.sender),
            Subject::Recipient => facts.recipient.clone(),
            Subject::RecipientDomain => domain(&facts.recipient),
            Subject::Helo => facts.helo.clone(),
            Subject::HeaderFrom => facts.header_from.clone(),
            Subject::Listener => Some(facts.listener.to_string()),
        }
    }
}

/// A parsed condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// A constant.
    Const(bool),
    /// The client authenticated.
    Authenticated,
    /// The session is encrypted.
    Tls,
    /// A bounce sender (null sender, postmaster, mailer-daemon).
    Bounce,
    /// The subject's value is in the named list.
    InList(Subject, String),
    /// The subject's value equals the text (case-insensitive).
    Equals(Subject, String),
    /// Two subjects' values compared (case-insensitive); `true` asks for equal values,
    /// `false` for different ones. False either way when a value is missing or empty.
    Compare(Subject, Subject, bool),
    /// Negation.
    Not(Box<Condition>),
    /// Both.
    And(Box<Condition>, Box<Condition>),
    /// Either.
    Or(Box<Condition>, Box<Condition>),
}

impl Condition {
    /// Whether the condition looks at `subject`.
    pub fn reads(&self, subject: Subject) -> bool {
        match self {
            Condition::InList(s, _) | Condition::Equals(s, _) => *s == subject,
            Condition::Compare(a, b, _) => *a == subject || *b == subject,
            Condition::Not(c) => c.reads(subject),
            Condition::And(a, b) | Condition::Or(a, b) => a.reads(subject) || b.reads(subject),
            Condition::Const(_) | Condition::Authenticated | Condition::Tls | Condition::Bounce => {
                false
            }
        }
    }
}

/// Why a condition was refused; `at` is the byte offset in the condition text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at character {})", at + 1)]
pub struct ConditionError {
    /// Byte offset.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Word(String),
    Str(String),
    Not,
    And,
    Or,
    Eq,
    Ne,
    Open,
    Close,
}

fn lex(text: &str) -> Result<Vec<(usize, Tok)>, ConditionError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |at: usize, m: &str| ConditionError {
        at,
        message: m.to_string(),
    };
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            b'(' => out.push((start, Tok::Open)),
            b')' => out.push((start, Tok::Close)),
            b'!' if b.get(i + 1) == Some(&b'=') => {
                out.push((start, Tok::Ne));
                i += 1;
            }
            b'!' => out.push((start, Tok::Not)),
            b'&' if b.get(i + 1) == Some(&b'&') => {
                out.push((start, Tok::And));
                i += 1;
            }
            b'|' if b.get(i + 1) == Some(&b'|') => {
                out.push((start, Tok::Or));
                i += 1;
            }
            b'=' if b.get(i + 1) == Some(&b'=') => {
                out.push((start, Tok::Eq));
                i += 1;
            }
            b'"' => {
                let end = text[i + 1..]
                    .find('"')
                    .ok_or_else(|| err(start, "unterminated \"text\""))?;
                out.push((start, Tok::Str(text[i + 1..i + 1 + end].to_string())));
                i += end + 2;
                continue;
            }
            c if is_word_byte(c) => {
                let end = b[i..]
                    .iter()
                    .position(|&c| !is_word_byte(c))
                    .map_or(b.len(), |p| i + p);
                out.push((start, Tok::Word(text[i..end].to_string())));
                i = end;
                continue;
            }
            _ => {
                return Err(err(
                    start,
                    "unexpected character: use !, &&, ||, ==, !=, parentheses, words and \"text\"",
                ))
            }
        }
        i += 1;
    }
    Ok(out)
}

/// The subject words, for error messages.
const SUBJECT_WORDS: &str = "client_ip, user, user_domain, sender, sender_domain, recipient, \
                             recipient_domain, helo, header_from, listener";

/// Bytes of bare words: condition words, subjects and list names.
fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'@')
}

struct Parser<'a> {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    end: usize,
    list_exists: &'a dyn Fn(&str) -> bool,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }

    fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end, |(a, _)| *a)
    }

    fn err<T>(&self, message: String) -> Result<T, ConditionError> {
        Err(ConditionError {
            at: self.at(),
            message,
        })
    }

    fn expr(&mut self) -> Result<Condition, ConditionError> {
        let mut left = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.pos += 1;
            let right = self.and()?;
            left = Condition::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Condition, ConditionError> {
        let mut left = self.unary()?;
        while self.peek() == Some(&Tok::And) {
            self.pos += 1;
            let right = self.unary()?;
            left = Condition::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Condition, ConditionError> {
        self.depth += 1;
        if self.depth > 64 {
            return self.err("condition nested too deeply".into());
        }
        let r = match self.peek().cloned() {
            Some(Tok::Not) => {
                self.pos += 1;
                Ok(Condition::Not(Box::new(self.unary()?)))
            }
            Some(Tok::Open) => {
                self.pos += 1;
                let e = self.expr()?;
                if self.peek() != Some(&Tok::Close) {
                    return self.err("expected `)`".into());
                }
                self.pos += 1;
                Ok(e)
            }
            Some(Tok::Word(w)) => {
                self.pos += 1;
                self.atom(&w)
            }
            Some(_) => self.err("expected a condition".into()),
            None => self.err("condition ends too early".into()),
        };
        self.depth -= 1;
        r
    }

    fn atom(&mut self, word: &str) -> Result<Condition, ConditionError> {
        match word {
            "true" => return Ok(Condition::Const(true)),
            "false" => return Ok(Condition::Const(false)),
            "authenticated" => return Ok(Condition::Authenticated),
            "tls" => return Ok(Condition::Tls),
            "bounce" => return Ok(Condition::Bounce),
            _ => {}
        }
        let Some(subject) = Subject::parse(word) else {
            self.pos -= 1;
            return self.err(format!(
                "unknown word `{word}`: expected authenticated, tls, bounce, true, false, or one of \
                 {SUBJECT_WORDS} followed by `in LIST`, `== \"text\"` or `== SUBJECT`"
            ));
        };
        match self.peek().cloned() {
            Some(Tok::Word(w)) if w == "in" => {
                self.pos += 1;
                match self.peek().cloned() {
                    Some(Tok::Word(name)) => {
                        if !(self.list_exists)(&name) {
                            return self.err(format!("no list called `{name}` in [lists]"));
                        }
                        self.pos += 1;
                        Ok(Condition::InList(subject, name))
                    }
                    _ => self.err("expected a list name after `in`".into()),
                }
            }
            Some(op @ (Tok::Eq | Tok::Ne)) => {
                self.pos += 1;
                let op_text = if op == Tok::Ne { "!=" } else { "==" };
                match self.peek().cloned() {
                    Some(Tok::Word(w)) => match Subject::parse(&w) {
                        Some(other) => {
                            self.pos += 1;
                            Ok(Condition::Compare(subject, other, op == Tok::Eq))
                        }
                        // Reading a bare word as text would make a typo of a subject
                        // (`sender != usr`) silently compare with the word itself.
                        None => self.err(format!(
                            "`{w}` after `{op_text}` is not quoted: text is written in double \
                             quotes (`{word} {op_text} \"{w}\"`); to compare with another \
                             subject name one of {SUBJECT_WORDS}"
                        )),
                    },
                    Some(Tok::Str(s)) => {
                        self.pos += 1;
                        let c = Condition::Equals(subject, s);
                        Ok(if op == Tok::Ne {
                            Condition::Not(Box::new(c))
                        } else {
                            c
                        })
                    }
                    _ => self.err("expected \"text\" or a subject after the comparison".into()),
                }
            }
            _ => self.err(format!(
                "expected `in LIST`, `== \"text\"` or `== SUBJECT` after `{word}`"
            )),
        }
    }
}

impl Condition {
    /// Parses condition text; `list_exists` says which list names are defined.
    pub fn parse(
        text: &str,
        list_exists: &dyn Fn(&str) -> bool,
    ) -> Result<Condition, ConditionError> {
        let toks = lex(text)?;
        let mut p = Parser {
            toks,
            pos: 0,
            end: text.len(),
            list_exists,
            depth: 0,
        };
        let c = p.expr()?;
        if p.pos < p.toks.len() {
            return p.err("unexpected text after the condition (missing && or ||?)".into());
        }
        Ok(c)
    }

    /// Evaluates the condition on what the session knows.
    pub fn eval(&self, facts: &Facts, lists: &Lists) -> bool {
        match self {
            Condition::Const(b) => *b,
            Condition::Authenticated => facts.user.is_some(),
            Condition::Tls => facts.tls,
            Condition::Bounce => facts.sender.as_deref().is_some_and(is_bounce),
            Condition::InList(subject, name) => {
                let Some(list) = lists.get(name) else {
                    return false;
                };
                match subject {
                    Subject::ClientIp => facts
                        .client_ip
                        .is_some_and(|ip: IpAddr| list.lookup_ip(ip).is_some()),
                    Subject::Sender | Subject::Recipient | Subject::HeaderFrom => subject
                        .value(facts)
                        .is_some_and(|v| !v.is_empty() && list.lookup_address(&v).is_some()),
                    Subject::User => facts
                        .user
                        .as_deref()
                        .is_some_and(|u| list.lookup_account(u, lists.login_realm()).is_some()),
                    _ => subject
                        .value(facts)
                        .is_some_and(|v| list.lookup_text(&v).is_some()),
                }
            }
            Condition::Equals(subject, text) => subject
                .value(facts)
                .is_some_and(|v| v.eq_ignore_ascii_case(text)),
            Condition::Compare(a, b, equal) => match (a.value(facts), b.value(facts)) {
                (Some(x), Some(y)) if !x.is_empty() && !y.is_empty() => {
                    x.eq_ignore_ascii_case(&y) == *equal
                }
                _ => false,
            },
            Condition::Not(c) => !c.eval(facts, lists),
            Condition::And(a, b) => a.eval(facts, lists) && b.eval(facts, lists),
            Condition::Or(a, b) => a.eval(facts, lists) || b.eval(facts, lists),
        }
    }

    /// Whether the condition mentions `authenticated` or the user (used to pick defaults).
    pub fn mentions_user(&self) -> bool {
        match self {
            Condition::Authenticated => true,
            Condition::InList(s, _) | Condition::Equals(s, _) => {
                matches!(s, Subject::User | Subject::UserDomain)
            }
            Condition::Compare(a, b, _) => [a, b]
                .iter()
                .any(|s| matches!(s, Subject::User | Subject::UserDomain)),
            Condition::Not(c) => c.mentions_user(),
            Condition::And(a, b) | Condition::Or(a, b) => a.mentions_user() || b.mentions_user(),
            _ => false,
        }
    }
}

/// A bounce sender: the null sender, or local part postmaster / mailer-daemon.
pub fn is_bounce(sender: &str) -> bool {
    if sender.is_empty() {
        return true;
    }
    let local = sender.rsplit_once('@').map_or(sender, |(l, _)| l);
    local.eq_ignore_ascii_case("postmaster") || local.eq_ignore_ascii_case("mailer-daemon")
}

#[cfg(test)]
mod compare_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lists::NamedList;
    use proptest::prelude::*;

    fn lists() -> Lists {
        let mut l = Lists::default();
        l.insert("trusted", NamedList::from_text("10.0.0.0/8\n").unwrap());
        l.insert("vip", NamedList::from_text("alice\n").unwrap());
        l.insert("postmaster", NamedList::from_text("postmaster@\n").unwrap());
        l
    }

    fn parse(t: &str) -> Result<Condition, ConditionError> {
        let l = lists();
        Condition::parse(t, &|n| l.contains(n))
    }

    fn facts() -> Facts {
        Facts {
            client_ip: Some("10.1.1.1".parse().unwrap()),
            listener: "submission".into(),
            user: Some("Alice".into()),
            sender: Some("alice@example.org".into()),
            recipient: Some("Postmaster@example.com".into()),
            ..Facts::default()
        }
    }

    #[test]
    fn evaluates() {
        let f = facts();
        let l = lists();
        let t = |s: &str| parse(s).unwrap().eval(&f, &l);
        assert!(t("authenticated"));
        assert!(!t("!authenticated"));
        assert!(t("client_ip in trusted"));
        assert!(t("user in vip && listener == \"submission\""));
        assert!(t("listener == \"submission\""));
        assert!(!t("listener != \"submission\""));
        assert!(t("recipient in postmaster"));
        assert!(!t("!(client_ip in trusted) && !(recipient in postmaster)"));
        assert!(t("false || tls || (true && !bounce)"));
        assert!(!t("bounce"));
        assert!(t("sender_domain == \"EXAMPLE.org\""));
        // && binds tighter than ||.
        assert!(t("true || false && false"));
        assert!(!t("(true || false) && false"));
    }

    #[test]
    fn bounces() {
        assert!(is_bounce(""));
        assert!(is_bounce("MAILER-DAEMON@x.org"));
        assert!(is_bounce("postmaster@x"));
        assert!(!is_bounce("post@x"));
        let mut f = facts();
        assert!(f.user.is_some() && !parse("bounce").unwrap().eval(&f, &lists()));
        f.sender = Some(String::new());
        assert!(parse("bounce").unwrap().eval(&f, &lists()));
        // Missing values are never in a list.
        f.recipient = None;
        assert!(!parse("recipient in postmaster").unwrap().eval(&f, &lists()));
    }

    #[test]
    fn errors_say_where() {
        let e = parse("authenticated && client_ip in nowhere").unwrap_err();
        assert_eq!(e.at, 30);
        assert!(e.message.contains("no list called `nowhere`"), "{e}");
        assert_eq!(parse("authenticatd").unwrap_err().at, 0);
        assert_eq!(parse("(tls").unwrap_err().at, 4);
        assert_eq!(parse("tls tls").unwrap_err().at, 4);
        assert!(parse("").is_err());
        assert!(parse("tls & tls").is_err());
        assert!(parse("user ==").is_err());
        assert!(parse("user in").is_err());
        assert!(parse("helo == \"x").is_err());
        // Text on the right of == and != must be quoted.
        let e = parse("authenticated && listener == submission").unwrap_err();
        assert_eq!(e.at, 29);
        assert!(
            e.message.contains("`submission` after `==` is not quoted"),
            "{e}"
        );
        assert!(e.message.contains("listener == \"submission\""), "{e}");
        let e = parse("user != admin.example").unwrap_err();
        assert_eq!(e.at, 8);
        assert!(e.message.contains("`user != \"admin.example\"`"), "{e}");
        assert!(parse("helo == usr").is_err());
        assert!(parse(&"!".repeat(100)).is_err());
        assert!(parse(&format!("{}tls{}", "(".repeat(100), ")".repeat(100))).is_err());
    }

    fn arb_cond() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("true".to_string()),
            Just("false".to_string()),
            Just("authenticated".to_string()),
            Just("tls".to_string()),
            Just("client_ip in trusted".to_string()),
            Just("user == \"alice\"".to_string()),
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                inner.clone().prop_map(|c| format!("!({c})")),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) && ({b})")),
                (inner.clone(), inner).prop_map(|(a, b)| format!("({a}) || ({b})")),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,60}") {
            let _ = parse(&s);
        }

        /// A bare word after == or != is refused at the word, whatever the word; the same
        /// text quoted is accepted.
        #[test]
        fn unquoted_text_is_refused(
            subject in prop_oneof![Just("user"), Just("listener"), Just("helo"), Just("client_ip")],
            ne in any::<bool>(),
            word in "[a-zA-Z0-9_.@-]{1,20}",
        ) {
            prop_assume!(Subject::parse(&word).is_none());
            let op = if ne { "!=" } else { "==" };
            let text = format!("tls && {subject} {op} {word}");
            let e = parse(&text).unwrap_err();
            prop_assert_eq!(e.at, text.len() - word.len());
            prop_assert!(e.message.contains("is not quoted"), "{}", e);
            let quoted = format!("tls && {subject} {op} \"{word}\"");
            prop_assert!(parse(&quoted).is_ok());
        }

        #[test]
        fn negation_flips(c in arb_cond()) {
            let f = facts();
            let l = lists();
            let a = parse(&c).unwrap().eval(&f, &l);
            let b = parse(&format!("!({c})")).unwrap().eval(&f, &l);
            prop_assert_eq!(a, !b);
        }

        #[test]
        fn de_morgan(a in arb_cond(), b in arb_cond()) {
            let f = facts();
            let l = lists();
            let x = parse(&format!("!(({a}) && ({b}))")).unwrap().eval(&f, &l);
            let y = parse(&format!("!({a}) || !({b})")).unwrap().eval(&f, &l);
            prop_assert_eq!(x, y);
        }
    }
}
