//! The admin endpoints, over whatever transport [`super::serve`] gives them.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/metrics` | the Prometheus text |
//! | GET | `/v1/inspect?key=KEY` | every limit's reading of KEY, and its restriction (`null` when none) |
//! | POST | `/v1/reset?key=KEY` | removes every record of KEY for every limit |
//! | GET | `/v1/top?limit=NAME&n=N` | keys by value relative to their limit |
//! | POST | `/v1/reload` | the same as SIGHUP |
//! | GET | `/v1/held?key=KEY` | held messages (all, or those of KEY) |
//! | GET | `/v1/held/show?id=ID` | one held message: envelope, client, header section |
//! | POST | `/v1/held/release?id=ID` or `?key=KEY` `&reason=TEXT[&confirm=true]` | relays it upstream (see [`super::held_act`]) |
//! | POST | `/v1/held/delete?id=ID` or `?key=KEY` (`&reason=TEXT`) | removes it |
//! | GET | `/v1/restricted` | the restricted keys (see [`super::restricted`]) |
//! | GET | `/v1/messages?key=KEY&page=N` | the key's messages from the event log, paged (see [`super::messages`]) |
//! | GET | `/v1/delivered?key=KEY&format=json\|csv` | what was relayed for a restricted key before its restriction |
//! | POST | `/v1/release?key=KEY&reason=TEXT` | ends a restriction |
//! | POST | `/v1/restrict?key=KEY&for=DURATION&reason=TEXT` | restricts by hand |
//! | POST | `/v1/campaigns/act?id=ID&op=release-held\|delete-held\|release&reason=TEXT[&confirm=true]` | one action on every account of a campaign: release or delete all their held mail, or end every restriction (see [`super::campaigns`]) |
//! | POST | `/v1/alerts/digest` | sends the daily alert digest now (see [`super::digest`]) |
//!
//! A `key=KEY` is folded like a login before it is looked up ([`crate::policy::identity`]:
//! with `login_fold = "lowercase"`, `ALICE` is the key `alice`; an IP address or CIDR block
//! stays as typed), so an account is found however the admin spells it. A key whose case
//! the client chose (a `${sender_address}` key) is still found by `release` and `held
//! list` as typed: when the folded key is not restricted (not held), the key as typed is.
//!
//! HEAD is accepted wherever GET is. Answers are JSON (`{"error": …}` on failure).
//!
//! Every request comes with its [`Actor`]: the name of the bearer token on the admin
//! address, the user at the other end of the admin socket (or, when that user is root or
//! floodgate's own, the person its verb names: [`super::invoker`]). Each change is recorded under
//! it (`by`: log line, alert, restriction, trace header) and, with `[admin] audit`, in the
//! audit log ([`super::audit`]).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use super::actor::Actor;
use super::audit::{self, AuditLog};
use super::held;
use super::http::{Request, Response};
use super::inspect::{database_key, reading_of_key, TopBuilder};
use super::Metrics;
use crate::proxy::release::HeldError;
use crate::server::Control;
use crate::store::open::Opened;
use crate::store::{now_micros, Record, StoreError};

/// Most entries `top` returns.
pub const MAX_TOP: usize = 10_000;
/// Most Redis keys `top` reads (SCAN stops there and the answer says it is partial).
pub const MAX_SCAN: usize = 200_000;

/// What the endpoints work on.
pub struct AdminState {
    /// Reload and the config in force.
    pub control: Control,
    /// The rate-limit store.
    pub store: Opened,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Where restriction notices go (the alerts), if anywhere.
    pub observer: Option<Arc<dyn crate::policy::alert::Observer>>,
    /// The running policy (the evidence of a restriction by hand), if any.
    pub policy: Option<crate::policy::RatePolicy>,
    /// The audit log of admin actions (`[admin] audit`), if any.
    pub audit: Option<AuditLog>,
}

/// The answer for a held message that could not be shown, released or deleted.
pub(super) fn held_error(e: &HeldError) -> Response {
    let status = match e {
        HeldError::NotFound(_) => 404,
        HeldError::Busy(_) => 409,
        HeldError::Spool(s) => spool_status(s),
        HeldError::Release(_) => 502,
        HeldError::Postfix(p) => postfix_status(p),
    };
    Response::error(status, &e.to_string())
}

