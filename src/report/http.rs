//! A tiny HTTP/1.1 client for alert webhooks: one `POST` per connection
//! (`Connection: close`), http or https (rustls, as [`crate::tls`] builds it), a time limit
//! on the whole exchange, and a strict status-line parser. Only the status code matters.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A webhook address: `http://host[:port]/path` or `https://...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// https.
    pub tls: bool,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port (80 / 443 by default).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

/// Why a webhook delivery or its address failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HttpError {
    /// The address is not an http(s) URL this client handles.
    #[error("bad URL {0:?}: write http://host:port/path or https://host:port/path")]
    Url(String),
    /// The status line is malformed.
    #[error("bad HTTP status line: {0}")]
    Status(&'static str),
    /// The server answered with a status that is not 2xx.
    #[error("webhook answered {code} {reason}")]
    Refused {
        /// The status code.
        code: u16,
        /// The reason phrase.
        reason: String,
    },
    /// Connecting, TLS, writing or reading failed.
    #[error("webhook: {0}")]
    Io(String),
    /// The whole exchange took longer than its time limit.
    #[error("webhook timed out after {0:?}")]
    Timeout(Duration),
}

impl Url {
    /// Parses `http://host[:port][/path]`; user info and fragments are refused.
    pub fn parse(text: &str) -> Result<Url, HttpError> {
        let bad = || HttpError::Url(text.to_string());
        let (tls, rest) = if let Some(r) = text.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = text.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(bad());
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty()
            || authority.contains('@')
            || path.contains('#')
            || path.bytes().any(|b| b <= b' ' || b == 0x7f)
        {
            return Err(bad());
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(bad)?;
            let port = match after {
                "" => default_port,
                p => p
                    .strip_prefix(':')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(bad)?,
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad())?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty()
            || port == 0
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
        {
            return Err(bad());
        }
        Ok(Url {
            tls,
            host,
            port,
            path: path.to_string(),
        })
    }

    /// The `Host` header value.
    fn host_header(&self) -> String {
        let h = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            h
        } else {
            format!("{h}:{}", self.port)
        }
    }
}

/// A parsed status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Minor version (`HTTP/1.x`).
    pub minor: u8,
    /// The three-digit code.
    pub code: u16,
    /// The reason phrase (may be empty).
    pub reason: String,
}

/// Parses one status line, without its line ending: `HTTP/1.x SP 3DIGIT SP reason`
/// (RFC 9112 §4; the space before an empty reason may be missing, as some servers do).
pub fn parse_status_line(line: &[u8]) -> Result<Status, HttpError> {
    let rest = line
        .strip_prefix(b"HTTP/1.")
        .ok_or(HttpError::Status("does not start with HTTP/1."))?;
    let (&minor, rest) = rest
        .split_first()
        .ok_or(HttpError::Status("no minor version"))?;
    if !minor.is_ascii_digit() {
        return Err(HttpError::Status("minor version is not a digit"));
    }
    let rest = rest
        .strip_prefix(b" ")
        .ok_or(HttpError::Status("no space after the version"))?;
    if rest.len() < 3 || !rest[..3].iter().all(u8::is_ascii_digit) {
        return Err(HttpError::Status("no three-digit status code"));
    }
    let code = rest[..3]
        .iter()
        .fold(0u16, |a, &d| a * 10 + u16::from(d - b'0'));
    if !(100..=599).contains(&code) {
        return Err(HttpError::Status("status code out of range"));
    }
    let reason = match &rest[3..] {
        [] => &[][..],
        [b' ', r @ ..] => r,
        _ => return Err(HttpError::Status("no space after the status code")),
    };
    if reason
        .iter()
        .any(|&b| (b < b' ' && b != b'\t') || b == 0x7f)
    {
        return Err(HttpError::Status("control character in the reason phrase"));
    }
    Ok(Status {
        minor: minor - b'0',
        code,
        reason: String::from_utf8_lossy(reason).into_owned(),
    })
}

/// The longest status line read.
const MAX_STATUS_LINE: usize = 8192;

