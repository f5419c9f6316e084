//! floodgate's own replies: every answer it gives in its own words rather than passing
//! on upstream's, built once here so the text on the wire has one source.

use std::net::IpAddr;
use std::sync::OnceLock;

use crate::smtp::reply::Reply;

/// 503 to MAIL before HELO or EHLO.
pub fn send_helo_first() -> Reply {
    Reply::new(503, "5.5.1 Send HELO or EHLO first")
}

/// 503 to AUTH before EHLO.
pub fn send_ehlo_first() -> Reply {
    Reply::new(503, "5.5.1 Send EHLO first")
}

/// 530 to MAIL on a listener that requires TLS, before STARTTLS.
pub fn tls_required() -> Reply {
    Reply::new(530, "5.7.0 Must issue a STARTTLS command first")
}

/// 530 to MAIL on a listener that requires AUTH, before a successful one.
pub fn auth_required() -> Reply {
    Reply::new(530, "5.7.0 Authentication required")
}

/// 250 to a MAIL that goes upstream with the command after it (`[upstream] pipelining`):
/// floodgate's checks passed, upstream's verdict comes with the first RCPT.
pub fn sender_ok() -> Reply {
    Reply::new(250, "2.1.0 Ok")
}

/// 503 to MAIL inside a transaction.
pub fn nested_mail() -> Reply {
    Reply::new(503, "5.5.1 Nested MAIL command")
}

/// 555 to a MAIL or RCPT parameter whose extension was not offered.
pub fn unsupported_option() -> Reply {
    Reply::new(555, "5.5.4 Unsupported option")
}

/// 552 to a MAIL whose SIZE is over `[smtp] max_message_size`.
pub fn size_over_limit() -> Reply {
    Reply::new(552, "5.3.4 Message size exceeds fixed limit")
}

/// 552 to BDAT chunks that together go over `[smtp] max_message_size`.
pub fn chunks_over_limit() -> Reply {
    Reply::new(552, "5.3.4 Message size exceeds fixed maximum message size")
}

/// 503 to RCPT, DATA or BDAT outside a transaction.
pub fn send_mail_first() -> Reply {
    Reply::new(503, "5.5.1 Send MAIL first")
}

/// 452 to a RCPT past `[smtp] max_recipients`.
pub fn too_many_recipients() -> Reply {
    Reply::new(452, "4.5.3 Too many recipients")
}

/// 554 to DATA or BDAT in a transaction without an accepted recipient.
pub fn no_valid_recipients() -> Reply {
    Reply::new(554, "5.5.1 No valid recipients")
}

/// 503 to DATA after BDAT chunks of the same transaction.
pub fn data_after_bdat() -> Reply {
    Reply::new(503, "5.5.1 DATA after BDAT: one message is sent one way")
}

/// 502 to BDAT when CHUNKING was not offered.
pub fn bdat_not_offered() -> Reply {
    Reply::new(502, "5.5.1 BDAT not available, CHUNKING is not offered")
}

/// 250 to a BDAT chunk that is not the last.
pub fn chunk_received(size: u64) -> Reply {
    Reply::new(250, format!("2.0.0 {size} octets received"))
}

/// 502 to STARTTLS where it is not available.
pub fn starttls_unavailable() -> Reply {
    Reply::new(502, "5.5.1 STARTTLS not available on this port")
}

/// 554 to STARTTLS in a session already under TLS.
pub fn tls_already_active() -> Reply {
    Reply::new(554, "5.5.1 TLS already active")
}

/// 503 to STARTTLS or AUTH inside a transaction.
pub fn transaction_in_progress() -> Reply {
    Reply::new(503, "5.5.1 MAIL transaction in progress")
}

/// 503 to STARTTLS or AUTH after a successful AUTH.
pub fn already_authenticated() -> Reply {
    Reply::new(503, "5.5.1 Already authenticated")
}

/// 220 to STARTTLS, before the handshake.
pub fn ready_for_tls() -> Reply {
    Reply::new(220, "2.0.0 Ready to start TLS")
}

/// 538 to AUTH without TLS when `[tls] auth_without_tls` is off.
pub fn encryption_required() -> Reply {
    Reply::new(
        538,
        "5.7.11 Encryption required for requested authentication mechanism",
    )
}

/// 504 to AUTH with a mechanism that was not offered or cannot be observed.
pub fn unrecognized_mechanism() -> Reply {
    Reply::new(504, "5.5.4 Unrecognized authentication type")
}