/// The status of an error of Postfix's hold queue: 404 for a message not held (any more),
/// 409 for one another request is acting on, 502 when Postfix's commands failed, 500
/// otherwise.
pub(super) fn postfix_status(e: &crate::hold::postfix::PostfixError) -> u16 {
    use crate::hold::postfix::PostfixError;
    if e.is_not_held() {
        404
    } else if e.is_busy() {
        409
    } else if matches!(
        e,
        PostfixError::Command(_) | PostfixError::Unexpected { .. }
    ) {
        502
    } else {
        500
    }
}

/// The status of a spool error: 404 for a message not held, 409 for one another request
/// is acting on, 500 otherwise.
pub(super) fn spool_status(e: &crate::hold::SpoolError) -> u16 {
    use crate::hold::SpoolError;
    match e {
        SpoolError::NotFound(_) => 404,
        SpoolError::Busy(_) => 409,
        _ => 500,
    }
}

/// The answer when neither `[hold]` nor `[postfix]` is configured.
fn no_hold() -> Response {
    Response::error(
        404,
        "no hold: the configuration has neither a [hold] section (floodgate's own spool) \
         nor a [postfix] section (Postfix's hold queue)",
    )
}

fn store_error(e: &StoreError) -> Response {
    Response::error(503, &e.to_string())
}

impl AdminState {
    /// Appends an audit line (when `[admin] audit` is set): `who` did `action` on `target`
    /// for `reason`, with `result`. A line that cannot be written is logged and counted;
    /// the action stands.
    pub fn audit(
        &self,
        who: &Actor,
        action: &str,
        target: &serde_json::Value,
        reason: Option<&str>,
        result: &str,
    ) {
        self.audit_with(who, action, target, reason, result, &[]);
    }

    /// [`AdminState::audit`] with more fields (see [`audit::line_with`]).
    pub fn audit_with(
        &self,
        who: &Actor,
        action: &str,
        target: &serde_json::Value,
        reason: Option<&str>,
        result: &str,
        more: &[(&str, serde_json::Value)],
    ) {
        let Some(log) = &self.audit else {
            return;
        };
        let line = audit::line_with(now_micros(), who, action, target, reason, result, more);
        if let Err(e) = log.write(&line) {
            self.metrics.audit_write_errors.inc();
            tracing::warn!(path = %log.path().display(), error = %e, action, who = %who,
                "audit line not written");
        }
    }

    /// Audits the answer `r` to `action` on `target` by `who`, and returns it.
    fn audited(
        &self,
        who: &Actor,
        action: &str,
        target: serde_json::Value,
        req: &Request,
        r: Response,
    ) -> Response {
        let reason = req.param("reason").map(str::trim).filter(|r| !r.is_empty());
        self.audit(who, action, &target, reason, &audit::result_of(&r));
        r
    }

    /// A key an admin typed, in the form floodgate keeps it: folded like a login by the
    /// `[identity]` in force ([`crate::policy::identity::Identity::admin_key`]).
    pub fn admin_key(&self, typed: &str) -> String {
        let generation = self.control.generation();
        generation.policy.identity.admin_key(typed).into_owned()
    }

    /// `req` with its `key` folded like a login (see the module's doc); `None` when the
    /// fold leaves it as it is.
    fn folded_key(&self, req: &Request) -> Option<Request> {
        let typed = req.param("key")?;
        let folded = self.admin_key(typed);
        (folded != typed).then(|| with_key(req, &folded))
    }

    /// `POST /v1/release` of the folded key, else (not restricted) of the key as `typed`.
    async fn release_either(&self, req: &Request, typed: Option<&str>, who: &Actor) -> Response {
        let r = self.release(req, who).await;
        match (r.status, typed) {
            (404, Some(typed)) => {
                let again = self.release(&with_key(req, typed), who).await;
                if again.status == 404 {
                    r
                } else {
                    again
                }
            }
            _ => r,
        }
    }

    /// Answers one request of `who`, its `key` folded like a login.
    pub async fn handle(&self, req: &Request, who: &Actor) -> Response {
        // The person behind root or this process's user, when the verb names one.
        let who = match super::invoker::vouched(who, req.header(super::invoker::HEADER)) {
            Ok(w) => w,
            Err(e) => return Response::error(400, &e.to_string()),
        };
        let who = &who;
        match self.folded_key(req) {
            None => self.answer(req, None, who).await,
            Some(folded) => self.answer(&folded, req.param("key"), who).await,
        }
    }

