//! The transaction's envelope as relayed, kept for a message floodgate may take instead of
//! relaying it (held, paced or rerouted).

use crate::smtp::command::Command;

/// The transaction's envelope as relayed, kept only when a hold spool or a second smart
/// host is configured.
#[derive(Default, Debug)]
pub(super) struct Envelope {
    /// `<sender> PARAMS` of the accepted MAIL.
    pub mail: Option<String>,
    /// `<recipient> PARAMS` of each accepted RCPT.
    pub rcpts: Vec<String>,
}

impl Envelope {
    /// Forgets the transaction's envelope.
    pub(super) fn clear(&mut self) {
        self.mail = None;
        self.rcpts.clear();
    }
}

/// The argument of a MAIL or RCPT command in its canonical wire form: `<path> PARAMS`.
pub(super) fn argument(cmd: &Command) -> String {
    let mut wire = Vec::new();
    cmd.write_wire(&mut wire);
    let text = String::from_utf8_lossy(&wire);
    let text = text.trim_end_matches("\r\n");
    let arg = text
        .strip_prefix("MAIL FROM:")
        .or_else(|| text.strip_prefix("RCPT TO:"))
        .unwrap_or(text);
    arg.to_string()
}
