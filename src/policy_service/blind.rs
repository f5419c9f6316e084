//! What a limit needs that Postfix's policy requests do not carry, and the restriction
//! lists Postfix must ask floodgate from, for `floodgate check`.

use crate::policy::model::{Action, Counted, PolicyModel};
use crate::policy::Stage;

/// One warning a line for each limit that cannot work as written behind
/// `check_policy_service`: the requests carry no message content (no message keys, no
/// header From or Subject), Postfix asks at no AUTH or per command, knows the size only
/// at END-OF-MESSAGE, and can hold a message but not reroute or pace it.
pub fn blind_spots(model: &PolicyModel) -> Vec<String> {
    let mut w = Vec::new();
    for d in &model.limits {
        let at = format!("limit {} (line {})", d.name, d.line);
        let key_vars = d
            .key
            .as_ref()
            .map(|k| k.message_keys().count())
            .unwrap_or(0);
        if key_vars > 0 {
            w.push(format!(
                "{at}: its key is a message key (${{fingerprint}}, ${{link_domain}}, ${{subject_shape}}), which the policy service cannot compute: Postfix sends no message content (use the milter or the proxy)"
            ));
        }
        if d.reads_header_from() {
            w.push(format!(
                "{at}: it reads the header From, which the policy service never sees (the milter or the proxy do)"
            ));
        }
        match d.stage {
            Stage::Auth => w.push(format!(
                "{at}: stage = \"auth\": Postfix asks the policy service at no AUTH (failed logins are not seen)"
            )),
            Stage::Command => w.push(format!(
                "{at}: stage = \"command\": Postfix asks the policy service once per stage, not per command"
            )),
            _ => {}
        }
        if d.counted == Counted::AuthFailures {
            w.push(format!(
                "{at}: counts failed AUTH, which Postfix does not tell the policy service"
            ));
        }
        if d.counted == Counted::Bytes && d.stage != Stage::Message {
            w.push(format!(
                "{at}: counts bytes at stage = \"{}\", where Postfix gives only the SIZE the client announced (the size received is known at END-OF-MESSAGE: stage = \"message\")",
                d.stage.as_str()
            ));
        }
        match d.action {
            Action::Reroute | Action::Pace => w.push(format!(
                "{at}: action = \"{}\" takes a message the policy service can only HOLD in Postfix's hold queue (released by hand, not automatically)",
                d.action.as_str()
            )),
            Action::Delay(_) => w.push(format!(
                "{at}: action = \"delay\" keeps Postfix waiting for the answer: keep the delay under check_policy_service's timeout, or Postfix applies its default_action"
            )),
            _ => {}
        }
    }
    w
}

/// Where Postfix must name the policy service for `model`'s limits, one sentence:
/// `smtpd_recipient_restrictions` (the recipients, and the connect, HELO and MAIL stages
/// asked with the first) and `smtpd_end_of_data_restrictions` (the message, the hold, the
/// charges) always; `smtpd_data_restrictions` only for limits at the `data` stage, named.
/// Without that list those limits are asked at END-OF-MESSAGE, after the content; each list
/// costs Postfix one request per message.
pub fn restriction_lists(model: &PolicyModel) -> String {
    let at_data: Vec<String> = model
        .limits
        .iter()
        .filter(|d| d.stage == Stage::Data)
        .map(|d| d.name.to_string())
        .collect();
    let always = "name it in smtpd_recipient_restrictions and smtpd_end_of_data_restrictions";
    if at_data.is_empty() {
        format!(
            "{always}; no limit is at stage = \"data\", so smtpd_data_restrictions need not ask it"
        )
    } else {
        format!(
            "{always}, and in smtpd_data_restrictions for the limits at stage = \"data\" ({}), else they are asked at END-OF-MESSAGE, after the content",
            at_data.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::policy::postfix_path_model as model;

    #[test]
    fn what_the_policy_service_cannot_see_is_named() {
        let w = blind_spots(&model(
            r#"
[[limit]]
name = "same-text"
key = "${fingerprint}"
ratelimit = "3 / 1h / per_mail"
action = "hold"

[[limit]]
name = "logins"
stage = "auth"
count = "auth_failures"
key = "${client_ip}"
rate = "5 / 1h"
burst = "5"
action = "defer"

[[limit]]
name = "bytes"
stage = "mail"
count = "bytes"
key = "${authenticated_id}"
rate = "10000000 / 1h"
burst = "10000000"
action = "pace"
"#,
        ));
        let all = w.join("\n");
        assert!(
            all.contains("limit same-text") && all.contains("message key"),
            "{all}"
        );
        assert!(
            all.contains("limit logins") && all.contains("no AUTH"),
            "{all}"
        );
        assert!(all.contains("failed AUTH"), "{all}");
        assert!(
            all.contains("limit bytes") && all.contains("END-OF-MESSAGE"),
            "{all}"
        );
        assert!(all.contains("can only HOLD"), "{all}");
    }

    #[test]
    fn recipient_limits_raise_nothing() {
        let w = blind_spots(&model(
            "[[limit]]\nname = \"r\"\nstage = \"rcpt\"\nratelimit = \"100 / 1h / per_rcpt / ${authenticated_id}\"\naction = \"defer\"\n",
        ));
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn the_data_list_is_named_only_for_limits_at_the_data_stage() {
        let rcpt = "[[limit]]\nname = \"r\"\nratelimit = \"100 / 1h / per_rcpt / strict\"\naction = \"warn\"\n";
        let plain = restriction_lists(&model(rcpt));
        assert!(
            plain.contains("smtpd_recipient_restrictions and smtpd_end_of_data_restrictions")
                && plain.contains("need not ask it"),
            "{plain}"
        );
        let data = format!(
            "{rcpt}[[limit]]\nname = \"big\"\nstage = \"data\"\ncount = \"messages\"\nrate = \"10 / 1h\"\nburst = \"10\"\naction = \"defer\"\n"
        );
        let with = restriction_lists(&model(&data));
        assert!(
            with.contains("smtpd_data_restrictions for the limits at stage = \"data\" (big)"),
            "{with}"
        );
    }
}
