//! The limits model: `[lists]`, `[[limit]]` and `[auth_failures]` compiled from the config
//! into checked, ready-to-run definitions. Every refusal names the file, line and column.

use std::ops::Range;
use std::time::Duration;

use super::condition::{Condition, Subject};
use super::lists::Lists;
use super::template::Template;
use super::Stage;
use crate::config::ConfigError;
use crate::limit::bucket::BucketSpec;
use crate::limit::gcra::GcraSpec;
use crate::limit::spec::{Acl, Resolved, UpdateMode};
use crate::limit::LimitSpec;

/// The hard cap of every delay floodgate imposes (well below the 5-minute client timeouts of
/// RFC 5321 §4.5.3.2).
pub const HARD_MAX_DELAY: Duration = Duration::from_secs(120);
/// The default cap of a limit's delay.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

pub use super::counted::Counted;

/// The rate of a limit.
#[derive(Clone, Debug)]
pub enum RateDef {
    /// Exim `ratelimit` (EWMA), verbatim.
    Exim {
        /// The parsed string.
        spec: LimitSpec,
        /// Resolved for the limit's stage.
        resolved: Resolved,
        /// The `unique=` template (per_addr uses the normalized recipient instead).
        unique: Option<Template>,
    },
    /// Token bucket.
    Gcra(GcraSpec),
    /// Rspamd-style leaky bucket (reservations, optional dynamic multipliers).
    Bucket(BucketSpec),
    /// At most this many sessions at once per key.
    Concurrency(u64),
    /// One count over another across a window (`ratio = "bounced_recipients / recipients"`).
    Ratio(super::ratio::RatioDef),
}

/// How long a `delay` countermeasure waits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DelayKind {
    /// Always this long.
    Fixed(Duration),
    /// Seconds over the limit: `$sender_rate - $sender_rate_limit` for Exim limits, the
    /// retry-after for buckets.
    Computed,
}

/// The countermeasure of a limit that is over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// Log only.
    Warn,
    /// Add an `X-Floodgate-Rate` header to the message.
    Header,
    /// Slow the client down, then go on.
    Delay(DelayKind),
    /// Accept the message from the client and keep it in the hold spool instead of
    /// relaying it.
    Hold,
    /// Take the message from the client and relay it, at the end of data, to the second
    /// smart host (`[upstream.high_risk]`) instead of the main one; that host's answer goes
    /// to the client.
    Reroute,
    /// Take the message (250), keep it in the hold spool and release it automatically at
    /// the limit's own rate, oldest first per key.
    Pace,
    /// 4xx; the session goes on.
    Defer,
    /// 5xx (only when asked for).
    Deny,
    /// 421 and close.
    Disconnect,
    /// Refuse, and put the key in the restricted set: every MAIL FROM of the key is refused
    /// until the restriction ends.
    Restrict,
}

impl Action {
    /// The config word.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Warn => "warn",
            Action::Header => "header",
            Action::Delay(_) => "delay",
            Action::Hold => "hold",
            Action::Reroute => "reroute",
            Action::Pace => "pace",
            Action::Defer => "defer",
            Action::Deny => "deny",
            Action::Disconnect => "disconnect",
            Action::Restrict => "restrict",
        }
    }

    /// Whether being over refuses the event (and so the whole decision).
    pub fn blocks(self) -> bool {
        matches!(
            self,
            Action::Defer | Action::Deny | Action::Disconnect | Action::Restrict
        )
    }

    /// Strength order when several limits are over: the graded answers (pace, then
    /// reroute) are milder than a hold, which waits for an operator.
    pub fn rank(self) -> u8 {
        match self {
            Action::Warn => 0,
            Action::Header => 1,
            Action::Delay(_) => 2,
            Action::Pace => 3,
            Action::Reroute => 4,
            Action::Hold => 5,
            Action::Defer => 6,
            Action::Restrict => 7,
            Action::Deny => 8,
            Action::Disconnect => 9,
        }
    }

    /// Whether the action takes the message from the client instead of relaying it to
    /// the main smart host (hold, reroute, pace).
    pub fn takes_message(self) -> bool {
        matches!(self, Action::Hold | Action::Reroute | Action::Pace)
    }
}

/// One compiled `[[limit]]`.
#[derive(Clone, Debug)]
pub struct LimitDef {
    /// Its name.
    pub name: String,
    /// Where it is checked.
    pub stage: Stage,
    /// What it counts.
    pub counted: Counted,
    /// The key template (for Exim limits: the key items of the string, if any).
    pub key: Option<Template>,
    /// The rate.
    pub rate: RateDef,
    /// Update mode (leaky, strict, readonly).
    pub mode: UpdateMode,
    /// The condition, if any.
    pub when: Option<Condition>,
    /// The condition as written.
    pub when_text: Option<String>,
    /// The countermeasure.
    pub action: Action,
    /// Reply text template.
    pub message: Option<Template>,
    /// Reply code override.
    pub code: Option<u16>,
    /// Delay cap.
    pub max_delay: Duration,
    /// Per-key limits: list name and what is looked up.
    pub limit_list: Option<(String, Subject)>,
    /// Per-key limits from each key's own history.
    pub baseline: Option<super::baseline::BaselineDef>,
    /// 1-based line of the `[[limit]]` in the config.
    pub line: usize,
    /// The restriction settings of an `action = "restrict"` limit.
    pub restrict: Option<RestrictDef>,
}

