//! floodgate's Received line on top of each message it takes, from what the session knows
//! of its client (address, names, HELO, TLS, user).

use crate::config::Config;
use crate::policy::Facts;
use crate::smtp::received::{received_header, ReceivedInfo};

use super::session::ClientSide;

/// floodgate's Received line for the message being received from `client` (whose facts
/// are `facts`; `ehlo`: it greeted with EHLO), when `[smtp] add_received` asks for one.
pub(super) async fn line(
    cfg: &Config,
    client: &mut ClientSide,
    facts: &Facts,
    ehlo: bool,
) -> Option<Vec<u8>> {
    if !cfg.smtp.add_received {
        return None;
    }
    let names = client.names.get().await;
    let tls = client.conn.tls_info().map(received_tls);
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let info = ReceivedInfo {
        helo: facts.helo.as_deref(),
        name: names.name.known(),
        addr: client.peer.ip(),
        by: &cfg.server.hostname,
        ehlo,
        tls: tls.as_ref().map(|(v, c)| (v.as_str(), c.as_str())),
        authenticated: facts.user.is_some(),
        user: facts
            .user
            .as_deref()
            .filter(|_| cfg.smtp.received_show_user),
        time,
    };
    Some(received_header(&info))
}

/// TLS version and cipher in the words of a Received line (`TLSv1.3`,
/// `TLS_AES_256_GCM_SHA384`) from the session's TLS description (`TLSv1_3
/// TLS13_AES_256_GCM_SHA384`, rustls' names).
fn received_tls(info: &str) -> (String, String) {
    let (version, cipher) = info.split_once(' ').unwrap_or((info, ""));
    let cipher = match cipher.strip_prefix("TLS13_") {
        Some(rest) => format!("TLS_{rest}"),
        None => cipher.to_string(),
    };
    (version.replace('_', "."), cipher)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_words_for_the_received_line() {
        assert_eq!(
            received_tls("TLSv1_3 TLS13_AES_256_GCM_SHA384"),
            ("TLSv1.3".to_string(), "TLS_AES_256_GCM_SHA384".to_string())
        );
        assert_eq!(
            received_tls("TLSv1_2 TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            (
                "TLSv1.2".to_string(),
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_string()
            )
        );
        assert_eq!(received_tls("odd"), ("odd".to_string(), String::new()));
    }
}
