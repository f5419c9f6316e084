//! The milter protocol (sendmail's libmilter protocol, version 6, as Postfix speaks it for
//! `smtpd_milters` and `non_smtpd_milters`).
//!
//! Every packet is a 4-octet big-endian length, one command octet and its data; the length
//! counts the command octet and the data. The MTA sends commands ([`Command`]); the filter
//! answers the ones that want an answer ([`Response`]). The first exchange is the option
//! negotiation ([`negotiate`]): which version, which actions the filter may take, which
//! protocol steps the MTA may leave out or not wait for, and (version 6) which macros the
//! filter wants at each stage.
//!
//! Strings in commands are NUL-terminated octets; they are handed over as octets, since
//! Postfix passes what the client sent (SMTPUTF8 or not).

use std::net::IpAddr;
use thiserror::Error;

/// The protocol version floodgate speaks.
pub const VERSION: u32 = 6;
/// The oldest version an MTA may offer: version 2 brought the option negotiation as
/// floodgate reads it.
pub const OLDEST_VERSION: u32 = 2;
/// Most octets of one packet's data. Postfix sends bodies in chunks of at most 65,535
/// octets and headers of at most `header_size_limit` (102,400 by default).
pub const MAX_DATA: usize = 1024 * 1024;

/// Actions a filter may ask for (`SMFIF_*`).
pub mod actions {
    /// Add header fields (`SMFIF_ADDHDRS`).
    pub const ADD_HEADERS: u32 = 0x01;
    /// Replace the body (`SMFIF_CHGBODY`).
    pub const CHANGE_BODY: u32 = 0x02;
    /// Add recipients (`SMFIF_ADDRCPT`).
    pub const ADD_RECIPIENT: u32 = 0x04;
    /// Delete recipients (`SMFIF_DELRCPT`).
    pub const DELETE_RECIPIENT: u32 = 0x08;
    /// Change or delete header fields (`SMFIF_CHGHDRS`).
    pub const CHANGE_HEADERS: u32 = 0x10;
    /// Quarantine the message: Postfix's hold queue (`SMFIF_QUARANTINE`).
    pub const QUARANTINE: u32 = 0x20;
    /// Change the envelope sender (`SMFIF_CHGFROM`).
    pub const CHANGE_FROM: u32 = 0x40;
    /// Add recipients with ESMTP arguments (`SMFIF_ADDRCPT_PAR`).
    pub const ADD_RECIPIENT_PAR: u32 = 0x80;
    /// Choose the macros of each stage (`SMFIF_SETSYMLIST`).
    pub const SET_MACRO_LIST: u32 = 0x100;
}

/// Protocol steps (`SMFIP_*`): what the MTA may leave out, and what it need not wait for.
pub mod steps {
    /// No connect event (`SMFIP_NOCONNECT`).
    pub const NO_CONNECT: u32 = 0x01;
    /// No HELO event (`SMFIP_NOHELO`).
    pub const NO_HELO: u32 = 0x02;
    /// No MAIL event (`SMFIP_NOMAIL`).
    pub const NO_MAIL: u32 = 0x04;
    /// No RCPT events (`SMFIP_NORCPT`).
    pub const NO_RCPT: u32 = 0x08;
    /// No body (`SMFIP_NOBODY`).
    pub const NO_BODY: u32 = 0x10;
    /// No header fields (`SMFIP_NOHDRS`).
    pub const NO_HEADERS: u32 = 0x20;
    /// No end of headers (`SMFIP_NOEOH`).
    pub const NO_END_OF_HEADERS: u32 = 0x40;
    /// No answer to header fields (`SMFIP_NR_HDR`).
    pub const NO_REPLY_HEADER: u32 = 0x80;
    /// No unknown commands (`SMFIP_NOUNKNOWN`).
    pub const NO_UNKNOWN: u32 = 0x100;
    /// No DATA event (`SMFIP_NODATA`).
    pub const NO_DATA: u32 = 0x200;
    /// The MTA understands a skip answer (`SMFIP_SKIP`).
    pub const SKIP: u32 = 0x400;
    /// Recipients the MTA rejected are sent too (`SMFIP_RCPT_REJ`).
    pub const RCPT_REJECTED: u32 = 0x800;
    /// No answer to connect (`SMFIP_NR_CONN`).
    pub const NO_REPLY_CONNECT: u32 = 0x1000;
    /// No answer to HELO (`SMFIP_NR_HELO`).
    pub const NO_REPLY_HELO: u32 = 0x2000;
    /// No answer to MAIL (`SMFIP_NR_MAIL`).
    pub const NO_REPLY_MAIL: u32 = 0x4000;
    /// No answer to RCPT (`SMFIP_NR_RCPT`).
    pub const NO_REPLY_RCPT: u32 = 0x8000;
    /// No answer to DATA (`SMFIP_NR_DATA`).
    pub const NO_REPLY_DATA: u32 = 0x1_0000;
    /// No answer to unknown commands (`SMFIP_NR_UNKN`).
    pub const NO_REPLY_UNKNOWN: u32 = 0x2_0000;
    /// No answer to end of headers (`SMFIP_NR_EOH`).
    pub const NO_REPLY_END_OF_HEADERS: u32 = 0x4_0000;
    /// No answer to body chunks (`SMFIP_NR_BODY`).
    pub const NO_REPLY_BODY: u32 = 0x8_0000;
    /// Header values keep their leading space (`SMFIP_HDR_LEADSPC`).
    pub const HEADER_LEADING_SPACE: u32 = 0x10_0000;
}

