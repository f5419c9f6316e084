//! `[upstream.high_risk]`: the second smart host of `action = "reroute"` (that a reroute
//! limit has one is checked when the generation is compiled).

use std::path::PathBuf;

use super::{split_host_port, ConfigError, UpstreamConfig};

type At<'a> = &'a dyn Fn(std::ops::Range<usize>, String) -> ConfigError;

/// Checks `[upstream.high_risk]` (an address, no section of its own inside) and makes its
/// paths absolute.
pub(super) fn check_high_risk(
    upstream: &mut UpstreamConfig,
    abs: &dyn Fn(PathBuf) -> PathBuf,
    at: At<'_>,
) -> Result<(), ConfigError> {
    let Some(h) = upstream.high_risk.as_mut() else {
        return Ok(());
    };
    let span = h.address.span();
    if h.high_risk.is_some() {
        return Err(at(
            span,
            "[upstream.high_risk] cannot have a high_risk section of its own".into(),
        ));
    }
    if split_host_port(h.address.get_ref()).is_none() {
        return Err(at(
            span,
            format!(
                "[upstream.high_risk] address {:?} is not host:port",
                h.address.get_ref()
            ),
        ));
    }
    h.ca_file = h.ca_file.take().map(abs);
    Ok(())
}
