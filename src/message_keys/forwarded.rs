//! Forwarded and quoted messages in plain text that carry no `>`: everything from the first
//! marker on is someone else's text.
//!
//! The markers: a separator line naming a forwarded or original message (Gmail's
//! "---------- Forwarded message ---------", Outlook's "-----Original Message-----",
//! Thunderbird's "-------- Original Message --------" / "-------- Forwarded Message
//! --------", their German, French and Spanish forms), Apple Mail's "Begin forwarded
//! message:", and a header block as Outlook and Outlook on the web write it above the old
//! text: a `From:` line (`Von:`, `De :`, `De:`) followed within a few lines by at least two
//! of `Sent:`, `Date:`, `To:`, `Subject:`, `Cc:` (and their translations).

/// Words a separator line names (lower-case, spaces collapsed).
const SEPARATOR_NAMES: [&str; 12] = [
    "forwarded message",
    "original message",
    "ursprüngliche nachricht",
    "weitergeleitete nachricht",
    "message d'origine",
    "message transféré",
    "message original",
    "mensaje original",
    "mensaje reenviado",
    "messaggio originale",
    "messaggio inoltrato",
    "oorspronkelijk bericht",
];

/// Lines that announce a forwarded message on their own.
const FORWARD_LINES: [&str; 5] = [
    "begin forwarded message:",
    "anfang der weitergeleiteten nachricht:",
    "début du message réexpédié :",
    "début du message réexpédié:",
    "inicio del mensaje reenviado:",
];

/// The field names that open a header block.
const FROM_FIELDS: [&str; 4] = ["from", "von", "de", "da"];

/// The other field names of a header block.
const OTHER_FIELDS: [&str; 17] = [
    "sent", "date", "to", "subject", "cc", "gesendet", "datum", "an", "betreff", "envoyé", "à",
    "objet", "enviado", "fecha", "para", "asunto", "oggetto",
];

/// How many lines after a `From:` line the rest of its header block may reach.
const BLOCK_REACH: usize = 8;

/// The field name of a header-like line (`Subject: x`, `Objet : x`, `*From:* x`),
/// lower-case, or None.
fn field_name(line: &str) -> Option<String> {
    let t = line.trim().trim_start_matches('*');
    // A field name is short: its colon is looked for in the first bytes only.
    let head = &t.as_bytes()[..t.len().min(25)];
    let colon = memchr::memchr(b':', head)?;
    if colon == 0 || t[colon + 1..].starts_with("//") {
        return None;
    }
    let name = t[..colon].trim_end().trim_end_matches('*').trim_end();
    if name.is_empty() || !name.chars().all(|c| c.is_alphabetic() || c == '-') {
        return None;
    }
    Some(name.to_lowercase())
}

/// Whether `line` is a separator naming a forwarded or original message.
fn is_separator(line: &str) -> bool {
    let t = line.trim();
    if !t.starts_with("--") && !t.starts_with("__") {
        return false;
    }
    let inner = t.trim_matches(|c: char| c == '-' || c == '_' || c.is_whitespace());
    let inner = inner
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    SEPARATOR_NAMES.iter().any(|n| inner == *n)
}

/// Whether `line` announces a forwarded message on its own (every such line ends with a
/// colon: others are not lower-cased to be compared).
fn is_forward_line(line: &str) -> bool {
    let t = line.trim();
    t.ends_with(':') && FORWARD_LINES.contains(&t.to_lowercase().as_str())
}

/// Whether a header block starts at `lines[i]`: a `From:` line and at least two other
/// fields within [`BLOCK_REACH`] lines.
fn is_header_block(lines: &[&str], i: usize) -> bool {
    if !field_name(lines[i]).is_some_and(|n| FROM_FIELDS.contains(&n.as_str())) {
        return false;
    }
    let others = lines[i + 1..]
        .iter()
        .take(BLOCK_REACH)
        .filter_map(|l| field_name(l))
        .filter(|n| OTHER_FIELDS.contains(&n.as_str()))
        .count();
    others >= 2
}

/// The index of the first line of `lines` that starts a forwarded or quoted message (the
/// author's text is the lines before it), or None. An Outlook underscore rule just before
/// a header block goes with it.
pub(super) fn start(lines: &[&str]) -> Option<usize> {
    let found = (0..lines.len()).find(|&i| {
        // An empty line is none of them (a text of blank lines is looked at quickly).
        !lines[i].is_empty()
            && (is_separator(lines[i]) || is_forward_line(lines[i]) || is_header_block(lines, i))
    })?;
    let rule = |l: &str| {
        let t = l.trim();
        t.len() >= 10 && t.chars().all(|c| c == '_' || c == '-')
    };
    let before = lines[..found].iter().rposition(|l| !l.trim().is_empty());
    Some(match before {
        Some(b) if rule(lines[b]) => b,
        _ => found,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cut(text: &str) -> Vec<&str> {
        let lines: Vec<&str> = text.lines().collect();
        let end = start(&lines).unwrap_or(lines.len());
        lines[..end].to_vec()
    }

    #[test]
    fn every_client_style_is_cut() {
        for marker in [
            "---------- Forwarded message ---------\nFrom: Ann <a@x>\nDate: Mon\nSubject: s\nTo: b@x",
            "-----Original Message-----\nFrom: Ann\nSent: Monday\nTo: Bob\nSubject: s",
            "-------- Original Message --------\nSubject: s",
            "-------- Forwarded Message --------\nSubject: s",
            "Begin forwarded message:\n\nFrom: Ann",
            "________________________________\nFrom: Ann <a@x>\nSent: Monday, 3 March 2025 10:00\nTo: Bob\nSubject: s",
            "From: Ann <a@x>\nSent: Monday, 3 March 2025 10:00\nTo: Bob\nSubject: s",
            "*From:* Ann\n*Sent:* Monday\n*To:* Bob",
            "Von: Ann\nGesendet: Montag\nAn: Bob\nBetreff: s",
            "De : Ann\nEnvoyé : lundi\nÀ : Bob\nObjet : s",
            "De: Ann\nEnviado: lunes\nPara: Bob\nAsunto: s",
            "-----Ursprüngliche Nachricht-----\nVon: Ann",
            "-------- Message d'origine --------",
        ] {
            let text = format!("My own words here.\n\n{marker}\n\nold text of someone else\n");
            assert_eq!(cut(&text), ["My own words here.", ""], "{marker}");
        }
    }

    #[test]
    fn ordinary_lines_are_not_markers() {
        let text = "From: the garden team\nwe planted trees.\nTo: everyone\n-- \nAnn\n----------\n";
        assert_eq!(cut(text).len(), text.lines().count());
        assert_eq!(field_name("http://x"), None);
        assert_eq!(field_name("Subject: x").as_deref(), Some("subject"));
    }

    proptest! {
        /// Any lines: no panic, and the cut is within the text.
        #[test]
        fn any_lines_cut_within(lines in prop::collection::vec("\\PC{0,40}", 0..30)) {
            let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
            if let Some(i) = start(&refs) {
                prop_assert!(i < refs.len());
            }
        }
    }
}
