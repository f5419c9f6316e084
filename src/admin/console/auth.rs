//! Who is asking, and whether they may.
//!
//! A browser cannot add `Authorization: Bearer` to a navigation, so the console has a login
//! form: it posts the admin token once, and gets a session cookie holding a random session
//! id (never the token): `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's
//! page sends it), `Path=/console`, and `Secure` (sent only over TLS) when the admin address
//! serves TLS. Pages are shown to a live session or to a request with
//! the bearer token. Actions (POSTs that release, delete, reset) need more: a session's
//! request must carry the session's CSRF value: in the `X-Floodgate-CSRF` header, which
//! the page's script reads from the page and sets on `fetch` (the row buttons), or in the
//! `csrf` field of a posted form (the forms, which work without scripting); a cookie alone
//! never authorises one. A request with the bearer token needs no CSRF value (a browser never
//! adds that header by itself).
//!
//! Every token presented (the login form, `Authorization: Bearer`) is checked through
//! [`super::throttle`]: wrong ones slow their address down, doubling.
//!
//! The decisions are pure functions ([`decide`], [`cookie`]); [`Sessions`] keeps the
//! sessions, bounded in number and time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::admin::http::ct_eq;

/// The session cookie's name.
pub const COOKIE: &str = "floodgate_console";
/// The request header carrying the CSRF value.
pub const CSRF_HEADER: &str = "x-floodgate-csrf";
/// Sessions kept at once; a new login beyond it ends the least recently used one.
pub const MAX_SESSIONS: usize = 64;
/// A session unused this long ends.
pub const IDLE: Duration = Duration::from_secs(60 * 60);
/// A session ends this long after its login, used or not.
pub const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// The credentials a request carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    /// Nothing, or a cookie of no live session.
    Nobody,
    /// A bearer token that is none of the admin tokens.
    WrongToken,
    /// An admin token as `Authorization: Bearer`, by its name.
    Bearer(String),
    /// A live session, with its CSRF value.
    Session {
        /// The session id (the cookie's value).
        id: String,
        /// The value actions of this session must carry in [`CSRF_HEADER`] or a form's
        /// `csrf` field.
        csrf: String,
        /// The name of the token it logged in with.
        name: String,
    },
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// To see a page.
    Read,
    /// To change something.
    Act,
}

/// The answer to a request's credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go on.
    Allow,
    /// 401: not logged in (nothing is shown but the login form).
    Unauthorized(&'static str),
    /// 403: logged in, but not allowed this.
    Forbidden(&'static str),
}

/// Whether `who` may do what `need` says; `csrf` is the request's CSRF value (its
/// [`CSRF_HEADER`], else its form's `csrf` field) and `actions` whether
/// `[admin] console_actions` is on.
pub fn decide(need: Need, who: &Who, csrf: Option<&str>, actions: bool) -> Decision {
    match who {
        Who::Nobody => return Decision::Unauthorized("log in with the admin token"),
        Who::WrongToken => return Decision::Unauthorized("wrong bearer token"),
        Who::Bearer(_) | Who::Session { .. } => {}
    }
    if need == Need::Read {
        return Decision::Allow;
    }
    if !actions {
        return Decision::Forbidden(
            "the console is read-only: set [admin] console_actions = true to act from it",
        );
    }
    match (who, csrf) {
        (Who::Session { .. }, None) => Decision::Forbidden(
            "the action carries no CSRF value (the X-Floodgate-CSRF header or the csrf form \
             field): use the page's buttons and forms",
        ),
        (Who::Session { csrf: want, .. }, Some(got)) if !ct_eq(got.as_bytes(), want.as_bytes()) => {
            Decision::Forbidden(
                "the CSRF value (X-Floodgate-CSRF header or csrf field) does not match this \
                 session: reload the page",
            )
        }
        _ => Decision::Allow,
    }
}

/// The value of cookie `name` in a `Cookie` header (`a=1; b=2`).
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (n, v) = pair.trim().split_once('=')?;
        (n.trim() == name).then(|| v.trim().trim_matches('"'))
    })
}

