//! Messages the private Postfix delivered to its maildir.

use std::path::PathBuf;

/// A message Postfix delivered to the maildir.
#[derive(Clone)]
pub struct Delivered {
    /// The maildir file.
    pub path: PathBuf,
    /// The file's bytes (Postfix's `Return-Path:`, `Delivered-To:` and `Received:`
    /// headers first, line ends as LF).
    pub raw: Vec<u8>,
}

impl std::fmt::Debug for Delivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:\n{}", self.path.display(), self.head())
    }
}

impl Delivered {
    /// The whole message as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// The header section as text (up to the first empty line).
    pub fn head(&self) -> String {
        let end = find(&self.raw, b"\n\n").unwrap_or(self.raw.len());
        String::from_utf8_lossy(&self.raw[..end]).into_owned()
    }

    /// The body (after the first empty line).
    pub fn body(&self) -> &[u8] {
        match find(&self.raw, b"\n\n") {
            Some(i) => &self.raw[i + 2..],
            None => &[],
        }
    }

    /// The values of every header called `name` (case-insensitive), unfolded, in order.
    pub fn headers(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut current: Option<String> = None;
        for line in self.head().lines() {
            if line.starts_with([' ', '\t']) {
                if let Some(c) = current.as_mut() {
                    c.push(' ');
                    c.push_str(line.trim());
                }
                continue;
            }
            if let Some(c) = current.take() {
                out.push(c);
            }
            if let Some((n, v)) = line.split_once(':') {
                if n.eq_ignore_ascii_case(name) {
                    current = Some(v.trim().to_string());
                }
            }
        }
        out.extend(current);
        out
    }

    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers(name).into_iter().next()
    }

    /// The `Received:` header Postfix's smtpd added (the first one in the file).
    pub fn postfix_received(&self) -> String {
        self.header("Received")
            .unwrap_or_else(|| panic!("no Received header in {self:?}"))
    }
}

pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
