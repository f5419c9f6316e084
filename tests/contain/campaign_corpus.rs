//! The fingerprint on a corpus, at the message-keys level: every lure family (ten families,
//! each copied by eight accounts with every trick: each word position spun at a chance of
//! 10 % and of 20 %, random words hidden at 40 % of the visible text by `display:none`,
//! `font-size:0`, white on white and zero boxes, look-alike letters, invisible characters,
//! three rotating link hosts, a numbered Subject, base64, quoted-printable, ISO-8859-1, an
//! inline image before the text) forms one connected group through shared bands, and as
//! the copies arrive one account after another a campaign limit of three accounts relays
//! at most three accounts' copies; no two messages of one ordinary kind from different
//! accounts share a band; and among 10,000+ real texts (paragraphs of the installed manual
//! pages) the pairs of Jaccard similarity under 0.3 practically never share one, and,
//! sent all under one Subject (the Subject-joined bands' worst case), rarely. Every
//! figure is written to stderr past the test harness's capture, so CI's log shows it.
//!
//! Which ordinary kinds need the boilerplate learner: meeting invitations (the Teams and
//! Zoom blocks) and web application mail (WordPress's password reset) are the
//! organisation's boilerplate and are left out only once learnt, so the test first feeds
//! four simulated days of such traffic; forwards in every style, Outlook-quoted threads,
//! signatures and the shared disclaimer are recognised by their form, on day one (the test
//! checks them with an empty learner too).

use crate::common;

use common::campaign::{ordinary, Rng};
use common::corpus::*;
use floodgate::message_keys::boilerplate::{account_hash, day_of, Settings};
use floodgate::message_keys::{
    compute_learnt, minhash, text_bands, text_bands_with_subject, text_shingles, Boilerplate,
    MessageKeys, Wanted,
};
use std::collections::{HashMap, HashSet};
use std::io::Write;

const FAMILIES: usize = 10;
const COPIES: usize = 8;
/// The day the corpus is read on (2025-03-10), after four days of learning.
const TODAY: u64 = 1_741_564_800;

/// A figure for the log, past the harness's capture.
fn figure(line: &str) {
    let _ = writeln!(std::io::stderr(), "[corpus] {line}");
}

fn keys(mail: &Mail, learnt: Option<&Boilerplate>) -> MessageKeys {
    let wanted = Wanted {
        fingerprint: true,
        ..Wanted::default()
    };
    compute_learnt(&mail.raw, wanted, &[], learnt.map(|b| (b, day_of(TODAY))))
}

fn share(a: &MessageKeys, b: &MessageKeys) -> bool {
    let set: HashSet<&String> = a.fingerprint.iter().collect();
    b.fingerprint.iter().any(|k| set.contains(k))
}

/// Union-find roots: the number of groups the copies form through shared bands.
fn groups(keys: &[MessageKeys]) -> (usize, usize, usize) {
    let mut parent: Vec<usize> = (0..keys.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let (mut pairs, mut sharing) = (0, 0);
    for i in 0..keys.len() {
        for j in i + 1..keys.len() {
            pairs += 1;
            if share(&keys[i], &keys[j]) {
                sharing += 1;
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a] = b;
            }
        }
    }
    let roots: HashSet<usize> = (0..keys.len()).map(|i| root(&mut parent, i)).collect();
    (roots.len(), sharing, pairs)
}

/// Four days of the organisation's ordinary template traffic, as a deployed node sees it:
/// each day eight organisers send invitations, eight hosted sites send password resets,
/// eight employees send notes with the disclaimer.
fn learnt(rng: &mut Rng) -> Boilerplate {
    let mut b = Boilerplate::new(Settings::default());
    let wanted = Wanted {
        fingerprint: true,
        ..Wanted::default()
    };
    for day in 1..=4u64 {
        let when = day_of(TODAY - day * 86_400);
        let mut traffic = Vec::new();
        for i in 0..8 {
            let k = (day as usize) * 8 + i;
            traffic.push(invitation(rng, &format!("organiser{}", k % 20), k));
            traffic.push(wordpress_reset(rng, &format!("site{}", k % 20), k));
        }
        traffic.extend(disclaimer_notes(rng, 8, "staff"));
        for m in &traffic {
            let k = compute_learnt(&m.raw, wanted, &[], Some((&b, when)));
            b.observe(account_hash(&m.account), when, &k.blocks);
        }
    }
    b
}