/// Reads up to the first LF and parses the status line before it.
async fn read_status(r: &mut (impl AsyncRead + Unpin)) -> Result<Status, HttpError> {
    let mut line = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    loop {
        let n = r
            .read(&mut byte)
            .await
            .map_err(|e| HttpError::Io(e.to_string()))?;
        if n == 0 {
            return Err(HttpError::Io(
                "connection closed before the status line".into(),
            ));
        }
        if byte[0] == b'\n' {
            break;
        }
        if line.len() >= MAX_STATUS_LINE {
            return Err(HttpError::Status("status line too long"));
        }
        line.push(byte[0]);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    parse_status_line(&line)
}

async fn exchange(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    request: &[u8],
) -> Result<Status, HttpError> {
    s.write_all(request)
        .await
        .map_err(|e| HttpError::Io(e.to_string()))?;
    s.flush().await.map_err(|e| HttpError::Io(e.to_string()))?;
    read_status(&mut s).await
}

/// POSTs `body` (JSON) to `url`; `Ok` with the status when it is 2xx. `tls` is the client
/// configuration for https (see [`crate::tls::client_config`]). The whole exchange is
/// bounded by `limit`.
pub async fn post_json(
    url: &Url,
    body: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    limit: Duration,
) -> Result<Status, HttpError> {
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: floodgate/{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        url.path,
        url.host_header(),
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    let work = async {
        let tcp = TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|e| HttpError::Io(format!("connect {}:{}: {e}", url.host, url.port)))?;
        let _ = tcp.set_nodelay(true);
        if url.tls {
            let config = tls.ok_or_else(|| HttpError::Io("no TLS configuration".into()))?;
            let name = rustls::pki_types::ServerName::try_from(url.host.clone())
                .map_err(|e| HttpError::Io(e.to_string()))?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| HttpError::Io(format!("TLS: {e}")))?;
            exchange(stream, request.as_bytes()).await
        } else {
            exchange(tcp, request.as_bytes()).await
        }
    };
    let status = tokio::time::timeout(limit, work)
        .await
        .map_err(|_| HttpError::Timeout(limit))??;
    if (200..300).contains(&status.code) {
        Ok(status)
    } else {
        Err(HttpError::Refused {
            code: status.code,
            reason: status.reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn status_lines() {
        assert_eq!(
            parse_status_line(b"HTTP/1.1 200 OK"),
            Ok(Status {
                minor: 1,
                code: 200,
                reason: "OK".into()
            })
        );
        assert_eq!(parse_status_line(b"HTTP/1.0 204").map(|s| s.code), Ok(204));
        assert_eq!(
            parse_status_line(b"HTTP/1.1 503 Service Unavailable").map(|s| s.reason),
            Ok("Service Unavailable".into())
        );
        assert_eq!(
            parse_status_line(b"HTTP/1.1 404 ").map(|s| s.reason),
            Ok(String::new())
        );
        for bad in [
            &b""[..],
            b"HTTP/2 200 OK",
            b"HTTP/1.1  200 OK",
            b"HTTP/1.1 20 OK",
            b"HTTP/1.1 2000 OK",
            b"HTTP/1.1 099 x",
            b"HTTP/1.1 600 x",
            b"HTTP/1.x 200 OK",
            b"http/1.1 200 OK",
            b"HTTP/1.1 200 O\rK",
            b"HTTP/1.1 200\tOK",
        ] {
            assert!(
                parse_status_line(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8080/hook?x=1").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (false, "127.0.0.1", 8080, "/hook?x=1")
        );
        assert_eq!(u.host_header(), "127.0.0.1:8080");
        let u = Url::parse("https://alerts.example.org").unwrap();
        assert_eq!((u.tls, u.port, u.path.as_str()), (true, 443, "/"));
        assert_eq!(u.host_header(), "alerts.example.org");
        let u = Url::parse("http://[::1]:9/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 9));
        assert_eq!(u.host_header(), "[::1]:9");
        for bad in [
            "ftp://x/",
            "http://",
            "http://u:p@host/",
            "http://host:0/",
            "http://host:99999/",
            "http://host/a b",
            "http://host/#frag",
            "http://[::1/",
            "http://ho st/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn reads_status_across_reads() {
        let (mut a, mut b) = tokio::io::duplex(16);
        let w = tokio::spawn(async move {
            for part in [&b"HTTP/1.1 2"[..], b"01 Created\r\nX: y\r\n\r\n"] {
                a.write_all(part).await.unwrap();
            }
        });
        let s = read_status(&mut b).await.unwrap();
        assert_eq!((s.code, s.reason.as_str()), (201, "Created"));
        w.await.unwrap();
    }

    proptest! {
        #[test]
        fn well_formed_lines_parse(minor in 0u8..10, code in 100u16..600, reason in "[ -~\t]{0,40}") {
            let line = format!("HTTP/1.{minor} {code} {reason}");
            let s = parse_status_line(line.as_bytes()).unwrap();
            prop_assert_eq!((s.minor, s.code, s.reason), (minor, code, reason));
        }

        #[test]
        fn any_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(s) = parse_status_line(&b) {
                prop_assert!((100..600).contains(&s.code));
                prop_assert!(b.starts_with(b"HTTP/1."));
            }
        }

        #[test]
        fn url_parse_never_panics(s in "\\PC{0,60}") {
            if let Ok(u) = Url::parse(&s) {
                prop_assert!(u.path.starts_with('/'));
                prop_assert!(u.port > 0);
            }
        }
    }
}
