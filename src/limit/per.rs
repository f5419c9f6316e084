//! The `per_*` option of an Exim limit: what one evaluation counts. Both the limit strings
//! ([`super::spec`]) and the ACL rules ([`super::acl`]) speak of it.

/// The `per_*` option of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PerMode {
    /// Messages (the default when no `per_*` option is given).
    Mail,
    /// Bytes of the message; stored under `per_mail`.
    Byte,
    /// Recipients.
    Rcpt,
    /// Distinct recipient addresses (`per_rcpt` + `unique=${local_part}@${domain}`).
    Addr,
    /// Every evaluation.
    Cmd,
    /// Connections.
    Conn,
}

impl PerMode {
    /// The mode word that goes into the database key.
    pub fn key_word(self) -> &'static str {
        match self {
            PerMode::Mail | PerMode::Byte => "per_mail",
            PerMode::Rcpt | PerMode::Addr => "per_rcpt",
            PerMode::Cmd => "per_cmd",
            PerMode::Conn => "per_conn",
        }
    }
}
