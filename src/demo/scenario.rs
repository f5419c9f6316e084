//! The demo's play: a normal user sends a few messages while a stolen account sprays
//! until the shipped policy's limits trip; what each met is printed as it happens, then a
//! summary read back from floodgate's admin socket.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio_rustls::TlsConnector;

use super::client::{Outcome, Session};
use super::sink::{Queued, PASSWORD};
use super::DemoError;
use crate::admin::client::{call, render, Verb};

/// The normal user.
pub const NORMAL_USER: &str = "alice";
/// The stolen account.
pub const STOLEN_USER: &str = "carol";
/// The normal user's messages.
const NORMAL_MESSAGES: usize = 6;
/// Between two of the normal user's messages.
const NORMAL_PAUSE: Duration = Duration::from_secs(5);
/// Recipients in each of the stolen account's messages.
const SPRAY_RECIPIENTS: usize = 25;
/// After a message of the stolen account had no recipient accepted.
const SPRAY_PAUSE: Duration = Duration::from_millis(250);
/// The stolen account's attempts at most.
const SPRAY_ATTEMPTS: usize = 2000;
/// How long the stolen account sprays at most.
const SPRAY_TIME: Duration = Duration::from_secs(100);
/// How often the stolen account's tally is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Messages the stolen account still sends once the first is held.
const AFTER_HELD: usize = 3;

/// What the stolen account met.
#[derive(Debug, Default)]
pub struct Spray {
    /// Messages relayed, and their recipients.
    pub relayed: usize,
    /// Recipients of the relayed messages.
    pub recipients: usize,
    /// Attempts with every recipient (or the sender) refused.
    pub refused: usize,
    /// The first refusal's answer.
    pub first_refusal: Option<String>,
    /// Messages held.
    pub held: usize,
}

/// What the normal user met: how many messages were relayed, and every other answer.
#[derive(Debug, Default)]
pub struct Normal {
    /// Messages relayed.
    pub relayed: usize,
    /// Answers other than a relay.
    pub other: Vec<String>,
}

/// The whole play's result.
#[derive(Debug)]
pub struct Played {
    /// The normal user's.
    pub normal: Normal,
    /// The stolen account's.
    pub spray: Spray,
    /// How long it took.
    pub took: Duration,
}

async fn normal_user(
    addr: SocketAddr,
    tls: TlsConnector,
    queued: Queued,
) -> Result<Normal, DemoError> {
    let mut met = Normal::default();
    let from = format!("{NORMAL_USER}@example.org");
    for n in 1..=NORMAL_MESSAGES {
        let mut s = Session::login(addr, &tls, NORMAL_USER, PASSWORD).await?;
        let to = vec![
            format!("colleague{n}@example.org"),
            "partner@example.net".to_string(),
        ];
        let subject = format!("Minutes of the meeting, part {n}");
        match s.send(&from, &to, &subject, &queued).await? {
            Outcome::Relayed { id, .. } => {
                met.relayed += 1;
                say!("{NORMAL_USER}: message {n} relayed, queued upstream as {id}");
            }
            other => {
                say!("{NORMAL_USER}: message {n}: {other:?}");
                met.other.push(format!("{other:?}"));
            }
        }
        s.quit().await;
        tokio::time::sleep(NORMAL_PAUSE).await;
    }
    Ok(met)
}