/// What a presented token turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenCheck {
    /// One of the admin tokens, by its name.
    Right(String),
    /// None of the admin tokens; the address now waits this long before its next token.
    Wrong(Duration),
    /// Not looked at: the address must wait after its wrong tokens, or everyone after the
    /// wrong tokens of all addresses together.
    Throttled(super::throttle::Wait),
}

/// Whole seconds to tell a client to wait for `wait` (`Retry-After`): rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

/// The attributes every session cookie carries; `Secure` when the console is served over TLS.
fn cookie_attributes(secure: bool) -> &'static str {
    if secure {
        "Path=/console; HttpOnly; SameSite=Strict; Secure"
    } else {
        "Path=/console; HttpOnly; SameSite=Strict"
    }
}

/// The `Set-Cookie` value opening session `id`; `secure` when served over TLS.
pub fn set_cookie(id: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={id}; {}; Max-Age={}",
        cookie_attributes(secure),
        LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie(secure: bool) -> String {
    format!("{COOKIE}=; {}; Max-Age=0", cookie_attributes(secure))
}

/// The value of field `name` in an `application/x-www-form-urlencoded` body.
pub fn form_field(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        let n = crate::admin::http::percent_decode(n, true).ok()?;
        (n == name)
            .then(|| crate::admin::http::percent_decode(v, true).ok())
            .flatten()
    })
}

/// 32 random bytes from the operating system, in hex.
pub fn random_hex() -> String {
    let mut b = [0u8; 32];
    let rng = rustls::crypto::ring::default_provider().secure_random;
    if rng.fill(&mut b).is_err() {
        // The OS had no randomness to give: fall back to /dev/urandom, or fail loudly.
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut b))
            .expect("no randomness for a console session");
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[derive(Debug)]
struct Session {
    csrf: String,
    /// The name of the token it logged in with.
    name: String,
    created: Instant,
    used: Instant,
}

/// The live sessions.
#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<String, Session>>);

