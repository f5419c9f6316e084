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
use super::pages::held::Filter;
use super::respond::api_as;
use super::state::Console;
use crate::admin::actor::Actor;
use crate::admin::campaigns::CampaignOp;
use crate::admin::held_act::{HeldAsk, HeldRefusal, HeldResults, Selection};
use crate::admin::http::{percent_encode, Request, Response};
use crate::proxy::release::blocking;
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

/// A refusal in the words of the console's forms: a release of mail of a key still
/// restricted names the box to tick, not the API's parameter.
pub fn refusal_words(r: &HeldRefusal) -> String {
    match r {
        HeldRefusal::StillRestricted(x) => format!(
            "{} is still restricted (since {}, by {}: {}): its held mail is what the limit \
             stopped. End the restriction first, or tick \"release though restricted\" and \
             release again.",
            x.key,
            crate::time::rfc3339(x.since_us),
            x.by,
            if x.reason.is_empty() {
                "no reason given"
            } else {
                &x.reason
            }
        ),
        HeldRefusal::NoReason => {
            "say why: type a reason (it goes to the audit log) and release again".into()
        }
        other => other.to_string(),
    }
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
        Err(refusal) => (false, refusal_words(&refusal)),
    }
}

/// The ids of every held message the filter of a form (`f_key`, `f_limit`, `f_sender`,
/// `f_subject`) lets through.
async fn matching_ids(c: &Console, f: &[(String, String)]) -> Result<Vec<String>, String> {
    let v = |n: &str| form::first(f, n).unwrap_or("").trim().to_string();
    let key = v("f_key");
    let filter = Filter {
        account: c.state.admin_key(&key),
        key,
        limit: v("f_limit"),
        sender: v("f_sender"),
        subject: v("f_subject"),
    };
    let Some(spool) = c.state.control.shared().hold.clone() else {
        return Ok(Vec::new());
    };
    let heads = blocking(move || spool.list())
        .await
        .map_err(|e| e.to_string())?;
    Ok(heads
        .into_iter()
        .filter(|h| filter.passes(h))
        .map(|h| h.envelope.id)
        .collect())
}

/// `page` (a console path) with what a refused form keeps added: the reason typed, the
/// ticked ids, the scope.
fn keeping(page: &str, reason: &str, picked: &[String], scope: &str) -> String {
    let mut out = page.to_string();
    let mut add = |k: &str, v: &str| {
        out.push(if out.contains('?') { '&' } else { '?' });
        out.push_str(k);
        out.push('=');
        out.push_str(&percent_encode(v));
    };
    if !reason.is_empty() {
        add("reason", reason);
    }
    if scope != "selected" {
        add("scope", scope);
    }
    for id in picked.iter().take(MAX_IDS) {
        add("picked", id);
    }
    out
}

