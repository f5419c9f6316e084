//! The config's own words for its enumerations, for `floodgate check` and logs: what an
//! operator wrote, not Rust's names for it.

use super::{BareLineEndings, ClientIdentity, LogFormat, OnIdentityRefused};

impl ClientIdentity {
    /// The config word (`none`, `xclient`, `proxy-v2`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClientIdentity::None => "none",
            ClientIdentity::Xclient => "xclient",
            ClientIdentity::ProxyV2 => "proxy-v2",
        }
    }
}

impl BareLineEndings {
    /// The config word (`reject`, `normalize`).
    pub fn as_str(self) -> &'static str {
        match self {
            BareLineEndings::Reject => "reject",
            BareLineEndings::Normalize => "normalize",
        }
    }
}

impl OnIdentityRefused {
    /// The config word (`refuse`, `relay`).
    pub fn as_str(self) -> &'static str {
        match self {
            OnIdentityRefused::Refuse => "refuse",
            OnIdentityRefused::Relay => "relay",
        }
    }
}

impl LogFormat {
    /// The config word (`text`, `json`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn identity_refusal_words_read_back() {
        #[derive(Deserialize)]
        struct W {
            on: OnIdentityRefused,
        }
        for on in [OnIdentityRefused::Refuse, OnIdentityRefused::Relay] {
            let w: W = toml::from_str(&format!("on = \"{}\"\n", on.as_str())).unwrap();
            assert_eq!(w.on, on);
        }
    }

    /// Each word reads back as the value it names: the words are the config's.
    #[test]
    fn words_read_back_as_their_values() {
        #[derive(Deserialize)]
        struct W {
            identity: ClientIdentity,
            bare: BareLineEndings,
            format: LogFormat,
        }
        for identity in [
            ClientIdentity::None,
            ClientIdentity::Xclient,
            ClientIdentity::ProxyV2,
        ] {
            for bare in [BareLineEndings::Reject, BareLineEndings::Normalize] {
                for format in [LogFormat::Text, LogFormat::Json] {
                    let text = format!(
                        "identity = \"{}\"\nbare = \"{}\"\nformat = \"{}\"\n",
                        identity.as_str(),
                        bare.as_str(),
                        format.as_str()
                    );
                    let w: W = toml::from_str(&text).expect(&text);
                    assert_eq!(
                        (w.identity, w.bare, w.format),
                        (identity, bare, format),
                        "{text}"
                    );
                }
            }
        }
    }
}
