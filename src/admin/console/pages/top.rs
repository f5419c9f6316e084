//! Top keys: every stored key read against its limit, highest first, one limit or all,
//! paged; one row per key, its nearest limit first (its other limits after it), restricted
//! keys marked. Only the rows up to the page shown are kept while the store is walked (the
//! `top` builder keeps about twice that), so 100,000 keys cost one walk, not a sort of
//! them all.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::admin::api::{MAX_SCAN, MAX_TOP};
use crate::admin::console::html::{self, Nav, Shell};
use crate::admin::console::paging::{self, Page, PAGE_SIZE};
use crate::admin::console::respond::{error_page, html_response};
use crate::admin::console::state::Console;
use crate::admin::console::svg::meter;
use crate::admin::http::{Request, Response};
use crate::admin::inspect::{database_key, TopBuilder, TopEntry};
use crate::generation::Generation;
use crate::policy::model::{LimitDef, PolicyModel};
use crate::store::open::Opened;
use crate::store::{now_micros, Campaign, Record};

/// The key text of database key `db` under limit `name` (what the key page takes).
pub fn key_text<'a>(model: &PolicyModel, name: &str, db: &'a str) -> &'a str {
    model
        .limits
        .iter()
        .find(|d| d.name == name)
        .and_then(|d| database_key(d, ""))
        .and_then(|prefix| db.strip_prefix(prefix.as_str()))
        .unwrap_or(db)
}

/// The top `n` entries of `only` (all limits when `None`) among `records`, and how many
/// entries there are in all.
pub fn collect(
    model: &PolicyModel,
    records: impl FnOnce(&mut dyn FnMut(&str, Record)),
    only: Option<&str>,
    n: usize,
    now_us: i64,
) -> (Vec<TopEntry>, usize) {
    let mut top = TopBuilder::new(model, now_us, only, n);
    records(&mut |k, r| top.add(k, r));
    let total = top.offered();
    (top.finish(), total)
}

/// One key's row: its nearest limit's entry, then its other limits with their ratio.
pub struct KeyRow {
    /// The key text (what the key page takes).
    pub text: String,
    /// The entry of the limit it is nearest to (highest value against the limit).
    pub nearest: TopEntry,
    /// Its other limits, nearest first: (limit, value / limit).
    pub others: Vec<(String, f64)>,
}

/// `entries` (highest first) as one row per key text, in the order of each key's nearest
/// limit.
pub fn by_key(model: &PolicyModel, entries: Vec<TopEntry>) -> Vec<KeyRow> {
    let mut rows: Vec<KeyRow> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for e in entries {
        let text = key_text(model, &e.reading.limit, &e.key).to_string();
        match at.get(&text) {
            Some(&i) => rows[i].others.push((e.reading.limit.clone(), e.ratio)),
            None => {
                at.insert(text.clone(), rows.len());
                rows.push(KeyRow {
                    text,
                    nearest: e,
                    others: Vec::new(),
                });
            }
        }
    }
    rows
}

/// The entries of the store nearest their limits (of `only`, when given), the `n` first
/// ranked, with how many there are and whether the walk was partial (Redis: more keys
/// than [`MAX_SCAN`]); or the status and text of the failure.
async fn ranked(
    c: &Console,
    config: &Arc<Generation>,
    only: Option<&str>,
    n: usize,
    now: i64,
) -> Result<(Vec<TopEntry>, usize, bool), (u16, String)> {
    match &c.state.store {
        Opened::Memory(m) => {
            let (m, cfg, only) = (m.clone(), config.clone(), only.map(str::to_string));
            let walked = tokio::task::spawn_blocking(move || {
                collect(
                    &cfg.policy,
                    |f| m.for_each_record(f),
                    only.as_deref(),
                    n,
                    now,
                )
            })
            .await;
            match walked {
                Ok((e, t)) => Ok((e, t, false)),
                Err(e) => Err((500, e.to_string())),
            }
        }
        Opened::Redis(f) => match f.redis().scan_records(MAX_SCAN).await {
            Ok((records, complete)) => {
                let (e, t) = collect(
                    &config.policy,
                    |f| {
                        for (k, r) in records {
                            f(&k, r);
                        }
                    },
                    only,
                    n,
                    now,
                );
                Ok((e, t, !complete))
            }
            Err(e) => Err((503, e.to_string())),
        },
    }
}

