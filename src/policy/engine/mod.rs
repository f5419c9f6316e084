//! The rate-limit policy: at each stage, every applicable limit of the current config
//! generation is decided as one; the strongest countermeasure of the limits that are over
//! wins.
//!
//! Charging:
//! * strict limits charge attempts at check time, as in Exim;
//! * leaky Exim and GCRA limits on recipients and bytes are *checked* without storing and
//!   *charged* when upstream accepts the message. For Exim limits the check reads the stored
//!   record and replays this session's own pending events, each at its own check time, then
//!   the new one, with Exim's formula (see `policy::replay`): one session gets exactly
//!   Exim's answers. The charge applies the accepted events one by one, in order, at commit
//!   time (the store takes no explicit time): the stored rate differs from Exim's by the
//!   decay between check and commit, and by the rounding of same-instant intervals (Exim's
//!   `1e-9` s floor; at most about 0.02 % of each event's count at p = 1h, 0.2 % at p = 1d).
//!   GCRA checks are a dry run that adds the session's pending amount to the new one.
//!   Concurrent sessions may each pass the check before either commits: the overshoot is
//!   bounded by the events in flight at once;
//! * buckets reserve at check time, commit on upstream's 2xx (ham) or 5xx (spam, when
//!   dynamic multipliers are on) and cancel on refusal or abandonment: exact.
//!
//! A dry run is a decision holding the limits plus a sentinel request that is always over:
//! the store then refuses it and writes nothing for leaky limits, but still answers
//! `over` for each limit, atomically.
//!
//! A check runs in three steps: `plan` (pure: which limits apply, their keys and requests,
//! how each is asked), the store's answers (the only awaits, in `check`), and `settle`
//! (pure: what the answers mean: charges to keep, headers, limits over, and the verdict).
//! The driver in `check` tells the observer, the metrics and the log from what `settle`
//! returns.

mod answers;
mod campaign;
mod check;
mod keys_pool;
mod pending;
mod plan;
mod rate_session;
mod repeated;
mod restrict;
mod settle;
#[cfg(test)]
mod testing;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::alert::Observer;
use super::concurrency::Slots;
use super::evidence::Evidence;
use super::held::{HeldNow, HeldReader, HeldSource};
use super::model::PolicyModel;
use super::{Policy, SessionPolicy};
use crate::store::{now_micros, Store, StoreError};
use rate_session::RateSession;

/// The policy's clock: microseconds since the Unix epoch. It times this session's pending
/// events for the replay of leaky Exim limits, so it must agree with the store's clock.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

struct Inner {
    current: RwLock<Arc<PolicyModel>>,
    /// Moves on at every [`RatePolicy::install`]. Sessions keep the model they last read
    /// and read `current` again only when this has moved: a load of a value written only on
    /// reload, where taking the lock and counting the `Arc` at every command would pass
    /// their cache lines between the workers' cores.
    generation: AtomicU64,
    store: Arc<dyn Store>,
    slots: Arc<Slots>,
    clock: Clock,
    /// The event log and alerts, when serving.
    observer: Option<Arc<dyn Observer>>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Whether the generation in force reads the header From.
    header_from: std::sync::atomic::AtomicBool,
    /// What this node saw of each key recently (for restriction notices).
    evidence: Evidence,
    /// The paced messages waiting, when serving: a key with some queues its later
    /// messages behind them.
    paced: Option<Arc<crate::hold::pace::PaceBook>>,
    /// Sends the mail of `notify_user`, when serving.
    notifier: Option<Arc<dyn super::notice::Notifier>>,
    /// Queued messages whose bounces and deferrals are still to come.
    queued: Arc<crate::outcomes::index::Index>,
    /// What the hold spool holds per key, on this node and the others.
    held: HeldReader,
    /// The organisation's boilerplate, learnt from the messages whose fingerprint is
    /// computed, left out of later fingerprints (node-local, also with Redis).
    boilerplate: Arc<RwLock<crate::message_keys::Boilerplate>>,
    /// Where message keys are computed, off the sessions' workers.
    keys: keys_pool::KeysPool,
}

