//! Exim `ratelimit` limit strings: `m / p / options / key`.
//!
//! Parsing follows exim-ratelimit.md §1–3 exactly, including its error
//! messages (§11, as printed by Exim 4.96). Template text such as
//! `${authenticated_id}` in key items and `unique=` values is kept verbatim;
//! the policy layer expands it per event.

pub use super::acl::Acl;
use super::number::{exim_interval, strtod_prefix};
pub use super::per::PerMode;
use std::fmt;

/// Why a limit string was refused. `Display` is Exim's own message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The argument is empty.
    #[error("sender rate limit not set")]
    LimitNotSet,
    /// The limit `m` is not a number ≥ 0 (the item text is kept).
    #[error("\"{0}\" is not a positive number")]
    BadLimit(String),
    /// The period is missing (`"NULL"`) or not an Exim time interval.
    #[error("\"{0}\" is not a time value")]
    BadPeriod(String),
    /// A `count=` item is not a number ≥ 0 (the whole item is kept).
    #[error("\"{0}\" is not a positive number")]
    BadCount(String),
    /// More than one `per_*` option.
    #[error("conflicting per_* options")]
    ConflictingPer,
    /// More than one of leaky, strict and readonly.
    #[error("conflicting update modes")]
    ConflictingUpdate,
    /// leaky/strict given with a `per_*` option that this ACL forces readonly.
    #[error("\"{word}\" must not have /leaky or /strict option, or cannot be used in {acl} ACL")]
    BadAcl {
        /// The database mode word (`per_rcpt` for per_addr, `per_mail` for per_byte).
        word: &'static str,
        /// Exim's name of the ACL.
        acl: &'static str,
    },
}

/// What happens to the stored rate after an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpdateMode {
    /// Store only when the new rate is under the limit (Exim's default).
    Leaky,
    /// Always store.
    Strict,
    /// Never store; the count is 0.
    Readonly,
}

/// How much one evaluation adds to the rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CountSource {
    /// A fixed amount (1 by default, or `count=`).
    Fixed(f64),
    /// `$message_size` (per_byte; 0 while unknown).
    MessageSize,
    /// `$recipients_count` (per_rcpt outside the RCPT ACL).
    RecipientsCount,
}

/// Which of Exim's session caches an evaluation's result lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheScope {
    /// Whole connection (per_conn).
    Connection,
    /// One transaction, MAIL to end of DATA (per_mail, per_byte, per_rcpt outside RCPT).
    Message,
    /// One command / ACL evaluation (per_rcpt in RCPT, per_addr, per_cmd, readonly).
    Command,
}

/// An item that sets the count, in the order written (the last one wins).
#[derive(Debug, Clone, Copy, PartialEq)]
enum CountItem {
    PerRcpt,
    PerByte,
    Fixed(f64),
}

/// The unique text per_addr uses (Exim: lower-cased `$local_part@$domain`).
pub const PER_ADDR_UNIQUE: &str = "${local_part}@${domain}";

/// A parsed Exim `ratelimit` argument.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitSpec {
    limit: f64,
    limit_text: String,
    period: u32,
    period_text: String,
    per: Option<PerMode>,
    leaky: bool,
    strict: bool,
    readonly: bool,
    noupdate: bool,
    count_items: Vec<CountItem>,
    unique: Option<String>,
    key: Option<String>,
}

/// A limit resolved for one ACL: update mode, count and cache after Exim's rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolved {
    /// The update mode in force.
    pub update: UpdateMode,
    /// What one evaluation counts (0 when readonly).
    pub count: CountSource,
    /// Which session cache holds the result.
    pub cache: CacheScope,
    /// True when the `per_*` option is not allowed in this ACL (forced readonly).
    pub forced_readonly: bool,
}

