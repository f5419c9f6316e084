//! Strict RFC 5321 command parser for one framed line (without CRLF), and
//! the canonical wire form floodgate writes upstream.
//!
//! Accepted leniencies, all erased by [`Command::to_wire`]: verbs in any
//! case, trailing spaces, `MAIL FROM: <path>` with one space before `<`,
//! runs of spaces between MAIL/RCPT parameters, and source routes (dropped,
//! see [`crate::smtp::address`]). Everything else that RFC 5321 does not
//! allow is refused with the reply RFC 5321 names for it.

use super::address::{AddressError, AddressRole, Path};
use super::reply::Reply;
use thiserror::Error;

/// A parsed client command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `HELO domain`.
    Helo(String),
    /// `EHLO domain`.
    Ehlo(String),
    /// `MAIL FROM:<path> [params]`.
    Mail(MailFrom),
    /// `RCPT TO:<path> [params]`.
    Rcpt(RcptTo),
    /// `DATA`.
    Data,
    /// `BDAT size [LAST]` (RFC 3030).
    Bdat {
        /// Octets of the chunk that follows the command line.
        size: u64,
        /// Whether this is the last chunk.
        last: bool,
    },
    /// `RSET`.
    Rset,
    /// `NOOP [string]` (the string is dropped).
    Noop,
    /// `QUIT`.
    Quit,
    /// `HELP [string]` (the string is dropped).
    Help,
    /// `VRFY string`.
    Vrfy(String),
    /// `EXPN string`.
    Expn(String),
    /// `STARTTLS` (RFC 3207).
    StartTls,
    /// `AUTH mechanism [initial-response]` (RFC 4954).
    Auth {
        /// Mechanism name, upper-cased.
        mechanism: String,
        /// Base64 initial response; an empty one is kept as `"="`.
        initial: Option<String>,
    },
    /// A syntactically valid verb floodgate does not implement (upper-cased),
    /// to be answered with `502 5.5.1`. Its arguments are dropped; the wire
    /// form is only the verb.
    Unknown(String),
}

/// Arguments of `MAIL FROM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailFrom {
    /// The reverse-path; null for `<>`.
    pub sender: Path,
    /// ESMTP parameters in the order given.
    pub params: Vec<Param>,
}

/// Arguments of `RCPT TO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RcptTo {
    /// The forward-path.
    pub recipient: Path,
    /// ESMTP parameters in the order given.
    pub params: Vec<Param>,
}

/// One ESMTP parameter `keyword[=value]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Keyword, upper-cased.
    pub keyword: String,
    /// Value as written.
    pub value: Option<String>,
}

impl Param {
    /// The value of the parameter named `keyword` (upper case) in `params`.
    pub fn find<'a>(params: &'a [Param], keyword: &str) -> Option<&'a Param> {
        params.iter().find(|p| p.keyword == keyword)
    }
}

/// Why a command line was refused. Each variant knows its reply.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CommandError {
    /// An empty line.
    #[error("empty command line")]
    Empty,
    /// NUL or another control character in the line.
    #[error("control character in command line")]
    ControlChar,
    /// The line is not UTF-8.
    #[error("command line is not valid UTF-8")]
    InvalidUtf8,
    /// The verb is missing or contains characters other than letters, digits, '-'.
    #[error("malformed command verb")]
    BadVerb,
    /// The framer reported [`crate::smtp::line::LineEvent::TooLong`].
    #[error("command line too long")]
    LineTooLong,
    /// A SASL response line was over the RFC 4954 limit.
    #[error("authentication line too long")]
    AuthLineTooLong,
    /// The framer reported [`crate::smtp::line::LineEvent::BareLineEnding`].
    #[error("bare CR or LF in command line")]
    BareLineEnding,
    /// Wrong arguments for a known verb.
    #[error("syntax error, expected {usage}")]
    Syntax {
        /// The expected form, e.g. `"MAIL FROM:<address>"`.
        usage: &'static str,
    },
    /// Arguments given to a verb that takes none.
    #[error("{verb} takes no arguments")]
    UnexpectedArgument {
        /// The verb.
        verb: &'static str,
    },
    /// A malformed envelope address.
    #[error("bad {role} address: {error}")]
    Address {
        /// Sender or recipient.
        role: AddressRole,
        /// What is wrong.
        error: AddressError,
    },
    /// A malformed MAIL/RCPT parameter.
    #[error("malformed parameter {0:?}")]
    BadParameter(String),
}

