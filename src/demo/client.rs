//! The demo's SMTP client: implicit TLS to floodgate's submission listener, AUTH PLAIN,
//! then messages, each answered as relayed (queued by the stand-in), held (queued by
//! floodgate itself), deferred or refused.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::sink::Queued;
use super::DemoError;

/// How long one reply may take.
const REPLY_TIME: Duration = Duration::from_secs(30);
/// The most lines of one reply.
const MAX_REPLY_LINES: usize = 100;
/// The longest reply line.
const MAX_LINE: u64 = 4096;

/// One SMTP reply: its code and its lines' text joined by spaces.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The reply code.
    pub code: u16,
    /// The text of every line, without the codes.
    pub text: String,
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.text)
    }
}

/// What became of one message.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The stand-in queued it (to `accepted` recipients; the others' answers in `deferred`).
    Relayed {
        /// The stand-in's queue id.
        id: String,
        /// Recipients accepted.
        accepted: usize,
        /// The first refused recipient's answer, when any was refused.
        deferred: Option<Reply>,
    },
    /// floodgate took it into its hold spool and answered itself.
    Held {
        /// The hold spool's id.
        id: String,
    },
    /// Refused before the end of the data: every recipient, or the sender, or the data.
    Refused(Reply),
}

/// An authenticated SMTP session with floodgate.
pub struct Session {
    stream: BufReader<TlsStream<TcpStream>>,
    peer: String,
}

/// The TLS settings of the demo's clients: they trust the CA in `ca_file`.
pub fn tls(ca_file: &std::path::Path) -> Result<TlsConnector, DemoError> {
    crate::tls::client_config(Some(ca_file))
        .map(TlsConnector::from)
        .map_err(|e| DemoError::Tls(e.to_string()))
}

impl Session {
    /// Connects to `addr` with implicit TLS and logs in as `user` with `password`.
    pub async fn login(
        addr: SocketAddr,
        tls: &TlsConnector,
        user: &str,
        password: &str,
    ) -> Result<Session, DemoError> {
        let peer = addr.to_string();
        let tcp = tokio::time::timeout(REPLY_TIME, TcpStream::connect(addr))
            .await
            .map_err(|_| DemoError::Timeout(format!("connecting to {peer}")))?
            .map_err(DemoError::io(format!("connecting to {peer}")))?;
        let name = ServerName::from(addr.ip());
        let stream = tokio::time::timeout(REPLY_TIME, tls.connect(name, tcp))
            .await
            .map_err(|_| DemoError::Timeout(format!("TLS handshake with {peer}")))?
            .map_err(|e| DemoError::Tls(format!("handshake with {peer}: {e}")))?;
        let mut s = Session {
            stream: BufReader::new(stream),
            peer,
        };
        s.expect(220).await?;
        let ehlo = s.command("EHLO client.demo").await?;
        s.check(&ehlo, 250)?;
        let token = base64::engine::general_purpose::STANDARD
            .encode(format!("\0{user}\0{password}").as_bytes());
        let auth = s.command(&format!("AUTH PLAIN {token}")).await?;
        s.check(&auth, 235)?;
        Ok(s)
    }

    fn error(&self, reason: String) -> DemoError {
        DemoError::Smtp {
            peer: self.peer.clone(),
            reason,
        }
    }

    fn check(&self, r: &Reply, code: u16) -> Result<(), DemoError> {
        if r.code == code {
            Ok(())
        } else {
            Err(self.error(format!("expected {code}, got {r}")))
        }
    }

    async fn expect(&mut self, code: u16) -> Result<Reply, DemoError> {
        let r = self.reply().await?;
        self.check(&r, code)?;
        Ok(r)
    }

    /// Reads one reply, all its lines.
    pub async fn reply(&mut self) -> Result<Reply, DemoError> {
        let mut text = Vec::new();
        for _ in 0..MAX_REPLY_LINES {
            let mut buf = Vec::new();
            let mut limited = (&mut self.stream).take(MAX_LINE);
            let read = limited.read_until(b'\n', &mut buf);
            let n = tokio::time::timeout(REPLY_TIME, read)
                .await
                .map_err(|_| DemoError::Timeout(format!("no reply from {}", self.peer)))?
                .map_err(DemoError::io(format!("reading from {}", self.peer)))?;
            let line = String::from_utf8_lossy(&buf[..n]).trim_end().to_string();
            let code = line.get(..3).and_then(|c| c.parse::<u16>().ok());
            let Some(code) = code else {
                return Err(self.error(format!("not a reply: {line:?}")));
            };
            text.push(line.get(4..).unwrap_or("").to_string());
            if line.as_bytes().get(3) != Some(&b'-') {
                return Ok(Reply {
                    code,
                    text: text.join(" "),
                });
            }
        }
        Err(self.error("a reply of too many lines".into()))
    }

    /// Sends one command line and reads its reply.
    pub async fn command(&mut self, line: &str) -> Result<Reply, DemoError> {
        let w = self.stream.get_mut();
        // One write per command: a line and its CRLF in two segments would wait for the
        // peer's delayed acknowledgement.
        let bytes = format!("{line}\r\n");
        let write = async {
            w.write_all(bytes.as_bytes()).await?;
            w.flush().await
        };
        tokio::time::timeout(REPLY_TIME, write)
            .await
            .map_err(|_| DemoError::Timeout(format!("writing to {}", self.peer)))?
            .map_err(DemoError::io(format!("writing to {}", self.peer)))?;
        self.reply().await
    }

    /// Sends one message from `from` to `to` with `subject`; `queued` tells the stand-in's
    /// queue ids from floodgate's own.
    pub async fn send(
        &mut self,
        from: &str,
        to: &[String],
        subject: &str,
        queued: &Queued,
    ) -> Result<Outcome, DemoError> {
        let mail = self.command(&format!("MAIL FROM:<{from}>")).await?;
        if mail.code != 250 {
            return Ok(Outcome::Refused(mail));
        }
        let mut accepted = 0;
        let mut deferred = None;
        for rcpt in to {
            let r = self.command(&format!("RCPT TO:<{rcpt}>")).await?;
            if r.code == 250 || r.code == 251 {
                accepted += 1;
            } else if deferred.is_none() {
                deferred = Some(r);
            }
        }
        if accepted == 0 {
            let _ = self.command("RSET").await?;
            let r = deferred.unwrap_or_else(|| Reply {
                code: 554,
                text: "no recipient".into(),
            });
            return Ok(Outcome::Refused(r));
        }
        let data = self.command("DATA").await?;
        if data.code != 354 {
            return Ok(Outcome::Refused(data));
        }
        let message = format!(
            "From: <{from}>\r\nTo: <{}>\r\nSubject: {subject}\r\n\r\n{subject}.\r\n.\r\n",
            to[0]
        );
        let end = self.command(message.trim_end_matches("\r\n")).await?;
        if end.code != 250 {
            return Ok(Outcome::Refused(end));
        }
        let id = end
            .text
            .rsplit_once("queued as ")
            .map(|(_, id)| id.trim().to_string())
            .unwrap_or_default();
        Ok(if queued.contains(&id) {
            Outcome::Relayed {
                id,
                accepted,
                deferred,
            }
        } else {
            Outcome::Held { id }
        })
    }

    /// Ends the session politely.
    pub async fn quit(mut self) {
        let _ = self.command("QUIT").await;
    }
}
