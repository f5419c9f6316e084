//! The SMTP access policy delegation protocol (Postfix's `SMTPD_POLICY_README`).
//!
//! A request is a run of `name=value` lines ended by an empty line; the answer is one
//! `action=…` line and an empty line; the connection then carries the next request. Lines
//! end in LF (a CR before it is dropped too). Unknown attributes are kept but mean nothing
//! here, as the protocol asks; a value may hold `=`.

use std::net::IpAddr;
use std::ops::Range;
use thiserror::Error;

/// Most octets of one attribute line, its end included. Postfix's longest attributes (a
/// client certificate's subject or issuer, an address in SMTPUTF8) stay far below it.
pub const MAX_LINE: usize = 8 * 1024;
/// Most attributes of one request. Postfix 3.x sends about 30.
pub const MAX_ATTRIBUTES: usize = 128;

/// A request that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    /// A line longer than [`MAX_LINE`].
    #[error("policy request line longer than {MAX_LINE} octets")]
    LineTooLong,
    /// A line without `=`.
    #[error("policy request line without '=': {0:?}")]
    NoEquals(String),
    /// A line whose name is empty (`=value`).
    #[error("policy request attribute without a name")]
    EmptyName,
    /// More than [`MAX_ATTRIBUTES`] lines before the empty line.
    #[error("policy request with more than {MAX_ATTRIBUTES} attributes")]
    TooManyAttributes,
}

/// Postfix's `protocol_state`: the SMTP command the request is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolState {
    /// `CONNECT` (`smtpd_client_restrictions`).
    Connect,
    /// `EHLO` or `HELO` (`smtpd_helo_restrictions`).
    Helo,
    /// `MAIL` (`smtpd_sender_restrictions`).
    Mail,
    /// `RCPT` (`smtpd_recipient_restrictions`, `smtpd_relay_restrictions`).
    Rcpt,
    /// `DATA` (`smtpd_data_restrictions`): every recipient is known.
    Data,
    /// `END-OF-MESSAGE` (`smtpd_end_of_data_restrictions`): the size is known.
    EndOfMessage,
    /// `VRFY` (`smtpd_recipient_restrictions` for VRFY).
    Vrfy,
    /// `ETRN` (`smtpd_etrn_restrictions`).
    Etrn,
}

impl ProtocolState {
    /// The state a `protocol_state` value names, in any case.
    pub fn parse(value: &str) -> Option<ProtocolState> {
        const NAMES: [(&str, ProtocolState); 9] = [
            ("CONNECT", ProtocolState::Connect),
            ("EHLO", ProtocolState::Helo),
            ("HELO", ProtocolState::Helo),
            ("MAIL", ProtocolState::Mail),
            ("RCPT", ProtocolState::Rcpt),
            ("DATA", ProtocolState::Data),
            ("END-OF-MESSAGE", ProtocolState::EndOfMessage),
            ("VRFY", ProtocolState::Vrfy),
            ("ETRN", ProtocolState::Etrn),
        ];
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(value))
            .map(|&(_, s)| s)
    }
}

/// The attributes floodgate reads, found without a search.
const KNOWN: [&str; 14] = [
    "request",
    "protocol_state",
    "client_address",
    "client_port",
    "client_name",
    "helo_name",
    "sasl_username",
    "sender",
    "recipient",
    "recipient_count",
    "size",
    "queue_id",
    "instance",
    "encryption_protocol",
];

/// The place of `name` in [`KNOWN`]; most names Postfix sends are not there, and are told
/// apart by their length first.
fn known(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"request" => 0,
        b"protocol_state" => 1,
        b"client_address" => 2,
        b"client_port" => 3,
        b"client_name" => 4,
        b"helo_name" => 5,
        b"sasl_username" => 6,
        b"sender" => 7,
        b"recipient" => 8,
        b"recipient_count" => 9,
        b"size" => 10,
        b"queue_id" => 11,
        b"instance" => 12,
        b"encryption_protocol" => 13,
        _ => return None,
    })
}

/// One policy request: its attributes in the order they came, their names and values
/// one after another in one text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRequest {
    text: String,
    /// Each attribute's name and value, as ranges of `text`.
    attributes: Vec<(Range<usize>, Range<usize>)>,
    /// The last attribute of each [`KNOWN`] name, by its place in `attributes`.
    known: [Option<u8>; KNOWN.len()],
}

