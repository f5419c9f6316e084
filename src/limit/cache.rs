//! Exim's per-session result caches (exim-ratelimit.md §4 "Cache lifetimes").
//!
//! The proxy holds one [`SessionCache`] per client connection and calls
//! [`SessionCache::start_command`] before each command's limits,
//! [`SessionCache::reset_message`] on MAIL, RSET, HELO/EHLO and STARTTLS,
//! and [`SessionCache::start_connection`] once at the start.

use super::spec::CacheScope;

/// Computed rates remembered per database key for the three lifetimes.
#[derive(Debug, Default, Clone)]
pub struct SessionCache {
    connection: Vec<(String, f64)>,
    message: Vec<(String, f64)>,
    command: Vec<(String, f64)>,
}

impl SessionCache {
    /// An empty cache.
    pub fn new() -> SessionCache {
        SessionCache::default()
    }

    /// Connection start: forget everything.
    pub fn start_connection(&mut self) {
        self.connection.clear();
        self.message.clear();
        self.command.clear();
    }

    /// Exim's `smtp_reset` (MAIL, RSET, HELO/EHLO, STARTTLS): forget the message cache.
    pub fn reset_message(&mut self) {
        self.message.clear();
    }

    /// Start of an ACL evaluation (each command, each RCPT): forget the command cache.
    pub fn start_command(&mut self) {
        self.command.clear();
    }

    fn slot(&self, scope: CacheScope) -> &Vec<(String, f64)> {
        match scope {
            CacheScope::Connection => &self.connection,
            CacheScope::Message => &self.message,
            CacheScope::Command => &self.command,
        }
    }

    /// The rate remembered for `key` in `scope`, if any. The caller compares
    /// it with its own limit (`rate >= m`) and counts nothing.
    pub fn get(&self, scope: CacheScope, key: &str) -> Option<f64> {
        self.slot(scope)
            .iter()
            .find(|(k, _)| k == key)
            .map(|&(_, r)| r)
    }

    /// Remembers the computed rate for `key` (even when it was not stored).
    pub fn remember(&mut self, scope: CacheScope, key: &str, rate: f64) {
        let slot = match scope {
            CacheScope::Connection => &mut self.connection,
            CacheScope::Message => &mut self.message,
            CacheScope::Command => &mut self.command,
        };
        match slot.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = rate,
            None => slot.push((key.to_string(), rate)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes() {
        let mut c = SessionCache::new();
        c.start_connection();
        c.remember(CacheScope::Connection, "k", 1.0);
        c.remember(CacheScope::Message, "k", 2.0);
        c.remember(CacheScope::Command, "k", 3.0);
        c.start_command();
        assert_eq!(c.get(CacheScope::Command, "k"), None);
        assert_eq!(c.get(CacheScope::Message, "k"), Some(2.0));
        c.reset_message();
        assert_eq!(c.get(CacheScope::Message, "k"), None);
        assert_eq!(c.get(CacheScope::Connection, "k"), Some(1.0));
        c.remember(CacheScope::Connection, "k", 4.0);
        assert_eq!(c.get(CacheScope::Connection, "k"), Some(4.0));
        c.start_connection();
        assert_eq!(c.get(CacheScope::Connection, "k"), None);
    }
}
