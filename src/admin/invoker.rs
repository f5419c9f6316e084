//! The person behind an admin verb run as root or as the service's own user.
//!
//! `sudo floodgate release …` connects as root, and `runuser -u floodgate -- floodgate …`
//! as the service's user: the socket's peer credentials name that account, not the person.
//! The verb therefore says who invoked it, in the request's `Floodgate-Invoker` header
//! (`alice; via=sudo`): `SUDO_USER` (sudo), `DOAS_USER` (doas), or else the login uid of
//! the session (`/proc/self/loginuid`, kept across `su` and `runuser`), when that person is
//! not the connecting user itself. The server accepts the claim only from root or its own
//! user, who could act in anyone's name anyway, and records both: `user:alice (uid 0 via
//! sudo)`. From any other user the header is ignored: the peer's own name is recorded.

use std::sync::OnceLock;

use super::actor::Actor;

/// The request header (lower-case, as [`super::http::Request::header`] looks it up).
pub const HEADER: &str = "floodgate-invoker";

/// The longest person's name taken.
const MAX_NAME: usize = 64;

/// Who invoked a verb, and how they became the connecting user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The person's user name.
    pub person: String,
    /// `sudo`, `doas` or `login`.
    pub via: &'static str,
}

/// Why a `Floodgate-Invoker` header was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// Not `NAME; via=HOW`.
    #[error("Floodgate-Invoker: {0:?} is not \"NAME; via=sudo|doas|login\"")]
    Form(String),
    /// The name is empty, too long, or has a character no user name has.
    #[error("Floodgate-Invoker: {0:?} is not a user name (1 to 64 of A-Z a-z 0-9 . _ - @ $)")]
    Name(String),
}

impl Claim {
    /// The header's value: `NAME; via=HOW`.
    pub fn header_value(&self) -> String {
        format!("{}; via={}", self.person, self.via)
    }

    /// Reads a header's value.
    pub fn parse(value: &str) -> Result<Claim, ClaimError> {
        let form = || ClaimError::Form(value.to_string());
        let (person, via) = value.split_once(';').ok_or_else(form)?;
        let via = match via.trim().strip_prefix("via=").ok_or_else(form)? {
            "sudo" => "sudo",
            "doas" => "doas",
            "login" => "login",
            _ => return Err(form()),
        };
        let person = person.trim();
        if !user_name_like(person) {
            return Err(ClaimError::Name(person.to_string()));
        }
        Ok(Claim {
            person: person.to_string(),
            via,
        })
    }
}

/// Whether `s` can be a user name as Debian's adduser and useradd allow them.
fn user_name_like(s: &str) -> bool {
    (1..=MAX_NAME).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@' | b'$'))
}

/// The login uid's "unset" value (`(uid_t)-1`).
const NO_LOGIN_UID: u32 = u32::MAX;

/// The claim of a process running as `me` (named `my_name`) with these variables and login
/// uid text (`/proc/self/loginuid`); `name_of` names a uid. `None` when the person is the
/// connecting user itself or cannot be told.
pub fn claim_from(
    sudo_user: Option<&str>,
    doas_user: Option<&str>,
    login_uid: Option<&str>,
    me: u32,
    my_name: &str,
    name_of: impl Fn(u32) -> Option<String>,
) -> Option<Claim> {
    let named = |name: &str, via| {
        (user_name_like(name) && name != my_name).then(|| Claim {
            person: name.to_string(),
            via,
        })
    };
    if let Some(c) = sudo_user.and_then(|n| named(n, "sudo")) {
        return Some(c);
    }
    if let Some(c) = doas_user.and_then(|n| named(n, "doas")) {
        return Some(c);
    }
    let uid: u32 = login_uid?.trim().parse().ok()?;
    if uid == NO_LOGIN_UID || uid == me {
        return None;
    }
    named(
        &name_of(uid).unwrap_or_else(|| format!("uid{uid}")),
        "login",
    )
}

/// The claim of this process (its environment, its login uid, its user).
pub fn of_this_process() -> Option<Claim> {
    let var = |k| std::env::var(k).ok();
    let me = super::peer::my_uid();
    let login = std::fs::read_to_string("/proc/self/loginuid").ok();
    claim_from(
        var("SUDO_USER").as_deref(),
        var("DOAS_USER").as_deref(),
        login.as_deref(),
        me,
        &super::peer::user_name(me),
        |uid| {
            let n = super::peer::user_name(uid);
            (!n.starts_with("uid ")).then_some(n)
        },
    )
}

/// Root's and this process's user's names, as the admin socket names its peers (read once:
/// the user database may be slow).
fn vouchers() -> &'static [(u32, String)] {
    static V: OnceLock<Vec<(u32, String)>> = OnceLock::new();
    V.get_or_init(|| {
        let me = super::peer::my_uid();
        let mut v = vec![(0, super::peer::user_name(0))];
        if me != 0 {
            v.push((me, super::peer::user_name(me)));
        }
        v
    })
}

/// Reads the user database for [`vouched`] now, so no request waits on it.
pub fn prepare() {
    let _ = vouchers();
}

