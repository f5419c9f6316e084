//! The postmaster's end of the alerts: an HTTP server on a free loopback port that takes
//! each alert floodgate POSTs to `[alerts] webhook`, prints it and keeps it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::DemoError;

/// The largest request taken (header section and body).
const MAX_REQUEST: usize = 1 << 20;
/// How long one request may take to arrive.
const REQUEST_TIME: Duration = Duration::from_secs(10);

/// A running alert receiver.
pub struct Receiver {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The alerts received so far (their JSON), oldest first.
    pub alerts: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Receiver {
    /// The webhook URL to configure.
    pub fn url(&self) -> String {
        format!("http://{}/alerts", self.addr)
    }

    /// The alerts received so far.
    pub fn received(&self) -> Vec<serde_json::Value> {
        self.alerts.lock().expect("alerts").clone()
    }
}

/// Starts the receiver on a free port of 127.0.0.1; it serves until the runtime ends.
pub async fn start() -> Result<Receiver, DemoError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(DemoError::io("alert receiver: bind 127.0.0.1:0"))?;
    let addr = listener
        .local_addr()
        .map_err(DemoError::io("alert receiver: its address"))?;
    let alerts = Arc::new(Mutex::new(Vec::new()));
    let kept = alerts.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                if let Ok(Some(body)) = tokio::time::timeout(REQUEST_TIME, request(stream)).await {
                    take(&kept, &body);
                }
            });
        }
    });
    Ok(Receiver { addr, alerts })
}

/// Prints and keeps one alert.
fn take(kept: &Mutex<Vec<serde_json::Value>>, body: &[u8]) {
    let value = serde_json::from_slice(body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(body).into()));
    let kind = value["event"].as_str().unwrap_or("alert");
    say!(
        "postmaster alert ({kind}): {}",
        serde_json::to_string(&value).unwrap_or_default()
    );
    kept.lock().expect("alerts").push(value);
}

/// The end of the header section in `buf`, after its blank line.
fn header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The Content-Length of a header section (0 when absent).
fn content_length(head: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(head).ok()?;
    for l in text.split("\r\n") {
        if let Some((name, value)) = l.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                return value.trim().parse().ok();
            }
        }
    }
    Some(0)
}

/// Reads one request and answers 204; its body, or `None` when it is not a whole request.
async fn request(mut stream: TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let (end, length) = loop {
        if let Some(end) = header_end(&buf) {
            break (end, content_length(&buf[..end])?);
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_REQUEST {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if end + length > MAX_REQUEST {
        return None;
    }
    while buf.len() < end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let _ = stream
        .write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .await;
    let _ = stream.shutdown().await;
    Some(buf[end..end + length].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_found_by_its_length() {
        let req = b"POST /alerts HTTP/1.1\r\nHost: x\r\ncontent-length: 2\r\n\r\n{}";
        let end = header_end(req).unwrap();
        assert_eq!(content_length(&req[..end]), Some(2));
        assert_eq!(&req[end..], b"{}");
        assert_eq!(content_length(b"GET / HTTP/1.1\r\n\r\n"), Some(0));
    }
}