impl PolicyRequest {
    /// `raw`'s attributes at `attributes` (ranges of name and value), each name of
    /// [`KNOWN`] at its place in `known`: as they are when `raw` is UTF-8, else each part
    /// with invalid octets replaced.
    fn of(
        raw: Vec<u8>,
        attributes: Vec<(Range<usize>, Range<usize>)>,
        known: [Option<u8>; KNOWN.len()],
    ) -> PolicyRequest {
        match String::from_utf8(raw) {
            // Every range starts and ends at an '=' or at a line's ends: at characters.
            Ok(text) => PolicyRequest {
                text,
                attributes,
                known,
            },
            Err(e) => {
                let raw = e.into_bytes();
                let mut text = String::with_capacity(raw.len() + 16);
                let mut lossy = Vec::with_capacity(attributes.len());
                for (n, v) in attributes {
                    let n0 = text.len();
                    text.push_str(&String::from_utf8_lossy(&raw[n]));
                    let v0 = text.len();
                    text.push_str(&String::from_utf8_lossy(&raw[v]));
                    lossy.push((n0..v0, v0..text.len()));
                }
                PolicyRequest {
                    text,
                    attributes: lossy,
                    known,
                }
            }
        }
    }

    /// The value of attribute `name` (the last one, should it come twice); an empty value
    /// is `Some("")`, as Postfix sends `sasl_username=` for a client without AUTH.
    pub fn get(&self, name: &str) -> Option<&str> {
        let value = match known(name.as_bytes()) {
            Some(k) => &self.attributes[usize::from(self.known[k]?)].1,
            None => {
                &self
                    .attributes
                    .iter()
                    .rev()
                    .find(|(n, _)| &self.text[n.clone()] == name)?
                    .1
            }
        };
        Some(&self.text[value.clone()])
    }

    /// The value of `name` when it is present and not empty.
    pub fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }

    /// Every attribute in order.
    pub fn attributes(&self) -> impl Iterator<Item = (&str, &str)> {
        self.attributes
            .iter()
            .map(|(n, v)| (&self.text[n.clone()], &self.text[v.clone()]))
    }

    /// Whether this is an access policy request (`request=smtpd_access_policy`).
    pub fn is_access_policy(&self) -> bool {
        self.get("request") == Some("smtpd_access_policy")
    }

    /// `protocol_state`, when it names a state.
    pub fn protocol_state(&self) -> Option<ProtocolState> {
        self.get("protocol_state").and_then(ProtocolState::parse)
    }

    /// `client_address`, when it is an address (Postfix sends `unknown` when it has none).
    pub fn client_address(&self) -> Option<IpAddr> {
        self.get("client_address")?.parse().ok()
    }

    /// `client_port`, when it is a port.
    pub fn client_port(&self) -> Option<u16> {
        self.get("client_port")?.parse().ok()
    }

    /// `client_name`, unless Postfix has none (`unknown`).
    pub fn client_name(&self) -> Option<&str> {
        self.non_empty("client_name").filter(|n| *n != "unknown")
    }

    /// `sasl_username`: the login the client authenticated as, when it did.
    pub fn sasl_username(&self) -> Option<&str> {
        self.non_empty("sasl_username")
    }

    /// `recipient_count`: recipients accepted so far (0 before DATA; the count at DATA and
    /// END-OF-MESSAGE).
    pub fn recipient_count(&self) -> Option<u32> {
        self.get("recipient_count")?.parse().ok()
    }

    /// `size`: the message size the client announced (MAIL SIZE=) or, at
    /// END-OF-MESSAGE, the size received.
    pub fn size(&self) -> Option<u64> {
        self.get("size")?.parse().ok()
    }

    /// `instance`: one value for every request of one message.
    pub fn instance(&self) -> Option<&str> {
        self.non_empty("instance")
    }
}

/// Reads requests line by line: each line (without its LF) goes to [`RequestReader::line`],
/// which answers the request when the line is the empty one that ends it. The request's
/// octets are kept as they come and read as text once, when it ends.
#[derive(Debug, Default)]
pub struct RequestReader {
    /// The names and values read so far, one after another, as received.
    raw: Vec<u8>,
    /// Each attribute's name and value, as ranges of `raw`.
    attributes: Vec<(Range<usize>, Range<usize>)>,
    /// The last attribute of each [`KNOWN`] name, by its place in `attributes`.
    known: [Option<u8>; KNOWN.len()],
}