/// The actor of a socket request made by `peer` with the header value `header`: the
/// claimed person when `peer` is root or this process's user, else `peer` unchanged.
pub fn vouched(peer: &Actor, header: Option<&str>) -> Result<Actor, ClaimError> {
    // Token and console requests, and socket requests with no claim, never read the user
    // database.
    if !matches!((peer, header), (Actor::User(_), Some(_))) {
        return Ok(peer.clone());
    }
    vouched_by(peer, header, vouchers())
}

/// [`vouched`] with the users who may vouch given: `(uid, name)`.
pub fn vouched_by(
    peer: &Actor,
    header: Option<&str>,
    vouchers: &[(u32, String)],
) -> Result<Actor, ClaimError> {
    let (Actor::User(name), Some(value)) = (peer, header) else {
        return Ok(peer.clone());
    };
    let Some(&(uid, _)) = vouchers.iter().find(|(_, n)| n == name) else {
        return Ok(peer.clone());
    };
    let claim = Claim::parse(value)?;
    Ok(Actor::Invoker {
        person: claim.person,
        uid,
        via: claim.via.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(uid: u32) -> Option<String> {
        match uid {
            0 => Some("root".into()),
            1000 => Some("alice".into()),
            994 => Some("floodgate".into()),
            _ => None,
        }
    }

    #[test]
    fn sudo_then_doas_then_the_login_uid() {
        let c = |s, d, l, me, my: &str| claim_from(s, d, l, me, my, names);
        let claim = |p: &str, via| {
            Some(Claim {
                person: p.into(),
                via,
            })
        };
        assert_eq!(
            c(Some("alice"), None, None, 0, "root"),
            claim("alice", "sudo")
        );
        assert_eq!(
            c(None, Some("bob"), Some("1000"), 0, "root"),
            claim("bob", "doas")
        );
        assert_eq!(
            c(None, None, Some("1000\n"), 0, "root"),
            claim("alice", "login")
        );
        // runuser to the service's user keeps the login uid.
        assert_eq!(
            c(None, None, Some("1000"), 994, "floodgate"),
            claim("alice", "login")
        );
        // A login uid without a name is named by its number.
        assert_eq!(
            c(None, None, Some("4242"), 0, "root"),
            claim("uid4242", "login")
        );
        // No one else: the connecting user is the person.
        assert_eq!(c(None, None, Some("4294967295"), 0, "root"), None);
        assert_eq!(c(None, None, Some("1000"), 1000, "alice"), None);
        assert_eq!(c(Some("alice"), None, None, 1000, "alice"), None);
        assert_eq!(c(None, None, None, 0, "root"), None);
        assert_eq!(c(None, None, Some("garbage"), 0, "root"), None);
        // A variable that cannot be a user name is passed over.
        assert_eq!(
            c(Some("al ice"), None, Some("1000"), 0, "root"),
            claim("alice", "login")
        );
    }

    #[test]
    fn header_values_round_trip_and_bad_ones_are_named() {
        let claim = Claim {
            person: "alice".into(),
            via: "sudo",
        };
        assert_eq!(claim.header_value(), "alice; via=sudo");
        assert_eq!(Claim::parse("alice; via=sudo"), Ok(claim));
        assert_eq!(Claim::parse("alice"), Err(ClaimError::Form("alice".into())));
        assert_eq!(
            Claim::parse("alice; via=magic"),
            Err(ClaimError::Form("alice; via=magic".into()))
        );
        let e = Claim::parse("al\"ice; via=sudo").unwrap_err();
        assert_eq!(e, ClaimError::Name("al\"ice".into()));
        assert!(e.to_string().contains("is not a user name"), "{e}");
        assert!(Claim::parse(&format!("{}; via=sudo", "a".repeat(65))).is_err());
        assert!(Claim::parse("; via=sudo").is_err());
    }

    #[test]
    fn only_root_and_the_service_user_vouch() {
        let v = [(0, "root".to_string()), (994, "floodgate".to_string())];
        let user = |n: &str| Actor::User(n.into());
        let h = Some("alice; via=sudo");
        assert_eq!(
            vouched_by(&user("root"), h, &v).unwrap().to_string(),
            "user:alice (uid 0 via sudo)"
        );
        assert_eq!(
            vouched_by(&user("floodgate"), Some("alice; via=login"), &v)
                .unwrap()
                .to_string(),
            "user:alice (uid 994 via login)"
        );
        // Anyone else's claim is ignored; no claim leaves the peer.
        assert_eq!(vouched_by(&user("bob"), h, &v).unwrap(), user("bob"));
        assert_eq!(vouched_by(&user("root"), None, &v).unwrap(), user("root"));
        let token = Actor::Token("ann".into());
        assert_eq!(vouched_by(&token, h, &v).unwrap(), token);
        // A privileged peer's bad claim is refused, not recorded as the peer.
        assert!(vouched_by(&user("root"), Some("x y; via=sudo"), &v).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_accepts_only_sane_names(s in ".{0,80}") {
            if let Ok(c) = Claim::parse(&s) {
                prop_assert!(user_name_like(&c.person));
                prop_assert_eq!(Claim::parse(&c.header_value()), Ok(c));
            }
        }

        #[test]
        fn claims_round_trip(name in "[a-z_][a-z0-9_.-]{0,30}", via in 0usize..3) {
            let via = ["sudo", "doas", "login"][via];
            let c = Claim { person: name, via };
            prop_assert_eq!(Claim::parse(&c.header_value()), Ok(c));
        }
    }
}
