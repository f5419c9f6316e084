//! A strict reference SMTP server, written independently of floodgate's parsers: it reads
//! what floodgate writes upstream, answers it (steered by a script of decision bytes), and
//! records the commands, envelopes and messages it received.
//!
//! Strict means: every line ends in CRLF, a bare CR or LF anywhere is a violation, DATA ends
//! only at CRLF "." CRLF and every content line starting with "." must be dot-stuffed. A
//! message may also come as one `BDAT n LAST` chunk (floodgate sends whole messages so when
//! upstream offers CHUNKING): its content must be CRLF lines too, and any other BDAT is a
//! violation. Commands floodgate must never relay (STARTTLS, XCLIENT, unknown verbs) and
//! bytes after QUIT are violations too. Feeding the same bytes in any chunking, with the same
//! script, gives the same replies and the same record.

/// One MAIL or RCPT as upstream received it, with its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The path between the angle brackets.
    pub path: String,
    /// The reply code upstream gave.
    pub code: u16,
}

/// One message (DATA or BDAT) as upstream received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpMessage {
    /// The transaction's sender.
    pub sender: String,
    /// Recipients upstream accepted in the transaction.
    pub rcpts: Vec<String>,
    /// The unstuffed content, when DATA was answered 354 (or the BDAT chunk was taken).
    pub body: Option<Vec<u8>>,
    /// The final code: the end-of-data reply, or DATA's (or the chunk's) refusal.
    pub code: u16,
    /// The queue id given with a 250.
    pub queue_id: Option<String>,
}

/// Everything upstream received, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Every command line (SASL responses excluded) with its reply code.
    pub commands: Vec<(String, u16)>,
    /// MAIL commands.
    pub mails: Vec<Envelope>,
    /// RCPT commands.
    pub rcpts: Vec<Envelope>,
    /// DATA and BDAT commands with their content.
    pub messages: Vec<UpMessage>,
    /// Breaches of the strict grammar; must stay empty.
    pub violations: Vec<String>,
    /// The connection ended after QUIT.
    pub quit: bool,
}

enum State {
    Command,
    Data(Vec<u8>),
    /// Inside a `BDAT n LAST` chunk: its command line, the octets still to come, the
    /// octets so far.
    Chunk(String, usize, Vec<u8>),
    /// An AUTH exchange: how many more client responses are expected after this one.
    Sasl(u8),
    Quit,
}

struct Txn {
    sender: String,
    rcpts: Vec<String>,
}

/// The reference server for one upstream connection.
pub struct RefServer {
    script: Vec<u8>,
    pos: usize,
    buf: Vec<u8>,
    state: State,
    txn: Option<Txn>,
    next_id: u32,
    /// What was received so far.
    pub record: Record,
}

/// The greeting the reference server sends first.
pub const GREETING: &[u8] = b"220 ref.test ESMTP reference\r\n";

const EHLO_REPLY: &[u8] = b"250-ref.test\r\n250-PIPELINING\r\n250-SIZE 10000000\r\n\
250-8BITMIME\r\n250-ENHANCEDSTATUSCODES\r\n250-AUTH PLAIN LOGIN\r\n250-DSN\r\n\
250-SMTPUTF8\r\n250-STARTTLS\r\n250-CHUNKING\r\n250 XCLIENT ADDR NAME HELO\r\n";

/// Where a line ends in `buf`: `Ok(Some((line_len, consumed)))` for a CRLF line,
/// `Err(consumed)` for a line ended by a bare CR or LF, `Ok(None)` when incomplete.
fn next_line(buf: &[u8]) -> Result<Option<(usize, usize)>, usize> {
    let Some(i) = buf.iter().position(|&b| b == b'\r' || b == b'\n') else {
        return Ok(None);
    };
    if buf[i] == b'\n' {
        return Err(i + 1);
    }
    match buf.get(i + 1) {
        None => Ok(None),
        Some(b'\n') => Ok(Some((i, i + 2))),
        Some(_) => Err(i + 1),
    }
}

