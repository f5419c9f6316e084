//! The fleet's clients: authenticated sessions that send tagged messages, each attempt
//! recorded with what the client saw.
//!
//! A normal user sends a message of one to three recipients every few seconds and tries
//! a message again (under a new tag) after a 4xx or a cut connection, as a mail client
//! does. A compromised account sprays five-recipient messages twice a second and retries
//! whatever it is refused. Every attempt carries its own tag (in the Subject, the body and
//! every recipient's address), so the maildir says exactly which attempts were delivered
//! and how often.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::postfix::b64;

/// How long a client waits for one reply: longer than any of floodgate's own timeouts
/// towards upstream, so a hung reply shows up as a cut, not as a slow success.
const REPLY_WAIT: Duration = Duration::from_secs(40);

/// Who sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// An ordinary user, well under every limit.
    Normal,
    /// A stolen account sending spam.
    Compromised,
}

/// How an attempt ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// 2xx after the message: floodgate took responsibility for it.
    Accepted,
    /// A reply outside 2xx/3xx at `stage` (the session ended there).
    Refused {
        /// connect, greeting, ehlo, auth, mail, rcpt, data or end (after the message).
        stage: &'static str,
        /// The reply code.
        code: u16,
        /// The enhanced status code, when the reply had one.
        enhanced: String,
    },
    /// The connection failed or was closed at `stage` without a reply.
    Cut {
        /// As for `Refused`; `end` means the message was sent and its reply never came.
        stage: &'static str,
    },
}

impl End {
    /// A short label for the figures: `250`, `451 4.3.1`, `cut at end`.
    pub fn label(&self) -> String {
        match self {
            End::Accepted => "250".into(),
            End::Refused { code, enhanced, .. } if enhanced.is_empty() => code.to_string(),
            End::Refused { code, enhanced, .. } => format!("{code} {enhanced}"),
            End::Cut { stage } => format!("cut at {stage}"),
        }
    }
}

/// One attempt to send one message.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The account.
    pub user: String,
    /// Normal or compromised.
    pub class: Class,
    /// The node it was sent to (0 or 1).
    pub node: usize,
    /// The message's number for this user (tries of one message share it).
    pub message: usize,
    /// The attempt's tag, unique in the run.
    pub tag: String,
    /// Seconds since the traffic began, when the attempt started.
    pub started: f64,
    /// The recipients floodgate answered 250.
    pub accepted_rcpts: Vec<String>,
    /// How it ended.
    pub end: End,
}

/// Everything every client did, shared with the test.
pub type Ledger = Arc<Mutex<Vec<Attempt>>>;

/// What one client needs: where, who, how long.
#[derive(Clone)]
pub struct Client {
    /// The nodes' SMTP addresses.
    pub nodes: Vec<SocketAddr>,
    /// The account and its password.
    pub user: String,
    /// The password.
    pub password: String,
    /// Normal or compromised.
    pub class: Class,
    /// The run's prefix of every tag.
    pub run: String,
    /// When the traffic began.
    pub t0: Instant,
    /// Set when no new message may be started.
    pub stop: Arc<AtomicBool>,
    /// After `stop`, how long a normal user may still retry its last message.
    pub drain_until: Arc<Mutex<Option<Instant>>>,
    /// Where attempts are recorded.
    pub ledger: Ledger,
}

impl Client {
    /// Runs the client's loop until `stop` (and, for a normal user with a message not yet
    /// accepted, until the drain deadline).
    pub fn run(self) -> thread::JoinHandle<()> {
        thread::spawn(move || match self.class {
            Class::Normal => self.normal(),
            Class::Compromised => self.compromised(),
        })
    }

    fn normal(&self) {
        let mut tries = 0usize;
        let mut message = 0usize;
        loop {
            if self.stop.load(Ordering::SeqCst) {
                let pending = tries > 0;
                let deadline = *self.drain_until.lock().unwrap();
                if !pending || deadline.is_some_and(|d| Instant::now() >= d) {
                    return;
                }
            }
            let rcpts = 1 + message % 3;
            let node = (message + tries) % self.nodes.len();
            let a = self.attempt(node, message, tries, rcpts);
            let accepted = a.end == End::Accepted;
            let permanent = matches!(a.end, End::Refused { code, .. } if code >= 500);
            self.ledger.lock().unwrap().push(a);
            if accepted || permanent {
                message += 1;
                tries = 0;
                thread::sleep(Duration::from_millis(2500));
            } else {
                tries += 1;
                thread::sleep(Duration::from_millis(1000));
            }
        }
    }

    fn compromised(&self) {
        let mut n = 0usize;
        while !self.stop.load(Ordering::SeqCst) {
            let a = self.attempt(n % self.nodes.len(), n, 0, 5);
            self.ledger.lock().unwrap().push(a);
            n += 1;
            thread::sleep(Duration::from_millis(500));
        }
    }

