//! The stand-in smart host: an SMTP server on a free loopback port that accepts every
//! message, answers `250 2.0.0 Ok: queued as ID` and prints, once a second, one line of what
//! it queued in that second (messages and recipients per sender, and the Subject of a
//! sender's first message); floodgate's own mail (the null sender: alerts, notices) gets a
//! line of its own, as the postmaster would see it. It offers AUTH (PLAIN and LOGIN) and accepts any user
//! name with the password [`PASSWORD`], as a smart host that checks passwords would.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::DemoError;

/// The password the stand-in accepts for every user.
pub const PASSWORD: &str = "demo";

/// The longest command line or message line read, CRLF included.
const MAX_LINE: u64 = 1 << 20;
/// The largest message taken.
const MAX_MESSAGE: usize = 50 << 20;
/// Commands one session may send.
const MAX_COMMANDS: usize = 100_000;
/// How long a session may last.
const SESSION_TIME: Duration = Duration::from_secs(3600);
/// How long one line may take to come.
const LINE_TIME: Duration = Duration::from_secs(300);

/// How often the stand-in prints what it queued.
const TALLY_EVERY: Duration = Duration::from_secs(1);

/// What one sender had queued since the last tally line.
#[derive(Default)]
struct SenderTally {
    messages: u64,
    recipients: u64,
    /// The Subject of the sender's first message ever, shown once.
    first_subject: Option<String>,
}

/// What was queued since the last tally line, per sender, and the senders already shown.
#[derive(Default)]
struct Tally {
    senders: BTreeMap<String, SenderTally>,
    shown: HashSet<String>,
}

impl Tally {
    fn add(&mut self, sender: &str, recipients: usize, subject: String) {
        let first = self.shown.insert(sender.to_string());
        let t = self.senders.entry(sender.to_string()).or_default();
        t.messages += 1;
        t.recipients += recipients as u64;
        if first {
            t.first_subject = Some(subject);
        }
    }

    /// The line of what was queued since the last one, if anything was; starts anew.
    fn take_line(&mut self) -> Option<String> {
        if self.senders.is_empty() {
            return None;
        }
        let senders = std::mem::take(&mut self.senders);
        let messages: u64 = senders.values().map(|t| t.messages).sum();
        let recipients: u64 = senders.values().map(|t| t.recipients).sum();
        let mut line = format!(
            "stand-in smart host: queued {} for {}:",
            crate::figures::count(messages, "message"),
            crate::figures::count(recipients, "recipient"),
        );
        for (i, (sender, t)) in senders.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            let _ = write!(
                line,
                "{sep}from <{sender}> {} to {}",
                t.messages,
                crate::figures::count(t.recipients, "recipient")
            );
            if let Some(s) = &t.first_subject {
                let _ = write!(line, " (first: Subject: {s})");
            }
        }
        Some(line)
    }
}

/// The queue ids the stand-in gave out, so that a client can tell a message it relayed
/// from one floodgate answered itself (held); and the tally it prints.
#[derive(Clone, Default)]
pub struct Queued {
    ids: Arc<Mutex<HashSet<String>>>,
    next: Arc<AtomicU64>,
    tally: Arc<Mutex<Tally>>,
}

impl Queued {
    /// Whether the stand-in queued a message as `id`.
    pub fn contains(&self, id: &str) -> bool {
        self.ids.lock().expect("queued ids").contains(id)
    }

    /// How many messages the stand-in queued.
    pub fn len(&self) -> usize {
        self.ids.lock().expect("queued ids").len()
    }

    /// Whether it queued none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn take(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("SINK{n:05}");
        self.ids.lock().expect("queued ids").insert(id.clone());
        id
    }

    /// Prints what was queued since the last line, if anything was.
    pub fn print_tally(&self) {
        let line = self.tally.lock().expect("tally").take_line();
        if let Some(line) = line {
            say!("{line}");
        }
    }
}

/// A running stand-in smart host.
pub struct Sink {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it queued.
    pub queued: Queued,
}

/// Starts the stand-in on a free port of 127.0.0.1; it serves until the runtime ends.
pub async fn start() -> Result<Sink, DemoError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(DemoError::io("stand-in smart host: bind 127.0.0.1:0"))?;
    let addr = listener
        .local_addr()
        .map_err(DemoError::io("stand-in smart host: its address"))?;
    let queued = Queued::default();
    let ticking = queued.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(TALLY_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            ticking.print_tally();
        }
    });
    let q = queued.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let q = q.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(SESSION_TIME, session(stream, q)).await;
            });
        }
    });
    Ok(Sink { addr, queued })
}