/// Splits an Exim `/`-separated list: items are trimmed, `//` is a literal
/// `/`, and a trailing separator adds no empty item. A `/` inside a template variable
/// (`${client_ip/24/64}`) belongs to it: Exim expands `${...}` before it splits the list, so
/// such a slash never separates items there either.
pub fn split_list(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut items = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let mut item = Vec::new();
        while i < b.len() {
            if let Some(end) = variable_end(b, i) {
                // `${name/24/64}` whole; `//` in it is still one `/`.
                let mut j = i;
                while j < end {
                    item.push(b[j]);
                    j += if b[j] == b'/' && b[j + 1] == b'/' {
                        2
                    } else {
                        1
                    };
                }
                i = end;
                continue;
            }
            if b[i] == b'/' {
                if i + 1 < b.len() && b[i + 1] == b'/' {
                    item.push(b'/');
                    i += 2;
                    continue;
                }
                i += 1;
                break;
            }
            item.push(b[i]);
            i += 1;
        }
        while item.last().is_some_and(|c| c.is_ascii_whitespace()) {
            item.pop();
        }
        // Only ASCII bytes were removed or inserted, so this stays UTF-8.
        items.push(String::from_utf8(item).unwrap_or_default());
    }
    items
}

/// When a template variable with slashes starts at `i` (`${`, then letters, digits, `_`
/// and `/`, then `}`), the index just after its `}`.
fn variable_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'$') || b.get(i + 1) != Some(&b'{') {
        return None;
    }
    let mut j = i + 2;
    let mut slash = false;
    while let Some(&c) = b.get(j) {
        match c {
            b'}' => return slash.then_some(j + 1),
            b'/' => slash = true,
            c if c.is_ascii_alphanumeric() || c == b'_' => {}
            _ => return None,
        }
        j += 1;
    }
    None
}

/// Reads `m`: a strtod number, one optional k/m/g suffix, nothing after it.
fn parse_limit(text: &str) -> Result<f64, SpecError> {
    let (mut v, n) = strtod_prefix(text);
    let mut rest = &text[n..];
    if let Some(c) = rest.chars().next() {
        let mult = match c.to_ascii_lowercase() {
            'k' => 1024.0,
            'm' => 1024.0 * 1024.0,
            'g' => 1024.0 * 1024.0 * 1024.0,
            _ => 0.0,
        };
        if mult > 0.0 {
            v *= mult;
            rest = &rest[1..];
        }
    }
    if v < 0.0 || !rest.is_empty() {
        return Err(SpecError::BadLimit(text.to_string()));
    }
    Ok(v)
}

impl LimitSpec {
    /// Parses an Exim `ratelimit` argument (already expanded by nothing but
    /// Exim's list rules; templates stay as text).
    pub fn parse(text: &str) -> Result<LimitSpec, SpecError> {
        let items = split_list(text);
        let mut it = items.into_iter();
        let limit_text = it.next().ok_or(SpecError::LimitNotSet)?;
        let limit = parse_limit(&limit_text)?;
        let period_text = it
            .next()
            .ok_or_else(|| SpecError::BadPeriod("NULL".to_string()))?;
        let period =
            exim_interval(&period_text).ok_or_else(|| SpecError::BadPeriod(period_text.clone()))?;
        let mut spec = LimitSpec {
            limit,
            limit_text,
            period,
            period_text,
            per: None,
            leaky: false,
            strict: false,
            readonly: false,
            noupdate: false,
            count_items: Vec::new(),
            unique: None,
            key: None,
        };
        let mut per_count = 0;
        let mut key_parts: Vec<String> = Vec::new();
        for item in it {
            let lower = item.to_ascii_lowercase();
            let per = match lower.as_str() {
                "per_mail" => Some(PerMode::Mail),
                "per_byte" => Some(PerMode::Byte),
                "per_rcpt" => Some(PerMode::Rcpt),
                "per_addr" => Some(PerMode::Addr),
                "per_cmd" => Some(PerMode::Cmd),
                "per_conn" => Some(PerMode::Conn),
                _ => None,
            };
            if let Some(p) = per {
                per_count += 1;
                spec.per = Some(p);
                match p {
                    PerMode::Byte => spec.count_items.push(CountItem::PerByte),
                    PerMode::Rcpt => spec.count_items.push(CountItem::PerRcpt),
                    _ => {}
                }
                continue;
            }
            match lower.as_str() {
                "leaky" => spec.leaky = true,
                "strict" => spec.strict = true,
                "readonly" => spec.readonly = true,
                "noupdate" => spec.noupdate = true,
                _ if lower.starts_with("count=") => {
                    let (v, n) = strtod_prefix(&item[6..]);
                    if v < 0.0 || n != item.len() - 6 {
                        return Err(SpecError::BadCount(item));
                    }
                    spec.count_items.push(CountItem::Fixed(v));
                }
                _ if lower.starts_with("unique=") => spec.unique = Some(item[7..].to_string()),
                _ => key_parts.push(item),
            }
        }
        if per_count > 1 {
            return Err(SpecError::ConflictingPer);
        }
        if u8::from(spec.leaky) + u8::from(spec.strict) + u8::from(spec.readonly) > 1 {
            return Err(SpecError::ConflictingUpdate);
        }
        if spec.per == Some(PerMode::Addr) {
            spec.unique = Some(PER_ADDR_UNIQUE.to_string());
        }
        if !key_parts.is_empty() {
            spec.key = Some(key_parts.join("/"));
        }
        Ok(spec)
    }