impl RequestReader {
    /// Takes one line (its LF left off; a CR before it is dropped here). An error leaves
    /// the reader at the start of a new request: the caller answers or closes.
    pub fn line(&mut self, line: &[u8]) -> Result<Option<PolicyRequest>, PolicyError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            // The next request gets the room this one took.
            let (octets, count) = (self.raw.len(), self.attributes.len());
            let raw = std::mem::replace(&mut self.raw, Vec::with_capacity(octets));
            let attributes = std::mem::replace(&mut self.attributes, Vec::with_capacity(count));
            let known = std::mem::take(&mut self.known);
            return Ok(Some(PolicyRequest::of(raw, attributes, known)));
        }
        let result = self.attribute(line);
        if result.is_err() {
            self.raw.clear();
            self.attributes.clear();
            self.known = Default::default();
        }
        result.map(|()| None)
    }

    fn attribute(&mut self, line: &[u8]) -> Result<(), PolicyError> {
        if line.len() + 1 > MAX_LINE {
            return Err(PolicyError::LineTooLong);
        }
        if self.attributes.len() >= MAX_ATTRIBUTES {
            return Err(PolicyError::TooManyAttributes);
        }
        // Names are short: a plain search beats a vectorised one here.
        let Some(eq) = line.iter().position(|&b| b == b'=') else {
            return Err(PolicyError::NoEquals(
                String::from_utf8_lossy(&line[..line.len().min(64)]).into_owned(),
            ));
        };
        if eq == 0 {
            return Err(PolicyError::EmptyName);
        }
        let start = self.raw.len();
        self.raw.extend_from_slice(line);
        if let Some(k) = known(&line[..eq]) {
            // At most MAX_ATTRIBUTES (128) attributes: the place fits an octet.
            self.known[k] = u8::try_from(self.attributes.len()).ok();
        }
        self.attributes
            .push((start..start + eq, start + eq + 1..self.raw.len()));
        Ok(())
    }

    /// Whether a request is under way (some of its lines read).
    pub fn in_request(&self) -> bool {
        !self.attributes.is_empty()
    }
}

/// An access(5) action, the answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyAction {
    /// `DUNNO`: no opinion; Postfix goes on with its other restrictions.
    Dunno,
    /// `OK`: accept (rarely right for a limiter: it skips the restrictions after it).
    Ok,
    /// `DEFER_IF_PERMIT text`: a 450 unless a later restriction rejects anyway.
    DeferIfPermit(String),
    /// `DEFER text`: a 450 at once.
    Defer(String),
    /// `REJECT text`: a 554 (5xx).
    Reject(String),
    /// `4NN text` or `5NN text`: that code and text.
    Code(u16, String),
    /// `HOLD text`: the whole message goes to Postfix's hold queue.
    Hold(String),
    /// `PREPEND name: value`: a header field added to the message.
    Prepend(String),
    /// `WARN text`: a warning in Postfix's log, nothing else.
    Warn(String),
    /// `INFO text`: an informational line in Postfix's log.
    Info(String),
}

/// Most octets of an action's text; Postfix truncates SMTP replies near 512 anyway.
pub const MAX_TEXT: usize = 400;

/// `text` as one line: control characters as spaces, runs of spaces as one, trimmed, at
/// most [`MAX_TEXT`] octets (at a character boundary).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_TEXT));
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if c == ' ' && (out.is_empty() || out.ends_with(' ')) {
            continue;
        }
        if out.len() + c.len_utf8() > MAX_TEXT {
            break;
        }
        out.push(c);
    }
    out.truncate(out.trim_end().len());
    out
}

impl PolicyAction {
    /// The answer on the wire: `action=…`, LF, and the empty line that ends it.
    pub fn encode(&self) -> String {
        let (word, text) = match self {
            PolicyAction::Dunno => ("DUNNO", None),
            PolicyAction::Ok => ("OK", None),
            PolicyAction::DeferIfPermit(t) => ("DEFER_IF_PERMIT", Some(t)),
            PolicyAction::Defer(t) => ("DEFER", Some(t)),
            PolicyAction::Reject(t) => ("REJECT", Some(t)),
            PolicyAction::Code(code, t) => {
                let code = (*code).clamp(400, 599);
                return wire(&code.to_string(), Some(t));
            }
            PolicyAction::Hold(t) => ("HOLD", Some(t)),
            PolicyAction::Prepend(t) => ("PREPEND", Some(t)),
            PolicyAction::Warn(t) => ("WARN", Some(t)),
            PolicyAction::Info(t) => ("INFO", Some(t)),
        };
        wire(word, text)
    }
}

/// `action=WORD text`, LF and the empty line; the text as [`one_line`] makes it, left out
/// when empty.
fn wire(word: &str, text: Option<&String>) -> String {
    let text = text.map(|t| one_line(t)).filter(|t| !t.is_empty());
    let mut out =
        String::with_capacity(7 + word.len() + text.as_ref().map_or(0, |t| t.len() + 1) + 2);
    out.push_str("action=");
    out.push_str(word);
    if let Some(t) = text {
        out.push(' ');
        out.push_str(&t);
    }
    out.push_str("\n\n");
    out
}

#[cfg(test)]
mod tests;