/// The stages a macro list is set for in the negotiation (`SMFIM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum MacroStage {
    /// The connect event.
    Connect = 0,
    /// HELO.
    Helo = 1,
    /// MAIL.
    Mail = 2,
    /// RCPT.
    Rcpt = 3,
    /// DATA.
    Data = 4,
    /// End of message.
    EndOfMessage = 5,
    /// End of headers.
    EndOfHeaders = 6,
}

/// A packet or negotiation that cannot be read or agreed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MilterError {
    /// A length of 0: no command octet.
    #[error("milter packet of length 0")]
    EmptyPacket,
    /// A packet over [`MAX_DATA`].
    #[error("milter packet of {0} octets, over the limit of {MAX_DATA}")]
    TooLong(usize),
    /// A command octet this protocol does not have.
    #[error("unknown milter command {0:?}")]
    UnknownCommand(char),
    /// A command whose data does not have its form.
    #[error("malformed milter {command} command: {what}")]
    Malformed {
        /// The command's name.
        command: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// The MTA offers a version older than [`OLDEST_VERSION`].
    #[error(
        "the MTA offers milter protocol version {0}; floodgate needs {OLDEST_VERSION} or later"
    )]
    OldVersion(u32),
    /// The MTA does not offer an action floodgate cannot work without.
    #[error("the MTA does not offer the milter action(s) 0x{0:x} floodgate needs")]
    MissingActions(u32),
    /// A response text that cannot be sent: a NUL in it, or a reply code out of form.
    #[error("milter response text cannot be sent: {0}")]
    BadText(&'static str),
}

/// One packet: its command octet and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The command (or response) octet.
    pub code: u8,
    /// The data after it.
    pub data: &'a [u8],
}

/// The first whole packet at the start of `buf`, and the octets it takes; `None` while it
/// is incomplete. A length over [`MAX_DATA`] is an error as soon as the length is read, so
/// a peer cannot make the reader buffer it.
pub fn next_packet(buf: &[u8]) -> Result<Option<(Packet<'_>, usize)>, MilterError> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len == 0 {
        return Err(MilterError::EmptyPacket);
    }
    if len - 1 > MAX_DATA {
        return Err(MilterError::TooLong(len - 1));
    }
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    Ok(Some((
        Packet {
            code: body[0],
            data: &body[1..],
        },
        4 + len,
    )))
}

/// Appends one packet (`code` and `data`) to `out`.
pub fn write_packet(out: &mut Vec<u8>, code: u8, data: &[&[u8]]) {
    let len: usize = 1 + data.iter().map(|d| d.len()).sum::<usize>();
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.push(code);
    for d in data {
        out.extend_from_slice(d);
    }
}

/// What one side offers or agrees in the negotiation: version, actions, steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The protocol version.
    pub version: u32,
    /// `SMFIF_*` actions ([`actions`]).
    pub actions: u32,
    /// `SMFIP_*` steps ([`steps`]).
    pub steps: u32,
}

/// Where the client connected from, as the connect event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAddress {
    /// Unknown (`U`), as for mail from the local `sendmail`.
    Unknown,
    /// A unix socket's path (`L`).
    Unix(Vec<u8>),
    /// An IPv4 or IPv6 address and port (`4`, `6`).
    Inet(IpAddr, u16),
}

