//! `[[policy_service]]`: Postfix's SMTP access policy delegation (`check_policy_service`)
//! served on a unix socket or TCP.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

/// One `[[policy_service]]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyServiceConfig {
    /// A name for logs; defaults to `listen`.
    #[serde(default)]
    pub name: Option<String>,
    /// `unix:/path` (relative paths from the config file's directory) or `address:port`.
    pub listen: Spanned<String>,
    /// The unix socket's permission bits, in octal (`"0660"`).
    #[serde(default = "default_mode")]
    pub mode: Spanned<String>,
}

fn default_mode() -> Spanned<String> {
    Spanned::new(0..0, "0660".to_string())
}

/// Where a policy service listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyListen {
    /// A unix socket at this path, made with these permission bits.
    Unix(PathBuf, u32),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl PolicyServiceConfig {
    /// The service's name, or its `listen`.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.listen.get_ref().clone())
    }

    /// Where it listens, relative socket paths taken from `base`; the span and the reason
    /// when `listen` or `mode` cannot be used.
    pub fn resolve(&self, base: &Path) -> Result<PolicyListen, (std::ops::Range<usize>, String)> {
        let listen = self.listen.get_ref();
        if let Some(path) = listen.strip_prefix("unix:") {
            if path.is_empty() {
                return Err((
                    self.listen.span(),
                    "listen = \"unix:\" names no socket".into(),
                ));
            }
            let mode = parse_mode(self.mode.get_ref()).ok_or_else(|| {
                (
                    self.mode.span(),
                    format!(
                        "mode {:?} is not octal permission bits such as \"0660\"",
                        self.mode.get_ref()
                    ),
                )
            })?;
            let path = Path::new(path);
            let path = if path.is_absolute() {
                path.to_path_buf()
            } else {
                base.join(path)
            };
            return Ok(PolicyListen::Unix(path, mode));
        }
        listen.parse().map(PolicyListen::Tcp).map_err(|_| {
            (
                self.listen.span(),
                format!(
                    "listen {listen:?} is neither \"unix:/path\" nor an address:port such as \"127.0.0.1:10031\""
                ),
            )
        })
    }
}

/// Octal permission bits (`"0660"`, `"660"`), at most `0777`.
fn parse_mode(text: &str) -> Option<u32> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    if digits.is_empty() || digits.len() > 4 {
        return None;
    }
    u32::from_str_radix(digits, 8).ok().filter(|m| *m <= 0o777)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(listen: &str, mode: &str) -> PolicyServiceConfig {
        PolicyServiceConfig {
            name: None,
            listen: Spanned::new(0..0, listen.into()),
            mode: Spanned::new(0..0, mode.into()),
        }
    }

    #[test]
    fn listen_reads_unix_and_tcp() {
        let base = Path::new("/etc/floodgate");
        assert_eq!(
            service("unix:/run/fg.sock", "0600").resolve(base),
            Ok(PolicyListen::Unix("/run/fg.sock".into(), 0o600))
        );
        assert_eq!(
            service("unix:fg.sock", "660").resolve(base),
            Ok(PolicyListen::Unix("/etc/floodgate/fg.sock".into(), 0o660))
        );
        assert_eq!(
            service("127.0.0.1:10031", "0660").resolve(base),
            Ok(PolicyListen::Tcp("127.0.0.1:10031".parse().unwrap()))
        );
    }

    #[test]
    fn bad_listen_and_mode_are_refused_with_why() {
        let base = Path::new("/");
        let e = service("localhost", "0660").resolve(base).unwrap_err();
        assert!(e.1.contains("neither \"unix:/path\""), "{}", e.1);
        assert!(service("unix:", "0660")
            .resolve(base)
            .unwrap_err()
            .1
            .contains("names no socket"));
        for bad in ["0999", "rw", "", "07777"] {
            let e = service("unix:/s", bad).resolve(base).unwrap_err();
            assert!(e.1.contains("not octal"), "{bad}: {}", e.1);
        }
    }
}