async fn stolen_account(
    addr: SocketAddr,
    tls: TlsConnector,
    queued: Queued,
) -> Result<Spray, DemoError> {
    let mut met = Spray::default();
    let from = format!("{STOLEN_USER}@example.org");
    let start = Instant::now();
    let mut s = Session::login(addr, &tls, STOLEN_USER, PASSWORD).await?;
    // The first answer of each kind is printed, then a tally every PROGRESS_EVERY.
    let mut seen: Vec<&str> = Vec::new();
    let mut first = |kind: &'static str| {
        let new = !seen.contains(&kind);
        seen.push(kind);
        new
    };
    let mut progress = PROGRESS_EVERY;
    for n in 1..=SPRAY_ATTEMPTS {
        if start.elapsed() > SPRAY_TIME || met.held > AFTER_HELD {
            break;
        }
        let secs = start.elapsed().as_secs();
        if start.elapsed() >= progress && met.held == 0 {
            say!(
                "{STOLEN_USER} ({secs:>2} s): so far {} messages relayed to {} recipients, {} \
                 attempts deferred outright",
                met.relayed,
                met.recipients,
                met.refused
            );
            progress += PROGRESS_EVERY;
        }
        let to: Vec<String> = (0..SPRAY_RECIPIENTS)
            .map(|i| format!("victim{}@example.net", n * SPRAY_RECIPIENTS + i))
            .collect();
        let subject = format!("Your invoice {n} is overdue");
        match s.send(&from, &to, &subject, &queued).await? {
            Outcome::Relayed {
                id,
                accepted,
                deferred,
            } => {
                met.relayed += 1;
                met.recipients += accepted;
                match deferred {
                    Some(d) if first("partly") => say!(
                        "{STOLEN_USER} ({secs:>2} s): message {n} relayed as {id} to {accepted} of \
                         {SPRAY_RECIPIENTS} recipients, the others deferred: {d}"
                    ),
                    None if first("relayed") => say!(
                        "{STOLEN_USER} ({secs:>2} s): message {n} relayed as {id} to all \
                         {SPRAY_RECIPIENTS} recipients"
                    ),
                    _ => {}
                }
            }
            Outcome::Refused(r) => {
                met.refused += 1;
                if met.first_refusal.is_none() {
                    met.first_refusal = Some(r.to_string());
                }
                if first("refused") {
                    say!("{STOLEN_USER} ({secs:>2} s): message {n} deferred: {r}");
                }
                tokio::time::sleep(SPRAY_PAUSE).await;
            }
            Outcome::Held { id } => {
                met.held += 1;
                say!(
                    "{STOLEN_USER} ({secs:>2} s): message {n} answered 250 but held by floodgate as {id}"
                );
            }
        }
    }
    s.quit().await;
    Ok(met)
}

/// Plays both users at once against floodgate's implicit-TLS listener `addr`.
pub async fn play(
    addr: SocketAddr,
    tls: TlsConnector,
    queued: Queued,
) -> Result<Played, DemoError> {
    let start = Instant::now();
    let normal = tokio::spawn(normal_user(addr, tls.clone(), queued.clone()));
    let spray = stolen_account(addr, tls, queued).await;
    let normal = normal
        .await
        .map_err(|e| DemoError::Timeout(format!("the normal user's task: {e}")))?;
    Ok(Played {
        normal: normal?,
        spray: spray?,
        took: start.elapsed(),
    })
}

/// Waits (at most `limit`) until floodgate serves its admin socket and `addr`.
pub async fn wait_for(socket: &Path, addr: SocketAddr, limit: Duration) -> Result<(), DemoError> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if socket.exists() && tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(DemoError::Timeout(format!(
        "floodgate did not come up on {addr} within {} s",
        limit.as_secs()
    )))
}

/// What floodgate's admin socket says: the restricted keys and the held messages, as
/// `floodgate restricted` and `floodgate held list` print them, and their counts.
pub struct Standing {
    /// `floodgate restricted`, printed.
    pub restricted_text: String,
    /// The restricted keys.
    pub restricted: Vec<String>,
    /// `floodgate held list`, printed.
    pub held_text: String,
    /// Messages held for the stolen account.
    pub held: usize,
}

/// Reads [`Standing`] from the admin socket (blocking).
pub fn standing(socket: &Path) -> Result<Standing, DemoError> {
    let r = call(socket, &Verb::Restricted)?;
    let restricted_text = render(&Verb::Restricted, &r);
    let list = r
        .get("restricted")
        .and_then(|v| v.as_array())
        .or_else(|| r.as_array())
        .cloned()
        .unwrap_or_default();
    let restricted = list
        .iter()
        .filter_map(|k| k.get("key").and_then(|k| k.as_str()).map(str::to_string))
        .collect();
    let verb = Verb::HeldList {
        key: Some(STOLEN_USER.to_string()),
        wide: false,
    };
    let h = call(socket, &verb)?;
    let list = h
        .get("held")
        .and_then(|v| v.as_array())
        .cloned()
        .unwrap_or_default();
    let held = list.len();
    // One short line a message: the table `floodgate held list` prints names every recipient.
    let held_text = list
        .iter()
        .map(|m| {
            format!(
                "{}  {}  {}  {} recipients  {}",
                m["id"].as_str().unwrap_or(""),
                m["key"].as_str().unwrap_or(""),
                m["limit"].as_str().unwrap_or(""),
                m["recipients"].as_array().map_or(0, Vec::len),
                m["subject"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Standing {
        restricted_text,
        restricted,
        held_text,
        held,
    })
}
