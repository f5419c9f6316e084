//! `[postfix]` compiled into [`PostfixSettings`].

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{Config, ConfigError};

/// Where Postfix's commands, its configuration and the ledger are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostfixSettings {
    /// Postfix's configuration directory (each command's `-c`).
    pub config_directory: PathBuf,
    /// `postqueue`.
    pub postqueue: PathBuf,
    /// `postcat`.
    pub postcat: PathBuf,
    /// `postsuper`.
    pub postsuper: PathBuf,
    /// The ledger file, absolute.
    pub ledger: PathBuf,
    /// Most messages the ledger holds.
    pub max_held: usize,
    /// How long one command may take.
    pub command_timeout: Duration,
}

impl PostfixSettings {
    /// The settings of `config`'s `[postfix]`, with the ledger's path made absolute; `None`
    /// when there is no `[postfix]`.
    pub fn compile(config: &Config) -> Result<Option<PostfixSettings>, ConfigError> {
        let Some(p) = &config.postfix else {
            return Ok(None);
        };
        let span = p.span();
        let p = p.get_ref();
        if p.max_held == 0 {
            return Err(config.error_at(span, "[postfix] max_held must be at least 1".into()));
        }
        if p.command_timeout.0.is_zero() {
            return Err(config.error_at(
                span,
                "[postfix] command_timeout must be longer than 0s".into(),
            ));
        }
        for (name, path) in [
            ("config_directory", &p.config_directory),
            ("postqueue", &p.postqueue),
            ("postcat", &p.postcat),
            ("postsuper", &p.postsuper),
        ] {
            if !path.is_absolute() {
                return Err(config.error_at(
                    config.key_span("postfix", name),
                    format!(
                        "[postfix] {name} = {:?} must be an absolute path",
                        path.display()
                    ),
                ));
            }
        }
        Ok(Some(PostfixSettings {
            config_directory: p.config_directory.clone(),
            postqueue: p.postqueue.clone(),
            postcat: p.postcat.clone(),
            postsuper: p.postsuper.clone(),
            ledger: config.resolve(&p.ledger),
            max_held: p.max_held,
            command_timeout: p.command_timeout.0,
        }))
    }
}