/// What the policy of a running floodgate reports to and reads besides its limits and
/// store, each given when it is built ([`RatePolicy::serving`]). The notifier and the
/// hold spool's source read what sessions share in force, which itself holds this policy:
/// the caller gives them a handle to it made before either.
pub struct Serving {
    /// Sees every evaluation and every limit over (the event log and alerts).
    pub observer: Arc<dyn Observer>,
    /// The paced messages waiting: while a key of an `action = "pace"` limit has messages
    /// waiting, its later messages are paced too, behind them, so they leave in order.
    pub paced: Arc<crate::hold::pace::PaceBook>,
    /// Sends the mail of `notify_user` (through upstream).
    pub notifier: Arc<dyn super::notice::Notifier>,
    /// Where the hold spool in force is, for the `held` of evidence (see [`super::held`]).
    pub held: Arc<dyn HeldSource>,
}

/// The floodgate policy: the current generation of limits over one store that outlives
/// reloads.
#[derive(Clone)]
pub struct RatePolicy {
    inner: Arc<Inner>,
}

impl RatePolicy {
    /// A policy running `model` over `store`, on the system clock.
    pub fn new(model: Arc<PolicyModel>, store: Arc<dyn Store>) -> RatePolicy {
        RatePolicy::with_clock(model, store, Arc::new(now_micros))
    }

    /// A policy running `model` over `store`, timing checks with `clock` (for tests that
    /// replay the same times elsewhere; the store keeps its own clock).
    pub fn with_clock(model: Arc<PolicyModel>, store: Arc<dyn Store>, clock: Clock) -> RatePolicy {
        RatePolicy::build(model, store, clock, Arc::default(), None)
    }

    /// The policy of a running floodgate: `model` over `store` on the system clock, counting
    /// the limits found over in `metrics`, with every part of [`Serving`].
    pub fn serving(
        model: Arc<PolicyModel>,
        store: Arc<dyn Store>,
        metrics: Arc<crate::metrics::Metrics>,
        parts: Serving,
    ) -> RatePolicy {
        RatePolicy::build(model, store, Arc::new(now_micros), metrics, Some(parts))
    }

    fn build(
        model: Arc<PolicyModel>,
        store: Arc<dyn Store>,
        clock: Clock,
        metrics: Arc<crate::metrics::Metrics>,
        parts: Option<Serving>,
    ) -> RatePolicy {
        let (observer, paced, notifier, held) = match parts {
            Some(p) => (
                Some(p.observer),
                Some(p.paced),
                Some(p.notifier),
                Some(p.held),
            ),
            None => (None, None, None, None),
        };
        RatePolicy {
            inner: Arc::new(Inner {
                header_from: (model.reads_header_from()
                    || model.restricts()
                    || model.follows_outcomes())
                .into(),
                current: RwLock::new(model),
                generation: AtomicU64::new(0),
                held: HeldReader::new(store.clone(), held),
                store,
                slots: Arc::new(Slots::default()),
                clock,
                observer,
                metrics,
                evidence: Evidence::default(),
                paced,
                notifier,
                queued: Arc::default(),
                boilerplate: Arc::default(),
                keys: keys_pool::KeysPool::new(keys_pool::threads()),
            }),
        }
    }

    /// Makes `model` the generation every later check uses (sessions in flight included).
    pub fn install(&self, model: Arc<PolicyModel>) {
        self.inner.header_from.store(
            model.reads_header_from() || model.restricts() || model.follows_outcomes(),
            Ordering::Relaxed,
        );
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = model;
        self.inner.generation.fetch_add(1, Ordering::Release);
    }

    /// Ends every restriction whose time is over and tells of each (log, metric, alert);
    /// see [`super::expiry`]. Returns how many ended. Also tells the counts of the
    /// engine's repeated warnings whose interval has passed.
    pub async fn expire_restrictions(&self) -> Result<usize, StoreError> {
        repeated::flush();
        let host = self.current().hostname.clone();
        super::expiry::sweep(
            &*self.inner.store,
            self.inner.observer.as_ref(),
            &self.inner.metrics,
            &self.inner.held,
            &host,
        )
        .await
    }

    /// What this node saw recently of the first of `keys` it knows (see
    /// [`Evidence::of`]).
    pub fn evidence(&self, keys: &[&str]) -> serde_json::Value {
        self.inner.evidence.of(keys)
    }