    /// Answers `req` of `who`; `typed` is the key as the admin typed it when `req`'s was
    /// folded.
    async fn answer(&self, req: &Request, typed: Option<&str>, who: &Actor) -> Response {
        let get = req.method == "GET" || req.method == "HEAD";
        let post = req.method == "POST";
        let (allowed, ok) = match req.path.as_str() {
            "/metrics" => ("GET, HEAD", get),
            "/v1/inspect" | "/v1/top" | "/v1/held" | "/v1/held/show" | "/v1/restricted"
            | "/v1/campaigns" | "/v1/messages" | "/v1/delivered" => ("GET, HEAD", get),
            "/v1/reset" | "/v1/reload" | "/v1/held/release" | "/v1/held/delete" | "/v1/release"
            | "/v1/restrict" | "/v1/outcome" | "/v1/alerts/digest" | "/v1/campaigns/act" => {
                ("POST", post)
            }
            _ => return Response::error(404, &format!("no endpoint {}", req.path)),
        };
        if !ok {
            return Response::error(
                405,
                &format!("{} takes {allowed}, not {}", req.path, req.method),
            );
        }
        match req.path.as_str() {
            "/metrics" => metrics_response(&self.metrics),
            "/v1/inspect" => match req.param("key") {
                Some(k) => self.inspect(k).await,
                None => Response::error(400, "inspect needs ?key=KEY"),
            },
            "/v1/reset" => {
                let r = match req.param("key") {
                    Some(k) => self.reset(k, who).await,
                    None => Response::error(400, "reset needs ?key=KEY"),
                };
                self.audited(who, "reset", json!(req.param("key")), req, r)
            }
            "/v1/top" => {
                let n = match req.param("n").map(str::parse::<usize>) {
                    None => 20,
                    Some(Ok(n)) if (1..=MAX_TOP).contains(&n) => n,
                    Some(_) => {
                        return Response::error(400, &format!("n must be 1 to {MAX_TOP}"));
                    }
                };
                self.top(req.param("limit"), n).await
            }
            "/v1/held" => self.held_list(req.param("key"), typed).await,
            "/v1/held/show" => match req.param("id") {
                Some(id) => self.held_show(id).await,
                None => Response::error(400, "held show needs ?id=ID"),
            },
            "/v1/held/release" | "/v1/held/delete" => {
                let release = req.path == "/v1/held/release";
                self.held_act(req, release, who).await
            }
            "/v1/restricted" => self.restricted().await,
            "/v1/campaigns" => self.campaigns().await,
            "/v1/campaigns/act" => self.campaign_request(req, who).await,
            "/v1/messages" => self.messages(req).await,
            "/v1/delivered" => self.delivered(req).await,
            "/v1/release" => {
                let r = self.release_either(req, typed, who).await;
                self.audited(who, "release", json!(req.param("key")), req, r)
            }
            "/v1/restrict" => {
                let r = self.restrict(req, who).await;
                self.audited(who, "restrict", json!(req.param("key")), req, r)
            }
            "/v1/outcome" => self.outcome(req).await,
            "/v1/alerts/digest" => self.digest_now().await,
            _ => {
                let r = self.reload(who);
                self.audited(who, "reload", serde_json::Value::Null, req, r)
            }
        }
    }

    /// The hold spool in force, or the answer saying there is none.
    pub(super) fn spool(
        &self,
    ) -> Result<(Arc<crate::proxy::Shared>, Arc<crate::hold::Spool>), Response> {
        let shared = self.control.shared();
        match shared.hold.clone() {
            Some(s) => Ok((shared, s)),
            None => Err(Response::error(
                404,
                "no hold spool: the configuration has no [hold] section",
            )),
        }
    }

    /// `GET /v1/held`: every held message (in the spool and in Postfix's hold queue), or
    /// those of `key` (folded), or of the key as `typed` when none is held for the folded
    /// one.
    async fn held_list(&self, key: Option<&str>, typed: Option<&str>) -> Response {
        let shared = self.control.shared();
        if !held::any_hold(&shared) {
            return no_hold();
        }
        let mut list = match held::list_all(&shared, key).await {
            Ok(l) => l,
            Err(e) => return held_error(&e),
        };
        if list.is_empty() && typed.is_some() && typed != key {
            list = match held::list_all(&shared, typed).await {
                Ok(l) => l,
                Err(e) => return held_error(&e),
            };
        }
        Response::json(200, &json!({ "held": list }))
    }