/// How many accounts' copies a campaign limit of three accounts relays when the copies
/// arrive in order (one account each) and are grouped as the store groups them: a copy
/// joins every earlier copy it shares a band with, with all of their group; it is relayed
/// while its group, itself included, has at most three accounts.
fn relayed(keys: &[MessageKeys]) -> usize {
    let mut group: Vec<usize> = (0..keys.len()).collect();
    let mut relayed = 0;
    for i in 0..keys.len() {
        for j in 0..i {
            if share(&keys[i], &keys[j]) {
                let (from, to) = (group[j], group[i]);
                for g in group.iter_mut().take(i + 1) {
                    if *g == from {
                        *g = to;
                    }
                }
            }
        }
        let size = group[..=i].iter().filter(|&&g| g == group[i]).count();
        relayed += usize::from(size <= 3);
    }
    relayed
}

/// Every pair of messages from different accounts in `kind`: how many share a band.
fn sharing_pairs(kind: &[Mail], learnt: Option<&Boilerplate>) -> (usize, usize, usize) {
    let ks: Vec<MessageKeys> = kind.iter().map(|m| keys(m, learnt)).collect();
    let with = ks.iter().filter(|k| !k.fingerprint.is_empty()).count();
    let mut pairs = 0;
    let mut sharing = 0;
    for i in 0..kind.len() {
        for j in i + 1..kind.len() {
            if kind[i].account != kind[j].account {
                pairs += 1;
                sharing += usize::from(share(&ks[i], &ks[j]));
            }
        }
    }
    (sharing, pairs, with)
}

#[test]
fn lure_copies_connect_and_ordinary_mail_never_shares_a_band() {
    let mut rng = Rng(0x5eed_c0ff_ee12_3456);
    let tricks = Tricks {
        spin_percent: 20,
        hidden_percent: 40,
    };
    figure(&format!(
        "shingles of {} words, {} bands x {} rows",
        minhash::SHINGLE_WORDS,
        minhash::BANDS,
        minhash::ROWS
    ));
    // 10 % and 20 % of the words spun: every family's copies form one group, and a limit
    // of three accounts relays at most three accounts' copies. At 20 % the copies' 3-word
    // shingles sit at Jaccard 0.23 to 0.66 (half the pairs of the two most spun families
    // under 0.3): their text bands alone connect few families; the bands joined to the
    // Subject's shape (word pairs, at 0.38 to 0.72) connect them all (see minhash.rs).
    for spin in [10, 20] {
        let tricks = Tricks {
            spin_percent: spin,
            ..tricks
        };
        let (mut all_sharing, mut all_pairs, mut text_sharing, mut connected, mut stopped) =
            (0, 0, 0, 0, 0);
        for f in 0..FAMILIES {
            let lure = Lure::new(&mut rng, f, tricks);
            let copies: Vec<MessageKeys> = (0..COPIES)
                .map(|n| {
                    keys(
                        &lure.copy(&mut rng, n, &format!("stolen{f}-{n}"), tricks),
                        None,
                    )
                })
                .collect();
            assert!(
                copies
                    .iter()
                    .all(|k| k.fingerprint.len() == minhash::BANDS + minhash::SUBJECT_BANDS),
                "family {f}: every copy has a fingerprint: {:?}",
                copies
                    .iter()
                    .map(|k| k.fingerprint.len())
                    .collect::<Vec<_>>()
            );
            let (text_groups, text_pairs_sharing) = {
                let text_only: Vec<MessageKeys> = copies
                    .iter()
                    .map(|k| MessageKeys {
                        fingerprint: k.fingerprint[..minhash::BANDS].to_vec(),
                        ..MessageKeys::default()
                    })
                    .collect();
                let (g, sharing, _) = groups(&text_only);
                (g, sharing)
            };
            let (found, sharing, pairs) = groups(&copies);
            let relayed = relayed(&copies);
            all_sharing += sharing;
            all_pairs += pairs;
            text_sharing += text_pairs_sharing;
            connected += usize::from(found == 1);
            stopped += usize::from(relayed <= 3);
            figure(&format!(
                "lure family {f}, {spin} % spun, 40 % hidden: {COPIES} accounts, {found} group(s), {sharing}/{pairs} copy pairs share a band ({text_pairs_sharing} a text band: {text_groups} group(s)), {relayed} accounts relayed"
            ));
            assert_eq!(
                found, 1,
                "family {f}, {spin} % spun: the copies form one group"
            );
            assert!(
                relayed <= 3,
                "family {f}, {spin} % spun: {relayed} accounts' copies relayed"
            );
        }
        let fraction = all_sharing as f64 / all_pairs as f64;
        figure(&format!(
            "lure families, {spin} % spun: {connected}/{FAMILIES} connected, {stopped}/{FAMILIES} with at most 3 accounts relayed; {all_sharing}/{all_pairs} copy pairs ({fraction:.3}) share a band, {text_sharing} a text band"
        ));
    }

    let learner = learnt(&mut rng);
    figure(&format!(
        "boilerplate learnt over 4 days: {} blocks known",
        learner.len()
    ));
    let announcement = announcement(&mut rng);
    let kinds: Vec<(&str, Vec<Mail>, bool)> = vec![
        (
            "plain-text forwards (Gmail, Outlook, new Outlook de/fr, Apple, Thunderbird)",
            plain_forwards(&mut rng, &announcement, 14),
            false,
        ),
        (
            "HTML forwards (gmail_quote, divRplyFwdMsg, border-top, moz-cite-prefix)",
            html_forwards(&mut rng, &announcement, 12),
            false,
        ),
        (
            "Outlook-quoted thread replies",
            outlook_thread(&mut rng, 12),
            false,
        ),
        (
            "short notes with one 60-word disclaimer",
            disclaimer_notes(&mut rng, 30, "emp"),
            false,
        ),
        (
            "Teams/Zoom invitations from 12 organisers",
            (0..12)
                .map(|i| invitation(&mut rng, &format!("org{i}"), 100 + i))
                .collect(),
            true,
        ),
        (
            "WordPress password resets from 12 sites",
            (0..12)
                .map(|i| wordpress_reset(&mut rng, &format!("wp{i}"), 100 + i))
                .collect(),
            true,
        ),
        (
            "distinct ordinary mail",
            (0..12)
                .map(|i| {
                    let (s, b) = ordinary(&mut rng, i, 0);
                    plain(&format!("user{i}"), &s, &b)
                })
                .collect(),
            false,
        ),
    ];
    for (name, kind, needs_learning) in &kinds {
        assert!(kind.len() >= 10);
        let (sharing, pairs, with) = sharing_pairs(kind, Some(&learner));
        figure(&format!(
            "{name}: {} messages ({with} with a fingerprint), {sharing}/{pairs} pairs share a band{}",
            kind.len(),
            if *needs_learning { " (after learning)" } else { "" }
        ));
        assert_eq!(sharing, 0, "{name}");
        if !needs_learning {
            let (sharing, pairs, _) = sharing_pairs(kind, None);
            figure(&format!(
                "{name}, day one (nothing learnt): {sharing}/{pairs}"
            ));
            assert_eq!(sharing, 0, "{name} on day one");
        } else {
            // The learner is what keeps them apart: without it they match.
            let (sharing, pairs, _) = sharing_pairs(kind, None);
            figure(&format!(
                "{name}, nothing learnt: {sharing}/{pairs} pairs share a band"
            ));
        }
    }
}

