//! The admin endpoints, over whatever transport [`super::serve`] gives them.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/metrics` | the Prometheus text |
//! | GET | `/v1/inspect?key=KEY` | every limit's reading of KEY |
//! | POST | `/v1/reset?key=KEY` | removes every record of KEY for every limit |
//! | GET | `/v1/top?limit=NAME&n=N` | keys by value relative to their limit |
//! | POST | `/v1/reload` | the same as SIGHUP |
//! | GET | `/v1/held?key=KEY` | held messages (all, or those of KEY) |
//! | GET | `/v1/held/show?id=ID` | one held message: envelope, client, header section |
//! | POST | `/v1/held/release?id=ID` or `?key=KEY` (`&by=WHO&reason=TEXT`) | relays it upstream |
//! | POST | `/v1/held/delete?id=ID` or `?key=KEY` (`&by=WHO&reason=TEXT`) | removes it |
//! | GET | `/v1/restricted` | the restricted keys (see [`super::restricted`]) |
//! | POST | `/v1/release?key=KEY&reason=TEXT` | ends a restriction |
//! | POST | `/v1/restrict?key=KEY&for=DURATION&reason=TEXT` | restricts by hand |
//!
//! HEAD is accepted wherever GET is. Answers are JSON (`{"error": …}` on failure).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use super::held;
use super::http::{Request, Response};
use super::inspect::{database_key, reading_of_key, TopBuilder};
use super::Metrics;
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
}

/// The answer for a held message that could not be shown, released or deleted.
fn held_error(e: &held::HeldError) -> Response {
    use crate::hold::SpoolError;
    let status = match e {
        held::HeldError::Spool(SpoolError::NotFound(_)) => 404,
        held::HeldError::Spool(SpoolError::Busy(_)) => 409,
        held::HeldError::Release(_) => 502,
        held::HeldError::Spool(_) => 500,
    };
    Response::error(status, &e.to_string())
}

fn store_error(e: &StoreError) -> Response {
    Response::error(503, &e.to_string())
}