/// 500 to an AUTH response line that is too long or not a clean line.
pub fn bad_auth_line() -> Reply {
    Reply::new(
        500,
        "5.5.6 Authentication exchange line is too long or malformed",
    )
}

/// 502 to a verb floodgate does not implement.
pub fn not_recognized() -> Reply {
    Reply::new(502, "5.5.1 Command not recognized")
}

/// 500 to a command line over `[smtp] max_command_line`.
pub fn line_too_long() -> Reply {
    Reply::new(500, "5.5.2 Line too long")
}

/// 500 to a command line ended by a bare CR or LF.
pub fn bare_line_ending() -> Reply {
    Reply::new(
        500,
        "5.5.2 Bare <CR> or <LF> received, lines must end in <CR><LF>",
    )
}

/// 221 to QUIT.
pub fn closing(host: &str) -> Reply {
    // Put together directly: `format!` costs more than the rest of the reply.
    let mut text = String::with_capacity(host.len() + 25);
    text.push_str("2.0.0 ");
    text.push_str(host);
    text.push_str(" closing connection");
    Reply::new(221, text)
}

/// 221 to QUIT in a session upstream refused at its greeting.
pub fn bye() -> Reply {
    Reply::new(221, "2.0.0 Bye")
}

/// 503 to every command but QUIT in a session upstream refused at its greeting.
pub fn session_refused() -> Reply {
    Reply::new(503, "5.5.1 Session refused, send QUIT")
}

/// 421 to a PROXY header from a peer not trusted to send one.
pub fn proxy_header_refused(host: &str, peer: IpAddr) -> Reply {
    Reply::new(
        421,
        format!("4.7.0 {host} PROXY header not accepted from {peer}"),
    )
}

/// 421 after `[server] max_errors` protocol errors.
pub fn too_many_errors(host: &str) -> Reply {
    Reply::new(
        421,
        format!("4.7.0 {host} too many errors, closing connection"),
    )
}

/// 421 when the client was idle past `[timeouts] command`.
pub fn idle_timeout(host: &str) -> Reply {
    Reply::new(
        421,
        format!("4.4.2 {host} timeout exceeded, closing connection"),
    )
}

/// 421 when the session ran past `[timeouts] session`.
pub fn session_too_long(host: &str) -> Reply {
    Reply::new(
        421,
        format!("4.4.2 {host} session too long, closing connection"),
    )
}

/// 421 when floodgate is shutting down.
pub fn shutting_down(host: &str) -> Reply {
    Reply::new(
        421,
        format!("4.3.2 {host} Service shutting down, try again later"),
    )
}

/// 421 to a connection over `[server] max_connections`.
pub fn too_many_connections(host: &str) -> Reply {
    Reply::new(
        421,
        format!("4.7.0 {host} too many connections, try again later"),
    )
}

/// 421 to a connection over `[server] max_connections_per_ip`.
pub fn too_many_connections_from(host: &str, client: IpAddr) -> Reply {
    Reply::new(
        421,
        format!("4.7.0 {host} too many connections from {client}, try again later"),
    )
}

/// 354 to DATA, built once (it is written for every message).
pub fn start_data() -> &'static Reply {
    static REPLY: OnceLock<Reply> = OnceLock::new();
    REPLY.get_or_init(|| Reply::new(354, "End data with <CR><LF>.<CR><LF>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_have_the_wire_form_of_before() {
        assert_eq!(
            start_data().to_wire(),
            b"354 End data with <CR><LF>.<CR><LF>\r\n"
        );
        assert_eq!(
            too_many_connections("mx.example").to_wire(),
            b"421 4.7.0 mx.example too many connections, try again later\r\n"
        );
        assert_eq!(
            too_many_connections_from("mx.example", "192.0.2.1".parse().unwrap()).to_wire(),
            b"421 4.7.0 mx.example too many connections from 192.0.2.1, try again later\r\n"
        );
        assert_eq!(
            proxy_header_refused("h", "::1".parse().unwrap()).to_wire(),
            b"421 4.7.0 h PROXY header not accepted from ::1\r\n"
        );
        assert_eq!(
            chunk_received(7).to_wire(),
            b"250 2.0.0 7 octets received\r\n"
        );
        assert_eq!(
            closing("mx.example").to_wire(),
            b"221 2.0.0 mx.example closing connection\r\n"
        );
    }
}