impl Sessions {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new session of the token named `name`; returns its id (the cookie) and its CSRF
    /// value.
    pub fn open(&self, name: &str, now: Instant) -> (String, String) {
        let mut m = self.map();
        m.retain(|_, s| alive(s, now));
        if m.len() >= MAX_SESSIONS {
            if let Some(oldest) = m.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| k.clone()) {
                m.remove(&oldest);
            }
        }
        let (id, csrf) = (random_hex(), random_hex());
        m.insert(
            id.clone(),
            Session {
                csrf: csrf.clone(),
                name: name.to_string(),
                created: now,
                used: now,
            },
        );
        (id, csrf)
    }

    /// The CSRF value and token name of live session `id` (and marks it used), or `None`.
    pub fn find(&self, id: &str, now: Instant) -> Option<(String, String)> {
        let mut m = self.map();
        let live = m.get(id).is_some_and(|s| alive(s, now));
        if !live {
            m.remove(id);
            return None;
        }
        let s = m.get_mut(id)?;
        s.used = now;
        Some((s.csrf.clone(), s.name.clone()))
    }

    /// Ends session `id`.
    pub fn close(&self, id: &str) {
        self.map().remove(id);
    }

    /// Sessions kept now.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether no session is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn alive(s: &Session, now: Instant) -> bool {
    now.saturating_duration_since(s.used) < IDLE
        && now.saturating_duration_since(s.created) < LIFETIME
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(csrf: &str) -> Who {
        Who::Session {
            id: "id".into(),
            csrf: csrf.into(),
            name: "alice".into(),
        }
    }

    fn bearer() -> Who {
        Who::Bearer("alice".into())
    }

    #[test]
    fn nobody_and_wrong_tokens_get_401_for_everything() {
        for need in [Need::Read, Need::Act] {
            for actions in [false, true] {
                assert!(matches!(
                    decide(need, &Who::Nobody, Some("x"), actions),
                    Decision::Unauthorized(_)
                ));
                assert_eq!(
                    decide(need, &Who::WrongToken, None, actions),
                    Decision::Unauthorized("wrong bearer token")
                );
            }
        }
    }

    #[test]
    fn reading_needs_a_session_or_the_token_only() {
        assert_eq!(decide(Need::Read, &bearer(), None, false), Decision::Allow);
        assert_eq!(
            decide(Need::Read, &session("c"), None, false),
            Decision::Allow
        );
    }

    #[test]
    fn acting_needs_the_switch_and_the_csrf_header() {
        let off = decide(Need::Act, &session("c"), Some("c"), false);
        assert!(matches!(off, Decision::Forbidden(m) if m.contains("console_actions")));
        assert!(matches!(
            decide(Need::Act, &bearer(), None, false),
            Decision::Forbidden(_)
        ));
        // The cookie alone is never enough.
        let none = decide(Need::Act, &session("c"), None, true);
        assert!(matches!(none, Decision::Forbidden(m) if m.contains("no CSRF value")));
        let wrong = decide(Need::Act, &session("c"), Some("d"), true);
        assert!(matches!(wrong, Decision::Forbidden(m) if m.contains("does not match")));
        assert!(matches!(
            decide(Need::Act, &session("c"), Some(""), true),
            Decision::Forbidden(_)
        ));
        assert_eq!(
            decide(Need::Act, &session("c"), Some("c"), true),
            Decision::Allow
        );
        // The bearer token is not sent by a browser on its own: no CSRF value needed.
        assert_eq!(decide(Need::Act, &bearer(), None, true), Decision::Allow);
    }

    #[test]
    fn cookies_and_forms() {
        assert_eq!(
            cookie("a=1; floodgate_console=abc; b=2", COOKIE),
            Some("abc")
        );
        assert_eq!(cookie("floodgate_console=\"q\"", COOKIE), Some("q"));
        assert_eq!(cookie("xfloodgate_console=abc", COOKIE), None);
        assert_eq!(cookie("", COOKIE), None);
        assert_eq!(cookie("junk;;=;", COOKIE), None);
        for secure in [false, true] {
            let c = set_cookie("abc", secure);
            for part in [
                "floodgate_console=abc",
                "HttpOnly",
                "SameSite=Strict",
                "Path=/console",
            ] {
                assert!(c.contains(part), "{c}");
            }
            assert_eq!(c.split("; ").any(|a| a == "Secure"), secure, "{c}");
            let clear = clear_cookie(secure);
            assert!(clear.contains("Max-Age=0"), "{clear}");
            assert_eq!(clear.split("; ").any(|a| a == "Secure"), secure, "{clear}");
        }
        assert_eq!(
            form_field(b"a=1&token=x%2By+z&c", "token").as_deref(),
            Some("x+y z")
        );
        assert_eq!(form_field(b"c", "c").as_deref(), Some(""));
        assert_eq!(form_field(b"token=%zz", "token"), None);
        assert_eq!(form_field(b"\xff", "token"), None);
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(60)), 60);
    }

    #[test]
    fn sessions_are_random_bounded_and_expire() {
        let s = Sessions::default();
        let t0 = Instant::now();
        let (id, csrf) = s.open("alice", t0);
        assert_eq!(id.len(), 64);
        assert_ne!(id, csrf);
        assert_eq!(s.find(&id, t0), Some((csrf.clone(), "alice".to_string())));
        let (other, _) = s.open("bob", t0);
        assert_eq!(s.find(&other, t0).unwrap().1, "bob");
        s.close(&other);
        assert_eq!(s.find("nope", t0), None);
        // Idle too long: gone.
        assert_eq!(s.find(&id, t0 + IDLE + Duration::from_secs(1)), None);
        assert!(s.is_empty());
        // Used often, but past its lifetime: gone.
        let (id, _) = s.open("alice", t0);
        let mut t = t0;
        while t < t0 + LIFETIME - Duration::from_secs(1800) {
            t += Duration::from_secs(1800);
            assert!(s.find(&id, t).is_some());
        }
        assert!(s.find(&id, t0 + LIFETIME).is_none());
        // Bounded: the least recently used goes.
        let first = s.open("alice", t0).0;
        for i in 0..MAX_SESSIONS {
            s.open("alice", t0 + Duration::from_secs(1 + i as u64));
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        assert!(s.find(&first, t0 + Duration::from_secs(100)).is_none());
        let (id, _) = s.open("alice", t0);
        s.close(&id);
        assert!(s.find(&id, t0).is_none());
    }
}