/// The links to every limit's top (`only`'s marked current), and to all limits'.
fn limit_nav(limits: &[LimitDef], only: Option<&str>) -> String {
    let mut b = String::new();
    b.push_str("<p class=\"limits\">");
    let all_current = if only.is_none() {
        " aria-current=\"page\""
    } else {
        ""
    };
    let _ = write!(b, "<a href=\"/console/top\"{all_current}>all limits</a>");
    for d in limits {
        let current = if only == Some(d.name.as_str()) {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(
            b,
            " · <a href=\"{}\"{current}>{}</a>",
            html::url("/console/top", &[("limit", &d.name)]),
            html::text(&d.name, 60)
        );
    }
    b.push_str("</p>");
    b
}

/// How many entries there are, and how many were ranked or read.
fn count_line(total: usize, partial: bool) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<p class=\"muted\" id=\"top-count\">{total} entries (key and limit){}{}, highest \
         first against their limit.</p>",
        if total > MAX_TOP {
            format!(", the first {MAX_TOP} ranked")
        } else {
            String::new()
        },
        if partial {
            format!(" (Redis: only the first {MAX_SCAN} keys were read)")
        } else {
            String::new()
        }
    );
    b
}

/// Row `number` of the table: a key, the limit it is nearest, its reading and meter, the
/// other limits it is near.
fn row_html(
    number: usize,
    row: &KeyRow,
    restricted: &HashSet<String>,
    campaigns: &HashMap<String, String>,
) -> String {
    let e = &row.nearest;
    let r = &e.reading;
    let until = match (r.over, r.until_under_secs) {
        (false, _) => String::new(),
        (true, Some(s)) => format!("{} s", html::num(s.ceil())),
        (true, None) => "never by waiting".into(),
    };
    let is_restricted = restricted.contains(&row.text);
    let mut class = Vec::new();
    if r.over {
        class.push("over");
    }
    if is_restricted {
        class.push("restricted");
    }
    let others: Vec<String> = row
        .others
        .iter()
        .map(|(l, ratio)| {
            format!(
                "{} {}%",
                html::text(l, 60),
                html::num((ratio * 100.0).round())
            )
        })
        .collect();
    format!(
        "<tr{}><td class=\"n\" data-label=\"#\">{}</td><td data-label=\"key\">{}{}<br>\
         <small class=\"muted\">{}</small></td><td data-label=\"limit\">{}{}</td>\
         <td class=\"n\" data-label=\"value\">{}</td><td class=\"n\" data-label=\"limit\">{}</td>\
         <td data-label=\"per\">{}</td><td data-label=\"against the limit\">{}</td>\
         <td class=\"n\" data-label=\"under again in\">{}</td></tr>",
        if class.is_empty() {
            String::new()
        } else {
            format!(" class=\"{}\"", class.join(" "))
        },
        number,
        campaigns
            .get(&row.text)
            .cloned()
            .unwrap_or_else(|| html::key_link(&row.text)),
        if is_restricted {
            " <strong class=\"badge restricted\">restricted</strong>"
        } else {
            ""
        },
        html::text(&e.key, html::CELL_CHARS),
        html::text(&r.limit, 60),
        if others.is_empty() {
            String::new()
        } else {
            format!(
                "<br><small class=\"muted\">also {}</small>",
                others.join(", ")
            )
        },
        html::num(r.value),
        html::num(r.limit_value),
        html::escape(&r.period),
        meter(r.value, r.limit_value),
        until
    )
}