/// The paragraphs of the installed manual pages (`/usr/share/man/man1` to `man8`, the
/// roff markup taken off), distinct, in the order of the sorted file names. The Google
/// Cloud SDK's generated reference pages (`gcloud*`, thousands of pages from one
/// template where it is installed) are not distinct texts and are left out.
fn manual_paragraphs() -> Vec<String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("find /usr/share/man/man1 /usr/share/man/man2 /usr/share/man/man3 /usr/share/man/man4 /usr/share/man/man5 /usr/share/man/man6 /usr/share/man/man7 /usr/share/man/man8 -name '*.gz' ! -name 'gcloud*' 2>/dev/null | sort | xargs -r zcat -f")
        .output()
        .expect("sh, find and zcat run (the corpus of real texts is the manual pages)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut seen = HashSet::new();
    let mut texts = Vec::new();
    let mut current = String::new();
    let mut flush = |current: &mut String| {
        let t = std::mem::take(current);
        if !t.trim().is_empty() && seen.insert(t.clone()) {
            texts.push(t);
        }
    };
    for line in text.lines() {
        let (is_macro, rest) = match line.strip_prefix('.').or_else(|| line.strip_prefix('\'')) {
            Some(m) => (true, m),
            None => (false, line),
        };
        if line.trim().is_empty() {
            flush(&mut current);
            continue;
        }
        let text_part = if is_macro {
            let name = rest.split_whitespace().next().unwrap_or("");
            if [
                "PP", "P", "LP", "SH", "SS", "TP", "IP", "HP", "TH", "sp", "br", "RS", "RE", "nf",
                "fi", "EX", "EE",
            ]
            .contains(&name)
            {
                flush(&mut current);
            }
            if ["B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM"].contains(&name) {
                rest[name.len()..].trim().to_string()
            } else {
                continue;
            }
        } else {
            line.to_string()
        };
        current.push_str(&roff_text(&text_part));
        current.push('\n');
    }
    flush(&mut current);
    texts
}

/// A roff line's text: font changes and escapes taken off, quotes gone.
fn roff_text(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            if c != '"' {
                out.push(c);
            }
            continue;
        }
        match chars.next() {
            // A font change: `\fB`, or `\f(CW` with a two-letter name.
            Some('f') => {
                let two = chars.next() == Some('(');
                for _ in 0..2 * usize::from(two) {
                    chars.next();
                }
            }
            Some('(') => {
                chars.next();
                chars.next();
                out.push(' ');
            }
            Some('-') => out.push('-'),
            Some('e') => out.push('\\'),
            Some('&') | Some('c') | Some('%') => {}
            Some(' ') => out.push(' '),
            _ => {}
        }
    }
    out
}