/// One command from the MTA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `O`: the MTA's offer.
    Negotiate(Options),
    /// `D`: macros for the command `stage` (a command octet); name and value pairs, names as
    /// sent (`i`, `{auth_authen}`). No answer.
    Macros {
        /// The command octet the macros go with.
        stage: u8,
        /// Name, value.
        pairs: Vec<(&'a [u8], &'a [u8])>,
    },
    /// `C`: the client's name and address.
    Connect {
        /// Its host name (or `[address]`; `localhost` for local submissions).
        hostname: &'a [u8],
        /// Its address.
        address: ClientAddress,
    },
    /// `H`: the HELO or EHLO argument.
    Helo(&'a [u8]),
    /// `M`: the sender (`<addr>`) then its ESMTP parameters.
    Mail(Vec<&'a [u8]>),
    /// `R`: the recipient (`<addr>`) then its ESMTP parameters.
    Rcpt(Vec<&'a [u8]>),
    /// `T`: DATA.
    Data,
    /// `L`: one header field.
    Header {
        /// Its name.
        name: &'a [u8],
        /// Its value (unfolded lines joined as Postfix sends them).
        value: &'a [u8],
    },
    /// `N`: end of headers.
    EndOfHeaders,
    /// `B`: a chunk of the body.
    Body(&'a [u8]),
    /// `E`: end of the message (with a last chunk, usually empty).
    EndOfMessage(&'a [u8]),
    /// `A`: the message is abandoned; the connection stays for the next one. No answer.
    Abort,
    /// `Q`: the connection ends.
    Quit,
    /// `K`: this SMTP connection ends and the next one follows on this milter connection.
    QuitNewConnection,
    /// `U`: an SMTP command the MTA did not know.
    Unknown(&'a [u8]),
}

/// The NUL-terminated strings of `data`: every one must be terminated.
fn strings<'a>(data: &'a [u8], command: &'static str) -> Result<Vec<&'a [u8]>, MilterError> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let Some(body) = data.strip_suffix(b"\0") else {
        return Err(MilterError::Malformed {
            command,
            what: "a string without its NUL",
        });
    };
    Ok(body.split(|&b| b == 0).collect())
}

/// Exactly `n` NUL-terminated strings.
fn exactly<'a, const N: usize>(
    data: &'a [u8],
    command: &'static str,
) -> Result<[&'a [u8]; N], MilterError> {
    let v = strings(data, command)?;
    v.try_into().map_err(|_| MilterError::Malformed {
        command,
        what: "another number of strings",
    })
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn connect(data: &[u8]) -> Result<Command<'_>, MilterError> {
    const BAD: MilterError = MilterError::Malformed {
        command: "connect",
        what: "not a host name, family, port and address",
    };
    let nul = memchr::memchr(0, data).ok_or(BAD)?;
    let hostname = &data[..nul];
    let rest = &data[nul + 1..];
    let (&family, rest) = rest.split_first().ok_or(BAD)?;
    let address = match family {
        b'U' => ClientAddress::Unknown,
        b'L' | b'4' | b'6' => {
            let port = rest.get(..2).ok_or(BAD)?;
            let port = u16::from_be_bytes([port[0], port[1]]);
            let addr = rest[2..].strip_suffix(b"\0").ok_or(BAD)?;
            if family == b'L' {
                ClientAddress::Unix(addr.to_vec())
            } else {
                // Postfix writes IPv6 addresses with an "IPv6:" prefix.
                let text = std::str::from_utf8(addr).map_err(|_| BAD)?;
                let text = text.strip_prefix("IPv6:").unwrap_or(text);
                let ip: IpAddr = text.parse().map_err(|_| BAD)?;
                if (family == b'4') != ip.is_ipv4() {
                    return Err(BAD);
                }
                ClientAddress::Inet(ip, port)
            }
        }
        _ => return Err(BAD),
    };
    Ok(Command::Connect { hostname, address })
}

fn macros(data: &[u8]) -> Result<Command<'_>, MilterError> {
    let (&stage, rest) = data.split_first().ok_or(MilterError::Malformed {
        command: "macro",
        what: "no stage",
    })?;
    let list = strings(rest, "macro")?;
    if list.len() % 2 != 0 {
        return Err(MilterError::Malformed {
            command: "macro",
            what: "a name without its value",
        });
    }
    let pairs = list.chunks_exact(2).map(|p| (p[0], p[1])).collect();
    Ok(Command::Macros { stage, pairs })
}

impl<'a> Command<'a> {
    /// The command a packet carries.
    pub fn parse(packet: Packet<'a>) -> Result<Command<'a>, MilterError> {
        let data = packet.data;
        let empty = |command: &'static str, c: Command<'a>| {
            if data.is_empty() {
                Ok(c)
            } else {
                Err(MilterError::Malformed {
                    command,
                    what: "data where there is none",
                })
            }
        };
        match packet.code {
            b'O' => {
                let (Some(version), Some(actions), Some(steps)) =
                    (u32_at(data, 0), u32_at(data, 4), u32_at(data, 8))
                else {
                    return Err(MilterError::Malformed {
                        command: "negotiation",
                        what: "fewer than three numbers",
                    });
                };
                Ok(Command::Negotiate(Options {
                    version,
                    actions,
                    steps,
                }))
            }
            b'D' => macros(data),
            b'C' => connect(data),
            b'H' => Ok(Command::Helo(exactly::<1>(data, "helo")?[0])),
            b'M' | b'R' => {
                let name = if packet.code == b'M' { "mail" } else { "rcpt" };
                let args = strings(data, name)?;
                if args.is_empty() {
                    return Err(MilterError::Malformed {
                        command: name,
                        what: "no address",
                    });
                }
                Ok(if packet.code == b'M' {
                    Command::Mail(args)
                } else {
                    Command::Rcpt(args)
                })
            }
            b'T' => empty("data", Command::Data),
            b'L' => {
                let [name, value] = exactly::<2>(data, "header")?;
                Ok(Command::Header { name, value })
            }
            b'N' => empty("end of headers", Command::EndOfHeaders),
            b'B' => Ok(Command::Body(data)),
            b'E' => Ok(Command::EndOfMessage(data)),
            b'A' => empty("abort", Command::Abort),
            b'Q' => empty("quit", Command::Quit),
            b'K' => empty("quit-new-connection", Command::QuitNewConnection),
            b'U' => Ok(Command::Unknown(exactly::<1>(data, "unknown")?[0])),
            other => Err(MilterError::UnknownCommand(other as char)),
        }
    }

    /// Whether the MTA waits for an answer to this command, given the steps agreed.
    pub fn wants_answer(&self, agreed_steps: u32) -> bool {
        use steps::*;
        let no_reply = match self {
            Command::Macros { .. }
            | Command::Abort
            | Command::Quit
            | Command::QuitNewConnection => return false,
            Command::Connect { .. } => NO_REPLY_CONNECT,
            Command::Helo(_) => NO_REPLY_HELO,
            Command::Mail(_) => NO_REPLY_MAIL,
            Command::Rcpt(_) => NO_REPLY_RCPT,
            Command::Data => NO_REPLY_DATA,
            Command::Header { .. } => NO_REPLY_HEADER,
            Command::EndOfHeaders => NO_REPLY_END_OF_HEADERS,
            Command::Body(_) => NO_REPLY_BODY,
            Command::Unknown(_) => NO_REPLY_UNKNOWN,
            Command::Negotiate(_) | Command::EndOfMessage(_) => return true,
        };
        agreed_steps & no_reply == 0
    }
}

/// The macro `name` in `pairs`, whether sent as `{name}` or as `name`.
pub fn macro_value<'a>(pairs: &[(&'a [u8], &'a [u8])], name: &str) -> Option<&'a [u8]> {
    let bare = name
        .trim_start_matches('{')
        .trim_end_matches('}')
        .as_bytes();
    pairs.iter().rev().find_map(|&(n, v)| {
        let n = n
            .strip_prefix(b"{")
            .and_then(|n| n.strip_suffix(b"}"))
            .unwrap_or(n);
        (n == bare).then_some(v)
    })
}

/// One answer to the MTA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    /// `O`: the agreed options and (version 6, with [`actions::SET_MACRO_LIST`]) the
    /// macros wanted at each stage.
    Negotiate(Options, &'a [(MacroStage, &'a str)]),
    /// `c`: go on.
    Continue,
    /// `a`: accept; the filter wants nothing more of this message.
    Accept,
    /// `r`: reject (5xx).
    Reject,
    /// `t`: temporary failure (4xx).
    Tempfail,
    /// `d`: accept and throw the message away.
    Discard,
    /// `y`: this SMTP reply: `4NN x.y.z text` or `5NN x.y.z text`.
    ReplyCode(&'a str),
    /// `q`: quarantine with this reason (Postfix: the hold queue).
    Quarantine(&'a str),
    /// `h`: add a header field.
    AddHeader {
        /// Its name.
        name: &'a str,
        /// Its value.
        value: &'a str,
    },
    /// `p`: still working; the MTA restarts its timeout.
    Progress,
}

/// `text` checked for the wire: no NUL, and no CR or LF (a reply is one line).
fn wire_text(text: &str) -> Result<&[u8], MilterError> {
    if text.bytes().any(|b| b == 0 || b == b'\r' || b == b'\n') {
        return Err(MilterError::BadText("a NUL, CR or LF in it"));
    }
    Ok(text.as_bytes())
}

impl Response<'_> {
    /// Appends the response's packet to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), MilterError> {
        match self {
            Response::Negotiate(o, lists) => {
                let mut data = Vec::with_capacity(12 + lists.len() * 32);
                for n in [o.version, o.actions, o.steps] {
                    data.extend_from_slice(&n.to_be_bytes());
                }
                for (stage, list) in lists.iter() {
                    data.extend_from_slice(&(*stage as u32).to_be_bytes());
                    data.extend_from_slice(wire_text(list)?);
                    data.push(0);
                }
                write_packet(out, b'O', &[&data]);
            }
            Response::Continue => write_packet(out, b'c', &[]),
            Response::Accept => write_packet(out, b'a', &[]),
            Response::Reject => write_packet(out, b'r', &[]),
            Response::Tempfail => write_packet(out, b't', &[]),
            Response::Discard => write_packet(out, b'd', &[]),
            Response::Progress => write_packet(out, b'p', &[]),
            Response::ReplyCode(text) => {
                let t = wire_text(text)?;
                let b = t;
                let code_ok = b.len() >= 4
                    && matches!(b[0], b'4' | b'5')
                    && b[1].is_ascii_digit()
                    && b[2].is_ascii_digit()
                    && b[3] == b' ';
                if !code_ok {
                    return Err(MilterError::BadText(
                        "a reply that is not 4NN or 5NN and text",
                    ));
                }
                write_packet(out, b'y', &[t, b"\0"]);
            }
            Response::Quarantine(reason) => write_packet(out, b'q', &[wire_text(reason)?, b"\0"]),
            Response::AddHeader { name, value } => {
                let n = wire_text(name)?;
                if n.is_empty() || n.iter().any(|&b| b == b':' || b <= b' ' || b > b'~') {
                    return Err(MilterError::BadText(
                        "a header name that is not a field name",
                    ));
                }
                write_packet(out, b'h', &[n, b"\0", wire_text(value)?, b"\0"]);
            }
        }
        Ok(())
    }
}