/// Each campaign's id with what its row shows in place of the opaque id: the campaign's
/// Subject (its latest copy's) and accounts, linking to its one entry on the Campaigns
/// page. Read from the store alone: no held mail is looked at.
pub fn campaign_labels(list: &[Campaign]) -> HashMap<String, String> {
    list.iter()
        .map(|c| {
            let accounts: Vec<&str> = c.senders.iter().map(|s| s.sender.as_str()).collect();
            let subject = c
                .senders
                .first()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(&s.info).ok())
                .and_then(|v| v["subject"].as_str().map(str::to_string))
                .unwrap_or_else(|| "no Subject".into());
            let shown: Vec<String> = accounts
                .iter()
                .take(4)
                .map(|a| html::token(a, 60))
                .collect();
            let more = accounts.len().saturating_sub(4);
            let label = format!(
                "<a href=\"{}\">campaign: {}</a><br><small>{}: {}{}</small>",
                html::url("/console/campaigns", &[("c", &c.key)]),
                html::text(&subject, 80),
                crate::figures::count(accounts.len() as u64, "account"),
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
            (c.key.clone(), label)
        })
        .collect()
}

/// `GET /console/top`.
pub async fn page(c: &Console, req: &Request, shell: &Shell<'_>) -> Response {
    let config: Arc<Generation> = c.state.control.generation();
    let only = req
        .param("limit")
        .filter(|l| !l.is_empty())
        .map(str::to_string);
    if let Some(name) = &only {
        if !config.policy.limits.iter().any(|d| &d.name == name) {
            return error_page(404, &format!("no limit named {name:?}"), shell);
        }
    }
    let asked = Page::parse(req.param("page"), PAGE_SIZE);
    // At most MAX_TOP rows are ranked, as in the admin API's top.
    let last = MAX_TOP / PAGE_SIZE;
    let pg = Page {
        number: asked.number.min(last),
        ..asked
    };
    let now = now_micros();
    let n = pg.needed();
    let (entries, total, partial) = match ranked(c, &config, only.as_deref(), n, now).await {
        Ok(r) => r,
        Err((status, e)) => return error_page(status, &e, shell),
    };
    let shown_total = total.min(MAX_TOP);
    let pg = pg.clamp(shown_total);
    let rows = by_key(&config.policy, entries);
    let range = pg.range(rows.len());
    let restricted: HashSet<String> = match c.state.store.as_store().restrictions().await {
        Ok(list) => list.into_iter().map(|r| r.key).collect(),
        Err(_) => Default::default(),
    };

    let campaigns = campaign_labels(
        &c.state
            .store
            .as_store()
            .campaigns()
            .await
            .unwrap_or_default(),
    );
    let mut b = String::with_capacity(32 * 1024);
    b.push_str(&limit_nav(&config.policy.limits, only.as_deref()));
    b.push_str(&count_line(total, partial));
    b.push_str(
        "<table id=\"top\" class=\"stack\"><thead><tr><th class=\"n\">#</th><th>key</th><th>limit</th>\
         <th class=\"n\">value</th><th class=\"n\">limit</th><th>per</th><th>against the \
         limit</th><th class=\"n\">under again in</th></tr></thead><tbody>",
    );
    for (i, row) in rows[range.clone()].iter().enumerate() {
        b.push_str(&row_html(range.start + i + 1, row, &restricted, &campaigns));
    }
    if range.is_empty() {
        b.push_str("<tr><td colspan=\"8\" class=\"muted\">no keys</td></tr>");
    }
    b.push_str("</tbody></table>");
    let params: Vec<(&str, &str)> = only.as_deref().map(|o| ("limit", o)).into_iter().collect();
    b.push_str(&paging::links(
        "/console/top",
        &params,
        pg,
        Some(shown_total),
        false,
    ));
    html_response(200, html::page("Top keys", Nav::Top, shell, &b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::ewma::EwmaState;

    fn model() -> Arc<PolicyModel> {
        let text =
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n\
            [[limit]]\nname = \"per-user\"\nstage = \"rcpt\"\n\
            ratelimit = \"10 / 1h / per_rcpt / ${authenticated_id}\"\naction = \"defer\"\n\
            [[limit]]\nname = \"tb\"\nstage = \"mail\"\nrate = \"2 / 1m\"\nburst = \"4\"\n\
            count = \"messages\"\naction = \"defer\"\n";
        crate::generation::Generation::parse(std::path::Path::new("t.toml"), text)
            .unwrap()
            .policy
    }

    #[test]
    fn a_campaign_row_shows_its_subject_and_accounts() {
        let sender = |n: usize| crate::store::CampaignSender {
            sender: format!("s{n}"),
            info: serde_json::json!({"subject": "Invoice <1>"}).to_string(),
            ..Default::default()
        };
        let list = [Campaign {
            key: "c:b3:ab".into(),
            limit: "campaign".into(),
            since_us: 0,
            last_us: 0,
            copies: 5,
            recipients: 25,
            senders: (1..=5).map(sender).collect(),
        }];
        let l = campaign_labels(&list);
        let h = &l["c:b3:ab"];
        assert!(h.contains("campaign: Invoice &lt;1&gt;"), "{h}");
        assert!(h.contains("5 accounts: s1, s2, s3, s4 and 1 more"), "{h}");
        assert!(h.contains("/console/campaigns?c=c%3Ab3%3Aab"), "{h}");
    }

    #[test]
    fn key_text_strips_the_limits_prefix() {
        let m = model();
        assert_eq!(key_text(&m, "per-user", "1h/per_rcpt/alice"), "alice");
        assert_eq!(key_text(&m, "tb", "gcra/tb/10.0.0.1"), "10.0.0.1");
        assert_eq!(key_text(&m, "nope", "gcra/tb/x"), "gcra/tb/x");
        assert_eq!(key_text(&m, "tb", "other/x"), "other/x");
    }

    #[test]
    fn collect_counts_all_and_keeps_only_the_page() {
        let m = model();
        let now = 1_000_000_000_000_000;
        let records: Vec<(String, Record)> = (0..1000)
            .map(|i| {
                (
                    format!("1h/per_rcpt/user{i:04}"),
                    Record::Ewma(EwmaState {
                        time_us: now,
                        rate: f64::from(i),
                    }),
                )
            })
            .chain(std::iter::once((
                "gcra/tb/x".to_string(),
                Record::Gcra { tat_ns: now * 1000 },
            )))
            .collect();
        let feed = |f: &mut dyn FnMut(&str, Record)| {
            for (k, r) in &records {
                f(k, r.clone());
            }
        };
        let (e, total) = collect(&m, feed, Some("per-user"), 100, now);
        assert_eq!(total, 1000);
        assert_eq!(e.len(), 100);
        assert_eq!(e[0].key, "1h/per_rcpt/user0999");
        assert_eq!(e[99].key, "1h/per_rcpt/user0900");
        let (e, total) = collect(&m, feed, None, 5, now);
        assert_eq!((e.len(), total), (5, 1001));
        let (e, total) = collect(&m, feed, Some("tb"), 5, now);
        assert_eq!((e.len(), total), (1, 1));
    }

    #[test]
    fn one_row_per_key_with_its_nearest_limit_first() {
        let m = model();
        let now = 1_000_000_000_000_000;
        let records = vec![
            (
                "1h/per_rcpt/alice".to_string(),
                Record::Ewma(EwmaState {
                    time_us: now,
                    rate: 5.0,
                }),
            ),
            (
                "1h/per_rcpt/bob".to_string(),
                Record::Ewma(EwmaState {
                    time_us: now,
                    rate: 9.0,
                }),
            ),
            (
                "gcra/tb/alice".to_string(),
                Record::Gcra {
                    tat_ns: now * 1000 + 60_000_000_000,
                },
            ),
        ];
        let feed = |f: &mut dyn FnMut(&str, Record)| {
            for (k, r) in &records {
                f(k, r.clone());
            }
        };
        let (e, total) = collect(&m, feed, None, 10, now);
        assert_eq!((e.len(), total), (3, 3));
        let rows = by_key(&m, e);
        let texts: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(texts, ["bob", "alice"]);
        // alice's nearest limit is the one she is highest against; the other follows.
        let alice = &rows[1];
        let mut ratios = vec![alice.nearest.ratio];
        ratios.extend(alice.others.iter().map(|(_, r)| *r));
        assert_eq!(alice.others.len(), 1);
        assert!(ratios[0] >= ratios[1], "{ratios:?}");
    }
}
