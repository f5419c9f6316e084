//! `[[milter]]`: floodgate as a milter in Postfix's own path (`smtpd_milters`,
//! `non_smtpd_milters`), on a unix socket or a TCP port.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

/// One `[[milter]]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MilterConfig {
    /// A name for logs; defaults to `listen`.
    #[serde(default)]
    pub name: Option<String>,
    /// `unix:/path` or `host:port` (`inet:host:port` as Postfix writes it is accepted too).
    pub listen: Spanned<String>,
    /// The unix socket's permissions, octal (`"0660"`): Postfix's `smtpd` and `cleanup`
    /// connect as the `postfix` user.
    #[serde(default = "default_mode")]
    pub mode: Spanned<String>,
}

fn default_mode() -> Spanned<String> {
    Spanned::new(0..0, "0660".into())
}

/// Where a milter listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MilterListen {
    /// A unix socket at this path (made absolute against the config's directory).
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

/// Why a `[[milter]]` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MilterConfigError {
    /// `listen` is neither `unix:/path` nor an `IP:PORT`.
    #[error("milter listen {0:?} is neither unix:/path nor IP:PORT")]
    Listen(String),
    /// `mode` is not an octal permission.
    #[error("milter mode {0:?} is not an octal permission such as \"0660\"")]
    Mode(String),
}

impl MilterConfig {
    /// The milter's name, or its `listen`.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.listen.get_ref().clone())
    }

    /// Where it listens; a relative socket path is taken from `base`.
    pub fn address(&self, base: &std::path::Path) -> Result<MilterListen, MilterConfigError> {
        parse_listen(self.listen.get_ref(), base)
    }

    /// The unix socket's permission bits.
    pub fn mode_bits(&self) -> Result<u32, MilterConfigError> {
        parse_mode(self.mode.get_ref())
    }
}

/// Reads `unix:/path`, `inet:IP:PORT` or `IP:PORT`.
pub fn parse_listen(text: &str, base: &std::path::Path) -> Result<MilterListen, MilterConfigError> {
    let bad = || MilterConfigError::Listen(text.to_string());
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() || path.contains('\0') {
            return Err(bad());
        }
        let p = PathBuf::from(path);
        return Ok(MilterListen::Unix(if p.is_absolute() {
            p
        } else {
            base.join(p)
        }));
    }
    let inet = text.strip_prefix("inet:").unwrap_or(text);
    inet.parse::<SocketAddr>()
        .map(MilterListen::Tcp)
        .map_err(|_| bad())
}

/// Reads an octal permission of at most `0777`.
pub fn parse_mode(text: &str) -> Result<u32, MilterConfigError> {
    let bad = || MilterConfigError::Mode(text.to_string());
    if text.is_empty() || text.len() > 4 || !text.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad());
    }
    u32::from_str_radix(text, 8).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    #[test]
    fn listen_forms() {
        let base = Path::new("/etc/floodgate");
        assert_eq!(
            parse_listen("unix:/run/floodgate/milter.sock", base),
            Ok(MilterListen::Unix("/run/floodgate/milter.sock".into()))
        );
        assert_eq!(
            parse_listen("unix:milter.sock", base),
            Ok(MilterListen::Unix("/etc/floodgate/milter.sock".into()))
        );
        assert_eq!(
            parse_listen("127.0.0.1:8891", base),
            Ok(MilterListen::Tcp("127.0.0.1:8891".parse().unwrap()))
        );
        assert_eq!(
            parse_listen("inet:[::1]:8891", base),
            Ok(MilterListen::Tcp("[::1]:8891".parse().unwrap()))
        );
    }

    #[test]
    fn bad_listen_is_named() {
        let base = Path::new("/");
        for bad in ["unix:", "localhost", "8891", "inet:host:port", "local:/x"] {
            let e = parse_listen(bad, base).unwrap_err();
            assert_eq!(e, MilterConfigError::Listen(bad.into()));
            assert!(e.to_string().contains("neither unix:/path nor IP:PORT"));
        }
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert_eq!(parse_mode("666"), Ok(0o666));
        for bad in ["", "0968", "rw", "07777", "-1"] {
            assert_eq!(parse_mode(bad), Err(MilterConfigError::Mode(bad.into())));
        }
    }

    proptest! {
        /// Every octal text of up to four digits reads as its number; nothing else reads.
        #[test]
        fn mode_reads_octal_only(s in "[0-9a-z]{0,5}") {
            let ok = !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| (b'0'..=b'7').contains(&b));
            prop_assert_eq!(parse_mode(&s).is_ok(), ok);
            if ok {
                prop_assert_eq!(parse_mode(&s).unwrap(), u32::from_str_radix(&s, 8).unwrap());
            }
        }

        /// A unix listen keeps its path; any other text is an address or an error, never a panic.
        #[test]
        fn listen_never_panics(s in "\\PC{0,40}") {
            let _ = parse_listen(&s, Path::new("/b"));
            if let Some(p) = s.strip_prefix("unix:/") {
                if !p.contains('\0') {
                    prop_assert_eq!(parse_listen(&s, Path::new("/b")), Ok(MilterListen::Unix(PathBuf::from(format!("/{p}")))));
                }
            }
        }
    }
}
