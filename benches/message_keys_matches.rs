//! How often the message fingerprint matches: falsely over a corpus of distinct real texts,
//! and rightly over copies of campaign templates. Prints the figures; asserts nothing.
//!
//! Run: `cargo bench --bench message_keys_matches` (under `cargo test` it only says so).
//!
//! The corpus: the English man pages the machine ships (`/usr/share/man/man*/*.gz`,
//! decompressed by `gzip -dc`, roff requests and escapes stripped), each cut into
//! consecutive slices of 50–300 words, each slice one message. Near-exact duplicates go
//! first: a slice whose word set is more than 80 % the same (exact Jaccard, found with a
//! prefix-filtered similarity join) as one already kept is dropped and counted. Every pair
//! of kept messages sharing a band key is a false match (the texts are distinct); the
//! crude 4-word shingle Jaccard of each such pair is printed beside it.
//!
//! The campaigns: 10 templates (slices of the corpus), 100 copies each with another
//! greeting name, another tracking token in the link, other numbers, and in half of them a
//! sentence added or removed; the match rate is the share of copy pairs within a template
//! sharing a band key, and the share of copies that share one with the template's first.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::process::Command;

use floodgate::message_keys::{compute, MessageKeys, Wanted};

/// Keeps a deterministic stream of pseudo-random numbers (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn man_pages() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir("/usr/share/man") else {
        return out;
    };
    for d in dirs.flatten() {
        let name = d.file_name().to_string_lossy().to_string();
        if !name.starts_with("man") {
            continue;
        }
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            let p = f.path();
            let big = f.metadata().map(|m| m.len() > 600).unwrap_or(false);
            if big
                && p.extension().is_some_and(|e| e == "gz")
                && f.file_type().is_ok_and(|t| t.is_file())
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Decompresses `files` with `gzip -dc`, a few hundred per shell.
fn decompress(files: &[PathBuf]) -> Vec<String> {
    const SEPARATOR: &str = "\u{1e}FILE\u{1e}";
    let mut out = Vec::new();
    for batch in files.chunks(400) {
        let output = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for f; do printf '\\n{SEPARATOR}\\n'; gzip -dc -- \"$f\"; done"
            ))
            .arg("sh")
            .args(batch)
            .output()
            .expect("sh and gzip");
        let text = String::from_utf8_lossy(&output.stdout);
        out.extend(
            text.split(SEPARATOR)
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string),
        );
    }
    out
}

/// The words of a roff page: requests dropped (their text kept for font and heading
/// requests), escapes stripped.
fn roff_words(page: &str) -> Vec<String> {
    let mut words = Vec::new();
    for line in page.lines() {
        let text = if let Some(req) = line.strip_prefix('.').or_else(|| line.strip_prefix('\'')) {
            let (name, rest) = req.split_once(char::is_whitespace).unwrap_or((req, ""));
            match name {
                "B" | "I" | "BR" | "IR" | "RB" | "RI" | "BI" | "IB" | "SH" | "SS" | "IP" => rest,
                _ => continue,
            }
        } else {
            line
        };
        let mut clean = String::with_capacity(text.len());
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\\' {
                clean.push(if c == '"' { ' ' } else { c });
                continue;
            }
            match chars.next() {
                Some('f') | Some('s') => {
                    if chars.next() == Some('(') {
                        chars.next();
                        chars.next();
                    }
                    while chars
                        .peek()
                        .is_some_and(|c| c.is_ascii_digit() || *c == '-')
                    {
                        chars.next();
                    }
                }
                Some('(') => {
                    chars.next();
                    chars.next();
                    clean.push(' ');
                }
                Some('*') if chars.next() == Some('(') => {
                    chars.next();
                    chars.next();
                }
                Some('-') => clean.push('-'),
                Some('"') => break,
                _ => {}
            }
        }
        words.extend(clean.split_whitespace().map(str::to_string));
    }
    words
}

/// Lower-case alphanumeric words: what the duplicate check and the crude Jaccard compare.
fn plain_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn message(subject: &str, body: &str) -> Vec<u8> {
    format!("From: a@example.org\r\nTo: b@example.net\r\nSubject: {subject}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n").into_bytes()
}

fn fingerprint(body: &str) -> Vec<String> {
    let wanted = Wanted {
        fingerprint: true,
        ..Wanted::default()
    };
    let MessageKeys { fingerprint, .. } = compute(&message("x", body), wanted, &[]);
    fingerprint
}

/// Exact Jaccard similarity of two sorted, deduplicated id lists.
fn jaccard(a: &[u32], b: &[u32]) -> f64 {
    let (mut i, mut j, mut both) = (0, 0, 0);
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
    both as f64 / (a.len() + b.len() - both) as f64
}

