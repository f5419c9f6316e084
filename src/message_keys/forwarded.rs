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

/// What a header-like line's field name makes it in a header block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// One of [`FROM_FIELDS`]: it may open a block.
    From,
    /// One of [`OTHER_FIELDS`].
    Other,
}

/// The field of a header-like line (`Subject: x`, `Objet : x`, `*From:* x`) whose name a
/// header block names, or None. An ASCII name is compared without regard to case as it
/// stands; another is lower-cased first.
fn field(line: &str) -> Option<Field> {
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
    let lower = if name.is_ascii() {
        String::new()
    } else {
        name.to_lowercase()
    };
    let named = |list: &[&str]| {
        if name.is_ascii() {
            list.iter().any(|f| f.eq_ignore_ascii_case(name))
        } else {
            list.contains(&lower.as_str())
        }
    };
    if named(&FROM_FIELDS) {
        Some(Field::From)
    } else if named(&OTHER_FIELDS) {
        Some(Field::Other)
    } else {
        None
    }
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

/// The index of the first line of `lines` that starts a forwarded or quoted message (the
/// author's text is the lines before it), or None. An Outlook underscore rule just before
/// a header block goes with it.
pub(super) fn start(lines: &[&str]) -> Option<usize> {
    // Each line's field, read once: a header block is a `From:` line and at least two
    // other fields within the BLOCK_REACH lines after it.
    let mut fields: Vec<Option<Field>> = Vec::new();
    let found = (0..lines.len()).find(|&i| {
        // An empty line is none of them (a text of blank lines is looked at quickly).
        if lines[i].is_empty() {
            return false;
        }
        if is_separator(lines[i]) || is_forward_line(lines[i]) {
            return true;
        }
        let reach = (i + 1 + BLOCK_REACH).min(lines.len());
        while fields.len() < reach {
            fields.push(field(lines[fields.len()]));
        }
        fields[i] == Some(Field::From)
            && fields[i + 1..reach]
                .iter()
                .filter(|f| **f == Some(Field::Other))
                .count()
                >= 2
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
        assert_eq!(field("From: http://x"), Some(Field::From));
        assert_eq!(field("http://x"), None);
        assert_eq!(field("Subject: x"), Some(Field::Other));
        assert_eq!(field("*OBJET :* x"), Some(Field::Other));
        assert_eq!(field("Envoyé : lundi"), Some(Field::Other));
        assert_eq!(field("ENVOYÉ : lundi"), Some(Field::Other));
        assert_eq!(field("Keywords: x"), None);
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