/// One line, CRLF or LF removed; `None` at the end of the stream or past [`LINE_TIME`].
async fn line(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut buf = Vec::new();
    let mut limited = (&mut *r).take(MAX_LINE);
    let read = limited.read_until(b'\n', &mut buf);
    match tokio::time::timeout(LINE_TIME, read).await {
        Ok(Ok(n)) if n > 0 && buf.ends_with(b"\n") => {
            buf.pop();
            if buf.ends_with(b"\r") {
                buf.pop();
            }
            Some(String::from_utf8_lossy(&buf).into_owned())
        }
        _ => None,
    }
}

/// Whether `pass` of an AUTH exchange is the stand-in's password.
fn good_password(pass: &[u8]) -> bool {
    pass == PASSWORD.as_bytes()
}

/// The password in a SASL PLAIN response (`authzid NUL user NUL password`, base64).
fn plain_password(response: &str) -> Option<Vec<u8>> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(response.trim())
        .ok()?;
    raw.split(|b| *b == 0).nth(2).map(<[u8]>::to_vec)
}

fn decode(response: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(response.trim())
        .unwrap_or_default()
}

/// Sends a 334 `prompt` and reads the client's response; `None` when it cancels (`*`).
async fn ask(r: &mut BufReader<TcpStream>, prompt: &[u8]) -> Option<String> {
    r.get_mut().write_all(prompt).await.ok()?;
    let answer = line(r).await?;
    (answer != "*").then_some(answer)
}

/// The answer to AUTH, reading the client's responses when the mechanism asks for them.
async fn auth(args: &str, r: &mut BufReader<TcpStream>) -> Option<&'static str> {
    const OK: &str = "235 2.7.0 Authentication successful\r\n";
    const BAD: &str = "535 5.7.8 Authentication credentials invalid\r\n";
    let mut words = args.split_whitespace();
    let mechanism = words.next().unwrap_or("").to_ascii_uppercase();
    let initial = words.next().map(str::to_string);
    let pass = match mechanism.as_str() {
        "PLAIN" => {
            let response = match initial {
                Some(i) => i,
                None => ask(r, b"334 \r\n").await?,
            };
            plain_password(&response)
        }
        "LOGIN" => {
            if initial.is_none() {
                ask(r, b"334 VXNlcm5hbWU6\r\n").await?;
            }
            Some(decode(&ask(r, b"334 UGFzc3dvcmQ6\r\n").await?))
        }
        _ => return Some("504 5.5.4 Unrecognized authentication type\r\n"),
    };
    Some(match pass {
        Some(p) if good_password(&p) => OK,
        _ => BAD,
    })
}

/// The Subject of a message's header section, unfolded.
fn subject(message: &[String]) -> String {
    let mut found: Option<String> = None;
    for l in message {
        if l.is_empty() {
            break;
        }
        match &mut found {
            Some(s) if l.starts_with([' ', '\t']) => s.push_str(l),
            Some(_) => break,
            None => {
                if l.len() > 8 && l[..8].eq_ignore_ascii_case("subject:") {
                    found = Some(l[8..].trim().to_string());
                }
            }
        }
    }
    found.unwrap_or_default()
}

/// The recipients as printed: the first three, then how many more.
fn recipients_text(rcpts: &[String]) -> String {
    let mut text = rcpts
        .iter()
        .take(3)
        .map(|r| format!("<{r}>"))
        .collect::<Vec<_>>()
        .join(", ");
    if rcpts.len() > 3 {
        text.push_str(&format!(" and {} more", rcpts.len() - 3));
    }
    text
}

/// The address inside `FROM:<...>` or `TO:<...>`.
fn path(args: &str) -> String {
    let open = args.find('<').map_or(0, |i| i + 1);
    let close = args[open..].find('>').map_or(args.len(), |i| open + i);
    args[open..close].to_string()
}

