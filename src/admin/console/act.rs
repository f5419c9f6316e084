//! The console's actions on held messages, typed: one or many ids released or deleted
//! through the admin API's own code ([`crate::admin::api::AdminState::held_ids`], with its
//! checks: a reason for a release, `confirm=true` for mail of a key still restricted; its
//! log lines and audit lines), as the session's token, each result told in words; and the
//! HTML forms that act without scripting (the selection of the Held page, the message
//! page, the incident page's buttons), which send the browser back to the page with the
//! result in its query (`?done=` or `?failed=`, a refusal's text included).

use serde_json::json;

use super::form::{self, back_to, with_result};
use super::html;
use super::respond::api_as;
use super::state::Console;
use crate::admin::actor::Actor;
use crate::admin::held_act::{HeldAsk, HeldRefusal, HeldResults, Selection};
use crate::admin::http::{Request, Response};
use crate::proxy::release::HeldError;

/// Most ids one form may release or delete.
pub const MAX_IDS: usize = 1000;

/// What one held message's action did, for people.
pub fn held_outcome(id: &str, r: &Result<(), HeldError>, release: bool) -> String {
    let verb = if release { "released" } else { "deleted" };
    match r {
        Ok(()) => format!("held message {id} {verb}"),
        Err(HeldError::NotFound(_)) => format!(
            "held message {id} is no longer held: it was released or deleted already (by \
             another admin, the expiry or the pacer); nothing was done"
        ),
        Err(HeldError::Busy(_)) => format!(
            "held message {id} is being released or deleted by another request right now; \
             nothing was done"
        ),
        Err(e) => format!("held message {id} not {verb}: {e}"),
    }
}

/// The HTTP status of one held message's failed action.
fn held_status(e: &HeldError) -> u16 {
    match e {
        HeldError::NotFound(_) => 404,
        HeldError::Busy(_) => 409,
        HeldError::Release(_) => 502,
        HeldError::Spool(_) => 500,
        HeldError::Postfix(p) => crate::admin::api::postfix_status(p),
    }
}

/// The JSON answer to a refused action of a row's button: the refusal's status and text;
/// for mail of a key still restricted also the restriction and `confirm: true`, so the page
/// offers the box that confirms the release.
fn refused_json(r: &HeldRefusal) -> Response {
    let mut body = json!({ "error": r.to_string() });
    if let HeldRefusal::StillRestricted(restriction) = r {
        body["restricted"] = crate::policy::alert::restriction_json(restriction);
        body["confirm"] = true.into();
    }
    Response::json(r.response().status, &body)
}

/// `POST /console/act/held/release?id=ID&reason=TEXT[&confirm=true]` (or `delete`): one
/// message, as `who`, answered in JSON for the page's buttons.
pub async fn one(c: &Console, req: &Request, release: bool, who: &Actor) -> Response {
    let Some(id) = req.param("id").filter(|v| !v.is_empty()) else {
        return Response::error(400, &format!("{} needs ?id=", req.path));
    };
    let ask = HeldAsk {
        release,
        reason: req.param("reason").unwrap_or(""),
        confirm: req.param("confirm"),
    };
    let ids = [id.to_string()];
    let results = match c.state.held_ids(who, Selection::Ids(&ids), ask).await {
        Ok(r) => r,
        Err(refusal) => return refused_json(&refusal),
    };
    let Some((_, r)) = results.first() else {
        return Response::error(500, "nothing was done");
    };
    let text = held_outcome(id, r, release);
    match r {
        Ok(()) => {
            tracing::info!(action = %req.path, by = %who, "console: action done");
            let verb = if release { "released" } else { "deleted" };
            Response::json(200, &json!({ "message": text, "result": { verb: [id] } }))
        }
        Err(e) => Response::error(held_status(e), &text),
    }
}

/// A 303 to `to` (a console path).
fn see(to: &str) -> Response {
    let mut r = Response::text(303, "text/plain; charset=utf-8", format!("see {to}\n"));
    r.headers.push(("Location", to.to_string()));
    r
}

/// The words for the results of a form's release or delete of many messages.
fn summary(results: &HeldResults, release: bool) -> (bool, String) {
    let verb = if release { "released" } else { "deleted" };
    let done = results.iter().filter(|(_, r)| r.is_ok()).count();
    let failed: Vec<String> = results
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(id, r)| held_outcome(id, r, release))
        .collect();
    let noun = |n: usize| if n == 1 { "message" } else { "messages" };
    if failed.is_empty() {
        return (true, format!("{done} held {} {verb}", noun(done)));
    }
    (
        false,
        format!(
            "{done} held {} {verb}, {} not: {}",
            noun(done),
            failed.len(),
            failed.join("; ")
        ),
    )
}

/// The result of a form's release or delete of the messages `sel` names, as `who`: the
/// words for each message, or the refusal's text (no reason, still restricted, …).
async fn form_held(
    c: &Console,
    who: &Actor,
    sel: Selection<'_>,
    ask: HeldAsk<'_>,
) -> (bool, String) {
    match c.state.held_ids(who, sel, ask).await {
        Ok(results) => summary(&results, ask.release),
        Err(refusal) => (false, refusal.to_string()),
    }
}