    /// Whether this node has seen any of `keys` (see [`Evidence::knows`]).
    pub fn knows(&self, keys: &[&str]) -> bool {
        self.inner.evidence.knows(keys)
    }

    /// What the hold spool holds for `key` now, on this node and (with a shared store) the
    /// others.
    pub async fn held_now(&self, key: &str) -> HeldNow {
        let node = self.current().hostname.clone();
        self.inner.held.now(key, &node).await
    }

    /// Sets the `held` and `held_by_node` of a restriction's `evidence` of `key` to what
    /// is held now.
    pub async fn set_held(&self, evidence: &mut serde_json::Value, key: &str) {
        self.held_now(key).await.set_in(evidence);
    }

    /// The index of queued messages whose outcomes are still to come.
    pub fn queue_index(&self) -> &Arc<crate::outcomes::index::Index> {
        &self.inner.queued
    }

    /// The store the policy decides against.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The observer (event log and alerts), when serving.
    pub fn observer(&self) -> Option<&Arc<dyn Observer>> {
        self.inner.observer.as_ref()
    }

    /// The generation in force.
    pub fn current(&self) -> Arc<PolicyModel> {
        self.inner
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Policy for RatePolicy {
    fn session(&self) -> Box<dyn SessionPolicy> {
        // The generation before the model: a reload in between is only read again later.
        let generation = self.inner.generation.load(Ordering::Acquire);
        Box::new(RateSession::new(
            self.inner.clone(),
            self.current(),
            generation,
        ))
    }

    fn reads_header_from(&self) -> bool {
        self.inner.header_from.load(Ordering::Relaxed)
    }

    fn reload(&self, model: Arc<PolicyModel>) {
        self.install(model);
    }

    fn notice(&self, notice: &serde_json::Value) {
        if let Some(o) = self.observer() {
            o.restriction(notice);
        }
    }

    fn record_message(&self, t: &crate::policy::alert::MessageRecord<'_>) {
        // What was relayed is evidence about the key (restricting configs only).
        if t.verdict.starts_with("relayed") && self.current().restricts() {
            self.inner.evidence.note(
                t.key,
                super::evidence::Fact::Relayed(t.recipients),
                t.time_us,
            );
        }
        if let Some(o) = self.observer() {
            o.record_message(t);
        }
    }

    fn message_keys(
        &self,
        message: super::SharedMessage,
        null_sender: bool,
        account: Option<String>,
    ) -> super::BoxFuture<'_, Option<crate::message_keys::MessageKeys>> {
        use crate::message_keys::boilerplate::{account_hash, day_of};
        let model = self.current();
        if model.wanted_message_keys().is_none() {
            return Box::pin(std::future::ready(None));
        }
        let seconds = u64::try_from((self.inner.clock)() / 1_000_000).unwrap_or(0);
        let today = day_of(seconds);
        let boilerplate = self.inner.boilerplate.clone();
        Box::pin(async move {
            let size = (*message).as_ref().len();
            let budget = model.message_keys.budget;
            let work = move || {
                let mut budget =
                    crate::message_keys::Budget::new(budget, keys_pool::thread_cpu_time);
                let keys = {
                    let learnt = boilerplate.read().unwrap_or_else(|e| e.into_inner());
                    message_keys_of(
                        &model,
                        (*message).as_ref(),
                        null_sender,
                        Some((&learnt, today)),
                        &mut budget,
                    )
                };
                // Learnt from the author's blocks after the keys are read: a block becomes
                // boilerplate only over days, never through the message being judged.
                if let (Some(k), Some(account)) = (&keys, account.as_deref()) {
                    if !k.blocks.is_empty() {
                        boilerplate
                            .write()
                            .unwrap_or_else(|e| e.into_inner())
                            .observe(account_hash(account), today, &k.blocks);
                    }
                }
                (keys, budget.exceeded())
            };
            let Some((keys, exceeded)) = self.inner.keys.run(work).await else {
                repeated::KEYS_LOST.warn("the message-key pool gave no answer");
                return None;
            };
            if exceeded {
                self.inner.metrics.message_keys_budget_exceeded.inc();
                repeated::KEYS_BUDGET.warn(&format!(
                    "a message of {size} octets; budget {}ms",
                    budget.as_millis()
                ));
            }
            keys
        })
    }
}

/// The header section of `message` (up to its first empty line; all of it without one).
fn head_of(message: &[u8]) -> &[u8] {
    memchr::memmem::find(message, b"\r\n\r\n")
        .map(|i| &message[..i + 2])
        .or_else(|| memchr::memmem::find(message, b"\n\n").map(|i| &message[..i + 1]))
        .unwrap_or(message)
}

/// The message keys `model`'s limits use, of `message` (see [`Policy::message_keys`]),
/// within `budget`.
fn message_keys_of(
    model: &PolicyModel,
    message: &[u8],
    null_sender: bool,
    learnt: Option<(&crate::message_keys::Boilerplate, u32)>,
    budget: &mut crate::message_keys::Budget,
) -> Option<crate::message_keys::MessageKeys> {
    use crate::message_keys::{compute_within, is_automatic, Wanted};
    let wanted = model.wanted_message_keys();
    if wanted == Wanted::default() {
        return None;
    }
    let settings = &model.message_keys;
    if !settings.include_automatic && (null_sender || is_automatic(head_of(message))) {
        return None;
    }
    let exempt = &settings.exempt_link_domains;
    if exempt.is_empty() {
        return Some(compute_within(message, wanted, &[], learnt, budget));
    }
    // The link domains too, to tell a message that links only to exempt domains (own
    // bulk mail) from one that links to others as well.
    let mut keys = compute_within(
        message,
        Wanted {
            link_domains: true,
            ..wanted
        },
        exempt,
        learnt,
        budget,
    );
    if keys.only_exempt_links {
        return None;
    }
    if !wanted.link_domains {
        keys.link_domains.clear();
    }
    Some(keys)
}

impl RatePolicy {
    /// The boilerplate learnt so far, as bytes ([`crate::message_keys::Boilerplate::to_bytes`]).
    pub fn boilerplate_bytes(&self) -> Vec<u8> {
        self.inner
            .boilerplate
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .to_bytes()
    }

