//! The SMTP wire protocol without I/O: framing, parsing and formatting as
//! pure functions and small state machines over byte slices, so every part
//! can be unit-tested and fuzzed byte by byte. Nothing here touches sockets,
//! clocks or policy.
//!
//! Data flows one way: [`line::LineFramer`] cuts client bytes into lines,
//! [`command::parse_command`] turns a line into a [`Command`] whose
//! [`Command::to_wire`] is what goes upstream; [`data::DataDecoder`] and
//! [`data::encode_data`] re-frame message content, [`bdat::ChunkReader`] and
//! [`bdat::ChunkedBody`] take BDAT chunks; [`reply::ReplyParser`]
//! reads upstream's replies and [`ehlo::filter_ehlo`] rewrites its EHLO list;
//! [`sasl::SaslObserver`] learns the user name; [`dialogue::Dialogue`] holds the
//! session's protocol state and its sequencing rules; [`proxy_header`] and
//! [`xclient`] carry the real client address.

#![warn(missing_docs)]

pub mod address;
pub mod auto_submitted;
pub mod bdat;
pub mod clean_lines;
pub mod command;
pub mod data;
pub mod dialogue;
pub mod ehlo;
pub mod header_fields;
pub mod help;
pub mod line;
pub mod proxy_header;
pub mod received;
pub mod reply;
pub mod sasl;
pub mod xclient;

pub use address::{AddressError, AddressRole, Path};
pub use bdat::{ChunkReader, ChunkedBody};
pub use command::{parse_command, Command, CommandError, MailFrom, Param, RcptTo};
pub use data::{
    encode_data, unstuffed, unstuffed_runs, BarePolicy, DataDecoder, DataOutcome, LineMode,
    UnstuffedRuns, Wire,
};
pub use ehlo::{filter_ehlo, parse_ehlo, Capabilities, EhloFilter};
pub use line::{LineEvent, LineFramer};
pub use proxy_header::{encode_proxy_v2, parse_proxy_header, ProxyHeader, ProxyHeaderError};
pub use reply::{Reply, ReplyError, ReplyParser};
pub use sasl::{Mechanism, SaslObserver};
pub use xclient::{xclient_command, xtext_encode, ClientName, XclientAttrs};

/// RFC 5321 §4.5.3.1.4: command line limit, CRLF included. floodgate allows
/// more (see [`DEFAULT_COMMAND_LINE_MAX`]) because extensions raise it.
pub const RFC_COMMAND_LINE_MAX: usize = 512;
/// Default command line cap: Postfix's `line_length_limit` (2048).
pub const DEFAULT_COMMAND_LINE_MAX: usize = 2048;
/// RFC 4954 §4: SASL response line cap, CRLF included.
pub const SASL_LINE_MAX: usize = 12288;
/// RFC 5321 §4.5.3.1.6: text line limit in DATA, CRLF included.
pub const DATA_LINE_MAX: usize = 1000;
