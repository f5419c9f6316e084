//! Identity extraction from a copy of the client's AUTH exchange.
//!
//! floodgate relays AUTH verbatim and lets upstream validate it; it only
//! reads the user name out of a copy of what the client sent, and records it
//! once upstream says 235. Secrets are never kept: decoded buffers that may
//! hold a password are wiped before they are dropped, and LOGIN's password
//! response is not even decoded.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use zeroize::Zeroizing;

/// Longest user name floodgate keeps (longer ones are treated as unknown).
pub const MAX_USERNAME: usize = 255;

/// SASL mechanisms whose user name can be read from the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// RFC 4616: `[authzid] NUL authcid NUL password`.
    Plain,
    /// draft-murchison-sasl-login: first response is the user name.
    Login,
    /// Google XOAUTH2: `user=<u> ^A auth=Bearer <token> ^A ^A`.
    XOAuth2,
    /// RFC 2195: response `user SP hexdigest`.
    CramMd5,
}

impl Mechanism {
    /// The mechanism for a name as in `AUTH <name>` (any case).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_uppercase().as_str() {
            "PLAIN" => Some(Mechanism::Plain),
            "LOGIN" => Some(Mechanism::Login),
            "XOAUTH2" => Some(Mechanism::XOAuth2),
            "CRAM-MD5" => Some(Mechanism::CramMd5),
            _ => None,
        }
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Login => "LOGIN",
            Mechanism::XOAuth2 => "XOAUTH2",
            Mechanism::CramMd5 => "CRAM-MD5",
        }
    }
}

/// Watches one AUTH exchange from the client side.
#[derive(Debug, Clone)]
pub struct SaslObserver {
    mechanism: Mechanism,
    /// Client responses seen so far (the initial response counts).
    responses: usize,
    username: Option<String>,
    authzid: Option<String>,
    cancelled: bool,
}

impl SaslObserver {
    /// Starts observing `AUTH <mechanism> [initial]`. An initial response of
    /// `"="` is the empty response (RFC 4954 §4).
    pub fn new(mechanism: Mechanism, initial: Option<&str>) -> Self {
        let mut o = SaslObserver {
            mechanism,
            responses: 0,
            username: None,
            authzid: None,
            cancelled: false,
        };
        match initial {
            // CRAM-MD5 cannot have an initial response: the server speaks first.
            Some(_) if mechanism == Mechanism::CramMd5 => {}
            Some("=") => o.responses += 1,
            Some(ir) => o.response(ir.as_bytes()),
            None => {}
        }
        o
    }

    /// Feeds a client response line (without CRLF) sent after a 334.
    pub fn client_line(&mut self, line: &[u8]) {
        if Self::is_cancel(line) {
            self.cancelled = true;
            return;
        }
        self.response(line);
    }

    /// Whether `line` cancels the exchange (`*`, RFC 4954 §4).
    pub fn is_cancel(line: &[u8]) -> bool {
        line == b"*"
    }

    /// The user name, once a response carrying it has been seen: PLAIN's
    /// authcid, XOAUTH2's `user=`, LOGIN's first response, CRAM-MD5's user.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// PLAIN's authorisation identity, if one was given and differs from
    /// nothing (empty authzid is `None`).
    pub fn authzid(&self) -> Option<&str> {
        self.authzid.as_deref()
    }

    /// Whether the client cancelled with `*`.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// The mechanism being observed.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    fn response(&mut self, line: &[u8]) {
        let index = self.responses;
        self.responses += 1;
        // Only the first response carries the identity in all four
        // mechanisms; later ones (LOGIN's password, XOAUTH2's empty line
        // after an error) are not decoded at all.
        if index != 0 || self.cancelled {
            return;
        }
        let Some(decoded) = decode_strict(line) else {
            return;
        };
        match self.mechanism {
            Mechanism::Plain => {
                let mut parts = decoded.split(|&b| b == 0);
                let (Some(authz), Some(authc), Some(_pw), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return;
                };
                self.username = identity(authc);
                if self.username.is_some() {
                    self.authzid = identity(authz);
                }
            }
            Mechanism::Login => self.username = identity(&decoded),
            Mechanism::XOAuth2 => {
                self.username = decoded
                    .split(|&b| b == 0x01)
                    .find_map(|kv| kv.strip_prefix(b"user="))
                    .and_then(identity);
            }
            Mechanism::CramMd5 => {
                if let Some(sp) = decoded.iter().rposition(|&b| b == b' ') {
                    let digest = &decoded[sp + 1..];
                    if digest.len() == 32 && digest.iter().all(u8::is_ascii_hexdigit) {
                        self.username = identity(&decoded[..sp]);
                    }
                }
            }
        }
    }
}