/// The path inside `<...>` at the start of `s` (quotes and escapes respected).
fn angle_path(s: &str) -> Option<String> {
    let rest = s.strip_prefix('<')?;
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == '>' && !quoted {
            return Some(rest[..i].to_string());
        }
    }
    None
}

impl RefServer {
    /// A server whose decisions follow `script` (one byte per decision; when it runs out,
    /// everything is accepted).
    pub fn new(script: &[u8]) -> RefServer {
        RefServer {
            script: script.to_vec(),
            pos: 0,
            buf: Vec::new(),
            state: State::Command,
            txn: None,
            next_id: 0,
            record: Record::default(),
        }
    }

    /// The next decision byte; `None` (accept) once the script is used up.
    fn decide(&mut self) -> Option<u8> {
        let b = self.script.get(self.pos).copied();
        self.pos += 1;
        b
    }

    /// Whether the server said 221 and closes.
    pub fn closed(&self) -> bool {
        matches!(self.state, State::Quit)
    }

    /// Bytes received but not yet a complete line or chunk (should be empty at the end).
    pub fn pending(&self) -> &[u8] {
        match &self.state {
            State::Chunk(..) => b"(inside a BDAT chunk)",
            _ => &self.buf,
        }
    }

    /// Takes more bytes; returns the replies to send.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if matches!(self.state, State::Quit) {
            if !bytes.is_empty() {
                self.violation(format!("{} bytes after QUIT", bytes.len()));
            }
            return out;
        }
        self.buf.extend_from_slice(bytes);
        loop {
            if matches!(self.state, State::Quit) {
                if !self.buf.is_empty() {
                    let n = self.buf.len();
                    self.violation(format!("{n} bytes after QUIT"));
                    self.buf.clear();
                }
                return out;
            }
            if let State::Chunk(_, left, body) = &mut self.state {
                let take = (*left).min(self.buf.len());
                body.extend(self.buf.drain(..take));
                *left -= take;
                if *left > 0 {
                    return out;
                }
                if let State::Chunk(command, _, body) =
                    std::mem::replace(&mut self.state, State::Command)
                {
                    self.chunk(command, body, &mut out);
                }
                continue;
            }
            let (line, used) = match next_line(&self.buf) {
                Ok(None) => return out,
                Ok(Some((len, used))) => (self.buf[..len].to_vec(), used),
                Err(used) => {
                    let shown = String::from_utf8_lossy(&self.buf[..used]).into_owned();
                    self.violation(format!("bare CR or LF in {shown:?}"));
                    (self.buf[..used - 1].to_vec(), used)
                }
            };
            self.buf.drain(..used);
            self.line(&line, &mut out);
        }
    }

    fn violation(&mut self, what: String) {
        self.record.violations.push(what);
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        match &mut self.state {
            State::Data(body) => {
                if line == b"." {
                    let body = std::mem::take(body);
                    self.state = State::Command;
                    self.end_of_data(body, out);
                    return;
                }
                let text = match line.strip_prefix(b".") {
                    Some(rest) if rest.starts_with(b".") => rest,
                    Some(_) => {
                        let shown = String::from_utf8_lossy(line).into_owned();
                        self.violation(format!("DATA line not dot-stuffed: {shown:?}"));
                        &line[1..]
                    }
                    None => line,
                };
                if let State::Data(body) = &mut self.state {
                    body.extend_from_slice(text);
                    body.extend_from_slice(b"\r\n");
                }
            }
            State::Sasl(more) => {
                let more = *more;
                if line == b"*" {
                    self.state = State::Command;
                    out.extend_from_slice(b"501 5.7.0 Authentication cancelled\r\n");
                } else if more > 0 {
                    self.state = State::Sasl(more - 1);
                    out.extend_from_slice(b"334 UGFzc3dvcmQ6\r\n");
                } else {
                    self.state = State::Command;
                    self.auth_result(out);
                }
            }
            State::Command => self.command(line, out),
            State::Chunk(..) | State::Quit => {}
        }
    }

    fn auth_result(&mut self, out: &mut Vec<u8>) -> u16 {
        if self.decide().is_some_and(|b| b % 3 == 0) {
            out.extend_from_slice(b"535 5.7.8 Authentication failed\r\n");
            535
        } else {
            out.extend_from_slice(b"235 2.7.0 Authentication successful\r\n");
            235
        }
    }

    fn end_of_data(&mut self, body: Vec<u8>, out: &mut Vec<u8>) {
        let txn = self.txn.take();
        let (sender, rcpts) = txn.map(|t| (t.sender, t.rcpts)).unwrap_or_default();
        let (code, queue_id) = if self.decide().is_some_and(|b| b % 4 == 0) {
            out.extend_from_slice(b"451 4.3.0 Reference: try again later\r\n");
            (451, None)
        } else {
            self.next_id += 1;
            let id = format!("REF{}", self.next_id);
            out.extend_from_slice(format!("250 2.0.0 Ok: queued as {id}\r\n").as_bytes());
            (250, Some(id))
        };
        self.record.messages.push(UpMessage {
            sender,
            rcpts,
            body: Some(body),
            code,
            queue_id,
        });
    }

    fn command(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let text = String::from_utf8_lossy(line).into_owned();
        if line.len() > 12288 {
            self.violation(format!("command line of {} octets", line.len()));
        }
        let verb = text
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        let arg = text.get(verb.len()..).unwrap_or("").trim_start();
        let reply: &[u8] = match verb.as_str() {
            "EHLO" | "HELO" => {
                self.txn = None;
                if verb == "EHLO" {
                    EHLO_REPLY
                } else {
                    b"250 ref.test\r\n"
                }
            }
            "MAIL" => return self.mail(&text, out),
            "RCPT" => return self.rcpt(&text, out),
            "DATA" => return self.data(out),
            "BDAT" => {
                let arg = arg.to_string();
                return self.bdat(text, &arg, out);
            }
            "RSET" => {
                self.txn = None;
                b"250 2.0.0 Ok\r\n"
            }
            "NOOP" => b"250 2.0.0 Ok\r\n",
            "HELP" => b"214 2.0.0 Reference help\r\n",
            "VRFY" => b"252 2.0.0 Cannot VRFY\r\n",
            "EXPN" => b"502 5.5.1 EXPN not available\r\n",
            "QUIT" => {
                self.state = State::Quit;
                self.record.quit = true;
                b"221 2.0.0 Bye\r\n"
            }
            "AUTH" => {
                let mut words = arg.split(' ');
                let mech = words.next().unwrap_or_default().to_ascii_uppercase();
                let initial = words.next().is_some();
                match (mech.as_str(), initial) {
                    ("PLAIN", true) => {
                        let code = self.auth_result(out);
                        self.record.commands.push((text, code));
                        return;
                    }
                    ("PLAIN", false) => {
                        self.state = State::Sasl(0);
                        b"334 \r\n"
                    }
                    ("LOGIN", true) => {
                        self.state = State::Sasl(0);
                        b"334 UGFzc3dvcmQ6\r\n"
                    }
                    ("LOGIN", false) => {
                        self.state = State::Sasl(1);
                        b"334 VXNlcm5hbWU6\r\n"
                    }
                    _ => {
                        self.violation(format!("AUTH with an unoffered mechanism: {mech}"));
                        b"504 5.5.4 Unrecognized authentication type\r\n"
                    }
                }
            }
            _ => {
                self.violation(format!("command floodgate must not relay: {text:?}"));
                b"502 5.5.1 Not relayed by a proxy\r\n"
            }
        };
        let code = reply_code(reply);
        self.record.commands.push((text, code));
        out.extend_from_slice(reply);
    }

    fn mail(&mut self, text: &str, out: &mut Vec<u8>) {
        let Some(path) = text.strip_prefix("MAIL FROM:").and_then(angle_path) else {
            self.violation(format!("malformed MAIL: {text:?}"));
            out.extend_from_slice(b"501 5.5.4 Syntax\r\n");
            return;
        };
        let reply: &[u8] = if self.txn.is_some() {
            b"503 5.5.1 Nested MAIL command\r\n"
        } else if self.decide().is_some_and(|b| b % 4 == 0) {
            b"550 5.7.1 Reference refuses this sender\r\n"
        } else {
            self.txn = Some(Txn {
                sender: path.clone(),
                rcpts: Vec::new(),
            });
            b"250 2.1.0 Ok\r\n"
        };
        let code = reply_code(reply);
        self.record.commands.push((text.to_string(), code));
        self.record.mails.push(Envelope { path, code });
        out.extend_from_slice(reply);
    }

    fn rcpt(&mut self, text: &str, out: &mut Vec<u8>) {
        let Some(path) = text.strip_prefix("RCPT TO:").and_then(angle_path) else {
            self.violation(format!("malformed RCPT: {text:?}"));
            out.extend_from_slice(b"501 5.5.4 Syntax\r\n");
            return;
        };
        let reply: &[u8] = if self.txn.is_none() {
            b"503 5.5.1 Need MAIL command\r\n"
        } else {
            match self.decide().map(|b| b % 8) {
                Some(0) => b"550 5.1.1 Reference: no such user\r\n",
                Some(1) => b"450 4.2.1 Reference: mailbox busy\r\n",
                _ => {
                    if let Some(t) = self.txn.as_mut() {
                        t.rcpts.push(path.clone());
                    }
                    b"250 2.1.5 Ok\r\n"
                }
            }
        };
        let code = reply_code(reply);
        self.record.commands.push((text.to_string(), code));
        self.record.rcpts.push(Envelope { path, code });
        out.extend_from_slice(reply);
    }

    /// `BDAT n LAST`: the whole message in one chunk, read before it is answered. Any other
    /// BDAT is a violation (floodgate never sends a message in pieces).
    fn bdat(&mut self, text: String, arg: &str, out: &mut Vec<u8>) {
        let mut words = arg.split(' ');
        let size = words.next().and_then(|n| n.parse::<usize>().ok());
        let last = words.next().is_some_and(|w| w.eq_ignore_ascii_case("LAST"));
        match size {
            Some(size) if last && words.next().is_none() => {
                self.state = State::Chunk(text, size, Vec::new());
            }
            _ => {
                self.violation(format!("BDAT other than BDAT n LAST: {text:?}"));
                self.record.commands.push((text, 501));
                out.extend_from_slice(b"501 5.5.4 Syntax: BDAT n LAST\r\n");
            }
        }
    }

    /// A whole `BDAT n LAST` chunk: answered as DATA and its end of data would be, with the
    /// same decisions in the same order.
    fn chunk(&mut self, command: String, body: Vec<u8>, out: &mut Vec<u8>) {
        let mut rest = &body[..];
        while !rest.is_empty() {
            let end = match next_line(rest) {
                Ok(Some((_, used))) => used,
                Ok(None) => {
                    self.violation("BDAT content does not end with CRLF".into());
                    rest.len()
                }
                Err(used) => {
                    let shown = String::from_utf8_lossy(&rest[..used]).into_owned();
                    self.violation(format!("bare CR or LF in BDAT content {shown:?}"));
                    used
                }
            };
            rest = &rest[end..];
        }
        if let Some(code) = self.refuse_data(out) {
            self.record.commands.push((command, code));
            return;
        }
        self.end_of_data(body, out);
        let code = self.record.messages.last().map_or(0, |m| m.code);
        self.record.commands.push((command, code));
    }

    fn data(&mut self, out: &mut Vec<u8>) {
        match self.refuse_data(out) {
            Some(code) => self.record.commands.push(("DATA".into(), code)),
            None => {
                self.record.commands.push(("DATA".into(), 354));
                self.state = State::Data(Vec::new());
                out.extend_from_slice(b"354 End data with <CR><LF>.<CR><LF>\r\n");
            }
        }
    }

    /// The refusal of a message before its content: no transaction, no recipients, or the
    /// script's 451. Writes the reply and records the refused message; `None` to go on.
    fn refuse_data(&mut self, out: &mut Vec<u8>) -> Option<u16> {
        let rcpts = self.txn.as_ref().map(|t| t.rcpts.len());
        let refused: Option<&[u8]> = match rcpts {
            None => Some(b"503 5.5.1 Need MAIL command\r\n"),
            Some(0) => Some(b"554 5.5.1 No valid recipients\r\n"),
            Some(_) if self.decide().is_some_and(|b| b % 4 == 0) => {
                Some(b"451 4.3.0 Reference: not now\r\n")
            }
            Some(_) => None,
        };
        let reply = refused?;
        let code = reply_code(reply);
        let (sender, rcpts) = self
            .txn
            .as_ref()
            .map(|t| (t.sender.clone(), t.rcpts.clone()))
            .unwrap_or_default();
        self.record.messages.push(UpMessage {
            sender,
            rcpts,
            body: None,
            code,
            queue_id: None,
        });
        out.extend_from_slice(reply);
        Some(code)
    }
}

