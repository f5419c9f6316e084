//! The console's routes: static files, login and logout, then every other path behind
//! [`auth::decide`], and the headers every console answer carries.

use std::net::IpAddr;
use std::time::Instant;

use serde_json::json;

use super::act;
use super::auth::{self, Decision, Need, TokenCheck, Who};
use super::html::Shell;
use super::pages;
use super::respond::{api_as, error_page};
use super::state::Console;
use super::throttle::Wait;
use super::{too_many_json, Body, Cleared, Pass};
use crate::admin::actor::Actor;
use crate::admin::http::ct_eq;
use crate::admin::http::{Request, Response};

/// The Content-Security-Policy of every console answer: nothing from other hosts, no
/// inline script or style, no framing, forms and fetches to this server only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                       img-src 'self'; connect-src 'self'; form-action 'self'; \
                       frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("console.css");
const JS: &str = include_str!("console.js");
/// The page icon (browsers ask for one; without it they log a failed request).
const ICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
                    <rect width=\"16\" height=\"16\" rx=\"3\" fill=\"#202a36\"/>\
                    <rect x=\"3\" y=\"8\" width=\"10\" height=\"5\" fill=\"#cfe0ff\"/></svg>";

/// Adds the security headers to a console answer.
pub fn secure(mut r: Response) -> Response {
    r.headers.push(("Content-Security-Policy", CSP.into()));
    r.headers.push(("X-Content-Type-Options", "nosniff".into()));
    r.headers.push(("X-Frame-Options", "DENY".into()));
    r.headers.push(("Referrer-Policy", "same-origin".into()));
    r
}

fn redirect(to: &'static str) -> Response {
    let mut r = Response::text(303, "text/plain; charset=utf-8", format!("see {to}\n"));
    r.headers.push(("Location", to.into()));
    r
}

/// Whether a POST's `Origin` (when the browser sent one) is this server: a form or fetch
/// from another site's page is refused even before its credentials are looked at. The
/// pages' `Referrer-Policy: same-origin` keeps the origin in their own POSTs (under
/// `no-referrer` a browser would send `Origin: null`, refused here).
pub fn same_origin(origin: Option<&str>, host: Option<&str>) -> bool {
    match (origin, host) {
        (None, _) => true,
        (Some(o), Some(h)) => o
            .strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
            .is_some_and(|rest| rest.eq_ignore_ascii_case(h)),
        (Some(_), None) => false,
    }
}

impl Console {
    /// The credentials `req`, from `peer`, carries; `Err(wait)` when it presents a token
    /// while `peer` (or everyone) must wait after wrong ones.
    fn who(&self, req: &Request, peer: IpAddr) -> Result<Who, Wait> {
        if req.header("authorization").is_some() {
            return match req.bearer().map(|t| self.check_token(t, peer)) {
                Some(TokenCheck::Right(name)) => Ok(Who::Bearer(name)),
                Some(TokenCheck::Throttled(wait)) => Err(wait),
                Some(TokenCheck::Wrong(_)) | None => Ok(Who::WrongToken),
            };
        }
        let id = req
            .header("cookie")
            .and_then(|c| auth::cookie(c, auth::COOKIE));
        Ok(
            match id.and_then(|id| Some((id, self.sessions.find(id, Instant::now())?))) {
                Some((id, (csrf, name))) => Who::Session {
                    id: id.to_string(),
                    csrf,
                    name,
                },
                None => Who::Nobody,
            },
        )
    }

    /// The page shell for `who`.
    fn shell<'a>(&'a self, who: &'a Who, host: &'a str) -> Shell<'a> {
        Shell {
            csrf: match who {
                Who::Session { csrf, .. } => Some(csrf),
                _ => None,
            },
            actions: self.actions,
            host,
        }
    }
}

/// The login page (or, for an action, JSON) with 429 and `Retry-After`, for a token presented
/// while its address (or everyone) waits after wrong ones.
fn too_many(wait: Wait, page: bool, host: &str) -> Response {
    if !page {
        return too_many_json(wait);
    }
    let secs = auth::retry_after_secs(wait.time());
    let why = wait.why(secs);
    let mut r = pages::login::page(429, Some(&why), Some(wait.time()), host);
    r.headers.push(("Retry-After", secs.to_string()));
    r
}

/// What a console request's head allows before its body is read (see
/// [`Console::gate`]): the answer is [`route`]'s, from the head alone when the body is not
/// read.
pub fn gate(c: &Console, head: &Request, peer: IpAddr) -> (Body, Pass) {
    if head.method != "POST" {
        return (Body::Skip, Pass::default());
    }
    let act = head.path.starts_with("/console/act/");
    match head.path.as_str() {
        "/console/login" => (Body::Form, Pass::default()),
        "/console/logout" => {
            let who = c.who(head, peer);
            let body = match who {
                Ok(Who::Session { .. }) => Body::Cleared,
                _ => Body::Skip,
            };
            (body, Pass(Cleared::Console(who)))
        }
        _ if act => {
            let who = c.who(head, peer);
            let body = match who {
                Ok(Who::Session { .. } | Who::Bearer(_)) => Body::Cleared,
                // Refused from the head alone (401, 403 or 429 by `route`).
                _ => Body::Skip,
            };
            (body, Pass(Cleared::Console(who)))
        }
        _ => (Body::Skip, Pass::default()),
    }
}