/// The default answer to a restricted key's MAIL FROM.
pub const DEFAULT_RESTRICTED_CODE: u16 = 450;

/// How a limit with `action = "restrict"` restricts.
#[derive(Clone, Debug)]
pub struct RestrictDef {
    /// The key restricted (`None`: the limit's own key).
    pub key: Option<Template>,
    /// How long.
    pub duration: crate::store::RestrictFor,
    /// Reply code to a restricted key's MAIL FROM.
    pub code: u16,
    /// Reply text template (`${restricted_since}`, `${restricted_until}`, `${limit_name}`…).
    pub message: Option<Template>,
    /// `while_restricted = "hold"`: a restricted key's messages are taken and held in the
    /// hold spool instead of refused at MAIL FROM.
    pub hold: bool,
    /// `notify_user`: the address (a template) told of each restriction by a short mail.
    pub notify: Option<Template>,
    /// `restrict_senders`: the restricted keys are the senders of the message key's
    /// campaign ledger (see [`crate::store::campaign`]), not the limit's key.
    pub senders: bool,
}

impl Default for RestrictDef {
    fn default() -> Self {
        RestrictDef {
            key: None,
            duration: crate::store::RestrictFor::UntilReleased,
            code: DEFAULT_RESTRICTED_CODE,
            message: None,
            hold: false,
            notify: None,
            senders: false,
        }
    }
}

impl LimitDef {
    /// The limit's period in µs, at least a second and at most 366 days: an Exim limit's
    /// or a token bucket's period, a leaky bucket's time to drain its burst, an hour for a
    /// concurrency or ratio limit.
    pub fn period_us(&self) -> i64 {
        let secs = match &self.rate {
            RateDef::Exim { spec, .. } => f64::from(spec.period_secs()),
            RateDef::Gcra(g) => g.rate.period_secs(),
            RateDef::Bucket(b) => b.burst / b.rate.per_second().max(f64::MIN_POSITIVE),
            RateDef::Concurrency(_) | RateDef::Ratio(_) => 3600.0,
        };
        (secs * 1e6).clamp(1e6, 366.0 * 86_400e6) as i64
    }

    /// The rate at which an `action = "pace"` limit releases the messages it paces: its
    /// own rate, in what it counts. `None` for concurrency limits.
    pub fn pace_rate(&self) -> Option<crate::hold::pace::PaceRate> {
        use crate::hold::pace::{PaceRate, PaceUnit};
        let (amount, period) = match &self.rate {
            RateDef::Exim { spec, .. } => (spec.limit(), f64::from(spec.period_secs())),
            RateDef::Gcra(g) => (g.rate.amount(), g.rate.period_secs()),
            RateDef::Bucket(b) => (b.rate.amount(), b.rate.period_secs()),
            RateDef::Concurrency(_) | RateDef::Ratio(_) => return None,
        };
        let unit = match self.counted {
            Counted::Recipients | Counted::DistinctRecipients => PaceUnit::Recipients,
            Counted::Bytes => PaceUnit::Bytes,
            _ => PaceUnit::Messages,
        };
        PaceRate::new(amount, period, unit)
    }

    /// Whether the limit reads the header From: in its key, `unique=`, condition, reply
    /// text or per-key list lookup. Only then must the message's header be parsed for it.
    pub fn reads_header_from(&self) -> bool {
        let templates = [
            self.key.as_ref(),
            self.message.as_ref(),
            self.restrict.as_ref().and_then(|r| r.key.as_ref()),
            self.restrict.as_ref().and_then(|r| r.message.as_ref()),
            match &self.rate {
                RateDef::Exim { unique, .. } => unique.as_ref(),
                _ => None,
            },
        ];
        templates
            .into_iter()
            .flatten()
            .any(Template::reads_header_from)
            || self
                .when
                .as_ref()
                .is_some_and(|c| c.reads(Subject::HeaderFrom))
            || matches!(self.limit_list, Some((_, Subject::HeaderFrom)))
    }
}

/// Auth failure timeouts, compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct AuthDelay {
    /// On or off.
    pub enabled: bool,
    /// The first delay.
    pub base: Duration,
    /// The cap.
    pub max: Duration,
    /// The decay period in whole seconds.
    pub decay_secs: u32,
}

