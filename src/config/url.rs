//! A webhook address, checked when the config is read.

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

/// An address that is not an http(s) URL floodgate's webhook client handles.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad URL {0:?}: write http://host:port/path or https://host:port/path")]
pub struct UrlError(pub String);

impl Url {
    /// Parses `http://host[:port][/path]`; user info and fragments are refused.
    pub fn parse(text: &str) -> Result<Url, UrlError> {
        let bad = || UrlError(text.to_string());
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

    /// The absolute URI of a request to it.
    pub fn uri(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.host_header(), self.path)
    }

    /// The `Host` header value.
    pub fn host_header(&self) -> String {
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