/// Answers one console request from `peer`; `checked`: its credentials, when
/// [`gate`] looked at them already.
pub async fn route(
    c: &Console,
    req: &Request,
    peer: IpAddr,
    checked: Option<Result<Who, Wait>>,
) -> Response {
    let get = req.method == "GET" || req.method == "HEAD";
    let post = req.method == "POST";
    let config = c.state.control.config();
    let host = config.server.hostname.as_str();
    let who = |c: &Console| checked.clone().unwrap_or_else(|| c.who(req, peer));
    match req.path.as_str() {
        "/console" => return redirect("/console/"),
        "/console/static/console.css" if get => {
            return Response::text(200, "text/css; charset=utf-8", CSS.into());
        }
        "/console/static/console.js" if get => {
            return Response::text(200, "text/javascript; charset=utf-8", JS.into());
        }
        "/console/static/icon.svg" if get => {
            return Response::text(200, "image/svg+xml", ICON.into());
        }
        "/console/login" if get => {
            return match who(c) {
                Ok(Who::Session { .. }) => redirect("/console/"),
                Err(wait) => too_many(wait, true, host),
                Ok(_) => pages::login::page(200, None, None, host),
            };
        }
        "/console/login" if post => return login(c, req, host, peer),
        "/console/logout" if post => return logout(c, req, who(c)),
        _ => {}
    }
    let need = if req.path.starts_with("/console/act/") {
        Need::Act
    } else {
        Need::Read
    };
    let who = match who(c) {
        Ok(who) => who,
        Err(wait) => return too_many(wait, need == Need::Read, host),
    };
    let shell = c.shell(&who, host);
    if need == Need::Act && !same_origin(req.header("origin"), req.header("host")) {
        return Response::error(403, "the request comes from another site's page");
    }
    // Forms (no script) carry the CSRF value as a field; the buttons' fetch as a header.
    let csrf_field = if need == Need::Act && req.header(auth::CSRF_HEADER).is_none() {
        auth::form_field(&req.body, "csrf")
    } else {
        None
    };
    let csrf = req.header(auth::CSRF_HEADER).or(csrf_field.as_deref());
    match auth::decide(need, &who, csrf, c.actions) {
        Decision::Allow => {}
        Decision::Unauthorized(why) if need == Need::Read => {
            return pages::login::page(401, Some(why), None, host);
        }
        Decision::Unauthorized(why) => return Response::error(401, why),
        Decision::Forbidden(why) if need == Need::Read => return error_page(403, why, &shell),
        Decision::Forbidden(why) => return Response::error(403, why),
    }
    if need == Need::Act {
        if !post {
            return Response::error(405, &format!("{} takes POST", req.path));
        }
        let actor = match &who {
            Who::Bearer(name) | Who::Session { name, .. } => Actor::Token(name.clone()),
            // `decide` let no one else act.
            Who::Nobody | Who::WrongToken => return Response::error(401, "log in first"),
        };
        return action(c, req, &actor).await;
    }
    if !get {
        return error_page(405, &format!("{} takes GET", req.path), &shell);
    }
    match req.path.as_str() {
        "/console/" => pages::overview::page(c, req, &shell).await,
        "/console/top" => pages::top::page(c, req, &shell).await,
        "/console/restricted" => pages::restricted::page(c, req, &shell).await,
        "/console/held" => pages::held::page(c, req, &shell).await,
        "/console/campaigns" => pages::campaigns::page(c, req, &shell).await,
        "/console/delivered.csv" => match req.param("k").filter(|k| !k.is_empty()) {
            Some(k) => pages::key::delivered_csv(c, &c.state.admin_key(k), &shell).await,
            None => error_page(400, "which key? /console/delivered.csv?k=KEY", &shell),
        },
        // The key search finds an account however its login is spelled.
        "/console/key" => match req.param("k").filter(|k| !k.is_empty()) {
            Some(k) => pages::key::page(c, req, &c.state.admin_key(k), &shell).await,
            None => error_page(400, "which key? /console/key/KEY", &shell),
        },
        p => {
            if let Some(k) = p.strip_prefix("/console/key/").filter(|k| !k.is_empty()) {
                return pages::key::page(c, req, &c.state.admin_key(k), &shell).await;
            }
            if let Some(id) = p.strip_prefix("/console/held/") {
                return match id.strip_suffix(".eml") {
                    Some(id) => pages::message::raw(c, id, &shell).await,
                    None => match pages::held_postfix::names_postfix(c, id) {
                        Some(pf) => pages::message::postfix_page(&pf, req, id, &shell).await,
                        None => pages::message::page(c, req, id, &shell).await,
                    },
                };
            }
            error_page(404, &format!("no console page {p}"), &shell)
        }
    }
}