/// The texts kept after dropping each one whose word set has Jaccard > `t` with one kept
/// before it (exact: prefix filtering over words ordered rarest first finds every such
/// pair), and how many were dropped.
fn dedupe(texts: Vec<String>, t: f64) -> (Vec<String>, usize) {
    let mut ids: HashMap<String, u32> = HashMap::new();
    let sets: Vec<Vec<u32>> = texts
        .iter()
        .map(|text| {
            let set: BTreeSet<u32> = plain_words(text)
                .into_iter()
                .map(|w| {
                    let n = ids.len() as u32;
                    *ids.entry(w).or_insert(n)
                })
                .collect();
            set.into_iter().collect()
        })
        .collect();
    let mut freq = vec![0u32; ids.len()];
    for s in &sets {
        for &w in s {
            freq[w as usize] += 1;
        }
    }
    // Renumber words rarest first, so that sorted sets start with their rarest words.
    let mut order: Vec<u32> = (0..ids.len() as u32).collect();
    order.sort_by_key(|&w| (freq[w as usize], w));
    let mut rank = vec![0u32; ids.len()];
    for (r, &w) in order.iter().enumerate() {
        rank[w as usize] = r as u32;
    }
    let sets: Vec<Vec<u32>> = sets
        .into_iter()
        .map(|s| {
            let mut s: Vec<u32> = s.into_iter().map(|w| rank[w as usize]).collect();
            s.sort_unstable();
            s
        })
        .collect();
    let mut index: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut kept = Vec::new();
    let mut dropped = 0;
    for (i, (text, set)) in texts.into_iter().zip(&sets).enumerate() {
        let prefix = set.len() - (t * set.len() as f64).ceil() as usize + 1;
        let prefix = &set[..prefix.min(set.len())];
        let mut seen = HashSet::new();
        let duplicate = prefix
            .iter()
            .flat_map(|w| index.get(w).into_iter().flatten())
            .any(|&k| seen.insert(k) && jaccard(set, &sets[k]) > t);
        if duplicate {
            dropped += 1;
            continue;
        }
        for &w in prefix {
            index.entry(w).or_default().push(i);
        }
        kept.push(text);
    }
    (kept, dropped)
}

/// Crude 4-word shingle Jaccard of two texts (plain words, digits as they are).
fn shingle_jaccard(a: &str, b: &str) -> f64 {
    let sh =
        |t: &str| -> HashSet<String> { plain_words(t).windows(4).map(|w| w.join(" ")).collect() };
    let (a, b) = (sh(a), sh(b));
    let both = a.intersection(&b).count();
    both as f64 / (a.len() + b.len() - both).max(1) as f64
}

/// Pairs of messages sharing at least one band key: (i, j) with i < j.
fn colliding_pairs(keys: &[Vec<String>]) -> BTreeSet<(usize, usize)> {
    let mut by_band: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, k) in keys.iter().enumerate() {
        for band in k {
            by_band.entry(band.as_str()).or_default().push(i);
        }
    }
    let mut pairs = BTreeSet::new();
    for ids in by_band.values() {
        for (x, &i) in ids.iter().enumerate() {
            for &j in &ids[x + 1..] {
                pairs.insert((i.min(j), i.max(j)));
            }
        }
    }
    pairs
}

const NAMES: [&str; 12] = [
    "Ann", "Bob", "Carla", "Dmitri", "Eve", "Farah", "Gustav", "Hiroshi", "Ines", "Jamal",
    "Kerstin", "Luis",
];

