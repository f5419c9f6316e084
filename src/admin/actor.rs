//! Who asked for an admin action: the name recorded as `by` in its log line, its alert, the
//! restriction it makes, the trace header of the mail it releases and its audit line.

use std::fmt;

/// Who is at the other end of an admin request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Actor {
    /// A bearer token of the admin address (the HTTP API or the web console), by its name
    /// in `[admin] token_file` / `[admin.tokens]`: `token:NAME`.
    Token(String),
    /// The operating-system user whose process connected to the admin socket (its peer
    /// credentials), by user name, or `uid N` when the system knows no name: `user:NAME`.
    User(String),
    /// A person acting through root or the service's own user (`sudo`, `doas`, a login
    /// session's `su`/`runuser`), as that user's admin verb said and the server accepted
    /// (only from those two users): `user:PERSON (uid UID via VIA)`.
    Invoker {
        /// The person behind the connection (`SUDO_USER`, `DOAS_USER`, the login uid's
        /// name).
        person: String,
        /// The user id at the other end of the admin socket: 0, or the service's own.
        uid: u32,
        /// How the person became that user: `sudo`, `doas` or `login` (the login uid).
        via: String,
    },
    /// The web console reading the admin API for its own pages; never the actor of a
    /// change (the console's actions carry the session's token).
    Console,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Token(name) => write!(f, "token:{name}"),
            Actor::User(name) => write!(f, "user:{name}"),
            Actor::Invoker { person, uid, via } => write!(f, "user:{person} (uid {uid} via {via})"),
            Actor::Console => f.write_str("console"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_by_forms() {
        assert_eq!(Actor::Token("alice".into()).to_string(), "token:alice");
        assert_eq!(Actor::User("root".into()).to_string(), "user:root");
        assert_eq!(Actor::User("uid 4242".into()).to_string(), "user:uid 4242");
        assert_eq!(Actor::Console.to_string(), "console");
        let alice = Actor::Invoker {
            person: "alice".into(),
            uid: 0,
            via: "sudo".into(),
        };
        assert_eq!(alice.to_string(), "user:alice (uid 0 via sudo)");
    }
}