/// Everything the policy needs from the config.
#[derive(Clone, Debug)]
pub struct PolicyModel {
    /// Limits in file order.
    pub limits: Vec<LimitDef>,
    /// Named lists.
    pub lists: Lists,
    /// AUTH failure timeouts.
    pub auth: AuthDelay,
    /// floodgate's hostname (for replies).
    pub hostname: String,
    /// The computed per-key baselines (carried from one generation to the next).
    pub baselines: std::sync::Arc<super::baseline::Baselines>,
    /// `[message_keys]`: link domains left out, and whether automatic mail gets keys.
    pub message_keys: MessageKeySettings,
    /// `[identity]`: how a login is folded into its account.
    pub identity: super::identity::Identity,
}

/// `[message_keys]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageKeySettings {
    /// Registered domains whose links are not message keys (lower case).
    pub exempt_link_domains: Vec<String>,
    /// Keys also for null-sender, automatic and list mail.
    pub include_automatic: bool,
    /// The CPU time one message's keys may take (see [`crate::message_keys::Budget`]).
    pub budget: std::time::Duration,
}

impl MessageKeySettings {
    /// `budget` when the config sets none.
    pub const DEFAULT_BUDGET: std::time::Duration = std::time::Duration::from_millis(50);
    /// The least `budget` the config may set.
    pub const MIN_BUDGET: std::time::Duration = std::time::Duration::from_millis(1);
    /// The most `budget` the config may set.
    pub const MAX_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);
}

impl Default for MessageKeySettings {
    fn default() -> Self {
        MessageKeySettings {
            exempt_link_domains: Vec::new(),
            include_automatic: false,
            budget: MessageKeySettings::DEFAULT_BUDGET,
        }
    }
}

impl PolicyModel {
    /// Whether any limit restricts.
    pub fn restricts(&self) -> bool {
        self.limits.iter().any(|d| d.restrict.is_some())
    }

    /// Whether any limit reads the header From.
    pub fn reads_header_from(&self) -> bool {
        self.limits.iter().any(LimitDef::reads_header_from)
    }

    /// The message keys some limit's key uses (computed at the end of data only then), and
    /// the link domains when a limit restricts a campaign's senders (its alert names them).
    pub fn wanted_message_keys(&self) -> crate::message_keys::Wanted {
        let mut w = crate::message_keys::Wanted::default();
        for v in self
            .limits
            .iter()
            .filter_map(|d| d.key.as_ref())
            .flat_map(|k| k.message_keys())
        {
            match v {
                super::template::Var::Fingerprint => w.fingerprint = true,
                super::template::Var::LinkDomain => w.link_domains = true,
                super::template::Var::SubjectShape => w.subject_shape = true,
                _ => {}
            }
        }
        // A campaign's alert and ledger name the link domains of its copies.
        if self
            .limits
            .iter()
            .any(|d| d.restrict.as_ref().is_some_and(|r| r.senders))
        {
            w.link_domains = true;
        }
        w
    }

    /// Whether any limit is a ratio or counts upstream's outcomes: then upstream's answers
    /// to RCPT and to the end of data are followed, and the header (Auto-Submitted) read.
    pub fn follows_outcomes(&self) -> bool {
        self.limits
            .iter()
            .any(|d| d.counted.outcome() || matches!(d.rate, RateDef::Ratio(_)))
    }
}

impl Default for PolicyModel {
    fn default() -> Self {
        PolicyModel {
            limits: Vec::new(),
            lists: Lists::default(),
            auth: AuthDelay {
                enabled: false,
                base: Duration::from_secs(1),
                max: DEFAULT_MAX_DELAY,
                decay_secs: 600,
            },
            hostname: "floodgate".into(),
            baselines: Default::default(),
            message_keys: MessageKeySettings::default(),
            identity: super::identity::Identity::default(),
        }
    }
}

/// Makes a config error at a span of the config text.
pub type At<'a> = &'a dyn Fn(Range<usize>, String) -> ConfigError;

pub(super) fn stage_of(w: &str) -> Option<Stage> {
    Some(match w {
        "connect" => Stage::Connect,
        "helo" => Stage::Helo,
        "auth" => Stage::Auth,
        "mail" => Stage::Mail,
        "rcpt" => Stage::Rcpt,
        "data" => Stage::Data,
        "message" => Stage::Message,
        "command" => Stage::Command,
        _ => return None,
    })
}

/// Exim's ACL for a stage (decides which per_* options count there).
pub fn acl_of(stage: Stage) -> Acl {
    match stage {
        Stage::Connect => Acl::Connect,
        Stage::Helo => Acl::Helo,
        Stage::Auth => Acl::Auth,
        Stage::Mail => Acl::Mail,
        Stage::Rcpt => Acl::Rcpt,
        Stage::Data => Acl::Predata,
        Stage::Message => Acl::Data,
        Stage::Command => Acl::Unknown,
    }
}
