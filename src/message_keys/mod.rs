//! PROVISIONAL: replaced by the message keys module of branch t38-keys on merge.
#![allow(missing_docs)]

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub fingerprint: bool,
    pub link_domains: bool,
    pub subject_shape: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessageKeys {
    pub fingerprint: Vec<String>,
    pub link_domains: Vec<String>,
    pub subject_shape: Option<String>,
}

pub fn is_automatic(header_section: &[u8]) -> bool {
    let t = String::from_utf8_lossy(header_section).to_ascii_lowercase();
    t.contains("\nlist-id:")
        || t.contains("\nprecedence: bulk")
        || t.contains("\nauto-submitted: auto")
}

pub fn compute(message: &[u8], wanted: Wanted, exempt_link_domains: &[String]) -> MessageKeys {
    let t = String::from_utf8_lossy(message).to_string();
    let body = t.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let words: Vec<String> = body
        .split_whitespace()
        .map(|w| {
            w.to_lowercase()
                .chars()
                .map(|c| if c.is_ascii_digit() { '0' } else { c })
                .collect()
        })
        .filter(|w: &String| !w.starts_with("dear") && w.len() < 16)
        .collect();
    let mut k = MessageKeys::default();
    if wanted.fingerprint && words.len() >= 20 {
        let h = words[words.len() / 2..].join(" ");
        k.fingerprint = vec![format!(
            "b0:{:x}",
            h.len() * 7919 + h.bytes().map(u64::from).sum::<u64>() as usize
        )];
    }
    if wanted.link_domains {
        for w in body.split_whitespace() {
            if let Some(r) = w.strip_prefix("https://") {
                let host = r.split('/').next().unwrap_or("").to_lowercase();
                if !exempt_link_domains
                    .iter()
                    .any(|e| host.ends_with(e.as_str()))
                    && !k.link_domains.contains(&host)
                {
                    k.link_domains.push(host);
                }
            }
        }
    }
    if wanted.subject_shape {
        k.subject_shape = t
            .lines()
            .find_map(|l| l.strip_prefix("Subject: "))
            .map(|s| {
                s.chars()
                    .map(|c| if c.is_ascii_digit() { '0' } else { c })
                    .collect()
            });
    }
    k
}
