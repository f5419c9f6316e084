//! `floodgate demo`: the shipped policy at work in one process. A stand-in smart host
//! ([`sink`]) takes floodgate's relayed mail, a webhook receiver ([`alerts`]) takes the
//! postmaster's alerts, the config is the shipped one pointed at both with its state in a
//! scratch directory and its clock sped up ([`setup`]), and two scripted SMTP clients
//! ([`client`]) play a normal user and a stolen account against it ([`scenario`]); then
//! [`summary`] says what happened.

/// `println!` that never panics: the demo's narration is for a person watching, and a
/// closed stdout (`floodgate demo | head`) must not stop the scenario half-way.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

pub mod alerts;
pub mod client;
pub mod scenario;
pub mod setup;
pub mod sink;
pub mod summary;

use std::path::PathBuf;

/// What can stop the demo.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A file or socket of the demo.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The shipped config cannot be turned into the demo's.
    #[error("{path}: {reason}")]
    Config {
        /// The shipped config.
        path: PathBuf,
        /// What is wrong with it for the demo.
        reason: String,
    },
    /// An SMTP exchange did not go as SMTP says.
    #[error("SMTP with {peer}: {reason}")]
    Smtp {
        /// Who was talked to.
        peer: String,
        /// What went wrong.
        reason: String,
    },
    /// The TLS set-up of the demo's clients.
    #[error("TLS: {0}")]
    Tls(String),
    /// floodgate did not come up, or the scenario did not end, in time.
    #[error("{0}")]
    Timeout(String),
    /// floodgate's admin socket.
    #[error(transparent)]
    Admin(#[from] crate::admin::client::ClientError),
}

impl DemoError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DemoError {
        let what = what.into();
        move |source| DemoError::Io { what, source }
    }
}