    /// The limit m (after k/m/g scaling).
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// The limit as written (`$sender_rate_limit`).
    pub fn limit_text(&self) -> &str {
        &self.limit_text
    }

    /// The period p in seconds.
    pub fn period_secs(&self) -> u32 {
        self.period
    }

    /// The period as written (`$sender_rate_period`, and the start of the key).
    pub fn period_text(&self) -> &str {
        &self.period_text
    }

    /// The `per_*` option given, if any.
    pub fn per_option(&self) -> Option<PerMode> {
        self.per
    }

    /// The effective `per_*` mode (per_mail when none is given).
    pub fn per_mode(&self) -> PerMode {
        self.per.unwrap_or(PerMode::Mail)
    }

    /// The update mode without any ACL rule: noupdate/readonly → readonly,
    /// strict → strict, otherwise leaky.
    pub fn update_mode(&self) -> UpdateMode {
        if self.readonly || self.noupdate {
            UpdateMode::Readonly
        } else if self.strict {
            UpdateMode::Strict
        } else {
            UpdateMode::Leaky
        }
    }

    /// The explicit `count=` value in force (the last count-setting item if it
    /// is a `count=`), or `None`.
    pub fn count(&self) -> Option<f64> {
        match self.count_items.last() {
            Some(CountItem::Fixed(v)) => Some(*v),
            _ => None,
        }
    }

    /// The count an evaluation uses outside any ACL context (simulate): the
    /// explicit `count=`, else 1; 0 when readonly.
    pub fn default_count(&self) -> f64 {
        if self.update_mode() == UpdateMode::Readonly {
            0.0
        } else {
            self.count().unwrap_or(1.0)
        }
    }

    /// The unique-event text (template), if unique counting is in force.
    ///
    /// When it is `Some`, every request for this limit must carry a unique
    /// value, even where the limit is forced readonly (per_addr outside
    /// RCPT: Exim uses a dummy value there), so that it reads the record with
    /// the unique set (the database key contains `unique/`).
    pub fn unique(&self) -> Option<&str> {
        self.unique.as_deref()
    }

    /// The spec as Exim reads it when its `unique=` expands to `text` for one
    /// evaluation: unique counting in force with that text (and `unique/` in the
    /// database key). Exim expands the whole argument per evaluation, so the
    /// event text an evaluation tests is a property of that evaluation.
    pub fn with_unique(&self, text: &str) -> LimitSpec {
        LimitSpec {
            unique: Some(text.to_string()),
            ..self.clone()
        }
    }

    /// The count one evaluation of the RCPT ACL adds: the last `count=` (a
    /// `per_rcpt` after it counts one recipient per RCPT there, which is what
    /// `count=` already sets), 1 when there is none or a `per_byte` comes after
    /// it (the message size is not known at RCPT), 0 when readonly.
    pub fn rcpt_count(&self) -> f64 {
        // Every per_* option is allowed in the RCPT ACL, so this never fails.
        match self.resolve(Acl::Rcpt).map(|r| r.count) {
            Ok(CountSource::Fixed(v)) => v,
            _ => 1.0,
        }
    }

