//! floodgate's own answer to HELP: the commands it accepts in the session as it stands.
//! Upstream's HELP text would list commands floodgate never passes on (XCLIENT, BDAT
//! when CHUNKING is hidden, ETRN, ...), so it is not relayed.

use super::reply::Reply;

/// The commands whose availability depends on the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HelpCommands {
    /// STARTTLS is available (a STARTTLS listener with a certificate, not yet TLS).
    pub starttls: bool,
    /// AUTH was offered in the last EHLO reply.
    pub auth: bool,
    /// CHUNKING was offered in the last EHLO reply, so BDAT is accepted.
    pub bdat: bool,
}

/// The verbs floodgate accepts, in the order of a dialogue.
pub fn help_verbs(c: &HelpCommands) -> Vec<&'static str> {
    let mut verbs = vec!["EHLO", "HELO"];
    if c.starttls {
        verbs.push("STARTTLS");
    }
    if c.auth {
        verbs.push("AUTH");
    }
    verbs.extend(["MAIL", "RCPT", "DATA"]);
    if c.bdat {
        verbs.push("BDAT");
    }
    verbs.extend(["RSET", "NOOP", "VRFY", "EXPN", "HELP", "QUIT"]);
    verbs
}

/// The 214 reply to HELP (RFC 5321 §4.1.1.8), one line listing [`help_verbs`].
pub fn help_reply(c: &HelpCommands) -> Reply {
    Reply::new(
        214,
        format!("2.0.0 Commands accepted: {}", help_verbs(c).join(" ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smtp::command::{parse_command, Command, CommandError};
    use proptest::prelude::*;

    #[test]
    fn plain_session_lists_the_base_commands() {
        let r = help_reply(&HelpCommands::default());
        assert_eq!(r.code, 214);
        assert_eq!(
            r.lines,
            ["2.0.0 Commands accepted: EHLO HELO MAIL RCPT DATA RSET NOOP VRFY EXPN HELP QUIT"]
        );
    }

    #[test]
    fn offered_extensions_add_their_commands() {
        let all = HelpCommands {
            starttls: true,
            auth: true,
            bdat: true,
        };
        assert_eq!(
            help_verbs(&all),
            [
                "EHLO", "HELO", "STARTTLS", "AUTH", "MAIL", "RCPT", "DATA", "BDAT", "RSET", "NOOP",
                "VRFY", "EXPN", "HELP", "QUIT"
            ]
        );
    }

    proptest! {
        /// Every listed verb is one floodgate's parser knows (never `Unknown`), each
        /// optional verb appears exactly when offered, and XCLIENT, XFORWARD or ETRN never.
        #[test]
        fn listed_verbs_are_known_and_match_the_offer(
            starttls in any::<bool>(), auth in any::<bool>(), bdat in any::<bool>()
        ) {
            let c = HelpCommands { starttls, auth, bdat };
            let verbs = help_verbs(&c);
            for v in &verbs {
                let parsed = parse_command(v.as_bytes());
                // A syntax error (EHLO without a name) still means the verb is known.
                let known = !matches!(
                    parsed,
                    Ok(Command::Unknown(_)) | Err(CommandError::BadVerb | CommandError::Empty)
                );
                prop_assert!(known, "{} parses as {:?}", v, parsed);
            }
            prop_assert_eq!(verbs.contains(&"STARTTLS"), starttls);
            prop_assert_eq!(verbs.contains(&"AUTH"), auth);
            prop_assert_eq!(verbs.contains(&"BDAT"), bdat);
            for hidden in ["XCLIENT", "XFORWARD", "ETRN"] {
                prop_assert!(!verbs.contains(&hidden));
            }
            let r = help_reply(&c);
            prop_assert_eq!(r.lines.len(), 1);
            prop_assert!(r.lines[0].ends_with(&verbs.join(" ")));
        }
    }
}
