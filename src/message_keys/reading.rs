//! The author's own text, read line by line: what the fingerprint shingles, what it left
//! out and why, and the blocks the boilerplate learner counts.
//!
//! In order: quoted lines and their attribution go (module `quotes`); from the first marker
//! of a forwarded or Outlook-quoted message on, everything goes (module `forwarded`); a
//! signature and a disclaimer at the end go (module `signature`); every line of at least
//! [`boilerplate::MIN_BLOCK_WORDS`] words that the organisation's learnt boilerplate
//! holds goes (module `boilerplate`). The words of the rest are the fingerprint's.

use super::boilerplate::{self, Boilerplate};
use super::{forwarded, minhash, quotes, signature, words};
use siphasher::sip::SipHasher13;
use std::hash::Hasher;

/// At most this many left-out lines are told (the first ones).
pub const MAX_TOLD: usize = 40;

/// At most this many characters of a left-out line are told.
const TOLD_CHARS: usize = 100;

/// The key of block hashes.
const BLOCK_KEY: (u64, u64) = (0x626c_6f63_6b73_2131, 0x666c_6f6f_6467_6174);

/// Why a line is not the author's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftOut {
    /// In a forwarded message or below an Outlook-style header block.
    Forwarded,
    /// A signature.
    Signature,
    /// A legal disclaimer.
    Disclaimer,
    /// The organisation's boilerplate, learnt.
    Boilerplate,
}

/// One line left out, as told.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Told {
    /// Why.
    pub why: LeftOut,
    /// Its first characters.
    pub text: String,
}

/// What was read of one text.
#[derive(Debug, Default)]
pub(super) struct Reading {
    /// The word hashes of the author's text, in order, at most [`minhash::MAX_WORDS`].
    pub words: Vec<u64>,
    /// The hash of each line of the author's text with enough words (boilerplate ones
    /// included), for the learner.
    pub blocks: Vec<u64>,
    /// Lines left out (quoted lines only counted), at most [`MAX_TOLD`].
    pub told: Vec<Told>,
    /// Quoted lines and their attributions.
    pub quoted: usize,
}

impl Reading {
    fn tell(&mut self, why: LeftOut, line: &str) {
        let text = line.trim();
        if self.told.len() < MAX_TOLD && !text.is_empty() {
            self.told.push(Told {
                why,
                text: text.chars().take(TOLD_CHARS).collect(),
            });
        }
    }
}

/// The hash of a block from its words' hashes.
fn block_hash(words: &[u64]) -> u64 {
    let mut h = SipHasher13::new_with_keys(BLOCK_KEY.0, BLOCK_KEY.1);
    for w in words {
        h.write_u64(*w);
    }
    h.finish()
}

/// The number of lines of `text` as [`str::lines`] counts them, counted by memchr.
fn line_count(text: &str) -> usize {
    let ends = memchr::memchr_iter(b'\n', text.as_bytes()).count();
    ends + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Reads `text`; with `learnt`, lines that are boilerplate on its day are left out.
pub(super) fn read(text: &str, learnt: Option<(&Boilerplate, u32)>) -> Reading {
    let mut out = Reading::default();
    let lines = quotes::unquoted_lines(text);
    out.quoted = line_count(text).saturating_sub(lines.len());
    let own_end = forwarded::start(&lines).unwrap_or(lines.len());
    for l in &lines[own_end..] {
        out.tell(LeftOut::Forwarded, l);
    }
    let (end, tail) = signature::end(&lines[..own_end]);
    let why = match tail {
        Some(signature::Tail::Disclaimer) => LeftOut::Disclaimer,
        _ => LeftOut::Signature,
    };
    for l in &lines[end..own_end] {
        out.tell(why, l);
    }
    let mut line_words = Vec::new();
    for line in &lines[..end] {
        line_words.clear();
        words::each_word_hash(line, &mut |h| {
            line_words.push(h);
            line_words.len() < minhash::MAX_WORDS
        });
        if line_words.len() >= boilerplate::MIN_BLOCK_WORDS {
            let block = block_hash(&line_words);
            if out.blocks.len() < MAX_BLOCKS {
                out.blocks.push(block);
            }
            if learnt.is_some_and(|(b, day)| b.is_boilerplate(block, day)) {
                out.tell(LeftOut::Boilerplate, line);
                continue;
            }
        }
        let room = minhash::MAX_WORDS - out.words.len();
        out.words.extend(line_words.iter().take(room));
        if out.words.len() >= minhash::MAX_WORDS {
            break;
        }
    }
    out
}

/// At most this many blocks of one message are learnt.
pub const MAX_BLOCKS: usize = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_foreign_text_is_told() {
        let text = "My own words are these few.\n> quoted\n\nBest regards,\nAnn\n\n-----Original Message-----\nFrom: Bob\nSent: x\nTo: y\nOld text.\n";
        let r = read(text, None);
        assert_eq!(r.quoted, 1);
        assert_eq!(r.words.len(), 6);
        assert_eq!(r.blocks.len(), 1);
        let whys: Vec<LeftOut> = r.told.iter().map(|t| t.why).collect();
        assert_eq!(
            whys,
            [
                LeftOut::Forwarded,
                LeftOut::Forwarded,
                LeftOut::Forwarded,
                LeftOut::Forwarded,
                LeftOut::Forwarded,
                LeftOut::Signature,
                LeftOut::Signature
            ]
        );
    }

    #[test]
    fn lines_are_counted_as_str_lines_counts_them() {
        for text in [
            "", "\n", "a", "a\n", "a\r\nb", "a\n\nb\n", "\r\n\r\n", "x\ny\r\n",
        ] {
            assert_eq!(line_count(text), text.lines().count(), "{text:?}");
        }
    }

    #[test]
    fn learnt_boilerplate_is_left_out() {
        let text = "a personal line of text\nthe shared footer of the whole organisation\n";
        let r = read(text, None);
        assert_eq!(r.blocks.len(), 2);
        let mut b = Boilerplate::new(boilerplate::Settings::default());
        for d in 0..3 {
            for a in 0..5 {
                b.observe(a, 100 + d, &r.blocks[1..]);
            }
        }
        let r = read(text, Some((&b, 102)));
        assert_eq!(r.words.len(), 5);
        assert_eq!(r.told[0].why, LeftOut::Boilerplate);
        assert_eq!(r.blocks.len(), 2);
    }
}