impl AdminState {
    /// Answers one request.
    pub async fn handle(&self, req: &Request) -> Response {
        let get = req.method == "GET" || req.method == "HEAD";
        let post = req.method == "POST";
        let (allowed, ok) = match req.path.as_str() {
            "/metrics" => ("GET, HEAD", get),
            "/v1/inspect" | "/v1/top" | "/v1/held" | "/v1/held/show" | "/v1/restricted"
            | "/v1/campaigns" => ("GET, HEAD", get),
            "/v1/reset" | "/v1/reload" | "/v1/held/release" | "/v1/held/delete" | "/v1/release"
            | "/v1/restrict" | "/v1/outcome" => ("POST", post),
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
            "/v1/reset" => match req.param("key") {
                Some(k) => self.reset(k).await,
                None => Response::error(400, "reset needs ?key=KEY"),
            },
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
            "/v1/held" => self.held_list(req.param("key")).await,
            "/v1/held/show" => match req.param("id") {
                Some(id) => self.held_show(id).await,
                None => Response::error(400, "held show needs ?id=ID"),
            },
            "/v1/held/release" | "/v1/held/delete" => {
                let release = req.path == "/v1/held/release";
                self.held_act(req, release).await
            }
            "/v1/restricted" => self.restricted().await,
            "/v1/campaigns" => self.campaigns().await,
            "/v1/release" => self.release(req).await,
            "/v1/restrict" => self.restrict(req).await,
            "/v1/outcome" => self.outcome(req).await,
            _ => self.reload(),
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

    async fn held_list(&self, key: Option<&str>) -> Response {
        let (_, spool) = match self.spool() {
            Ok(s) => s,
            Err(r) => return r,
        };
        let s = spool.clone();
        match held::blocking(move || s.list()).await {
            Ok(all) => {
                let list: Vec<_> = all
                    .iter()
                    .filter(|m| key.is_none_or(|k| m.envelope.key == k))
                    .map(held::summary)
                    .collect();
                Response::json(200, &json!({ "held": list }))
            }
            Err(e) => held_error(&e.into()),
        }
    }

    async fn held_show(&self, id: &str) -> Response {
        let (_, spool) = match self.spool() {
            Ok(s) => s,
            Err(r) => return r,
        };
        let (s, owned) = (spool.clone(), id.to_string());
        match held::blocking(move || s.header_section(&owned)).await {
            Ok((h, section)) => Response::json(200, &held::detail(&h, &section)),
            Err(e) => held_error(&e.into()),
        }
    }

    /// Releases (`release`) or deletes each of `ids` as `by`, one after the other, with the
    /// typed result of each: what `POST /v1/held/release|delete` and the console do.
    pub async fn held_ids(
        &self,
        ids: &[String],
        release: bool,
        by: &crate::proxy::release::ReleaseBy,
    ) -> Result<Vec<(String, Result<(), held::HeldError>)>, Response> {
        let (shared, spool) = self.spool()?;
        Ok(held_apply(&shared, &spool, &self.metrics, ids, release, by).await)
    }

    async fn held_act(&self, req: &Request, release: bool) -> Response {
        let (shared, spool) = match self.spool() {
            Ok(s) => s,
            Err(r) => return r,
        };
        let (id, key) = (req.param("id"), req.param("key"));
        if id.is_some() == key.is_some() {
            return Response::error(400, "give either ?id=ID or ?key=KEY");
        }
        let ids = match held::select(&spool, id, key).await {
            Ok(ids) => ids,
            Err(e) => return held_error(&e.into()),
        };
        let by = crate::proxy::release::ReleaseBy {
            by: req.param("by").unwrap_or("admin").to_string(),
            reason: req.param("reason").unwrap_or("").to_string(),
            at: crate::hold::spool::now_secs() as i64,
        };
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for (id, r) in held_apply(&shared, &spool, &self.metrics, &ids, release, &by).await {
            match r {
                Ok(()) => done.push(id),
                Err(e) => failed.push((id, e)),
            }
        }
        let verb = if release { "released" } else { "deleted" };
        if let (Some(_), Some((_, e))) = (id, failed.first()) {
            return held_error(e);
        }
        if !failed.is_empty() {
            let why: Vec<String> = failed.iter().map(|(i, e)| format!("{i}: {e}")).collect();
            return Response::error(
                502,
                &format!(
                    "{} {verb}, {} not: {}",
                    done.len(),
                    failed.len(),
                    why.join("; ")
                ),
            );
        }
        Response::json(200, &json!({ verb: done }))
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
        Response::json(200, &json!({ "key": key, "limits": limits }))
    }

    async fn reset(&self, key: &str) -> Response {
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
        tracing::info!(removed, "admin: rate limit records reset");
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

    fn reload(&self) -> Response {
        match self.control.reload() {
            Ok(()) => {
                tracing::info!("admin: configuration reloaded");
                Response::json(200, &json!({ "reloaded": true }))
            }
            Err(e) => {
                tracing::warn!(error = %e, "admin: new configuration refused; the old one stays in force");
                Response::error(422, &e.to_string())
            }
        }
    }
}

/// Releases or deletes each of `ids` in `spool`, then refreshes the spool's gauges.
async fn held_apply(
    shared: &Arc<crate::proxy::Shared>,
    spool: &Arc<crate::hold::Spool>,
    metrics: &Metrics,
    ids: &[String],
    release: bool,
    by: &crate::proxy::release::ReleaseBy,
) -> Vec<(String, Result<(), held::HeldError>)> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let r = if release {
            held::release_one(shared, spool, id, by).await
        } else {
            held::delete_one(shared, spool, id, by).await
        };
        out.push((id.clone(), r));
    }
    crate::proxy::refresh_hold_gauges(spool, metrics);
    out
}

/// `GET /metrics`.
pub fn metrics_response(m: &Metrics) -> Response {
    Response::text(200, crate::metrics::CONTENT_TYPE, m.render())
}
