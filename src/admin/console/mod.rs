//! The web console on the admin TCP address: server-rendered pages under `/console/`.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/console/?range=1h\|6h\|24h` | overview: sessions, messages sent and deferrals of `defer` limits over the range (charts), the latest restrictions, holds and deferrals, the store's health and failure mode; reloads itself every minute |
//! | GET | `/console/top?limit=NAME&page=N` | keys by value against their limit, paged |
//! | GET | `/console/restricted?page=N` | restricted keys with their evidence |
//! | GET | `/console/held?key=&limit=&sender=&subject=&page=N` | held messages (envelope, header section, size, limit), newest first, filtered, paged, with a selection to release or delete |
//! | GET | `/console/held/ID` | one held message: envelope, client, header section, text parts, attachments listed |
//! | GET | `/console/held/ID.eml` | the held message as it would be relayed (`message/rfc822`, a download) |
//! | GET | `/console/campaigns` | campaigns of message keys: their accounts (linking to their incident pages), copies, recipients, Subject, link domains, held mail |
//! | GET | `/console/key/KEY` (or `/console/key?k=KEY`) | the incident page of KEY: its restriction, evidence, held mail, recent messages from the event log, every limit's reading, its last hour, actions |
//! | GET, POST | `/console/login` | the login form; posting the admin token opens a session (429 with `Retry-After` while the address waits after wrong tokens, see [`throttle`]) |
//! | POST | `/console/logout` | ends the session |
//! | POST | `/console/act/held/release?id=ID&reason=TEXT[&confirm=true]`, `/console/act/held/delete?id=ID` | releases or deletes a held message (a release of mail of a key still restricted needs `confirm=true`) |
//! | POST | `/console/act/reset?key=KEY` | resets KEY for every limit |
//! | POST | `/console/act/release?key=KEY&reason=TEXT` | ends KEY's restriction |
//! | POST | `/console/act/held/bulk` (form: `op=release\|delete`, `id`…, `reason`, `confirm=true`, `back`) | releases or deletes the selected held messages, then back to the list with the result |
//! | POST | `/console/act/key` (form: `key`, `op=release\|restrict\|release-held\|delete-held`, `for`, `reason`, `confirm=true`) | the incident page's actions, then back to it with the result |
//!
//! Who may do what is [`auth`]'s: an admin token (once, at login, or as a bearer header),
//! actions only with `[admin] console_actions = true` and the session's CSRF value (a
//! header from the buttons' script, a hidden field from the forms). The pages need no
//! script to be read, and the forms none to act; the row buttons use a little
//! (`console.js`, served from here like the style sheet: the Content-Security-Policy
//! allows nothing from anywhere else).
//! Actions go through the admin API ([`crate::admin::api::AdminState::handle`], and for held
//! mail its [`crate::admin::api::AdminState::held_ids`]), so a release from the console is
//! the same release as `floodgate held release`, with its checks (a reason; `confirm=true`
//! for mail of a key still restricted), log line, metric, alert and audit line, done as
//! `token:NAME`: the name of the token the session logged in with.

pub mod act;
pub mod auth;
pub mod evidence;
pub mod figures;
pub mod form;
pub mod history;
pub mod html;
pub mod keylog;
mod pages;
pub mod paging;
mod respond;
mod routes;
mod state;
pub mod svg;
pub mod throttle;

use std::net::IpAddr;

use super::actor::Actor;
use super::http::{Request, Response};
use auth::{TokenCheck, Who};

pub use state::{Console, SAMPLE_EVERY};

/// What to do with a request's body once its head was looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// Not read: nothing that answers the request needs it.
    Skip,
    /// Read before any credentials were checked: the login form, whose token is in the body.
    /// The connection still counts as waiting for its request meanwhile.
    Form,
    /// Read: the head's credentials were checked (or the listener needs none).
    Cleared,
}

/// What [`Console::gate`] found in a request's head, handed on to [`Console::respond`] so
/// that the credentials are not checked (and a wrong token not counted) twice.
#[derive(Debug, Default)]
pub struct Pass(Cleared);

#[derive(Debug, Default)]
enum Cleared {
    /// Nothing checked yet: the answer looks.
    #[default]
    Unchecked,
    /// An admin API request with the right bearer token, by its name.
    Api(String),
    /// A console request, with what its head's credentials turned out to be.
    Console(Result<Who, throttle::Wait>),
}

fn is_console(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

impl Console {
    /// What the head of a request on the admin address, from `peer`, allows before its
    /// body is read: `Err` is the answer from the head alone, the body never read (a
    /// missing or wrong token, an address or everyone waiting after wrong tokens); else
    /// whether to read the body, and what was found. An admin API request's bearer token is
    /// checked here; a console action's or logout's credentials (bearer token or session
    /// cookie) too, its body (the CSRF field, the form) read only with live ones; the login
    /// form's body (its token) is read within the request timeout; other console pages need
    /// no body.
    pub fn gate(&self, head: &Request, peer: IpAddr) -> Result<(Body, Pass), Response> {
        if is_console(&head.path) {
            return Ok(routes::gate(self, head, peer));
        }
        let name = self.authorize_api(head, peer)?;
        Ok((Body::Cleared, Pass(Cleared::Api(name))))
    }

    /// The answer to `req` from `peer`, given what [`Console::gate`] found in its head:
    /// a console page or action, or the admin API.
    pub async fn respond(&self, req: &Request, peer: IpAddr, pass: Pass) -> Response {
        let name = match pass.0 {
            Cleared::Api(name) => name,
            Cleared::Console(who) => {
                return routes::secure(routes::route(self, req, peer, Some(who)).await);
            }
            Cleared::Unchecked if is_console(&req.path) => {
                return routes::secure(routes::route(self, req, peer, None).await);
            }
            Cleared::Unchecked => match self.authorize_api(req, peer) {
                Ok(name) => name,
                Err(r) => return r,
            },
        };
        self.state.handle(req, &Actor::Token(name)).await
    }

    /// Whether `req`, from `peer`, may use the admin API: `Authorization: Bearer` with one of
    /// the admin tokens, checked through the throttle of wrong tokens; the token's name, else
    /// the answer saying why not (401, or 429 with `Retry-After` while the address waits).
    pub fn authorize_api(&self, req: &Request, peer: IpAddr) -> Result<String, Response> {
        let Some(given) = req.bearer() else {
            return Err(Response::error(401, "missing Authorization: Bearer TOKEN"));
        };
        match self.check_token(given, peer) {
            TokenCheck::Right(name) => Ok(name),
            TokenCheck::Wrong(_) => Err(Response::error(401, "wrong bearer token")),
            TokenCheck::Throttled(wait) => Err(too_many_json(wait)),
        }
    }
}

/// The JSON 429 for a token presented while its address, or everyone, waits.
fn too_many_json(wait: throttle::Wait) -> Response {
    let secs = auth::retry_after_secs(wait.time());
    let mut r = Response::error(429, &wait.why(secs));
    r.headers.push(("Retry-After", secs.to_string()));
    r
}
