//! The admin endpoints, over whatever transport [`super::serve`] gives them.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/metrics` | the Prometheus text |
//! | GET | `/v1/inspect?key=KEY` | every limit's reading of KEY |
//! | POST | `/v1/reset?key=KEY` | removes every record of KEY for every limit |
//! | GET | `/v1/top?limit=NAME&n=N` | keys by value relative to their limit |
//! | POST | `/v1/reload` | the same as SIGHUP |
//! | GET | `/v1/restricted` | the restricted keys (see [`super::restricted`]) |
//! | POST | `/v1/release?key=KEY&reason=TEXT` | ends a restriction |
//! | POST | `/v1/restrict?key=KEY&for=DURATION&reason=TEXT` | restricts by hand |
//!
//! HEAD is accepted wherever GET is. Answers are JSON (`{"error": …}` on failure).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use super::http::{Request, Response};
use super::inspect::{database_key, reading, TopBuilder};
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
            "/v1/inspect" | "/v1/top" | "/v1/restricted" => ("GET, HEAD", get),
            "/v1/reset" | "/v1/reload" | "/v1/release" | "/v1/restrict" => ("POST", post),
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
            "/v1/restricted" => self.restricted().await,
            "/v1/release" => self.release(req).await,
            "/v1/restrict" => self.restrict(req).await,
            _ => self.reload(),
        }
    }

    async fn inspect(&self, key: &str) -> Response {
        let config = self.control.config();
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
            limits.push(reading(def, db.as_deref(), records, now));
        }
        Response::json(200, &json!({ "key": key, "limits": limits }))
    }

    async fn reset(&self, key: &str) -> Response {
        let config = self.control.config();
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
        let config = self.control.config();
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
                Response::error(422, &e)
            }
        }
    }
}

/// `GET /metrics`.
pub fn metrics_response(m: &Metrics) -> Response {
    Response::text(200, "text/plain; version=0.0.4; charset=utf-8", m.render())
}