fn reply_code(reply: &[u8]) -> u16 {
    std::str::from_utf8(&reply[..3])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_lines_and_dot_stuffing() {
        let mut s = RefServer::new(&[]);
        s.feed(b"EHLO a\r\nMAIL FROM:<\"x>y\"@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n");
        s.feed(b"..dot\r\nplain\r\n.\r\nQUIT\r\n");
        assert!(s.record.violations.is_empty(), "{:?}", s.record.violations);
        assert_eq!(s.record.mails[0].path, "\"x>y\"@b");
        let m = &s.record.messages[0];
        assert_eq!(m.body.as_deref(), Some(&b".dot\r\nplain\r\n"[..]));
        assert_eq!(m.rcpts, ["c@d"]);
        assert_eq!(m.queue_id.as_deref(), Some("REF1"));
        assert!(s.closed());
    }

    #[test]
    fn bare_endings_unstuffed_dots_and_unrelayable_commands_are_violations() {
        for bad in [
            &b"NOOP\n"[..],
            b"NOOP\rX\r\n",
            b"BDAT 3\r\nabc",
            b"HELO a\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nBDAT 3 LAST\r\na\nb",
            b"STARTTLS\r\n",
        ] {
            let mut s = RefServer::new(&[]);
            s.feed(bad);
            assert!(!s.record.violations.is_empty(), "{bad:?}");
        }
        let mut s = RefServer::new(&[]);
        s.feed(b"HELO a\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n.x\r\n.\r\n");
        assert_eq!(s.record.violations.len(), 1);
        let mut s = RefServer::new(&[]);
        s.feed(b"QUIT\r\nNOOP\r\n");
        assert_eq!(s.record.violations.len(), 1);
    }

    #[test]
    fn one_bdat_last_is_a_message_as_data_would_be() {
        let data =
            b"HELO a\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n..dot\r\nx\r\n.\r\nQUIT\r\n";
        let bdat =
            b"HELO a\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nBDAT 9 LAST\r\n.dot\r\nx\r\nQUIT\r\n";
        for script in [&[][..], &[1, 1, 4], &[1, 1, 1, 4]] {
            let mut a = RefServer::new(script);
            let mut b = RefServer::new(script);
            a.feed(data);
            let mut replies = Vec::new();
            for byte in bdat {
                replies.extend(b.feed(&[*byte]));
            }
            assert!(b.record.violations.is_empty(), "{:?}", b.record.violations);
            assert_eq!(a.record.messages, b.record.messages, "script {script:?}");
            assert!(b.closed() && b.pending().is_empty());
            let replies = String::from_utf8_lossy(&replies).into_owned();
            assert_eq!(replies.matches("\r\n").count(), 5, "{replies}");
        }
    }

    #[test]
    fn chunking_does_not_change_the_record() {
        let wire = b"EHLO a\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nRCPT TO:<e@f>\r\nDATA\r\n\
                     x\r\n.\r\nAUTH LOGIN\r\ndXNlcg==\r\ncGFzcw==\r\nQUIT\r\n";
        let script = [3, 0, 9, 5];
        let mut whole = RefServer::new(&script);
        let a = whole.feed(wire);
        let mut bytewise = RefServer::new(&script);
        let mut b = Vec::new();
        for byte in wire {
            b.extend(bytewise.feed(&[*byte]));
        }
        assert_eq!(a, b);
        assert_eq!(whole.record, bytewise.record);
        assert_eq!(whole.record.rcpts[0].code, 550);
    }
}
