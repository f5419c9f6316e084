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

use super::http::{Request, Response};
use auth::TokenCheck;

pub use state::{Console, SAMPLE_EVERY};

impl Console {
    /// The answer to `req`, from `peer`, when its path is the console's (`/console` and
    /// below), else `None` (the admin API answers it).
    pub async fn answer(&self, req: &Request, peer: IpAddr) -> Option<Response> {
        if req.path != "/console" && !req.path.starts_with("/console/") {
            return None;
        }
        Some(routes::secure(routes::route(self, req, peer).await))
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

/// The JSON 429 for a token presented while its address waits.
fn too_many_json(wait: std::time::Duration) -> Response {
    let secs = auth::retry_after_secs(wait);
    let mut r = Response::error(
        429,
        &format!("too many wrong tokens from this address: try again in {secs} s"),
    );
    r.headers.push(("Retry-After", secs.to_string()));
    r
}
