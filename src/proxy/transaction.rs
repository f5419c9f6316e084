//! The message's line in the event log: told to the policy's observer at the end of the
//! data, with what floodgate did with the message.

use super::hold::kept_name;
use super::session::Session;
use crate::policy::alert::{incident_key, Transaction};

/// The address of a RCPT argument (`<a@b> NOTIFY=NEVER` gives `a@b`).
fn address(arg: &str) -> &str {
    let first = arg.split(' ').next().unwrap_or("");
    first
        .strip_prefix('<')
        .and_then(|s| s.strip_suffix('>'))
        .unwrap_or(first)
}

impl Session {
    /// Tells the policy that the transaction's message ended with `verdict`.
    pub(super) fn tell_transaction(&self, verdict: &str) {
        let recipients: Vec<String> = self
            .transaction
            .envelope
            .rcpts
            .iter()
            .map(|r| address(r).to_string())
            .collect();
        let name = self
            .client
            .names
            .known()
            .and_then(|n| kept_name(&n.reverse));
        let key = incident_key(&self.policy.facts);
        self.shared.policy.transaction(&Transaction {
            time_us: crate::store::now_micros(),
            key: &key,
            client: self.policy.facts.client_ip,
            name: name.as_deref(),
            user: self.policy.facts.user.as_deref(),
            login: self.policy.facts.login.as_deref(),
            sender: self.policy.facts.sender.as_deref().unwrap_or(""),
            recipients: &recipients,
            subject: self.policy.facts.subject.as_deref(),
            verdict,
        });
    }
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
