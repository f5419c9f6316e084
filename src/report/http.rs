//! The alert webhook's HTTP/1.1 client (hyper): one `POST` per connection
//! (`Connection: close`), http or https (hyper-rustls, with the rustls configuration
//! [`crate::tls`] builds), a time limit on the whole exchange. Only the status code matters.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub use crate::config::url::{Url, UrlError};

/// Why a webhook delivery or its address failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HttpError {
    /// The address is not an http(s) URL this client handles.
    #[error("bad URL {0:?}: write http://host:port/path or https://host:port/path")]
    Url(String),
    /// The server answered with a status that is not 2xx.
    #[error("webhook answered {code} {reason}")]
    Refused {
        /// The status code.
        code: u16,
        /// The reason phrase.
        reason: String,
    },
    /// Connecting, TLS, writing or reading (a malformed answer included) failed.
    #[error("webhook: {0}")]
    Io(String),
    /// The whole exchange took longer than its time limit.
    #[error("webhook timed out after {0:?}")]
    Timeout(Duration),
}

impl From<UrlError> for HttpError {
    fn from(e: UrlError) -> HttpError {
        HttpError::Url(e.0)
    }
}

/// The answer's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The three-digit code.
    pub code: u16,
    /// The reason phrase as sent (the code's standard one when hyper did not keep it).
    pub reason: String,
}

/// The text of `e` and of each error that caused it.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Sends `request` through a one-connection client over `connector`; only the status of
/// the answer is read.
async fn send<C>(
    url: &Url,
    connector: C,
    request: hyper::Request<Full<Bytes>>,
) -> Result<Status, HttpError>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector);
    let answer = client.request(request).await.map_err(|e| {
        use std::error::Error as _;
        match e.source() {
            Some(cause) if e.is_connect() => HttpError::Io(format!(
                "connect {}:{}: {}",
                url.host,
                url.port,
                chain(cause)
            )),
            _ => HttpError::Io(chain(&e)),
        }
    })?;
    let status = answer.status();
    let reason = match answer.extensions().get::<hyper::ext::ReasonPhrase>() {
        Some(r) => String::from_utf8_lossy(r.as_bytes()).into_owned(),
        None => status.canonical_reason().unwrap_or("").to_string(),
    };
    Ok(Status {
        code: status.as_u16(),
        reason,
    })
}