    /// Takes the boilerplate learnt before (its bytes) in place of what is known.
    pub fn restore_boilerplate(
        &self,
        bytes: &[u8],
    ) -> Result<usize, crate::message_keys::boilerplate::BoilerplateError> {
        use crate::message_keys::{boilerplate::Settings, Boilerplate};
        let b = Boilerplate::from_bytes(bytes, Settings::default())?;
        let n = b.len();
        *self
            .inner
            .boilerplate
            .write()
            .unwrap_or_else(|e| e.into_inner()) = b;
        Ok(n)
    }
}

impl super::held::Publisher for RatePolicy {
    fn publish_held(&self) -> impl Future<Output = ()> + Send {
        let node = self.current().hostname.clone();
        async move { self.inner.held.publish(&node).await }
    }
}

impl super::expiry::Sweeper for RatePolicy {
    fn sweep(&self) -> impl Future<Output = Result<usize, StoreError>> + Send {
        self.expire_restrictions()
    }
}

#[cfg(test)]
mod message_key_tests {
    use super::testing::model;
    use super::*;

    const CAMPAIGN: &str = r#"
[[limit]]
name = "campaign"
key = "${fingerprint}"
ratelimit = "3 / 1h / per_mail / unique=${authenticated_id}"
action = "hold"
"#;

    fn keys_of(
        model: &PolicyModel,
        message: &[u8],
        null_sender: bool,
    ) -> Option<crate::message_keys::MessageKeys> {
        message_keys_of(
            model,
            message,
            null_sender,
            None,
            &mut crate::message_keys::Budget::unlimited(),
        )
    }

    fn message(extra_head: &str, links: &[&str]) -> Vec<u8> {
        let mut body = String::from(
            "Hello,\r\nplease find the minutes of our meeting about the garden project \
             and the budget for next spring, with the list of plants we chose together \
             and the dates on which the volunteers will meet to plant them.\r\n",
        );
        for l in links {
            body.push_str(&format!("https://{l}/page\r\n"));
        }
        format!("Subject: minutes 12\r\n{extra_head}\r\n{body}").into_bytes()
    }

