//! One milter connection's I/O: packets read from Postfix, handed to the session, answers
//! written back. The option negotiation comes first (the events and macros of
//! [`super::events`]); then Postfix describes one SMTP session after another (`K` starts
//! the next, `Q` ends the connection). Packets are read into one buffer and parsed where
//! they lie; the answers to what Postfix sent at once go out in one write. A refusal made
//! at an event Postfix does not wait for is given at the next event it waits for, at the
//! latest the end of the message.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use crate::postfix::milter::{macro_value, negotiate, next_packet, Command, MilterError, Response};

use super::session::{Answer, Context, MilterSession};

/// Why a milter connection ended before Postfix closed it.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// Reading or writing failed.
    #[error("milter connection: {0}")]
    Io(#[from] std::io::Error),
    /// Postfix sent a packet floodgate cannot read, or an offer it cannot agree to.
    #[error(transparent)]
    Protocol(#[from] MilterError),
    /// A command before the negotiation.
    #[error("milter command {0:?} before the option negotiation")]
    NotNegotiated(char),
}

/// Macros Postfix sent for the stage of command octet `stage`, kept until that command:
/// names and values one after another in `text`, at the ranges of `pairs`.
#[derive(Default)]
struct Macros {
    stage: u8,
    text: Vec<u8>,
    pairs: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
}

impl Macros {
    /// Keeps `pairs` for `stage`, in the storage of the ones before.
    fn set(&mut self, stage: u8, pairs: &[(&[u8], &[u8])]) {
        self.stage = stage;
        self.text.clear();
        self.pairs.clear();
        for (n, v) in pairs {
            let at = self.text.len();
            self.text.extend_from_slice(n);
            self.text.extend_from_slice(v);
            self.pairs
                .push((at..at + n.len(), at + n.len()..at + n.len() + v.len()));
        }
    }

    fn clear(&mut self) {
        self.stage = 0;
        self.text.clear();
        self.pairs.clear();
    }

    fn for_stage(&self, stage: u8) -> Vec<(&[u8], &[u8])> {
        if self.stage != stage {
            return Vec::new();
        }
        self.pairs
            .iter()
            .map(|(n, v)| (&self.text[n.clone()], &self.text[v.clone()]))
            .collect()
    }
}

/// Free room kept in the read buffer before each read.
const READ_ROOM: usize = 16 * 1024;

/// One connection's loop.
pub struct Conn<S> {
    stream: S,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    steps: Option<u32>,
    macros: Macros,
    /// The queue id from the latest `i` macro of this transaction.
    queue_id: Option<String>,
    /// A refusal made at an event Postfix did not wait for, owed to the next one it waits
    /// for; with whether it was made at connect or HELO (it lasts the SMTP session) rather
    /// than in the transaction (it lasts until the transaction ends).
    owed: Option<(Answer, bool)>,
    session: MilterSession,
    ctx: Context,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// A connection on `stream` for `ctx`'s policy.
    pub fn new(stream: S, ctx: Context) -> Conn<S> {
        Conn {
            stream,
            rbuf: Vec::with_capacity(READ_ROOM),
            wbuf: Vec::with_capacity(256),
            steps: None,
            macros: Macros::default(),
            queue_id: None,
            owed: None,
            session: MilterSession::new(ctx.clone()),
            ctx,
        }
    }

    /// Serves the connection until Postfix closes it or sends something floodgate cannot
    /// read (then the connection is closed: Postfix applies `milter_default_action`).
    pub async fn run(mut self) -> Result<(), ConnError> {
        let ended = self.serve().await;
        if ended.is_err() {
            // Answers owed before the bad packet still go out.
            let _ = self.flush().await;
        }
        ended
    }

    async fn serve(&mut self) -> Result<(), ConnError> {
        // The buffer is lent out while the packets in it are handled where they lie.
        let mut rbuf = std::mem::take(&mut self.rbuf);
        let served = self.serve_from(&mut rbuf).await;
        self.rbuf = rbuf;
        served
    }

    async fn serve_from(&mut self, rbuf: &mut Vec<u8>) -> Result<(), ConnError> {
        let mut at = 0;
        loop {
            let Some((packet, used)) = next_packet(&rbuf[at..])? else {
                rbuf.drain(..at);
                at = 0;
                rbuf.reserve(READ_ROOM);
                if self.stream.read_buf(rbuf).await? == 0 {
                    return Ok(());
                }
                continue;
            };
            at += used;
            let command = Command::parse(packet)?;
            if !self.handle(command).await? {
                self.flush().await?;
                return Ok(());
            }
            // Answers go out once no whole packet waits: one write for what was pipelined.
            if next_packet(&rbuf[at..])?.is_none() {
                self.flush().await?;
            }
        }
    }

    async fn flush(&mut self) -> Result<(), ConnError> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    fn send(&mut self, r: &Response<'_>) -> Result<(), ConnError> {
        r.encode(&mut self.wbuf)?;
        Ok(())
    }

    fn answer(&mut self, a: &Answer) -> Result<(), ConnError> {
        let r = match a {
            Answer::Continue => Response::Continue,
            Answer::Reply(t) => Response::ReplyCode(t),
            Answer::Quarantine(t) => Response::Quarantine(t),
            Answer::AddHeader(n, v) => Response::AddHeader { name: n, value: v },
        };
        if let Err(e) = r.encode(&mut self.wbuf) {
            // A text the policy made that cannot be sent: go on rather than break Postfix.
            warn!(error = %e, "milter answer left out");
            if matches!(a, Answer::Reply(_)) {
                Response::Tempfail.encode(&mut self.wbuf)?;
            }
        }
        Ok(())
    }

    /// Answers `a` to `command` when Postfix waits for an answer to it.
    fn reply(&mut self, command: &Command<'_>, a: &Answer) -> Result<(), ConnError> {
        if command.wants_answer(self.steps.unwrap_or(0)) {
            self.answer(a)?;
        }
        Ok(())
    }

    /// The session's answer `a` to `command`: answered when Postfix waits for it; a
    /// refusal Postfix does not wait for is owed to the next event it waits for (for the
    /// whole SMTP session when made at connect or HELO).
    fn settle(&mut self, command: &Command<'_>, a: Answer) -> Result<(), ConnError> {
        if matches!(a, Answer::Reply(_)) && !command.wants_answer(self.steps.unwrap_or(0)) {
            let whole_session = matches!(command, Command::Connect { .. } | Command::Helo(_));
            self.owed = Some((a, whole_session));
            return Ok(());
        }
        self.reply(command, &a)
    }

    /// The owed refusal, answered to `command` when Postfix waits for it; false when none
    /// is owed (the session is to hear `command`).
    fn pay_owed(&mut self, command: &Command<'_>) -> Result<bool, ConnError> {
        let Some((a, _)) = self.owed.clone() else {
            return Ok(false);
        };
        self.reply(command, &a)?;
        Ok(true)
    }

    /// The transaction ended: a refusal owed for it is dropped.
    fn end_transaction(&mut self) {
        if matches!(self.owed, Some((_, false))) {
            self.owed = None;
        }
    }

    /// The end of the message: a refusal owed refuses it; else the session's ending, a
    /// hold written down before Postfix is told (if it cannot be, the message is refused
    /// for now rather than held unknown to floodgate).
    async fn end_of_message(
        &mut self,
        command: &Command<'_>,
        chunk: &[u8],
    ) -> Result<(), ConnError> {
        let queue_id = self.queue_id.take();
        if self.owed.is_some() {
            self.session.abort();
            self.pay_owed(command)?;
            self.end_transaction();
            return Ok(());
        }
        self.session.body(chunk);
        let ending = self.session.end_of_message(queue_id.as_deref()).await;
        if let Some(held) = ending.held {
            if let Err(e) = super::held::record(&self.ctx, held) {
                warn!(error = %e, "held message not recorded: answered tempfail");
                return self.send(&Response::Tempfail);
            }
        }
        for a in &ending.answers {
            self.answer(a)?;
        }
        Ok(())
    }

    /// One command; false when the connection is to end.
    async fn handle(&mut self, command: Command<'_>) -> Result<bool, ConnError> {
        if let Command::Negotiate(offer) = command {
            let agreed = negotiate(offer, &self.ctx.wanted)?;
            debug!(
                version = agreed.options.version,
                actions = agreed.options.actions,
                steps = agreed.options.steps,
                "milter options agreed"
            );
            self.steps = Some(agreed.options.steps);
            self.send(&Response::Negotiate(agreed.options, agreed.macros))?;
            return Ok(true);
        }
        if self.steps.is_none() {
            return Err(ConnError::NotNegotiated(command_char(&command)));
        }
        match command {
            Command::Negotiate(_) => unreachable!("answered above"),
            Command::Macros { stage, pairs } => {
                if let Some(i) = macro_value(&pairs, "i").filter(|i| !i.is_empty()) {
                    self.queue_id = Some(String::from_utf8_lossy(i).into_owned());
                }
                self.macros.set(stage, &pairs);
            }
            Command::Connect {
                hostname,
                ref address,
            } => {
                let a = self.session.connect(hostname, address).await;
                self.settle(&command, a)?;
            }
            Command::Helo(name) => {
                if !self.pay_owed(&command)? {
                    let tls = macro_value(&self.macros.for_stage(b'H'), "{tls_version}")
                        .is_some_and(|v| !v.is_empty());
                    let a = self.session.helo(name, tls).await;
                    self.settle(&command, a)?;
                }
            }
            Command::Mail(ref args) => {
                self.end_transaction();
                if !self.pay_owed(&command)? {
                    let macros = self.macros.for_stage(b'M');
                    let a = self.session.mail(args, &macros).await;
                    self.settle(&command, a)?;
                }
            }
            Command::Rcpt(ref args) => {
                if !self.pay_owed(&command)? {
                    let a = self.session.rcpt(args).await;
                    self.settle(&command, a)?;
                }
            }
            Command::Data => {
                if !self.pay_owed(&command)? {
                    let a = self.session.data().await;
                    self.settle(&command, a)?;
                }
            }
            Command::Header { name, value } => {
                if self.owed.is_none() {
                    self.session.header(name, value);
                }
                self.reply(&command, &Answer::Continue)?;
            }
            Command::EndOfHeaders | Command::Unknown(_) => {
                self.reply(&command, &Answer::Continue)?;
            }
            Command::Body(chunk) => {
                if self.owed.is_none() {
                    self.session.body(chunk);
                }
                self.reply(&command, &Answer::Continue)?;
            }
            Command::EndOfMessage(chunk) => self.end_of_message(&command, chunk).await?,
            Command::Abort => {
                self.queue_id = None;
                self.end_transaction();
                self.session.abort();
            }
            Command::QuitNewConnection => {
                self.session = MilterSession::new(self.ctx.clone());
                self.macros.clear();
                self.queue_id = None;
                self.owed = None;
            }
            Command::Quit => return Ok(false),
        }
        Ok(true)
    }
}

/// The command octet of a command, for errors.
fn command_char(c: &Command<'_>) -> char {
    match c {
        Command::Negotiate(_) => 'O',
        Command::Macros { .. } => 'D',
        Command::Connect { .. } => 'C',
        Command::Helo(_) => 'H',
        Command::Mail(_) => 'M',
        Command::Rcpt(_) => 'R',
        Command::Data => 'T',
        Command::Header { .. } => 'L',
        Command::EndOfHeaders => 'N',
        Command::Body(_) => 'B',
        Command::EndOfMessage(_) => 'E',
        Command::Abort => 'A',
        Command::Quit => 'Q',
        Command::QuitNewConnection => 'K',
        Command::Unknown(_) => 'U',
    }
}

/// Serves one accepted connection, logging how it ended.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S, ctx: Context) {
    let name = ctx.name.clone();
    match Conn::new(stream, ctx).run().await {
        Ok(()) => debug!(milter = %name, "milter connection closed"),
        Err(e) => info!(milter = %name, error = %e, "milter connection ended"),
    }
}

#[cfg(test)]
mod tests;