    /// One session: greeting, EHLO, AUTH PLAIN, MAIL, `rcpts` RCPTs, DATA, the message,
    /// QUIT.
    fn attempt(&self, node: usize, message: usize, tries: usize, rcpts: usize) -> Attempt {
        let tag = format!("{}-{}-{message}-{tries}", self.run, self.user);
        let mut a = Attempt {
            user: self.user.clone(),
            class: self.class,
            node,
            message,
            tag: tag.clone(),
            started: self.t0.elapsed().as_secs_f64(),
            accepted_rcpts: Vec::new(),
            end: End::Cut { stage: "connect" },
        };
        a.end = self.session(node, &tag, rcpts, &mut a.accepted_rcpts);
        a
    }

    fn session(&self, node: usize, tag: &str, rcpts: usize, accepted: &mut Vec<String>) -> End {
        let Ok(stream) = TcpStream::connect_timeout(&self.nodes[node], Duration::from_secs(3))
        else {
            return End::Cut { stage: "connect" };
        };
        let mut s = Smtp::new(stream);
        let steps: [(&'static str, String); 3] = [
            ("greeting", String::new()),
            ("ehlo", "EHLO client.fault.test".into()),
            (
                "auth",
                format!(
                    "AUTH PLAIN {}",
                    b64(&format!("\0{}\0{}", self.user, self.password))
                ),
            ),
        ];
        for (stage, line) in steps {
            match s.step(&line) {
                Some((code, _)) if code / 100 == 2 => {}
                Some((code, enhanced)) => return s.refused(stage, code, enhanced),
                None => return End::Cut { stage },
            }
        }
        match s.step(&format!("MAIL FROM:<{}@client.fault.test>", self.user)) {
            Some((250, _)) => {}
            Some((code, enhanced)) => return s.refused("mail", code, enhanced),
            None => return End::Cut { stage: "mail" },
        }
        let mut last = (0, String::new());
        for i in 0..rcpts {
            let rcpt = format!("{tag}.{i}@dest.test");
            match s.step(&format!("RCPT TO:<{rcpt}>")) {
                Some((250, _)) => accepted.push(rcpt),
                Some(refused) => last = refused,
                None => return End::Cut { stage: "rcpt" },
            }
        }
        if accepted.is_empty() {
            return s.refused("rcpt", last.0, last.1);
        }
        match s.step("DATA") {
            Some((354, _)) => {}
            Some((code, enhanced)) => return s.refused("data", code, enhanced),
            None => return End::Cut { stage: "data" },
        }
        let body = format!(
            "From: {user}@client.fault.test\r\nTo: undisclosed-recipients:;\r\n\
             Subject: fault {tag}\r\nX-Fault-Tag: {tag}\r\n\r\nmessage {tag}\r\n.",
            user = self.user
        );
        match s.step(&body) {
            Some((250, _)) => {
                let _ = s.step("QUIT");
                End::Accepted
            }
            Some((code, enhanced)) => s.refused("end", code, enhanced),
            None => End::Cut { stage: "end" },
        }
    }
}

/// A minimal SMTP client over one stream: every error is an answer, never a panic.
struct Smtp {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Smtp {
    fn new(stream: TcpStream) -> Smtp {
        let _ = stream.set_read_timeout(Some(REPLY_WAIT));
        let _ = stream.set_write_timeout(Some(REPLY_WAIT));
        Smtp {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends `line` (nothing when empty: the greeting) and reads one reply: its code and
    /// enhanced status; `None` when the connection failed or the reply did not come.
    fn step(&mut self, line: &str) -> Option<(u16, String)> {
        if !line.is_empty() {
            self.stream
                .write_all(format!("{line}\r\n").as_bytes())
                .ok()?;
        }
        loop {
            if let Some(reply) = self.take_reply() {
                return Some(reply);
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The first whole reply in the buffer, taken out of it.
    fn take_reply(&mut self) -> Option<(u16, String)> {
        let mut at = 0;
        while let Some(nl) = self.buf[at..].iter().position(|&b| b == b'\n') {
            let line = &self.buf[at..at + nl + 1];
            let last = line.len() < 4 || line[3] != b'-';
            if last {
                let text = String::from_utf8_lossy(line).into_owned();
                let code = text.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0);
                let enhanced = text
                    .get(4..)
                    .and_then(|t| t.split_whitespace().next())
                    .filter(|w| w.split('.').count() == 3 && w.starts_with(['2', '4', '5']))
                    .unwrap_or("")
                    .to_string();
                self.buf.drain(..at + nl + 1);
                return Some((code, enhanced));
            }
            at += nl + 1;
        }
        None
    }

    /// Ends the session politely after a refusal and says so.
    fn refused(&mut self, stage: &'static str, code: u16, enhanced: String) -> End {
        if code != 421 {
            let _ = self.stream.write_all(b"QUIT\r\n");
        }
        End::Refused {
            stage,
            code,
            enhanced,
        }
    }
}