impl CommandError {
    /// The reply floodgate gives the client for this error.
    pub fn reply(&self) -> Reply {
        match self {
            CommandError::Empty | CommandError::BadVerb => {
                Reply::new(500, "5.5.2 Syntax error, command unrecognized")
            }
            CommandError::ControlChar => {
                Reply::new(500, "5.5.2 Syntax error, control character in command")
            }
            CommandError::InvalidUtf8 => Reply::new(500, "5.5.2 Syntax error, invalid UTF-8"),
            CommandError::LineTooLong => Reply::new(500, "5.5.2 Line too long"),
            CommandError::AuthLineTooLong => {
                Reply::new(500, "5.5.6 Authentication exchange line is too long")
            }
            CommandError::BareLineEnding => {
                Reply::new(500, "5.5.2 Syntax error, bare <CR> or <LF> received")
            }
            CommandError::Syntax { usage } => Reply::new(501, format!("5.5.4 Syntax: {usage}")),
            CommandError::UnexpectedArgument { verb } => {
                Reply::new(501, format!("5.5.4 Syntax: {verb} takes no arguments"))
            }
            CommandError::Address { role, error } => {
                let detail = match role {
                    AddressRole::Sender => "5.1.7",
                    AddressRole::Recipient => "5.1.3",
                };
                Reply::new(553, format!("{detail} Bad {role} address syntax: {error}"))
            }
            CommandError::BadParameter(_) => {
                Reply::new(555, "5.5.4 Malformed or unsupported parameter")
            }
        }
    }
}

/// Parses one command line (without its CRLF).
pub fn parse_command(line: &[u8]) -> Result<Command, CommandError> {
    if line.is_empty() {
        return Err(CommandError::Empty);
    }
    if line.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Err(CommandError::ControlChar);
    }
    let s = std::str::from_utf8(line).map_err(|_| CommandError::InvalidUtf8)?;
    let s = s.trim_end_matches(' ');
    let (verb, rest) = match s.split_once(' ') {
        Some((v, r)) => (v, Some(r)),
        None => (s, None),
    };
    if verb.is_empty() || !verb.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(CommandError::BadVerb);
    }
    // The verb upper-cased on the stack (it is ASCII, checked above): every known verb fits,
    // and only an unknown one is kept as a String.
    let mut stack = [0u8; 8];
    let upper = match stack.get_mut(..verb.len()) {
        Some(buf) => {
            buf.copy_from_slice(verb.as_bytes());
            buf.make_ascii_uppercase();
            std::str::from_utf8(buf).unwrap_or("")
        }
        None => "",
    };
    let no_args = |cmd: Command, verb: &'static str| match rest {
        None => Ok(cmd),
        Some(_) => Err(CommandError::UnexpectedArgument { verb }),
    };
    match upper {
        "HELO" => hello_arg(rest, "HELO domain").map(Command::Helo),
        "EHLO" => hello_arg(rest, "EHLO domain").map(Command::Ehlo),
        "MAIL" => {
            let (sender, params) = envelope(rest, "FROM:", AddressRole::Sender)?;
            Ok(Command::Mail(MailFrom { sender, params }))
        }
        "RCPT" => {
            let (recipient, params) = envelope(rest, "TO:", AddressRole::Recipient)?;
            Ok(Command::Rcpt(RcptTo { recipient, params }))
        }
        "DATA" => no_args(Command::Data, "DATA"),
        "RSET" => no_args(Command::Rset, "RSET"),
        "QUIT" => no_args(Command::Quit, "QUIT"),
        "STARTTLS" => no_args(Command::StartTls, "STARTTLS"),
        "NOOP" => Ok(Command::Noop),
        "HELP" => Ok(Command::Help),
        "VRFY" => string_arg(rest, "VRFY string").map(Command::Vrfy),
        "EXPN" => string_arg(rest, "EXPN string").map(Command::Expn),
        "BDAT" => bdat(rest),
        "AUTH" => auth(rest),
        _ => Ok(Command::Unknown(verb.to_ascii_uppercase())),
    }
}

/// The single domain / address-literal argument of HELO and EHLO. Only its
/// shape is checked (one token), as Postfix does; the name is policy.
fn hello_arg(rest: Option<&str>, usage: &'static str) -> Result<String, CommandError> {
    match rest {
        Some(a) if !a.is_empty() && !a.contains(' ') => Ok(a.to_string()),
        _ => Err(CommandError::Syntax { usage }),
    }
}