/// What floodgate asks of the MTA: the actions it needs and would like, the steps it would
/// like the MTA to leave out or not wait for, and its macro lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// Actions without which floodgate cannot work (the negotiation fails without them).
    pub needed_actions: u32,
    /// Actions taken when offered.
    pub optional_actions: u32,
    /// Steps taken when offered (`SMFIP_NR_*`, `SMFIP_NO*`, `SMFIP_HDR_LEADSPC`).
    pub steps: u32,
    /// Macros wanted at each stage, sent when the MTA offers `SMFIF_SETSYMLIST`.
    pub macros: &'a [(MacroStage, &'a str)],
}

/// The agreed options: what the filter answers to the MTA's offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreed<'a> {
    /// The options answered.
    pub options: Options,
    /// The macro lists answered (empty when the MTA cannot take them).
    pub macros: &'a [(MacroStage, &'a str)],
}

/// Agrees options with the MTA's `offer`: the lower version, the wanted actions and steps
/// the MTA offers. Fails on a version older than [`OLDEST_VERSION`] and when a needed
/// action is not offered.
pub fn negotiate<'a>(offer: Options, wanted: &Wanted<'a>) -> Result<Agreed<'a>, MilterError> {
    if offer.version < OLDEST_VERSION {
        return Err(MilterError::OldVersion(offer.version));
    }
    let missing = wanted.needed_actions & !offer.actions;
    if missing != 0 {
        return Err(MilterError::MissingActions(missing));
    }
    let mut actions = (wanted.needed_actions | wanted.optional_actions) & offer.actions;
    let version = offer.version.min(VERSION);
    let macros = if version >= 6 && offer.actions & actions::SET_MACRO_LIST != 0 {
        actions |= actions::SET_MACRO_LIST;
        wanted.macros
    } else {
        actions &= !actions::SET_MACRO_LIST;
        &[]
    };
    Ok(Agreed {
        options: Options {
            version,
            actions,
            steps: wanted.steps & offer.steps,
        },
        macros,
    })
}

#[cfg(test)]
mod tests;
