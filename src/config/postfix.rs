//! `[postfix]` as written: where Postfix's commands and its configuration are, for held
//! mail in Postfix's hold queue (checked when the generation is compiled).

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigDuration;

/// `[postfix]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostfixConfig {
    /// Postfix's configuration directory, given to each command as `-c`.
    #[serde(default = "default_config_directory")]
    pub config_directory: PathBuf,
    /// `postqueue`: lists the queue (`-j`).
    #[serde(default = "default_postqueue")]
    pub postqueue: PathBuf,
    /// `postcat`: shows a queued message (`-q`).
    #[serde(default = "default_postcat")]
    pub postcat: PathBuf,
    /// `postsuper`: releases (`-H`) and deletes (`-d`) held messages.
    #[serde(default = "default_postsuper")]
    pub postsuper: PathBuf,
    /// The ledger of what floodgate told Postfix to hold (relative to the config file's
    /// directory).
    #[serde(default = "default_ledger")]
    pub ledger: PathBuf,
    /// Most messages the ledger holds; past it, mail floodgate would hold is deferred.
    #[serde(default = "default_max_held")]
    pub max_held: usize,
    /// How long one of Postfix's commands may take.
    #[serde(default = "default_command_timeout")]
    pub command_timeout: ConfigDuration,
}

impl Default for PostfixConfig {
    fn default() -> Self {
        PostfixConfig {
            config_directory: default_config_directory(),
            postqueue: default_postqueue(),
            postcat: default_postcat(),
            postsuper: default_postsuper(),
            ledger: default_ledger(),
            max_held: default_max_held(),
            command_timeout: default_command_timeout(),
        }
    }
}

fn default_config_directory() -> PathBuf {
    PathBuf::from("/etc/postfix")
}

fn default_postqueue() -> PathBuf {
    PathBuf::from("/usr/sbin/postqueue")
}

fn default_postcat() -> PathBuf {
    PathBuf::from("/usr/sbin/postcat")
}

fn default_postsuper() -> PathBuf {
    PathBuf::from("/usr/sbin/postsuper")
}

fn default_ledger() -> PathBuf {
    PathBuf::from("/var/lib/floodgate/postfix-held")
}

fn default_max_held() -> usize {
    100_000
}

fn default_command_timeout() -> ConfigDuration {
    ConfigDuration(std::time::Duration::from_secs(30))
}