fn string_arg(rest: Option<&str>, usage: &'static str) -> Result<String, CommandError> {
    match rest {
        Some(a) if !a.trim_start_matches(' ').is_empty() => Ok(a.to_string()),
        _ => Err(CommandError::Syntax { usage }),
    }
}

fn bdat(rest: Option<&str>) -> Result<Command, CommandError> {
    const USAGE: &str = "BDAT size [LAST]";
    let syntax = CommandError::Syntax { usage: USAGE };
    let rest = rest.ok_or(syntax.clone())?;
    let (num, last) = match rest.split_once(' ') {
        None => (rest, false),
        Some((n, l)) if l.eq_ignore_ascii_case("LAST") => (n, true),
        Some(_) => return Err(syntax),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(syntax);
    }
    let size = num.parse::<u64>().map_err(|_| syntax)?;
    Ok(Command::Bdat { size, last })
}

fn auth(rest: Option<&str>) -> Result<Command, CommandError> {
    let syntax = CommandError::Syntax {
        usage: "AUTH mechanism [initial-response]",
    };
    let rest = rest.ok_or(syntax.clone())?;
    let (mech, initial) = match rest.split_once(' ') {
        None => (rest, None),
        Some((m, i)) => (m, Some(i)),
    };
    // RFC 4422 sasl-mech: 1*20 of upper-case letters, digits, '-', '_'.
    let mech_ok = (1..=20).contains(&mech.len())
        && mech
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !mech_ok {
        return Err(syntax);
    }
    if let Some(i) = initial {
        let b64 = |b: u8| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=';
        if i.is_empty() || !i.bytes().all(b64) {
            return Err(syntax);
        }
    }
    Ok(Command::Auth {
        mechanism: mech.to_ascii_uppercase(),
        initial: initial.map(str::to_string),
    })
}

/// Parses `FROM:<path> params` / `TO:<path> params`.
fn envelope(
    rest: Option<&str>,
    keyword: &str,
    role: AddressRole,
) -> Result<(Path, Vec<Param>), CommandError> {
    let usage = match role {
        AddressRole::Sender => "MAIL FROM:<address>",
        AddressRole::Recipient => "RCPT TO:<address>",
    };
    let syntax = CommandError::Syntax { usage };
    let rest = rest.ok_or(syntax.clone())?;
    let head = rest.get(..keyword.len()).ok_or(syntax.clone())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return Err(syntax);
    }
    let after = &rest[keyword.len()..];
    let after = after.strip_prefix(' ').unwrap_or(after);
    let inner_start = after.strip_prefix('<').ok_or(syntax.clone())?;
    let close = closing_bracket(inner_start).ok_or(syntax.clone())?;
    let path = Path::parse(&inner_start[..close], role)
        .map_err(|error| CommandError::Address { role, error })?;
    let tail = &inner_start[close + 1..];
    let params = match tail {
        "" => Vec::new(),
        t if t.starts_with(' ') => parse_params(t)?,
        _ => return Err(syntax),
    };
    Ok((path, params))
}

/// Index of the '>' closing a path, skipping quoted strings of the local part.
fn closing_bracket(s: &str) -> Option<usize> {
    let mut in_quote = false;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_quote => escaped = true,
            b'"' => in_quote = !in_quote,
            b'>' if !in_quote => return Some(i),
            _ => {}
        }
    }
    None
}

/// `esmtp-param *(SP esmtp-param)`; runs of spaces are tolerated.
fn parse_params(s: &str) -> Result<Vec<Param>, CommandError> {
    let mut out = Vec::new();
    for tok in s.split(' ').filter(|t| !t.is_empty()) {
        let bad = || CommandError::BadParameter(tok.to_string());
        let (kw, value) = match tok.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (tok, None),
        };
        let kw_ok = kw.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && kw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !kw_ok {
            return Err(bad());
        }
        if let Some(v) = value {
            // esmtp-value = 1*(%d33-60 / %d62-126), plus UTF-8 (RFC 6531).
            if v.is_empty() || v.contains('=') {
                return Err(bad());
            }
        }
        out.push(Param {
            keyword: kw.to_ascii_uppercase(),
            value: value.map(str::to_string),
        });
    }
    Ok(out)
}