/// `POST /console/act/held/bulk` (a form), as `who`: `op=release|delete`, `scope`
/// (`selected`: the ticked `id`s, the default; `page`: every `page_id`; `matching`: every
/// message the filter fields `f_*` let through), `reason`, `confirm=true` (release though
/// restricted), `back` (the list to go back to), `failed_back` (where a refusal goes,
/// `back` when absent). A refusal keeps the reason, the ticks and the scope.
pub async fn bulk(c: &Console, req: &Request, who: &Actor) -> Response {
    let f = form::fields(&req.body);
    let release = match form::first(&f, "op") {
        Some("release") => true,
        Some("delete") => false,
        _ => return Response::error(400, "say what to do with the selection: op=release|delete"),
    };
    let ids_of = |name: &str| -> Vec<String> {
        form::all(&f, name)
            .into_iter()
            .filter(|i| !i.is_empty())
            .map(str::to_string)
            .collect()
    };
    let ticked = ids_of("id");
    let scope = form::first(&f, "scope").unwrap_or("selected");
    let ids = match scope {
        "selected" => ticked.clone(),
        "page" => ids_of("page_id"),
        "matching" => match matching_ids(c, &f).await {
            Ok(ids) => ids,
            Err(e) => return Response::error(500, &e),
        },
        other => {
            return Response::error(
                400,
                &format!("scope={other:?}: use selected, page or matching"),
            )
        }
    };
    let back = back_to(form::first(&f, "back"), "/console/held").to_string();
    let failed_back = back_to(form::first(&f, "failed_back"), &back).to_string();
    // Reasons typed in more than one field of the form: the first one filled.
    let reason = form::all(&f, "reason")
        .into_iter()
        .find(|r| !r.trim().is_empty())
        .unwrap_or("");
    if ids.is_empty() {
        let why = match scope {
            "selected" => {
                "no held message is ticked: tick at least one, or choose \"every \
                           message on this page\" or \"all matching the filter\""
            }
            _ => "no held message matches: nothing was done",
        };
        let to = keeping(&failed_back, reason, &ticked, scope);
        return see(&with_result(&to, false, why));
    }
    if scope != "matching" && ids.len() > MAX_IDS {
        return Response::error(400, &format!("at most {MAX_IDS} messages at once"));
    }
    let ask = HeldAsk {
        release,
        reason,
        confirm: form::first(&f, "confirm"),
    };
    let (ok, text) = form_held(c, who, Selection::Ids(&ids), ask).await;
    tracing::info!(action = %req.path, ok, scope, by = %who, "console: form action done");
    let to = if ok {
        back
    } else {
        keeping(&failed_back, reason, &ticked, scope)
    };
    see(&with_result(&to, ok, &text))
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
                Err(refusal) => (false, refusal_words(&refusal)),
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

/// `POST /console/act/campaign` (a form on the Campaigns page), as `who`: `id` (the
/// campaign), `op` (`release-held` with `confirm=true` to release mail of accounts still
/// restricted | `delete-held` | `release`: end every restriction), `reason`. Back to the
/// campaign's entry with the result; a refusal keeps the reason.
pub async fn campaign(c: &Console, req: &Request, who: &Actor) -> Response {
    let f = form::fields(&req.body);
    let Some(id) = form::first(&f, "id").filter(|k| !k.is_empty()) else {
        return Response::error(400, "which campaign? the form needs id=");
    };
    let Some(op) = form::first(&f, "op").and_then(CampaignOp::parse) else {
        return Response::error(400, "say what to do: op=release-held|delete-held|release");
    };
    let reason = form::first(&f, "reason").unwrap_or("");
    let page = format!("/console/campaigns?c={}", percent_encode(id));
    let r = c
        .state
        .campaign_act(who, id, op, reason, form::first(&f, "confirm"))
        .await;
    let (ok, text) = match r {
        Ok(d) => {
            let noun = match op {
                CampaignOp::EndRestrictions => "restriction",
                _ => "held message",
            };
            let mut text = format!(
                "{id}: {} of its {} {}",
                crate::figures::count(d.done.len() as u64, noun),
                crate::figures::count(d.accounts.len() as u64, "account"),
                op.verb()
            );
            if !d.failed.is_empty() {
                text.push_str(&format!(
                    ", {} not: {}",
                    d.failed.len(),
                    d.failed.join("; ")
                ));
            }
            (d.failed.is_empty(), text)
        }
        Err(resp) => {
            let v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap_or_default();
            let mut text = api_error(&v);
            if resp.status == 409 {
                text = text.replace(
                    "release the restriction first, or release the mail all the same with \
                     confirm=true (--confirm)",
                    "end the restrictions first, or tick \"release though restricted\" and \
                     release again",
                );
            }
            (false, text)
        }
    };
    tracing::info!(action = %req.path, ok, by = %who, "console: form action done");
    let to = if ok {
        page
    } else {
        keeping(&page, reason, &[], "selected")
    };
    see(&with_result(&to, ok, &text))
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
