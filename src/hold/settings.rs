//! `[hold]` compiled into the spool's [`HoldSettings`].

use crate::config::{Config, ConfigError};

use super::HoldSettings;

impl HoldSettings {
    /// The settings of `config`'s `[hold]`, with its directory made absolute; `None` when
    /// there is no `[hold]`.
    pub fn compile(config: &Config) -> Result<Option<HoldSettings>, ConfigError> {
        let Some(h) = &config.hold else {
            return Ok(None);
        };
        let span = h.span();
        let h = h.get_ref();
        if h.max_messages == 0 || h.max_bytes == 0 {
            return Err(config.error_at(
                span,
                "[hold] max_messages and max_bytes must be at least 1".into(),
            ));
        }
        if h.ttl.0.is_zero() {
            return Err(config.error_at(span, "[hold] ttl must be longer than 0s".into()));
        }
        Ok(Some(HoldSettings {
            dir: config.resolve(&h.dir),
            max_bytes: h.max_bytes,
            max_messages: h.max_messages,
            ttl: h.ttl.0,
            on_expiry: h.on_expiry,
        }))
    }
}