fn push_params(out: &mut Vec<u8>, params: &[Param]) {
    for p in params {
        out.push(b' ');
        out.extend_from_slice(p.keyword.as_bytes());
        if let Some(v) = &p.value {
            out.push(b'=');
            out.extend_from_slice(v.as_bytes());
        }
    }
}

impl Command {
    /// Canonical wire form, ending in exactly CRLF: what floodgate writes
    /// upstream. Parsing it again (without the CRLF) gives back `self` for
    /// every command [`parse_command`] produces.
    pub fn to_wire(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.write_wire(&mut out);
        out
    }

    /// Appends [`to_wire`](Self::to_wire)'s bytes to `out` (the session reuses one buffer
    /// per upstream connection, so relaying a command allocates nothing).
    pub fn write_wire(&self, out: &mut Vec<u8>) {
        let simple = |out: &mut Vec<u8>, verb: &str, arg: &str| {
            out.extend_from_slice(verb.as_bytes());
            out.push(b' ');
            out.extend_from_slice(arg.as_bytes());
        };
        match self {
            Command::Helo(d) => simple(out, "HELO", d),
            Command::Ehlo(d) => simple(out, "EHLO", d),
            Command::Mail(m) => {
                out.extend_from_slice(b"MAIL FROM:<");
                out.extend_from_slice(m.sender.as_str().as_bytes());
                out.push(b'>');
                push_params(out, &m.params);
            }
            Command::Rcpt(r) => {
                out.extend_from_slice(b"RCPT TO:<");
                out.extend_from_slice(r.recipient.as_str().as_bytes());
                out.push(b'>');
                push_params(out, &r.params);
            }
            Command::Data => out.extend_from_slice(b"DATA"),
            Command::Bdat { size, last } => {
                out.extend_from_slice(format!("BDAT {size}").as_bytes());
                if *last {
                    out.extend_from_slice(b" LAST");
                }
            }
            Command::Rset => out.extend_from_slice(b"RSET"),
            Command::Noop => out.extend_from_slice(b"NOOP"),
            Command::Quit => out.extend_from_slice(b"QUIT"),
            Command::Help => out.extend_from_slice(b"HELP"),
            Command::Vrfy(s) => simple(out, "VRFY", s),
            Command::Expn(s) => simple(out, "EXPN", s),
            Command::StartTls => out.extend_from_slice(b"STARTTLS"),
            Command::Auth { mechanism, initial } => {
                out.extend_from_slice(b"AUTH ");
                out.extend_from_slice(mechanism.as_bytes());
                if let Some(i) = initial {
                    out.push(b' ');
                    out.extend_from_slice(i.as_bytes());
                }
            }
            Command::Unknown(v) => out.extend_from_slice(v.as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }

    /// Whether RFC 2920 requires this command to be the last of a pipelined
    /// group (so the server should flush its replies after it).
    ///
    /// MAIL, RCPT, RSET and BDAT may be followed by more commands; so may
    /// AUTH with an initial response for a one-round-trip mechanism (PLAIN,
    /// EXTERNAL; RFC 4954 §4). Everything else ends a group.
    pub fn ends_group(&self) -> bool {
        match self {
            Command::Mail(_) | Command::Rcpt(_) | Command::Rset | Command::Bdat { .. } => false,
            Command::Auth {
                mechanism,
                initial: Some(_),
            } => !matches!(mechanism.as_str(), "PLAIN" | "EXTERNAL"),
            _ => true,
        }
    }

    /// The verb of this command in upper case, for logs, metrics and policy facts; every
    /// unrecognised verb is `UNKNOWN` (client text must not become a metric label).
    pub fn verb(&self) -> &'static str {
        match self {
            Command::Helo(_) => "HELO",
            Command::Ehlo(_) => "EHLO",
            Command::Mail(_) => "MAIL",
            Command::Rcpt(_) => "RCPT",
            Command::Data => "DATA",
            Command::Bdat { .. } => "BDAT",
            Command::Rset => "RSET",
            Command::Noop => "NOOP",
            Command::Quit => "QUIT",
            Command::Help => "HELP",
            Command::Vrfy(_) => "VRFY",
            Command::Expn(_) => "EXPN",
            Command::StartTls => "STARTTLS",
            Command::Auth { .. } => "AUTH",
            Command::Unknown(_) => "UNKNOWN",
        }
    }
}

#[cfg(test)]
mod tests;
