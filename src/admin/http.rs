//! A small, strict HTTP/1.1 request parser and response writer, without I/O.
//!
//! Only what the admin API and the metrics endpoint need: a request line, header fields and
//! an optional body of bounded `Content-Length`. Anything loose is refused rather than
//! guessed at: bare LF, obsolete line folding, whitespace before a colon, duplicate or
//! non-numeric `Content-Length`, any `Transfer-Encoding`, versions other than 1.0 and 1.1.
//! Every connection carries one request and gets `Connection: close`.

use std::fmt::Write as _;

/// Size bounds of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Request line plus header fields, with their CRLFs.
    pub max_head: usize,
    /// Header fields.
    pub max_headers: usize,
    /// `Content-Length`.
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

/// One parsed request.
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
    /// The body (`Content-Length` bytes; empty without one).
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

    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
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

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parses one request from the start of `buf`. `Ok(None)`: incomplete, read more;
/// `Ok(Some((request, used)))`: a whole request of `used` bytes.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Option<(Request, usize)>, HttpError> {
    let Some(head_len) = find_head_end(buf, limits.max_head)? else {
        return Ok(None);
    };
    let head = &buf[..head_len - 2]; // keep each line's CRLF except the blank line's
    let mut lines = split_crlf(head)?;
    let request_line = lines.next().ok_or(HttpError::Bad("empty request"))?;
    let (method, path, query) = parse_request_line(request_line)?;
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut length: Option<usize> = None;
    for line in lines {
        if headers.len() == limits.max_headers {
            return Err(HttpError::TooLarge("too many header fields"));
        }
        let (name, value) = parse_field(line)?;
        match name.as_str() {
            "content-length" => {
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(HttpError::Bad("Content-Length is not a number"));
                }
                if length.is_some() {
                    return Err(HttpError::Bad("more than one Content-Length"));
                }
                let n = value
                    .parse::<usize>()
                    .map_err(|_| HttpError::TooLarge("body"))?;
                if n > limits.max_body {
                    return Err(HttpError::TooLarge("body"));
                }
                length = Some(n);
            }
            "transfer-encoding" => {
                return Err(HttpError::Bad("Transfer-Encoding is not supported"));
            }
            _ => {}
        }
        headers.push((name, value));
    }
    let body_len = length.unwrap_or(0);
    let total = head_len + body_len;
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some((
        Request {
            method,
            path,
            query,
            headers,
            body: buf[head_len..total].to_vec(),
        },
        total,
    )))
}

/// The length of the head with its blank line, once it is all in `buf`.
fn find_head_end(buf: &[u8], max: usize) -> Result<Option<usize>, HttpError> {
    let window = &buf[..buf.len().min(max)];
    if let Some(i) = memchr::memmem::find(window, b"\r\n\r\n") {
        return Ok(Some(i + 4));
    }
    // A bare LF anywhere in the head is refused at once (no waiting for more).
    if memchr::memchr_iter(b'\n', window).any(|j| j == 0 || window[j - 1] != b'\r') {
        return Err(HttpError::Bad(
            "bare CR or LF (lines must end in CRLF), or NUL, in the head",
        ));
    }
    if buf.len() >= max {
        return Err(HttpError::TooLarge("request head"));
    }
    Ok(None)
}

/// The lines of `head` (each ended by CRLF, the last one included), without CRLFs.
fn split_crlf(head: &[u8]) -> Result<impl Iterator<Item = &[u8]>, HttpError> {
    for (i, &b) in head.iter().enumerate() {
        let ok = match b {
            b'\n' => i > 0 && head[i - 1] == b'\r',
            b'\r' => head.get(i + 1) == Some(&b'\n'),
            0 => false,
            _ => true,
        };
        if !ok {
            return Err(HttpError::Bad(
                "bare CR or LF (lines must end in CRLF), or NUL, in the head",
            ));
        }
    }
    let body = head.strip_suffix(b"\r\n").unwrap_or(head);
    Ok(memchr::memmem::find_iter(body, b"\r\n")
        .chain(std::iter::once(body.len()))
        .scan(0usize, move |start, end| {
            let line = &body[*start..end];
            *start = end + 2;
            Some(line)
        }))
}

type RequestLine = (String, String, Vec<(String, String)>);

fn parse_request_line(line: &[u8]) -> Result<RequestLine, HttpError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Bad("request line is not METHOD TARGET VERSION"));
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::Bad("bad method"));
    }
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err(HttpError::Bad("only HTTP/1.0 and HTTP/1.1 are spoken"));
    }
    if target.first() != Some(&b'/') || !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        return Err(HttpError::Bad("target must be an origin-form path"));
    }
    let target = std::str::from_utf8(target).map_err(|_| HttpError::Bad("target"))?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path.contains('#') || query.contains('#') {
        return Err(HttpError::Bad("fragment in target"));
    }
    let path = percent_decode(path, false)?;
    let mut params = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        params.push((percent_decode(k, true)?, percent_decode(v, true)?));
    }
    // The method was checked to be ASCII.
    Ok((String::from_utf8_lossy(method).into_owned(), path, params))
}

fn parse_field(line: &[u8]) -> Result<(String, String), HttpError> {
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
        return Err(HttpError::Bad("obsolete line folding"));
    }
    let colon = memchr::memchr(b':', line).ok_or(HttpError::Bad("header field without colon"))?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::Bad("bad header field name"));
    }
    let value = &line[colon + 1..];
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(HttpError::Bad("control character in a header field"));
    }
    let value = std::str::from_utf8(value).map_err(|_| HttpError::Bad("header field value"))?;
    Ok((
        String::from_utf8_lossy(name).to_ascii_lowercase(),
        value.trim_matches([' ', '\t']).to_string(),
    ))
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

/// A response: status, content type, body; always `Connection: close`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// More header fields (name, value), written after the fixed ones.
    pub headers: Vec<(&'static str, String)>,
}

/// The reason phrase of the status codes floodgate sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Unknown",
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

    /// The wire form. `head_only` leaves the body out (for HEAD).
    pub fn to_bytes(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        if self.status == 401 {
            out.push_str("WWW-Authenticate: Bearer\r\n");
        }
        for (name, value) in &self.headers {
            let _ = write!(out, "{name}: {value}\r\n");
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// Parses a whole response as read up to the server's close: the status and the body
/// (`Content-Length` bytes when given, else everything after the head).
pub fn parse_response(buf: &[u8]) -> Result<(u16, Vec<u8>), HttpError> {
    let end =
        memchr::memmem::find(buf, b"\r\n\r\n").ok_or(HttpError::Bad("incomplete response"))?;
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| HttpError::Bad("response head"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let (Some(v), Some(code)) = (parts.next(), parts.next()) else {
        return Err(HttpError::Bad("status line"));
    };
    if !v.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(HttpError::Bad("status line"));
    }
    let status: u16 = code.parse().map_err(|_| HttpError::Bad("status code"))?;
    let mut body = &buf[end + 4..];
    for l in lines {
        if let Some((n, v)) = l.split_once(':') {
            if n.eq_ignore_ascii_case("content-length") {
                let n: usize = v
                    .trim()
                    .parse()
                    .map_err(|_| HttpError::Bad("Content-Length"))?;
                body = body.get(..n).ok_or(HttpError::Bad("truncated body"))?;
            }
        }
    }
    Ok((status, body.to_vec()))
}

#[cfg(test)]
mod tests;
