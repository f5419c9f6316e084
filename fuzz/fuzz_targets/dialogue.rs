//! smtp::dialogue: arbitrary command lines and upstream answers, in any order, never make
//! the dialogue panic or break its invariants (recipients only inside a transaction and
//! never past the limit, a transaction only after HELO/EHLO, chunks only inside one).
#![no_main]

use floodgate::smtp::dialogue::{Dialogue, Exchange, Settings, Step};
use floodgate::smtp::{parse_command, Reply};
use libfuzzer_sys::fuzz_target;

const EXCHANGES: [Exchange; 8] = [
    Exchange::Helo,
    Exchange::Ehlo,
    Exchange::Auth,
    Exchange::Mail,
    Exchange::Rcpt,
    Exchange::Message,
    Exchange::Rset,
    Exchange::Other,
];

/// An upstream answer chosen by `b`: its code, and for an EHLO a list of extensions.
fn answer(b: u8) -> Reply {
    match b % 6 {
        0 => Reply::multi(
            250,
            [
                "mx",
                "PIPELINING",
                "SIZE 1000",
                "CHUNKING",
                "DSN",
                "AUTH PLAIN LOGIN",
            ],
        ),
        1 => Reply::new(250, "ok"),
        2 => Reply::new(235, "ok"),
        3 => Reply::new(354, "go on"),
        4 => Reply::new(450, "later"),
        _ => Reply::new(550, "no"),
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, max_rcpt, rest @ ..] = data else {
        return;
    };
    let settings = Settings {
        max_recipients: usize::from(*max_rcpt % 8),
        max_message_size: 1000,
        max_errors: 10,
        require_tls: flags & 1 != 0,
        require_auth: flags & 2 != 0,
        starttls: flags & 4 != 0,
        auth_without_tls: flags & 8 != 0,
        chunking: flags & 16 != 0,
        xclient: flags & 32 != 0,
    };
    let mut d = Dialogue::new(settings, flags & 64 != 0);
    // Lines separated by '\n'; a line starting with 0xff is an upstream answer instead.
    for line in rest.split(|&b| b == b'\n') {
        match line {
            [0xff, exchange, code, ..] => {
                d.on_upstream(
                    EXCHANGES[usize::from(*exchange) % EXCHANGES.len()],
                    &answer(*code),
                );
            }
            // A HELO or EHLO answered, the client's and floodgate's upstream verb apart.
            [0xfe, verbs, code, ..] => {
                let heard = d.on_greeting(verbs & 1 != 0, verbs & 2 != 0, &answer(*code));
                if verbs & 1 == 0 && heard != floodgate::smtp::dialogue::Heard::Refused {
                    assert_eq!(d.offered(), &Default::default());
                }
            }
            _ => {
                if let Ok(cmd) = parse_command(line) {
                    let before = d.clone();
                    match d.on_command(&cmd) {
                        Step::Ask(Exchange::Rcpt) => {
                            assert!(before.in_transaction());
                            assert!(before.recipients() < settings.max_recipients);
                            d.on_upstream(Exchange::Rcpt, &answer(1));
                        }
                        Step::Ask(exchange) | Step::Relay(exchange) => {
                            d.on_upstream(exchange, &answer(line.len() as u8));
                        }
                        Step::Data => assert!(before.in_transaction() && before.recipients() > 0),
                        Step::Chunk { .. } => {
                            assert!(before.in_transaction() && before.recipients() > 0);
                            d.chunk_taken();
                        }
                        Step::StartTls => {
                            // STARTTLS is offered only before TLS.
                            assert!(before.starttls_available());
                            d.tls_started();
                        }
                        Step::Refuse { reply, .. } => {
                            assert!(reply.code >= 500);
                            d.count_error();
                        }
                        _ => {}
                    }
                }
            }
        }
        assert!(d.recipients() <= settings.max_recipients);
        assert!(d.in_transaction() || d.recipients() == 0);
        assert!(d.in_transaction() || !d.chunks_under_way());
        assert!(!d.in_transaction() || d.helo_seen());
    }
});