    #[test]
    fn keys_only_when_a_limit_uses_them() {
        assert!(keys_of(&model(""), &message("", &[]), false).is_none());
        let k = keys_of(&model(CAMPAIGN), &message("", &[]), false).unwrap();
        assert!(!k.fingerprint.is_empty());
        // Not asked for: neither link domains nor the Subject's shape.
        assert!(k.link_domains.is_empty() && k.subject_shape.is_none());
    }

    #[test]
    fn automatic_and_null_sender_mail_get_none_unless_included() {
        let m = model(CAMPAIGN);
        assert!(keys_of(&m, &message("", &[]), true).is_none());
        for head in [
            "Auto-Submitted: auto-replied\r\n",
            "List-Id: <x.example.org>\r\n",
        ] {
            assert!(keys_of(&m, &message(head, &[]), false).is_none(), "{head}");
        }
        let m = model(&format!(
            "{CAMPAIGN}\n[message_keys]\ninclude_automatic = true\n"
        ));
        assert!(keys_of(&m, &message("List-Id: <x>\r\n", &[]), true).is_some());
    }

    #[test]
    fn mail_linking_only_to_exempt_domains_gets_no_keys() {
        let m = model(&format!(
            "{CAMPAIGN}\n[message_keys]\nexempt_link_domains = [\"example.org\", \"news.example.net\"]\n"
        ));
        let own = message("", &["www.example.org", "lists.news.example.net"]);
        assert!(keys_of(&m, &own, false).is_none());
        // One other link domain: keys, and only that domain among the link domains.
        let mixed = message("", &["www.example.org", "evil.example.com"]);
        let k = keys_of(&m, &mixed, false).unwrap();
        assert!(!k.fingerprint.is_empty());
        // No link at all: keys as usual.
        assert!(keys_of(&m, &message("", &[]), false).is_some());
        // link_domain asked for: the exempt ones are left out.
        let m = model(
            "[[limit]]\nname = \"links\"\nkey = \"${link_domain}\"\nratelimit = \"5 / 1h / per_mail\"\n\
             [message_keys]\nexempt_link_domains = [\"example.org\"]\n",
        );
        let k = keys_of(&m, &mixed, false).unwrap();
        assert_eq!(k.link_domains, ["example.com"]);
    }

    fn policy(limits: &str) -> (RatePolicy, Arc<crate::metrics::Metrics>) {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::default());
        let p = RatePolicy::build(
            Arc::new(model(limits)),
            store,
            Arc::new(now_micros),
            metrics.clone(),
            None,
        );
        (p, metrics)
    }

    fn budget_exceeded(metrics: &crate::metrics::Metrics) -> String {
        metrics
            .render()
            .lines()
            .find(|l| l.starts_with("floodgate_message_keys_budget_exceeded_total "))
            .unwrap_or("")
            .to_string()
    }

    #[tokio::test]
    async fn the_policy_computes_keys_on_the_pool_within_the_budget() {
        let (p, metrics) = policy(CAMPAIGN);
        let shared: crate::policy::SharedMessage = Arc::new(message("", &[]));
        let k = p.message_keys(shared, false, None).await.unwrap();
        assert_eq!(
            Some(&k),
            keys_of(&model(CAMPAIGN), &message("", &[]), false).as_ref()
        );
        assert_eq!(
            budget_exceeded(&metrics),
            "floodgate_message_keys_budget_exceeded_total 0"
        );
        // A message far longer than 1 ms of work: no fingerprint, counted.
        let (p, metrics) = policy(&format!("{CAMPAIGN}\n[message_keys]\nbudget = \"1ms\"\n"));
        let words: String = (0..400_000).map(|i| format!("w{} ", i % 997)).collect();
        let long = format!("Subject: s\r\n\r\n{words}\r\n").into_bytes();
        let k = p.message_keys(Arc::new(long), false, None).await.unwrap();
        assert!(k.fingerprint.is_empty());
        assert_eq!(
            budget_exceeded(&metrics),
            "floodgate_message_keys_budget_exceeded_total 1"
        );
        // No limit uses a key: nothing computed, nothing counted.
        let (p, _) = policy("");
        assert!(p
            .message_keys(Arc::new(message("", &[])), false, None)
            .await
            .is_none());
    }
}
