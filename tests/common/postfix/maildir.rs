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
        crate::common::delivered::head(&self.raw)
    }

    /// The body (after the first empty line).
    pub fn body(&self) -> &[u8] {
        crate::common::delivered::body(&self.raw)
    }

    /// The values of every header called `name` (case-insensitive), unfolded, in order.
    pub fn headers(&self, name: &str) -> Vec<String> {
        crate::common::delivered::header_values(&self.head(), name)
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