fn login(c: &Console, req: &Request, host: &str, peer: IpAddr) -> Response {
    if !same_origin(req.header("origin"), req.header("host")) {
        let why = "the login comes from another site's page";
        return pages::login::page(403, Some(why), None, host);
    }
    let given = auth::form_field(&req.body, "token").unwrap_or_default();
    let given = given.trim();
    if given.is_empty() {
        // Nothing typed: no guess, nothing counted.
        return pages::login::page(401, Some("wrong token"), None, host);
    }
    let name = match c.check_token(given, peer) {
        TokenCheck::Right(name) => name,
        TokenCheck::Wrong(wait) => {
            return pages::login::page(401, Some("wrong token"), Some(wait), host);
        }
        TokenCheck::Throttled(wait) => return too_many(wait, true, host),
    };
    let (id, _) = c.sessions.open(&name, Instant::now());
    tracing::info!(client = %peer, token = %name, "console: session opened");
    let mut r = redirect("/console/");
    r.headers
        .push(("Set-Cookie", auth::set_cookie(&id, c.secure)));
    r
}

fn logout(c: &Console, req: &Request, who: Result<Who, Wait>) -> Response {
    // The form carries the session's CSRF value: another site cannot log the user out.
    if let Ok(Who::Session { id, csrf, .. }) = who {
        let given = auth::form_field(&req.body, "csrf").unwrap_or_default();
        if !ct_eq(given.as_bytes(), csrf.as_bytes()) {
            return Response::error(403, "logout without this session's CSRF value");
        }
        c.sessions.close(&id);
    }
    let mut r = redirect("/console/login");
    r.headers.push(("Set-Cookie", auth::clear_cookie(c.secure)));
    r
}

/// Runs one action through the admin API as `who` and says what happened, in words.
async fn action(c: &Console, req: &Request, who: &Actor) -> Response {
    let reason = req.param("reason").unwrap_or("").trim();
    let need = |name: &str| {
        req.param(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Response::error(400, &format!("{} needs ?{name}=", req.path)))
    };
    let (status, v, done) = match req.path.as_str() {
        "/console/act/held/release" => return act::one(c, req, true, who).await,
        "/console/act/held/delete" => return act::one(c, req, false, who).await,
        "/console/act/held/bulk" => return act::bulk(c, req, who).await,
        "/console/act/key" => return act::key(c, req, who).await,
        "/console/act/campaign" => return act::campaign(c, req, who).await,
        "/console/act/reset" => {
            let key = match need("key") {
                Ok(k) => k,
                Err(r) => return r,
            };
            let (status, v) = api_as(c, who, "POST", "/v1/reset", &[("key", key)]).await;
            let n = v["removed"].as_u64().unwrap_or(0);
            (status, v, format!("{key}: {n} records removed"))
        }
        "/console/act/release" => {
            let key = match need("key") {
                Ok(k) => k,
                Err(r) => return r,
            };
            if reason.is_empty() {
                return Response::error(400, "say why the restriction ends (a reason)");
            }
            let q = [("key", key), ("reason", reason)];
            let (status, v) = api_as(c, who, "POST", "/v1/release", &q).await;
            (status, v, format!("{key} released"))
        }
        p => return Response::error(404, &format!("no console action {p}")),
    };
    if status == 200 {
        tracing::info!(action = %req.path, by = %who, "console: action done");
        Response::json(200, &json!({ "message": done, "result": v }))
    } else {
        let e = v["error"]
            .as_str()
            .unwrap_or("the action failed")
            .to_string();
        Response::error(status, &e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        assert!(same_origin(None, Some("127.0.0.1:9466")));
        assert!(same_origin(None, None));
        assert!(same_origin(
            Some("http://127.0.0.1:9466"),
            Some("127.0.0.1:9466")
        ));
        assert!(same_origin(Some("http://LOCALHOST:1"), Some("localhost:1")));
        assert!(!same_origin(
            Some("http://evil.example"),
            Some("127.0.0.1:9466")
        ));
        assert!(!same_origin(Some("null"), Some("127.0.0.1:9466")));
        assert!(!same_origin(Some("http://127.0.0.1:9466"), None));
        assert!(!same_origin(
            Some("http://127.0.0.1:94667"),
            Some("127.0.0.1:9466")
        ));
    }

    #[test]
    fn every_answer_gets_the_security_headers() {
        let r = secure(Response::text(200, "text/html", "x".into()));
        let wire = String::from_utf8(r.to_bytes()).unwrap();
        assert!(
            wire.contains(&format!("\r\nContent-Security-Policy: {CSP}\r\n")),
            "{wire}"
        );
        assert!(
            wire.contains("\r\nX-Content-Type-Options: nosniff\r\n"),
            "{wire}"
        );
        assert!(wire.contains("\r\nX-Frame-Options: DENY\r\n"), "{wire}");
        assert!(CSP.contains("default-src 'none'") && !CSP.contains("unsafe"));
        // The assets ask for nothing from another host.
        for asset in [CSS, JS] {
            assert!(!asset.contains("http://") && !asset.contains("https://"));
            assert!(!asset.contains("@import") && !asset.contains("url("));
        }
    }
}