/// POSTs `body` (JSON) to `url`; `Ok` with the status when it is 2xx (redirects are not
/// followed: a 3xx is a refusal). `tls` is the client configuration for https (see
/// [`crate::tls::client_config`]). The whole exchange is bounded by `limit`.
pub async fn post_json(
    url: &Url,
    body: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    limit: Duration,
) -> Result<Status, HttpError> {
    use hyper::header;
    let request = hyper::Request::post(url.uri())
        .header(
            header::USER_AGENT,
            concat!("floodgate/", env!("CARGO_PKG_VERSION")),
        )
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONNECTION, "close")
        .body(Full::new(Bytes::from(body.to_owned())))
        .map_err(|_| HttpError::Url(url.uri()))?;
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    let work = async {
        if url.tls {
            let config = tls.ok_or_else(|| HttpError::Io("no TLS configuration".into()))?;
            tcp.enforce_http(false);
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config((*config).clone())
                .https_only()
                .enable_http1()
                .wrap_connector(tcp);
            send(url, https, request).await
        } else {
            send(url, tcp, request).await
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
    use http_body_util::BodyExt;
    use hyper::body::Incoming;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use proptest::prelude::*;
    use std::convert::Infallible;
    use std::path::Path;
    use std::sync::Mutex;
    use tokio::net::TcpListener;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8080/hook?x=1").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (false, "127.0.0.1", 8080, "/hook?x=1")
        );
        assert_eq!(u.host_header(), "127.0.0.1:8080");
        assert_eq!(u.uri(), "http://127.0.0.1:8080/hook?x=1");
        let u = Url::parse("https://alerts.example.org").unwrap();
        assert_eq!((u.tls, u.port, u.path.as_str()), (true, 443, "/"));
        assert_eq!(u.host_header(), "alerts.example.org");
        assert_eq!(u.uri(), "https://alerts.example.org/");
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
            let e = Url::parse(bad).unwrap_err();
            assert_eq!(
                HttpError::from(e.clone()),
                HttpError::Url(bad.into()),
                "{bad}"
            );
            assert!(e.to_string().contains("write http://host:port/path"), "{e}");
        }
    }

    /// What the webhook receiver saw of one request.
    #[derive(Debug, Clone)]
    struct Seen {
        line: String,
        host: String,
        content_type: String,
        agent: String,
        body: Vec<u8>,
    }

    type Log = Arc<Mutex<Vec<Seen>>>;

    /// A webhook receiver (hyper's server, over TLS when `tls` is given) answering every
    /// request with `status` and, when given, a reason phrase of its own.
    async fn hook(
        status: u16,
        reason: Option<&'static str>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> (u16, Log) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let log: Log = Arc::default();
        let seen = log.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = l.accept().await {
                let (seen, tls) = (seen.clone(), tls.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<Incoming>| {
                        let seen = seen.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await.unwrap().to_bytes().to_vec();
                            let header = |n| {
                                parts.headers.get(n).map_or(String::new(), |v| {
                                    v.to_str().unwrap_or_default().to_string()
                                })
                            };
                            seen.lock().unwrap().push(Seen {
                                line: format!("{} {} {:?}", parts.method, parts.uri, parts.version),
                                host: header(hyper::header::HOST),
                                content_type: header(hyper::header::CONTENT_TYPE),
                                agent: header(hyper::header::USER_AGENT),
                                body,
                            });
                            let mut resp = hyper::Response::new(Full::new(Bytes::new()));
                            *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            if let Some(r) = reason {
                                resp.extensions_mut()
                                    .insert(hyper::ext::ReasonPhrase::from_static(r.as_bytes()));
                            }
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let http = http1::Builder::new();
                    match tls {
                        Some(c) => {
                            if let Ok(s) = tokio_rustls::TlsAcceptor::from(c).accept(tcp).await {
                                let _ = http.serve_connection(TokioIo::new(s), service).await;
                            }
                        }
                        None => {
                            let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                        }
                    }
                });
            }
        });
        (port, log)
    }

    const LIMIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn posts_json_and_reads_the_status() {
        let (port, log) = hook(200, None, None).await;
        let url = Url::parse(&format!("http://127.0.0.1:{port}/hook?x=1")).unwrap();
        let status = post_json(&url, r#"{"event":"x"}"#, None, LIMIT)
            .await
            .unwrap();
        assert_eq!(
            status,
            Status {
                code: 200,
                reason: "OK".into()
            }
        );
        let seen = log.lock().unwrap()[0].clone();
        assert_eq!(seen.line, "POST /hook?x=1 HTTP/1.1");
        assert_eq!(seen.host, format!("127.0.0.1:{port}"));
        assert_eq!(seen.content_type, "application/json");
        assert!(seen.agent.starts_with("floodgate/"), "{seen:?}");
        assert_eq!(seen.body, br#"{"event":"x"}"#);
    }

    #[tokio::test]
    async fn other_statuses_are_refusals_with_their_reason() {
        for (status, reason, want) in [
            (503, None, "webhook answered 503 Service Unavailable"),
            (503, Some("Busy Now"), "webhook answered 503 Busy Now"),
            (302, None, "webhook answered 302 Found"),
            (404, Some(""), "webhook answered 404 "),
        ] {
            let (port, log) = hook(status, reason, None).await;
            let url = Url::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
            let e = post_json(&url, "{}", None, LIMIT).await.unwrap_err();
            assert!(
                matches!(e, HttpError::Refused { code, .. } if code == status),
                "{e:?}"
            );
            assert_eq!(e.to_string(), want);
            assert_eq!(
                log.lock().unwrap().len(),
                1,
                "one request, no redirect followed"
            );
        }
    }

    #[tokio::test]
    async fn silence_times_out_and_refusal_names_the_address() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let url = Url::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
        // Accepted (by the backlog) but never answered.
        let limit = Duration::from_millis(300);
        let e = post_json(&url, "{}", None, limit).await.unwrap_err();
        assert_eq!(e, HttpError::Timeout(limit));
        assert_eq!(e.to_string(), "webhook timed out after 300ms");
        drop(l);
        let e = post_json(&url, "{}", None, LIMIT).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("webhook: connect 127.0.0.1:{port}: ")),
            "{text}"
        );
        assert!(text.contains("refused"), "{text}");
    }

    fn dev_cert(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("certs/dev")
            .join(name)
    }

    #[tokio::test]
    async fn https_checks_the_certificate() {
        let server =
            crate::tls::server_config(&dev_cert("server.crt"), &dev_cert("server.key")).unwrap();
        let (port, log) = hook(204, None, Some(server)).await;
        let url = Url::parse(&format!("https://127.0.0.1:{port}/tls")).unwrap();
        let trusted = crate::tls::client_config(Some(&dev_cert("ca.crt"))).unwrap();
        let status = post_json(&url, "{}", Some(trusted), LIMIT).await.unwrap();
        assert_eq!(status.code, 204);
        assert_eq!(log.lock().unwrap()[0].line, "POST /tls HTTP/1.1");
        // A server whose certificate no trusted authority signed is not posted to.
        let nobody = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let e = post_json(&url, "{}", Some(Arc::new(nobody)), LIMIT)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("certificate"), "{e}");
        assert_eq!(log.lock().unwrap().len(), 1);
        // https without a TLS configuration.
        let e = post_json(&url, "{}", None, LIMIT).await.unwrap_err();
        assert_eq!(e, HttpError::Io("no TLS configuration".into()));
    }

    proptest! {
        #[test]
        fn url_parse_never_panics(s in "\\PC{0,60}") {
            if let Ok(u) = Url::parse(&s) {
                prop_assert!(u.path.starts_with('/'));
                prop_assert!(u.port > 0);
                prop_assert!(u.uri().parse::<hyper::Uri>().is_ok());
            }
        }
    }
}