    async fn held_show(&self, id: &str) -> Response {
        let shared = self.control.shared();
        if !held::any_hold(&shared) {
            return no_hold();
        }
        match held::show_any(&shared, id).await {
            Ok(v) => Response::json(200, &v),
            Err(e) => held_error(&e),
        }
    }

    async fn inspect(&self, key: &str) -> Response {
        let config = self.control.generation();
        let store = self.store.as_store();
        let now = now_micros();
        let mut cache: HashMap<String, Vec<Record>> = HashMap::new();
        let mut limits = Vec::new();
        for def in &config.policy.limits {
            let db = database_key(def, key);
            let records = match &db {
                Some(k) if !cache.contains_key(k) => match store.inspect(k).await {
                    Ok(r) => {
                        cache.insert(k.clone(), r);
                        &cache[k]
                    }
                    Err(e) => return store_error(&e),
                },
                Some(k) => &cache[k],
                None => &Vec::new() as &Vec<Record>,
            };
            let mut r = reading_of_key(def, &config.policy, key, db.as_deref(), records, now);
            // A ratio's two counts are in its window, not in the rate records.
            if let (crate::policy::model::RateDef::Ratio(q), Some(k)) = (&def.rate, &db) {
                match store.ratio(k, q.window(), Default::default()).await {
                    Ok(c) => {
                        let (value, over) = q.judge(c);
                        r.stored = c.den > 0 || c.num > 0;
                        r.value = value;
                        r.over = over;
                        r.until_under_secs = if over { None } else { Some(0.0) };
                    }
                    Err(e) => return store_error(&e),
                }
            }
            limits.push(r);
        }
        let restriction = match store.restrictions().await {
            Ok(list) => match list.into_iter().find(|r| r.key == key) {
                Some(mut r) => {
                    self.held_into(&mut r).await;
                    crate::policy::alert::restriction_json(&r)
                }
                None => serde_json::Value::Null,
            },
            Err(e) => return store_error(&e),
        };
        Response::json(
            200,
            &json!({ "key": key, "limits": limits, "restriction": restriction }),
        )
    }

    async fn reset(&self, key: &str, who: &Actor) -> Response {
        let config = self.control.generation();
        let store = self.store.as_store();
        let mut keys: Vec<String> = config
            .policy
            .limits
            .iter()
            .filter_map(|d| database_key(d, key))
            .collect();
        keys.sort();
        keys.dedup();
        let mut removed = 0;
        for k in &keys {
            match store.reset(k).await {
                Ok(n) => removed += n,
                Err(e) => return store_error(&e),
            }
        }
        tracing::info!(key = %key, removed, by = %who, "admin: rate limit records reset");
        Response::json(
            200,
            &json!({ "key": key, "removed": removed, "database_keys": keys }),
        )
    }

    async fn top(&self, only: Option<&str>, n: usize) -> Response {
        let config = self.control.generation();
        if let Some(name) = only {
            if !config.policy.limits.iter().any(|d| d.name == name) {
                return Response::error(404, &format!("no limit named {name:?}"));
            }
        }
        let now = now_micros();
        let mut top = TopBuilder::new(&config.policy, now, only, n);
        let mut partial = false;
        match &self.store {
            Opened::Memory(m) => m.for_each_record(|k, r| top.add(k, r)),
            Opened::Redis(f) => match f.redis().scan_records(MAX_SCAN).await {
                Ok((records, complete)) => {
                    partial = !complete;
                    for (k, r) in records {
                        top.add(&k, r);
                    }
                }
                Err(e) => return store_error(&e),
            },
        }
        Response::json(200, &json!({ "entries": top.finish(), "partial": partial }))
    }

    fn reload(&self, who: &Actor) -> Response {
        match self.control.reload() {
            Ok(()) => {
                tracing::info!(by = %who, "admin: configuration reloaded");
                Response::json(200, &json!({ "reloaded": true }))
            }
            Err(e) => {
                tracing::warn!(error = %e, by = %who, "admin: new configuration refused; the old one stays in force");
                Response::error(422, &e.to_string())
            }
        }
    }
}

/// `GET /metrics`.
pub fn metrics_response(m: &Metrics) -> Response {
    Response::text(200, crate::metrics::CONTENT_TYPE, m.render())
}

/// `req` with its `key` parameter set to `key`.
fn with_key(req: &Request, key: &str) -> Request {
    let mut r = req.clone();
    for (name, value) in &mut r.query {
        if name == "key" {
            *value = key.to_string();
        }
    }
    r
}
