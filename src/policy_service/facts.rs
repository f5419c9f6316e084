//! A policy request read as the policy's facts and stage, without I/O.

use crate::policy::identity::Identity;
use crate::policy::{Facts, Stage};
use crate::postfix::policy::{PolicyRequest, ProtocolState};
use crate::smtp::address::{AddressRole, Path};

/// The stage Postfix asks about in `state`; `None` for VRFY and ETRN, which no limit
/// judges.
pub fn stage_of(state: ProtocolState) -> Option<Stage> {
    match state {
        ProtocolState::Connect => Some(Stage::Connect),
        ProtocolState::Helo => Some(Stage::Helo),
        ProtocolState::Mail => Some(Stage::Mail),
        ProtocolState::Rcpt => Some(Stage::Rcpt),
        ProtocolState::Data => Some(Stage::Data),
        ProtocolState::EndOfMessage => Some(Stage::Message),
        ProtocolState::Vrfy | ProtocolState::Etrn => None,
    }
}

/// Which client session a request belongs to. Postfix names no session, but one `smtpd`
/// process serves one client at a time, and a client's address and port name its TCP
/// connection while it lasts.
pub fn session_of(req: &PolicyRequest) -> String {
    let address = req.get("client_address").unwrap_or("");
    let port = req.get("client_port").unwrap_or("");
    let mut key = String::with_capacity(address.len() + 1 + port.len());
    key.push_str(address);
    key.push('|');
    key.push_str(port);
    key
}

/// Fills `facts` from `req` for a check at `stage`: the client, its HELO name, TLS, the
/// login folded by `identity` into its account (one account, one key, as the proxy folds
/// it), and from MAIL on the sender, the recipient at RCPT, the count of recipients and
/// the size at DATA and END-OF-MESSAGE (Postfix counts them there).
pub fn fill(facts: &mut Facts, req: &PolicyRequest, identity: &Identity, stage: Stage) {
    facts.client_ip = req.client_address();
    facts.client_port = req.client_port().unwrap_or(0);
    if let Some(helo) = req.non_empty("helo_name") {
        set(&mut facts.helo, Some(helo));
    }
    facts.tls = req.non_empty("encryption_protocol").is_some();
    match req.sasl_username() {
        Some(login) => {
            let user = identity.fold(login).into_owned();
            facts.login = (user != login).then(|| login.to_string());
            facts.user = Some(user);
        }
        None => {
            facts.user = None;
            facts.login = None;
        }
    }
    if matches!(stage, Stage::Connect | Stage::Helo) {
        return;
    }
    set(&mut facts.sender, req.get("sender"));
    if let Some(size) = req.size() {
        facts.message_size = size;
    }
    if stage == Stage::Rcpt {
        let recipient = req.get("recipient").unwrap_or("");
        facts.recipient = Some(recipient.to_string());
        facts.recipient_normalized = Some(normalized(recipient));
    }
    if matches!(stage, Stage::Data | Stage::Message) {
        if let Some(n) = req.recipient_count() {
            facts.recipients_count = n as usize;
        }
    }
}

/// Sets `field` to `value`, reusing its string when it holds one already.
fn set(field: &mut Option<String>, value: Option<&str>) {
    match (field.as_mut(), value) {
        (Some(old), Some(new)) if old == new => {}
        (Some(old), Some(new)) => {
            old.clear();
            old.push_str(new);
        }
        (_, v) => *field = v.map(str::to_string),
    }
}

/// Exim's per_addr form of `recipient`: local part and domain lower-cased (the text
/// lower-cased when Postfix passed something that is not an address).
fn normalized(recipient: &str) -> String {
    match Path::parse(recipient, AddressRole::Recipient) {
        Ok(p) => p.normalized(),
        Err(_) => recipient.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postfix::policy::RequestReader;
    use proptest::prelude::*;

    fn request(lines: &[&str]) -> PolicyRequest {
        let mut r = RequestReader::default();
        for l in lines {
            assert_eq!(r.line(l.as_bytes()), Ok(None));
        }
        r.line(b"").unwrap().unwrap()
    }

    fn identity(fold: &str) -> Identity {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n\
             [identity]\nlogin_fold = \"{fold}\"\n"
        );
        let c = crate::config::Config::parse(std::path::Path::new("/t.toml"), &text).unwrap();
        crate::policy::compile(&c).unwrap().identity
    }

    #[test]
    fn a_recipient_request_fills_the_facts() {
        let req = request(&[
            "request=smtpd_access_policy",
            "protocol_state=RCPT",
            "client_address=192.0.2.9",
            "client_port=40001",
            "helo_name=pc.example.org",
            "sasl_username=Alice@Example.ORG",
            "sender=alice@example.org",
            "recipient=Bob@Example.NET",
            "size=1200",
            "encryption_protocol=TLSv1.3",
            "x_unknown=kept but meaning nothing",
        ]);
        let mut f = Facts::default();
        fill(&mut f, &req, &identity("lowercase"), Stage::Rcpt);
        assert_eq!(f.client_ip, Some("192.0.2.9".parse().unwrap()));
        assert_eq!(f.client_port, 40001);
        assert_eq!(f.user.as_deref(), Some("alice@example.org"));
        assert_eq!(f.login.as_deref(), Some("Alice@Example.ORG"));
        assert_eq!(f.recipient_normalized.as_deref(), Some("bob@example.net"));
        assert_eq!(f.helo.as_deref(), Some("pc.example.org"));
        assert!(f.tls);
        assert_eq!(f.message_size, 1200);
        assert_eq!(session_of(&req), "192.0.2.9|40001");
    }

    #[test]
    fn no_login_no_user_and_counts_only_at_data() {
        let req = request(&[
            "protocol_state=RCPT",
            "sasl_username=",
            "recipient_count=0",
            "client_address=unknown",
        ]);
        let mut f = Facts {
            recipients_count: 3,
            ..Facts::default()
        };
        fill(&mut f, &req, &identity("exact"), Stage::Rcpt);
        assert!(f.user.is_none() && f.client_ip.is_none() && !f.tls);
        assert_eq!(f.recipients_count, 3);
        fill(&mut f, &req, &identity("exact"), Stage::Message);
        assert_eq!(f.recipients_count, 0);
    }

    #[test]
    fn every_state_has_its_stage() {
        assert_eq!(stage_of(ProtocolState::EndOfMessage), Some(Stage::Message));
        assert_eq!(stage_of(ProtocolState::Helo), Some(Stage::Helo));
        assert_eq!(stage_of(ProtocolState::Vrfy), None);
    }

    proptest! {
        /// Any attribute values fill the facts without a panic, and the account is the
        /// login folded.
        #[test]
        fn any_request_fills(login in "[ -~]{0,40}", rcpt in "[ -~]{0,60}", n in "[0-9a-z]{0,6}") {
            let lines = [
                format!("sasl_username={login}"),
                format!("recipient={rcpt}"),
                format!("recipient_count={n}"),
            ];
            let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
            let req = request(&refs);
            let mut f = Facts::default();
            let id = identity("lowercase");
            fill(&mut f, &req, &id, Stage::Rcpt);
            let expected = (!login.is_empty()).then(|| id.fold(&login).into_owned());
            prop_assert_eq!(f.user, expected);
        }
    }
}
