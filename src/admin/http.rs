//! The admin API's view of HTTP: the [`Request`] its handlers read and the [`Response`] they
//! build, and their conversion from and to hyper's types. hyper reads and writes the wire
//! (see [`super::serve`]); [`guard`] holds the request head to CRLF line endings and keeps
//! error answers in the API's JSON shape.
//!
//! Every connection carries one request and gets `Connection: close` and
//! `Cache-Control: no-store`.

pub mod guard;

use std::fmt::Write as _;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue};

/// Size bounds of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Request line plus header fields.
    pub max_head: usize,
    /// Header fields.
    pub max_headers: usize,
    /// The body.
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head: 8 * 1024,
            max_headers: 32,
            max_body: 16 * 1024,
        }
    }
}

/// One request, as the handlers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, as sent (a token; case-sensitive, as HTTP says).
    pub method: String,
    /// The path, percent-decoded.
    pub path: String,
    /// Query parameters in order, percent-decoded (`+` is a space).
    pub query: Vec<(String, String)>,
    /// Header fields in order; names lower-cased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body (empty without one).
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of header `name` (give it lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The token of an `Authorization: Bearer TOKEN` header (trimmed); `None` without one.
    pub fn bearer(&self) -> Option<&str> {
        self.header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
    }

    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The handlers' view of a request hyper parsed, with its whole `body`: the target must
    /// be a path (origin form), whose path and query are percent-decoded to UTF-8, and
    /// header values must be UTF-8.
    pub fn from_parts(
        parts: &hyper::http::request::Parts,
        body: Vec<u8>,
    ) -> Result<Request, HttpError> {
        let uri = &parts.uri;
        if uri.scheme().is_some() || uri.authority().is_some() || !uri.path().starts_with('/') {
            return Err(HttpError::Bad("target must be an origin-form path"));
        }
        let path = percent_decode(uri.path(), false)?;
        let mut query = Vec::new();
        for pair in uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            query.push((percent_decode(k, true)?, percent_decode(v, true)?));
        }
        let mut headers = Vec::with_capacity(parts.headers.len());
        for (name, value) in &parts.headers {
            let value = std::str::from_utf8(value.as_bytes())
                .map_err(|_| HttpError::Bad("header field value is not UTF-8"))?;
            headers.push((
                name.as_str().to_string(),
                value.trim_matches([' ', '\t']).to_string(),
            ));
        }
        Ok(Request {
            method: parts.method.as_str().to_string(),
            path,
            query,
            headers,
            body,
        })
    }
}

/// Why a request was refused; each maps to a status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// Malformed: 400.
    #[error("bad request: {0}")]
    Bad(&'static str),
    /// Head or body too large: 413.
    #[error("request too large: {0}")]
    TooLarge(&'static str),
}

impl HttpError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::Bad(_) => 400,
            HttpError::TooLarge(_) => 413,
        }
    }
}

/// Decodes `%XX` escapes (and, in a query, `+` as a space); the result must be UTF-8.
pub fn percent_decode(s: &str, query: bool) -> Result<String, HttpError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                let (Some(h), Some(l)) = (
                    b.get(i + 1).copied().and_then(hex),
                    b.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(HttpError::Bad("bad percent escape"));
                };
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            b'+' if query => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| HttpError::Bad("escaped text is not UTF-8"))
}

/// Encodes `s` for a query value: everything but unreserved characters becomes `%XX`.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A response: status, content type, extra header fields, body; always sent with
/// `Connection: close` and `Cache-Control: no-store` (and `WWW-Authenticate: Bearer` on a
/// 401).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// More header fields (`Set-Cookie`, `Location`, …), in order.
    pub headers: Vec<(&'static str, String)>,
}

impl From<HttpError> for Response {
    fn from(e: HttpError) -> Response {
        Response::error(e.status(), &e.to_string())
    }
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        let mut body = serde_json::to_vec(value).unwrap_or_default();
        body.push(b'\n');
        Response {
            status,
            content_type: "application/json",
            body,
            headers: Vec::new(),
        }
    }

    /// A JSON error `{"error": message}`.
    pub fn error(status: u16, message: &str) -> Response {
        Response::json(status, &serde_json::json!({ "error": message }))
    }

    /// A plain-text response.
    pub fn text(status: u16, content_type: &'static str, body: String) -> Response {
        Response {
            status,
            content_type,
            body: body.into_bytes(),
            headers: Vec::new(),
        }
    }

    /// The header fields every answer carries, in order.
    fn fixed_headers(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("Content-Type", self.content_type.to_string()),
            ("Content-Length", self.body.len().to_string()),
            ("Connection", "close".to_string()),
            ("Cache-Control", "no-store".to_string()),
        ];
        if self.status == 401 {
            fields.push(("WWW-Authenticate", "Bearer".to_string()));
        }
        fields
    }

    /// hyper's form of the response. A status or header field hyper cannot send (a handler's
    /// mistake) becomes a 500 naming it.
    pub fn into_hyper(self) -> hyper::Response<Full<Bytes>> {
        let status = hyper::StatusCode::from_u16(self.status);
        let mut fields = self.fixed_headers();
        fields.extend(self.headers);
        let mut map = hyper::HeaderMap::with_capacity(fields.len());
        for (name, value) in fields {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                (Ok(n), Ok(v)) => {
                    map.append(n, v);
                }
                _ => {
                    let why = format!("the answer's header field {name} cannot be sent");
                    return Response::error(500, &why).into_hyper();
                }
            }
        }
        let Ok(status) = status else {
            let why = format!("the answer's status {} cannot be sent", self.status);
            return Response::error(500, &why).into_hyper();
        };
        let mut resp = hyper::Response::new(Full::new(Bytes::from(self.body)));
        *resp.status_mut() = status;
        *resp.headers_mut() = map;
        resp
    }

    /// The wire form, for answers written before hyper understood a request (see
    /// [`guard`]): the fields [`Response::into_hyper`] gives hyper, less any that could not
    /// be sent.
    pub fn to_bytes(&self) -> Vec<u8> {
        let reason = hyper::StatusCode::from_u16(self.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Unknown");
        let mut out = format!("HTTP/1.1 {} {reason}\r\n", self.status);
        for (name, value) in self.fixed_headers().iter().chain(&self.headers) {
            if HeaderName::from_bytes(name.as_bytes()).is_ok()
                && HeaderValue::from_str(value).is_ok()
            {
                let _ = write!(out, "{name}: {value}\r\n");
            }
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// Compares in time that depends only on the lengths, never on where the bytes differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keep the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests;
