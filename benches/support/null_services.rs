//! The cheapest policy service and milter there can be, for `benches/postfix.sh`: what
//! Postfix itself spends on asking a service, whatever the service does.
//!
//!   null_services POLICY_SOCKET MILTER_SOCKET
//!
//! Listens on two unix sockets (mode 0666, so Postfix's smtpd reaches them); [`THREADS`]
//! threads started at once on each take turns to accept a connection and serve it to its
//! end with blocking reads and writes: no thread started per connection, no event loop, no
//! parsing beyond finding where a request ends, no state. The policy service answers every
//! request `action=DUNNO`. The milter negotiates protocol version 6 with no actions and asks
//! Postfix to leave out every event it may leave out (connect, HELO, MAIL, RCPT, DATA,
//! header fields, end of header, body, unknown commands), so only the end of each message
//! reaches it, answered `continue`. Runs until killed.
//!
//! Built by `benches/postfix.sh` with `rustc -O` (standard library only); not a Cargo
//! target.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::thread;

/// Threads serving each socket: more than the connections Postfix keeps open at once in the
/// bench (one per smtpd process), so none waits for a free thread.
const THREADS: usize = 64;

/// `SMFIP_NOCONNECT | NOHELO | NOMAIL | NORCPT | NOBODY | NOHDRS | NOEOH | NOUNKNOWN |
/// NODATA`: every event a milter may decline.
const SKIP_ALL: u32 = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x100 | 0x200;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: null_services POLICY_SOCKET MILTER_SOCKET");
        std::process::exit(2);
    }
    let mut threads = Vec::new();
    for (path, serve) in [
        (&args[1], serve_policy as fn(UnixStream)),
        (&args[2], serve_milter),
    ] {
        let l = listen(path);
        for _ in 0..THREADS {
            let l = l.try_clone().expect("a listener's clone");
            threads.push(thread::spawn(move || accept(l, serve)));
        }
    }
    for t in threads {
        let _ = t.join();
    }
}

/// A listener on `path`, any stale socket there removed first.
fn listen(path: &str) -> UnixListener {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).unwrap_or_else(|e| {
        eprintln!("null_services: cannot listen on {path}: {e}");
        std::process::exit(1);
    });
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .unwrap_or_else(|e| eprintln!("null_services: chmod {path}: {e}"));
    l
}

/// Accepts a connection of `l` and serves it to its end, again and again.
fn accept(l: UnixListener, serve: fn(UnixStream)) {
    for conn in l.incoming().flatten() {
        serve(conn);
    }
}

/// Reads requests (attribute lines up to an empty line) and answers each `DUNNO`.
fn serve_policy(conn: UnixStream) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut input = BufReader::new(conn);
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line == b"\n" && out.write_all(b"action=DUNNO\n\n").is_err() {
            return;
        }
    }
}

/// Reads milter packets and answers the negotiation and each end of message.
fn serve_milter(mut conn: UnixStream) {
    let mut len = [0u8; 4];
    let mut body = Vec::new();
    loop {
        if conn.read_exact(&mut len).is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        if n == 0 || n > 1 << 20 {
            return;
        }
        body.resize(n, 0);
        if conn.read_exact(&mut body).is_err() {
            return;
        }
        let reply: Option<Vec<u8>> = match body[0] {
            // Option negotiation: version 6, no actions, every event left out that the MTA
            // lets a milter leave out.
            b'O' if n >= 13 => {
                let offered = u32::from_be_bytes([body[9], body[10], body[11], body[12]]);
                let mut r = vec![b'O'];
                r.extend_from_slice(&6u32.to_be_bytes());
                r.extend_from_slice(&0u32.to_be_bytes());
                r.extend_from_slice(&(offered & SKIP_ALL).to_be_bytes());
                Some(r)
            }
            // Macros, abort, a new connection's quit: no answer.
            b'D' | b'A' | b'K' => None,
            b'Q' => return,
            // The end of the message, and any event sent despite the negotiation: continue.
            _ => Some(vec![b'c']),
        };
        if let Some(r) = reply {
            let mut packet = (r.len() as u32).to_be_bytes().to_vec();
            packet.extend_from_slice(&r);
            if conn.write_all(&packet).is_err() {
                return;
            }
        }
    }
}