/// True Jaccard similarity of two sorted, distinct sets.
fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    let (mut i, mut j, mut both) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                both += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - both;
    if union == 0 {
        0.0
    } else {
        both as f64 / union as f64
    }
}

/// P(share a band) at Jaccard `s`.
fn s_curve(s: f64) -> f64 {
    1.0 - (1.0 - s.powi(minhash::ROWS as i32)).powi(minhash::BANDS as i32)
}

/// The pairs of texts (`bands`, `shingles` per text) that share a band: how many are under
/// Jaccard 0.3, how many at 0.3 or more, an estimate of the pairs at 0.3 or more that the
/// text bands miss, and those under 0.3, most similar first.
fn sharing_under(
    bands: &[Vec<String>],
    shingles: &[Vec<u64>],
) -> (u64, u64, f64, Vec<(f64, u32, u32)>) {
    let mut buckets: HashMap<&str, Vec<u32>> = HashMap::new();
    for (i, b) in bands.iter().enumerate() {
        for k in b {
            buckets.entry(k.as_str()).or_default().push(i as u32);
        }
    }
    let mut candidates: HashSet<(u32, u32)> = HashSet::new();
    for ids in buckets.values() {
        for (x, &i) in ids.iter().enumerate() {
            for &j in &ids[x + 1..] {
                candidates.insert((i.min(j), i.max(j)));
            }
        }
    }
    let (mut low, mut high) = (0u64, 0u64);
    let mut missed_high = 0.0f64;
    let mut worst: Vec<(f64, u32, u32)> = Vec::new();
    for &(i, j) in &candidates {
        let s = jaccard(&shingles[i as usize], &shingles[j as usize]);
        if s < 0.3 {
            low += 1;
            worst.push((s, i, j));
        } else {
            high += 1;
            // Horvitz-Thompson: a pair of similarity s is found by the text bands with
            // probability P(s); each one found stands for (1 - P) / P pairs of its
            // similarity not found.
            let p = s_curve(s);
            missed_high += (1.0 - p) / p;
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    (low, high, missed_high, worst)
}

#[test]
fn unrelated_real_texts_practically_never_share_a_band() {
    const WANTED: usize = 20_000;
    let all = manual_paragraphs();
    let mut texts = Vec::new();
    let mut shingles = Vec::new();
    let mut bands = Vec::new();
    for t in &all {
        if texts.len() == WANTED {
            break;
        }
        let b = text_bands(t);
        if b.is_empty() {
            continue;
        }
        shingles.push(text_shingles(t));
        bands.push(b);
        texts.push(t);
    }
    let n = texts.len();
    figure(&format!(
        "real texts: {} distinct paragraphs of manual pages read, {n} with a fingerprint used",
        all.len()
    ));
    assert!(
        n >= 10_000,
        "only {n} distinct real texts with a fingerprint: the corpus is the installed manual pages (/usr/share/man): install the packages of .ci/install.sh"
    );
    let total = n as u64 * (n as u64 - 1) / 2;
    let (low, high, missed_high, worst) = sharing_under(&bands, &shingles);
    // Pairs under 0.3: all pairs less those at 0.3 or more, found or estimated missed.
    let denominator = total as f64 - high as f64 - missed_high;
    let rate = low as f64 / denominator;
    figure(&format!(
        "real texts: {total} pairs; {high} at Jaccard >= 0.3 share a band (about {missed_high:.0} more such pairs share none); {low} under 0.3 share a band: rate {rate:.2e} of {denominator:.0} pairs under 0.3"
    ));
    for (s, i, j) in worst.iter().take(3) {
        figure(&format!(
            "  under 0.3 and sharing: J={s:.3}: {:?} / {:?}",
            texts[*i as usize].chars().take(70).collect::<String>(),
            texts[*j as usize].chars().take(70).collect::<String>()
        ));
    }
    assert!(
        rate <= 1e-6,
        "rate {rate:.2e} of pairs under 0.3 share a band"
    );
    // The worst case of the Subject-joined bands: every text sent under one Subject.
    let joined: Vec<Vec<String>> = texts
        .iter()
        .map(|t| text_bands_with_subject(t, "Your account"))
        .collect();
    let (joined_low, _, _, _) = sharing_under(&joined, &shingles);
    let joined_rate = joined_low as f64 / denominator;
    figure(&format!(
        "real texts all under one Subject: {joined_low} pairs under 0.3 share a band: rate {joined_rate:.2e}"
    ));
    assert!(
        joined_rate <= 3e-5,
        "rate {joined_rate:.2e} of pairs under 0.3 share a band under one Subject"
    );
}