async fn session(stream: TcpStream, queued: Queued) -> Option<()> {
    let mut r = BufReader::new(stream);
    r.get_mut()
        .write_all(b"220 stand-in.demo ESMTP stand-in smart host\r\n")
        .await
        .ok()?;
    let mut sender: Option<String> = None;
    let mut rcpts: Vec<String> = Vec::new();
    for _ in 0..MAX_COMMANDS {
        let l = line(&mut r).await?;
        let (verb, args) = l.split_once(' ').unwrap_or((l.as_str(), ""));
        let answer: String = match verb.to_ascii_uppercase().as_str() {
            "EHLO" => "250-stand-in.demo\r\n250-AUTH PLAIN LOGIN\r\n250-8BITMIME\r\n\
                       250-ENHANCEDSTATUSCODES\r\n250 SIZE 52428800\r\n"
                .into(),
            "HELO" => "250 stand-in.demo\r\n".into(),
            "AUTH" => auth(args, &mut r).await?.into(),
            "MAIL" => {
                sender = Some(path(args));
                rcpts.clear();
                "250 2.1.0 Ok\r\n".into()
            }
            "RCPT" if sender.is_some() => {
                rcpts.push(path(args));
                "250 2.1.5 Ok\r\n".into()
            }
            "DATA" if !rcpts.is_empty() => {
                r.get_mut()
                    .write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                    .await
                    .ok()?;
                let mut message = Vec::new();
                let mut size = 0;
                loop {
                    let l = line(&mut r).await?;
                    if l == "." {
                        break;
                    }
                    size += l.len() + 2;
                    if size > MAX_MESSAGE {
                        return None;
                    }
                    message.push(l);
                }
                let id = queued.take();
                let from = sender.take().unwrap_or_default();
                if from.is_empty() {
                    say!(
                        "stand-in smart host: queued {id} from <> to {}: Subject: {}",
                        recipients_text(&rcpts),
                        subject(&message)
                    );
                } else {
                    let mut tally = queued.tally.lock().expect("tally");
                    tally.add(&from, rcpts.len(), subject(&message));
                }
                rcpts.clear();
                format!("250 2.0.0 Ok: queued as {id}\r\n")
            }
            "RCPT" | "DATA" => "503 5.5.1 Error: need MAIL and RCPT first\r\n".into(),
            "RSET" => {
                sender = None;
                rcpts.clear();
                "250 2.0.0 Ok\r\n".into()
            }
            "NOOP" => "250 2.0.0 Ok\r\n".into(),
            "QUIT" => {
                r.get_mut().write_all(b"221 2.0.0 Bye\r\n").await.ok()?;
                return Some(());
            }
            _ => "502 5.5.2 Error: command not recognized\r\n".into(),
        };
        r.get_mut().write_all(answer.as_bytes()).await.ok()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_read_from_plain_and_the_subject_from_the_header() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"\0carol\0demo");
        assert_eq!(plain_password(&b64).as_deref(), Some(&b"demo"[..]));
        assert!(good_password(&plain_password(&b64).unwrap()));
        let m: Vec<String> = ["From: a", "Subject: one", " two", "", "Subject: body"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(subject(&m), "one two");
        assert_eq!(path("FROM:<a@b> SIZE=3"), "a@b");
        let r: Vec<String> = (0..5).map(|i| format!("r{i}@x")).collect();
        assert_eq!(recipients_text(&r), "<r0@x>, <r1@x>, <r2@x> and 2 more");
    }

    #[test]
    fn the_tally_sums_each_second_and_names_a_sender_s_first_subject_once() {
        let mut t = Tally::default();
        assert_eq!(t.take_line(), None);
        t.add("carol@example.org", 25, "Invoice 1".into());
        t.add("alice@example.org", 1, "Minutes".into());
        t.add("carol@example.org", 25, "Invoice 2".into());
        assert_eq!(
            t.take_line().as_deref(),
            Some(
                "stand-in smart host: queued 3 messages for 51 recipients: from \
                 <alice@example.org> 1 to 1 recipient (first: Subject: Minutes); from \
                 <carol@example.org> 2 to 50 recipients (first: Subject: Invoice 1)"
            )
        );
        assert_eq!(t.take_line(), None, "nothing new, no line");
        t.add("carol@example.org", 25, "Invoice 3".into());
        assert_eq!(
            t.take_line().as_deref(),
            Some(
                "stand-in smart host: queued 1 message for 25 recipients: from \
                 <carol@example.org> 1 to 25 recipients"
            )
        );
    }
}