/// `POST /console/act/held/bulk` (a form), as `who`: `op=release|delete`, `id` repeated,
/// `reason`, `confirm=true` (release though restricted), `back` (the filtered list to go
/// back to).
pub async fn bulk(c: &Console, req: &Request, who: &Actor) -> Response {
    let f = form::fields(&req.body);
    let release = match form::first(&f, "op") {
        Some("release") => true,
        Some("delete") => false,
        _ => return Response::error(400, "say what to do with the selection: op=release|delete"),
    };
    let ids: Vec<String> = form::all(&f, "id")
        .into_iter()
        .filter(|i| !i.is_empty())
        .map(str::to_string)
        .collect();
    if ids.is_empty() {
        return Response::error(400, "no held message is selected: tick at least one");
    }
    if ids.len() > MAX_IDS {
        return Response::error(400, &format!("at most {MAX_IDS} messages at once"));
    }
    let back = back_to(form::first(&f, "back"), "/console/held").to_string();
    let ask = HeldAsk {
        release,
        reason: form::first(&f, "reason").unwrap_or(""),
        confirm: form::first(&f, "confirm"),
    };
    let (ok, text) = form_held(c, who, Selection::Ids(&ids), ask).await;
    tracing::info!(action = %req.path, ok, by = %who, "console: form action done");
    see(&with_result(&back, ok, &text))
}

/// `POST /console/act/key` (a form on the incident page), as `who`: `key`, `op`
/// (`release` | `restrict` with `for` | `release-held` with `confirm=true` to release
/// though restricted | `delete-held`), `reason`. A refusal of the admin API (no reason,
/// still restricted, …) is the page's `failed=` text.
pub async fn key(c: &Console, req: &Request, who: &Actor) -> Response {
    let f = form::fields(&req.body);
    let Some(key) = form::first(&f, "key").filter(|k| !k.is_empty()) else {
        return Response::error(400, "which key? the form needs key=");
    };
    let reason = form::first(&f, "reason").unwrap_or("").trim();
    let page = html::key_url(key).replace("&amp;", "&");
    let (ok, text) = match form::first(&f, "op") {
        Some("release") => {
            let q = [("key", key), ("reason", reason)];
            let (status, v) = api_as(c, who, "POST", "/v1/release", &q).await;
            match status {
                200 => (true, format!("{key}: restriction ended")),
                _ => (false, api_error(&v)),
            }
        }
        Some("restrict") => {
            let Some(dur) = form::first(&f, "for").filter(|d| !d.trim().is_empty()) else {
                return Response::error(400, "say for how long: for=DURATION|until_released");
            };
            let q = [("key", key), ("for", dur.trim()), ("reason", reason)];
            let (status, v) = api_as(c, who, "POST", "/v1/restrict", &q).await;
            match status {
                200 => (true, format!("{key}: restricted ({})", dur.trim())),
                400 => return Response::error(400, &api_error(&v)),
                _ => (false, api_error(&v)),
            }
        }
        Some(op @ ("release-held" | "delete-held")) => {
            let ask = HeldAsk {
                release: op == "release-held",
                reason,
                confirm: form::first(&f, "confirm"),
            };
            match c.state.held_ids(who, Selection::Key(key), ask).await {
                Ok(results) if results.is_empty() => (true, format!("{key}: no message is held")),
                Ok(results) => summary(&results, ask.release),
                Err(refusal) => (false, refusal.to_string()),
            }
        }
        _ => {
            return Response::error(
                400,
                "say what to do: op=release|restrict|release-held|delete-held",
            )
        }
    };
    tracing::info!(action = %req.path, ok, by = %who, "console: form action done");
    see(&with_result(&page, ok, &text))
}

/// The error text of an admin API answer.
fn api_error(v: &serde_json::Value) -> String {
    v["error"]
        .as_str()
        .unwrap_or("the action failed")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::SpoolError;

    #[test]
    fn outcomes_in_words() {
        let gone: Result<(), HeldError> = Err(SpoolError::NotFound("a".into()).into());
        assert!(held_outcome("a", &gone, true).contains("no longer held"));
        let busy: Result<(), HeldError> = Err(SpoolError::Busy("a".into()).into());
        assert!(held_outcome("a", &busy, false).contains("another request"));
        assert_eq!(held_outcome("a", &Ok(()), false), "held message a deleted");
        let r = vec![("a".to_string(), Ok(())), ("b".to_string(), Ok(()))];
        assert_eq!(summary(&r, true), (true, "2 held messages released".into()));
        let r = vec![("a".to_string(), Ok(())), ("b".to_string(), gone)];
        let (ok, text) = summary(&r, false);
        assert!(
            !ok && text.starts_with("1 held message deleted, 1 not: held message b"),
            "{text}"
        );
    }
}