    /// The joined key text (template), or `None` when the key defaults to the client IP.
    pub fn key_text(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Builds Exim's database key `<p>/<mode>/[unique/]<key>`.
    ///
    /// `expanded_key` is the expanded key text (ignored when the spec has no
    /// key text); `client_ip` is used when there is no key text (empty when
    /// there is no client IP).
    pub fn database_key(&self, expanded_key: &str, client_ip: &str) -> String {
        let key = if self.key.is_some() {
            expanded_key
        } else {
            client_ip
        };
        let word = self.per_mode().key_word();
        let unique = if self.unique.is_some() { "unique/" } else { "" };
        let mut out = String::with_capacity(
            self.period_text.len() + word.len() + unique.len() + key.len() + 2,
        );
        out.push_str(&self.period_text);
        out.push('/');
        out.push_str(word);
        out.push('/');
        out.push_str(unique);
        out.push_str(key);
        out
    }

    /// Applies Exim's per-ACL rules (§2 "Resolving the mode", steps 3–4).
    pub fn resolve(&self, acl: Acl) -> Result<Resolved, SpecError> {
        let per = self.per_mode();
        let badacl = self.per.is_some() && !acl.allows(per);
        if badacl && (self.leaky || self.strict) && !self.noupdate {
            return Err(SpecError::BadAcl {
                word: per.key_word(),
                acl: acl.exim_name(),
            });
        }
        let update = if badacl {
            UpdateMode::Readonly
        } else {
            self.update_mode()
        };
        let mut count = CountSource::Fixed(1.0);
        for item in &self.count_items {
            match item {
                CountItem::PerRcpt if acl != Acl::Rcpt => count = CountSource::RecipientsCount,
                CountItem::PerRcpt => {}
                CountItem::PerByte => count = CountSource::MessageSize,
                CountItem::Fixed(v) => count = CountSource::Fixed(*v),
            }
        }
        if update == UpdateMode::Readonly {
            count = CountSource::Fixed(0.0);
        }
        let cache = if update == UpdateMode::Readonly {
            CacheScope::Command
        } else {
            match per {
                PerMode::Conn => CacheScope::Connection,
                PerMode::Mail | PerMode::Byte => CacheScope::Message,
                PerMode::Rcpt if acl != Acl::Rcpt => CacheScope::Message,
                PerMode::Rcpt | PerMode::Addr | PerMode::Cmd => CacheScope::Command,
            }
        };
        Ok(Resolved {
            update,
            count,
            cache,
            forced_readonly: badacl,
        })
    }
}

impl fmt::Display for LimitSpec {
    /// A canonical Exim form of the spec that parses back to the same meaning.
    /// The key comes right after the period so that an empty key item is
    /// followed by another item (a trailing empty item would be dropped).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let esc = |s: &str| s.replace('/', "//");
        write!(f, "{} / {}", esc(&self.limit_text), esc(&self.period_text))?;
        if let Some(k) = &self.key {
            write!(f, " / {}", esc(k))?;
        }
        let mut items = 0;
        // count= is written before the per_* word when it came first, since
        // per_rcpt and per_byte may override an earlier count=.
        let fixed_at = self
            .count_items
            .iter()
            .rposition(|c| matches!(c, CountItem::Fixed(_)));
        let per_at = self
            .count_items
            .iter()
            .position(|c| !matches!(c, CountItem::Fixed(_)));
        let count_first = matches!((fixed_at, per_at), (Some(a), Some(b)) if a < b);
        if count_first {
            if let Some(CountItem::Fixed(c)) = fixed_at.map(|i| self.count_items[i]) {
                write!(f, " / count={c:?}")?;
                items += 1;
            }
        }
        if let Some(p) = self.per {
            let word = match p {
                PerMode::Mail => "per_mail",
                PerMode::Byte => "per_byte",
                PerMode::Rcpt => "per_rcpt",
                PerMode::Addr => "per_addr",
                PerMode::Cmd => "per_cmd",
                PerMode::Conn => "per_conn",
            };
            write!(f, " / {word}")?;
            items += 1;
        }
        for (flag, word) in [
            (self.leaky, "leaky"),
            (self.strict, "strict"),
            (self.readonly, "readonly"),
            (self.noupdate, "noupdate"),
        ] {
            if flag {
                write!(f, " / {word}")?;
                items += 1;
            }
        }
        if let (Some(c), false) = (self.count(), count_first) {
            write!(f, " / count={c:?}")?;
            items += 1;
        }
        if let (Some(u), false) = (&self.unique, self.per == Some(PerMode::Addr)) {
            write!(f, " / unique={}", esc(u))?;
            items += 1;
        }
        if items == 0 && self.key.is_some() {
            // Without a per_* option "leaky" changes nothing (it is the
            // default and no ACL check applies); it keeps the key item from
            // being the last one.
            write!(f, " / leaky")?;
        }
        Ok(())
    }
}