/// One copy of `template` (sentences): greeting, token, numbers, and maybe a sentence more
/// or less.
fn campaign_copy(template: &[String], extra: &[String], rng: &mut Rng) -> String {
    let name = NAMES[rng.below(NAMES.len())];
    let token: String = (0..24)
        .map(|k| {
            let c = b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.below(36)];
            if k == 1 {
                (b'0' + (c % 10)) as char
            } else {
                c as char
            }
        })
        .collect();
    let mut sentences: Vec<String> = template.to_vec();
    match rng.below(4) {
        0 if sentences.len() > 3 => {
            sentences.remove(1 + rng.below(sentences.len() - 2));
        }
        1 => {
            let at = 1 + rng.below(sentences.len().max(2) - 1);
            sentences.insert(
                at.min(sentences.len()),
                extra[rng.below(extra.len())].clone(),
            );
        }
        _ => {}
    }
    let middle = sentences.len() / 2;
    sentences.insert(
        middle,
        format!(
            "Your reference is {} and the amount is {}.{:02}: https://track.example.com/c/{token}?u={}",
            rng.below(1_000_000),
            rng.below(10_000),
            rng.below(100),
            rng.below(100_000)
        ),
    );
    format!("Hi {name},\r\n\r\n{}\r\n", sentences.join(" "))
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("message_keys_matches: run with `cargo bench --bench message_keys_matches`");
        return;
    }
    let start = std::time::Instant::now();
    let pages = man_pages();
    let texts = decompress(&pages);
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut slices = Vec::new();
    for page in &texts {
        let words = roff_words(page);
        let mut at = 0;
        while at < words.len() {
            let n = 50 + rng.below(251);
            if at + n > words.len() {
                break;
            }
            slices.push(words[at..at + n].join(" "));
            at += n;
        }
    }
    let sliced = slices.len();
    let exact: HashSet<&String> = slices.iter().collect();
    let exact_duplicates = sliced - exact.len();
    let (corpus, near_duplicates) = dedupe(slices, 0.8);
    println!(
        "corpus: {} man pages read ({} decompressed), {sliced} slices of 50-300 words; \
         {near_duplicates} dropped as near-exact duplicates (word-set Jaccard > 0.8; {exact_duplicates} of them exact); \
         {} distinct texts kept",
        pages.len(),
        texts.len(),
        corpus.len()
    );
    let t = std::time::Instant::now();
    let keys: Vec<Vec<String>> = corpus.iter().map(|c| fingerprint(c)).collect();
    let per_message = t.elapsed().as_secs_f64() * 1e6 / corpus.len() as f64;
    let with_fp: Vec<usize> = (0..keys.len()).filter(|&i| !keys[i].is_empty()).collect();
    let n = with_fp.len();
    let pairs = colliding_pairs(&keys);
    let total_pairs = n as f64 * (n as f64 - 1.0) / 2.0;
    let mut touched = HashSet::new();
    let mut by_similarity = [0usize; 5];
    for &(i, j) in &pairs {
        touched.insert(i);
        touched.insert(j);
        let s = shingle_jaccard(&corpus[i], &corpus[j]);
        by_similarity[((s * 10.0) as usize).min(4)] += 1;
    }
    println!(
        "false matches: {} of {:.3e} pairs share a band ({:.2e} per pair); {} of {n} messages \
         share a band with some other ({:.2e} per message); {per_message:.1} µs per message",
        pairs.len(),
        total_pairs,
        pairs.len() as f64 / total_pairs,
        touched.len(),
        touched.len() as f64 / n as f64,
    );
    println!(
        "  colliding pairs by crude 4-shingle Jaccard: <0.1: {}, 0.1-0.2: {}, 0.2-0.3: {}, 0.3-0.4: {}, >=0.4: {}",
        by_similarity[0], by_similarity[1], by_similarity[2], by_similarity[3], by_similarity[4]
    );
    for &(i, j) in pairs.iter().take(5) {
        let cut = |s: &str| s.chars().take(100).collect::<String>();
        println!("  e.g. [{}] / [{}]", cut(&corpus[i]), cut(&corpus[j]));
    }

    // Campaigns: 10 templates of 40-300 words from the corpus, split into sentences.
    let sentences_of = |t: &str| -> Vec<String> {
        t.split_inclusive(". ")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let extra: Vec<String> = corpus
        .iter()
        .rev()
        .take(200)
        .flat_map(|t| sentences_of(t).into_iter().take(1))
        .collect();
    let templates: Vec<Vec<String>> = corpus
        .iter()
        .step_by(corpus.len() / 10)
        .take(10)
        .map(|t| sentences_of(t))
        .collect();
    let (mut within, mut within_matched, mut with_first, mut first_matched) = (0, 0, 0, 0);
    let mut all_copies = Vec::new();
    for (ti, template) in templates.iter().enumerate() {
        let copies: Vec<Vec<String>> = (0..100)
            .map(|_| fingerprint(&campaign_copy(template, &extra, &mut rng)))
            .collect();
        for a in 0..copies.len() {
            let set: HashSet<&String> = copies[a].iter().collect();
            for other in &copies[a + 1..] {
                let hit = other.iter().any(|k| set.contains(k));
                within += 1;
                within_matched += usize::from(hit);
                if a == 0 {
                    with_first += 1;
                    first_matched += usize::from(hit);
                }
            }
        }
        all_copies.extend(copies.into_iter().map(|c| (ti, c)));
    }
    let keys_only: Vec<Vec<String>> = all_copies.iter().map(|(_, c)| c.clone()).collect();
    let across = colliding_pairs(&keys_only)
        .into_iter()
        .filter(|&(i, j)| all_copies[i].0 != all_copies[j].0)
        .count();
    println!(
        "campaigns: 10 templates x 100 copies (greeting, token, numbers changed; a sentence \
         added or removed in half): {within_matched} of {within} copy pairs share a band ({:.4}); \
         {first_matched} of {with_first} copies share one with the first copy ({:.4}); \
         {across} pairs across templates share one",
        within_matched as f64 / within as f64,
        first_matched as f64 / with_first as f64,
    );
    println!("({:.1} s in all)", start.elapsed().as_secs_f64());
}
