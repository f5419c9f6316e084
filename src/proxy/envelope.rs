//! The transaction's envelope as relayed, kept for a message floodgate may take instead of
//! relaying it (held, paced or rerouted) and for the message's line in the event log.

use crate::logs::text::IpText;
use crate::smtp::command::Command;
use crate::smtp::xclient::{ClientName, TEMPUNAVAIL};

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

    /// The addresses of the accepted recipients.
    pub(super) fn recipients(&self) -> Vec<String> {
        self.rcpts.iter().map(|r| address(r).to_string()).collect()
    }
}

/// A message floodgate takes, as its log lines name it.
pub(super) struct Named<'a> {
    /// The client's address.
    pub client: &'a IpText,
    /// The authenticated user, or empty.
    pub user: &'a str,
    /// The envelope sender.
    pub sender: &'a str,
    /// The message's size as the client sent it.
    pub size: u64,
}

/// The address of a RCPT argument (`<a@b> NOTIFY=NEVER` gives `a@b`).
fn address(arg: &str) -> &str {
    let first = arg.split(' ').next().unwrap_or("");
    first
        .strip_prefix('<')
        .and_then(|s| s.strip_suffix('>'))
        .unwrap_or(first)
}

/// A client name as the held file and the event log keep it: the name, `[TEMPUNAVAIL]`, or
/// nothing.
pub(super) fn kept_name(n: &ClientName) -> Option<String> {
    match n {
        ClientName::Known(n) => Some(n.clone()),
        ClientName::TempUnavailable => Some(TEMPUNAVAIL.into()),
        ClientName::Unavailable => None,
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

#[cfg(test)]
mod tests {
    use super::address;

    #[test]
    fn addresses_of_rcpt_arguments() {
        assert_eq!(address("<a@b> NOTIFY=NEVER"), "a@b");
        assert_eq!(address("<a@b>"), "a@b");
        assert_eq!(address("a@b"), "a@b");
        assert_eq!(address(""), "");
    }
}