/// Strict base64 (standard alphabet, canonical padding) into a buffer that
/// is wiped when dropped.
fn decode_strict(line: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    if line.is_empty() {
        return None;
    }
    // Decode into a buffer allocated once, so no partial copy of a secret is
    // left behind by a reallocation.
    let mut buf = Zeroizing::new(vec![0u8; line.len() / 4 * 3 + 3]);
    let n = STANDARD.decode_slice(line, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// A usable identity: non-empty UTF-8 without control characters, at most
/// [`MAX_USERNAME`] octets.
fn identity(bytes: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(bytes).ok()?;
    (!s.is_empty() && s.len() <= MAX_USERNAME && !s.chars().any(char::is_control))
        .then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b64(s: &[u8]) -> String {
        STANDARD.encode(s)
    }

    #[test]
    fn mechanism_names() {
        assert_eq!(Mechanism::from_name("plain"), Some(Mechanism::Plain));
        assert_eq!(Mechanism::from_name("Cram-MD5"), Some(Mechanism::CramMd5));
        assert_eq!(
            Mechanism::from_name("xoauth2").map(Mechanism::name),
            Some("XOAUTH2")
        );
        assert_eq!(Mechanism::from_name("GSSAPI"), None);
    }

    #[test]
    fn plain_initial_response() {
        let ir = b64(b"\0alice@example.org\0s3cret");
        let o = SaslObserver::new(Mechanism::Plain, Some(&ir));
        assert_eq!(o.username(), Some("alice@example.org"));
        assert_eq!(o.authzid(), None);
    }

    #[test]
    fn plain_after_challenge_with_authzid() {
        let mut o = SaslObserver::new(Mechanism::Plain, None);
        assert_eq!(o.username(), None);
        o.client_line(b64(b"admin\0bob\0pw").as_bytes());
        assert_eq!(o.username(), Some("bob"));
        assert_eq!(o.authzid(), Some("admin"));
    }

    #[test]
    fn plain_empty_initial_response() {
        let mut o = SaslObserver::new(Mechanism::Plain, Some("="));
        // The empty IR was the first response; the identity never arrives.
        o.client_line(b64(b"\0bob\0pw").as_bytes());
        assert_eq!(o.username(), None);
    }

    #[test]
    fn plain_malformed() {
        for bad in [
            &b"bob\0pw"[..],
            b"\0\0pw",
            b"a\0b\0c\0d",
            b"\0bo\x01b\0pw",
            b"\0\xff\0pw",
        ] {
            let o = SaslObserver::new(Mechanism::Plain, Some(&b64(bad)));
            assert_eq!(o.username(), None, "{bad:?}");
        }
        let o = SaslObserver::new(Mechanism::Plain, Some("AGJvYgBwdw")); // missing padding
        assert_eq!(o.username(), None);
        let o = SaslObserver::new(Mechanism::Plain, Some("AGJvYgBwdx==")); // non-canonical
        assert_eq!(o.username(), None);
    }

    #[test]
    fn login() {
        let mut o = SaslObserver::new(Mechanism::Login, None);
        o.client_line(b64(b"carol").as_bytes());
        o.client_line(b64(b"password").as_bytes());
        assert_eq!(o.username(), Some("carol"));
        let mut o = SaslObserver::new(Mechanism::Login, Some(&b64(b"dave")));
        o.client_line(b64(b"password").as_bytes());
        assert_eq!(o.username(), Some("dave"));
    }

    #[test]
    fn cancel() {
        let mut o = SaslObserver::new(Mechanism::Login, None);
        assert!(SaslObserver::is_cancel(b"*"));
        assert!(!SaslObserver::is_cancel(b"**"));
        o.client_line(b"*");
        assert!(o.is_cancelled());
        o.client_line(b64(b"eve").as_bytes());
        assert_eq!(o.username(), None);
    }

    #[test]
    fn xoauth2() {
        let msg = b"user=frank@example.org\x01auth=Bearer ya29.token\x01\x01";
        let mut o = SaslObserver::new(Mechanism::XOAuth2, Some(&b64(msg)));
        assert_eq!(o.username(), Some("frank@example.org"));
        o.client_line(b""); // the empty line after a JSON error challenge
        assert_eq!(o.username(), Some("frank@example.org"));
        let o = SaslObserver::new(Mechanism::XOAuth2, Some(&b64(b"auth=Bearer x\x01\x01")));
        assert_eq!(o.username(), None);
    }

    #[test]
    fn cram_md5() {
        let mut o = SaslObserver::new(Mechanism::CramMd5, Some("ignored"));
        o.client_line(b64(b"tim b913a602c7eda7a495b4e6e7334d3890").as_bytes());
        assert_eq!(o.username(), Some("tim"));
        let mut o = SaslObserver::new(Mechanism::CramMd5, None);
        o.client_line(b64(b"tim nothex").as_bytes());
        assert_eq!(o.username(), None);
    }

    #[test]
    fn long_username_refused() {
        let long = "u".repeat(MAX_USERNAME + 1);
        let o = SaslObserver::new(Mechanism::Login, Some(&b64(long.as_bytes())));
        assert_eq!(o.username(), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn plain_round_trip(user in "[a-z0-9@.]{1,40}", pw in "[ -~]{0,40}") {
            let ir = b64(format!("\0{user}\0{pw}").as_bytes());
            let o = SaslObserver::new(Mechanism::Plain, Some(&ir));
            prop_assert_eq!(o.username(), Some(user.as_str()));
        }

        #[test]
        fn never_panics(lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 0..4),
                        ir in proptest::option::of("[A-Za-z0-9+/=]{0,40}"), m in 0usize..4) {
            let mech = [Mechanism::Plain, Mechanism::Login, Mechanism::XOAuth2, Mechanism::CramMd5][m];
            let mut o = SaslObserver::new(mech, ir.as_deref());
            for l in &lines { o.client_line(l); }
            if let Some(u) = o.username() { prop_assert!(!u.is_empty() && u.len() <= MAX_USERNAME); }
        }
    }
}
