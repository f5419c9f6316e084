//! Word shingles, their MinHash signatures, and the signatures cut into bands: the
//! near-duplicate fingerprint.
//!
//! Each run of [`SHINGLE_WORDS`] consecutive words is one shingle. For each of [`HASHES`]
//! hash functions the signature keeps the smallest value over the shingles; for two
//! messages, one row of their signatures agrees with probability equal to the Jaccard
//! similarity `s` of their shingle sets. The signature is cut into [`BANDS`] bands of
//! [`ROWS`] rows, and each band is one key value: two messages share at least one band with
//! probability
//!
//! ```text
//! P(s) = 1 − (1 − s^r)^b        with b = 24 bands, r = 5 rows, 3-word shingles
//! ```
//!
//! | Jaccard s | 0.05 | 0.1 | 0.2 | 0.3 | 0.4 | 0.5 | 0.6 | 0.7 | 0.8 | 0.9 |
//! |---|---|---|---|---|---|---|---|---|---|---|
//! | P(share a band) | 7.5·10⁻⁶ | 2.4·10⁻⁴ | 0.0077 | 0.057 | 0.22 | 0.53 | 0.86 | 0.988 | 0.99993 | 1 − 5·10⁻¹⁰ |
//!
//! # Spun copies
//!
//! Copies of one template (another greeting, other tokens and numbers, which masking
//! removes; hidden words, which the HTML step removes) sit at s ≥ 0.8. Spinning moves them
//! down. With a fraction q of the words differing between two copies, a k-word shingle
//! survives with probability (1 − q)^k, so
//!
//! ```text
//! s_k ≈ (1 − q)^k / (2 − (1 − q)^k)
//! ```
//!
//! A fifth of the word positions spun, each with four alternatives, makes two copies differ
//! in q = 0.2 · 3/4 = 0.15 of their words: s₃ ≈ 0.44 for 3-word shingles, s₂ ≈ 0.57 for
//! word pairs, s₁ ≈ 0.74 for single words; a family spun at 28 % (q = 0.21) falls to
//! s₃ ≈ 0.33, s₂ ≈ 0.45. The campaign corpus test (tests/contain/campaign_corpus.rs)
//! measures its ten families spun at a chance of 20 % per word at s₃ 0.23–0.66 (median
//! 0.41) and s₂ 0.38–0.72 (median 0.53); in the two most spun families half the copy pairs
//! are under s₃ = 0.3. The text bands alone then give P ≈ 0.06–0.36: a third of the copy
//! pairs share a band, and 2 of 10 families form one group.
//!
//! No band scheme on the text alone can tie those families together while keeping unrelated
//! texts apart: among the test's 20,000 paragraphs of real text (the installed manual
//! pages; measured once, exhaustively for the pairs sharing an uncommon word pair) 132
//! pairs under s₃ = 0.3 have s₂ ≥ 0.4 and 415 have s₂ ≥ 0.35, where those copies sit,
//! while the limit is about 200 such pairs sharing a band (10⁻⁶ of 2·10⁸); single words are
//! worse, as unrelated texts share their common words (8,000 of those pairs at s₁ ≥ 0.3,
//! 50,000 at s₁ ≥ 0.2). The text bands are therefore kept as they are (they catch a
//! spun Subject, and text spun up to about 10 %), and a second signature is joined to
//! evidence that a spinner keeps: the Subject.
//!
//! # The Subject-joined bands
//!
//! A message with a Subject also has [`SUBJECT_BANDS`] bands of [`SUBJECT_ROWS`] rows of a
//! MinHash signature over its word pairs ([`PAIR_WORDS`]), each band's key a hash of the
//! Subject's shape (digit runs as `0`, random tokens as `*`: the shape a numbered or tagged
//! Subject keeps across copies) with the band's rows. Two messages share one only under
//! one Subject shape, with probability in their word-pair similarity s₂:
//!
//! ```text
//! P₂(s₂) = 1 − (1 − s₂^4)^48
//! ```
//!
//! | s₂ | 0.02 | 0.05 | 0.1 | 0.2 | 0.3 | 0.38 | 0.45 | 0.5 | 0.6 |
//! |---|---|---|---|---|---|---|---|---|---|
//! | P₂ | 7.7·10⁻⁶ | 3.0·10⁻⁴ | 0.0048 | 0.074 | 0.32 | 0.64 | 0.87 | 0.955 | 0.999 |
//!
//! A copy pair shares a band with probability 1 − (1 − P(s₃)) (1 − P₂(s₂)) (the two
//! signatures' functions are drawn from other seeds): the test measures 266 of 280 pairs at
//! 20 % spun, every family one group, and as copies arrive one account after another a limit
//! of three accounts relays at most three accounts' copies in every family (simulated over
//! the measured similarities: in 94 % of draws of the hash functions all ten families are
//! stopped so, the two most spun in 97 %). Four rows rather than three keep the word pairs
//! that unrelated texts share by chance ("of the", "in the": s₂ ≈ 0.01–0.03 for most pairs)
//! from linking them: with every one of the 20,000 real texts under one Subject, 1.1·10⁻⁵ of
//! the pairs under s₃ = 0.3 share a band (with 3 rows and 32 bands, 2·10⁻⁴); 64 bands would
//! reach 99 % of the draws at 1.3·10⁻⁵ and 16 more keys per message. Unrelated mail under
//! one Subject shape (a thread's replies, notes numbered alike) is where the joined bands
//! can err; replies leave their quotes out, and a campaign needs its copies linked across
//! four accounts, which at 10⁻⁵ per pair takes thousands of unrelated messages under one
//! Subject within one period. A spinner who also spins the Subject meets the text bands
//! alone.
//!
//! The shingle's words are hashed with SipHash-1-3 under a fixed key and combined into one
//! 64-bit shingle hash (a word pair's running hash is its 3-word shingle's prefix: both are
//! read in one pass over the words); hash function `i` is `((a_i · x + c_i) mod 2⁶⁴) >> 32`
//! (multiply-add-shift, a 2-universal family) with fixed odd `a_i` and `c_i` drawn from a
//! fixed seed, so a signature costs one strong hash per word and a multiply per function.
//!
//! A text of more than [`SAMPLE`] distinct shingles enters the signature with its
//! [`SAMPLE`] smallest shingle hashes only (a text of fewer enters whole, and its signature
//! is the MinHash of its whole set). Shingle hashes are uniform, so these are a uniform
//! sample of the set, and the same shingles are sampled in every text that holds them
//! among its smallest: the samples of two texts of about one length (as copies of one
//! template are) have about the Jaccard similarity of the texts, and the rows of their
//! signatures agree with that probability. The bound makes a long text cost a few
//! comparisons per shingle, to select the sample, and [`HASHES`] multiplications for each
//! of [`SAMPLE`] shingles, rather than for each of up to [`MAX_SHINGLES`].

use siphasher::sip::SipHasher13;
use std::hash::Hasher;

/// Words in one shingle: 3 rather than 4 keeps spun copies (a fifth of the words
/// replaced) at a Jaccard similarity of about 0.4 instead of 0.3.
pub const SHINGLE_WORDS: usize = 3;
/// Bands of the signature, each one key value.
pub const BANDS: usize = 24;
/// Rows (hash functions) in one band.
pub const ROWS: usize = 5;
/// Hash functions in a signature.
pub const HASHES: usize = BANDS * ROWS;
/// Words in one shingle of the Subject-joined signature (word pairs).
pub const PAIR_WORDS: usize = 2;
/// Bands of the Subject-joined signature, each one key value.
pub const SUBJECT_BANDS: usize = 48;
/// Rows (hash functions) in one band of the Subject-joined signature.
pub const SUBJECT_ROWS: usize = 4;
/// Hash functions in the Subject-joined signature.
pub const PAIR_HASHES: usize = SUBJECT_BANDS * SUBJECT_ROWS;
/// A text of fewer words has no fingerprint: too short to tell a template from chance.
pub const MIN_WORDS: usize = 20;
/// At most this many shingles are read from one message (the first ones).
pub const MAX_SHINGLES: usize = 2_000;
/// At most this many words are read from one message.
pub const MAX_WORDS: usize = MAX_SHINGLES + SHINGLE_WORDS - 1;
/// At most this many distinct shingles enter the signature: the smallest shingle hashes
/// (see the module documentation).
pub const SAMPLE: usize = 256;

/// The fixed key of word hashes (and so of every shingle and signature): fingerprints
/// compare across processes, nodes and restarts.
const WORD_KEY: (u64, u64) = (0x666c_6f6f_6467_6174, 0x6d65_7373_6167_6531);
/// The fixed key of band hashes.
const BAND_KEY: (u64, u64) = (0x6261_6e64_7321_7631, 0x666c_6f6f_6467_6174);
/// The fixed key of the Subject-joined band hashes.
const SUBJECT_KEY: (u64, u64) = (0x7375_626a_6563_7431, 0x6261_6e64_7321_7632);

/// SplitMix64: the sequence the hash functions' constants are drawn from.
const fn splitmix64(state: u64) -> (u64, u64) {
    let state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (state, z ^ (z >> 31))
}

/// `N` hash functions' constants `(a_i, c_i)`, odd and distinct, drawn at compile time
/// from the fixed `seed`.
const fn functions<const N: usize>(seed: u64) -> ([u64; N], [u64; N]) {
    let mut a = [0u64; N];
    let mut c = [0u64; N];
    let mut state = seed;
    let mut i = 0;
    while i < N {
        let (s, x) = splitmix64(state);
        let (s, y) = splitmix64(s);
        state = s;
        a[i] = x | 1;
        c[i] = y;
        i += 1;
    }
    (a, c)
}

/// The constants of the shingle signature's hash functions.
const FUNCTIONS: ([u64; HASHES], [u64; HASHES]) = functions(0x0123_4567_89ab_cdef);
/// The constants of the pair signature's hash functions (another seed: its rows are
/// independent of the shingle signature's).
const PAIR_FUNCTIONS: ([u64; PAIR_HASHES], [u64; PAIR_HASHES]) = functions(0xfedc_ba98_7654_3210);

/// The hash of one normalised word.
pub(super) fn word_hash(word: &str) -> u64 {
    word_hash_bytes(word.as_bytes())
}

/// [`word_hash`] of a word given as its UTF-8 bytes.
pub(super) fn word_hash_bytes(word: &[u8]) -> u64 {
    siphash13(WORD_KEY, word)
}

/// [`word_hash_bytes`] of the first `len` bytes (at most 15) of `word`'s little-endian
/// bytes, the bytes after them zero: the hash's two blocks read as they lie.
pub(super) fn word_hash_padded(word: u128, len: usize) -> u64 {
    debug_assert!(len < 16 && word >> (8 * len) == 0);
    let (k0, k1) = WORD_KEY;
    let mut v = sip_init(k0, k1);
    let (low, high) = (word as u64, (word >> 64) as u64);
    let tail = if len >= 8 {
        v[3] ^= low;
        sip_round(&mut v);
        v[0] ^= low;
        high
    } else {
        low
    };
    sip_finish(v, tail | (len as u64) << 56)
}

/// SipHash's state for the key `(k0, k1)`.
fn sip_init(k0: u64, k1: u64) -> [u64; 4] {
    [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ]
}

/// One SipRound.
#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// SipHash-1-3's end: the `last` block (the bytes left, the length's low byte at the top)
/// and the three finishing rounds.
#[inline(always)]
fn sip_finish(mut v: [u64; 4], last: u64) -> u64 {
    v[3] ^= last;
    sip_round(&mut v);
    v[0] ^= last;
    v[2] ^= 0xff;
    for _ in 0..3 {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// SipHash-1-3 of `bytes` under `key`: the value a [`SipHasher13`] gives for one write of
/// them, computed in one pass without the hasher's buffer (a word is a few bytes, and the
/// buffering costs as much as the rounds).
fn siphash13(key: (u64, u64), bytes: &[u8]) -> u64 {
    let mut v = sip_init(key.0, key.1);
    let mut blocks = bytes.chunks_exact(8);
    for block in &mut blocks {
        let m = u64::from_le_bytes(block.try_into().unwrap_or([0; 8]));
        v[3] ^= m;
        sip_round(&mut v);
        v[0] ^= m;
    }
    let last = blocks
        .remainder()
        .iter()
        .enumerate()
        .fold((bytes.len() as u64 & 0xff) << 56, |b, (i, &c)| {
            b | u64::from(c) << (8 * i)
        });
    sip_finish(v, last)
}

/// The final mix of MurmurHash3: spreads every input bit over the output.
fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The hash of one shingle from its words' hashes (order matters).
fn shingle_hash(words: &[u64]) -> u64 {
    let h = words.iter().fold(0u64, |h, &w| {
        h.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(w)
    });
    fmix64(h)
}

/// The hashes of the shingles of `words` (word hashes, in order): the first
/// [`MAX_SHINGLES`]; a text of fewer than [`SHINGLE_WORDS`] words has none.
pub(super) fn shingles(words: &[u64]) -> Vec<u64> {
    words
        .windows(SHINGLE_WORDS)
        .take(MAX_SHINGLES)
        .map(shingle_hash)
        .collect()
}

/// The shingles and (with `with_pairs`) the word pairs of `words`, read in one pass: each
/// pair's running hash is its shingle's prefix.
fn shingles_and_pairs(words: &[u64], with_pairs: bool) -> (Vec<u64>, Vec<u64>) {
    let n = words.len().min(MAX_WORDS);
    let mut triples = Vec::with_capacity(n.saturating_sub(SHINGLE_WORDS - 1));
    let mut twos = Vec::with_capacity(if with_pairs { n } else { 0 });
    for i in 0..n.saturating_sub(PAIR_WORDS - 1) {
        let two = words[i]
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(words[i + 1]);
        if with_pairs && twos.len() < MAX_SHINGLES {
            twos.push(fmix64(two));
        }
        if i + SHINGLE_WORDS <= n {
            let three = two
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(words[i + 2]);
            triples.push(fmix64(three));
        }
    }
    (triples, twos)
}

/// The MinHash under the functions `f` of the [`SAMPLE`] smallest distinct values of
/// `hashes` (reordered).
fn minhash<const N: usize>(hashes: &mut Vec<u64>, f: &([u64; N], [u64; N])) -> [u32; N] {
    let sample = smallest_distinct(hashes, SAMPLE);
    let mut mins = [u32::MAX; N];
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected on this CPU.
            unsafe { mins_avx2(sample, &f.0, &f.1, &mut mins) };
            return mins;
        }
    }
    mins_portable(sample, &f.0, &f.1, &mut mins);
    mins
}

/// Sets each `mins[i]` to the smallest `(a[i]·x + c[i]) >> 32` (wrapping) over the `sample`
/// values `x`: one function at a time over the whole sample, its minimum in a register.
fn mins_portable(sample: &[u64], a: &[u64], c: &[u64], mins: &mut [u32]) {
    for ((m, &ai), &ci) in mins.iter_mut().zip(a).zip(c) {
        *m = sample.iter().fold(u32::MAX, |min, &x| {
            min.min((ai.wrapping_mul(x).wrapping_add(ci) >> 32) as u32)
        });
    }
}

/// [`mins_portable`] with AVX2: eight functions at a time, four to a register, over the
/// whole sample. A lane's 64-bit product is put together from three 32-bit ones (AVX2 has
/// no 64-bit multiply): `a·x = lo(a)·lo(x) + ((lo(a)·hi(x) + hi(a)·lo(x)) << 32)`, wrapping,
/// the same bits as the portable one. The functions past the last whole eight are left
/// to [`mins_portable`].
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn mins_avx2(sample: &[u64], a: &[u64], c: &[u64], mins: &mut [u32]) {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_loadu_si256, _mm256_min_epu32, _mm256_mul_epu32,
        _mm256_set1_epi64x, _mm256_slli_epi64, _mm256_srli_epi64, _mm256_storeu_si256,
    };
    const LANES: usize = 8;
    let whole = mins.len().min(a.len()).min(c.len()) / LANES * LANES;
    let load = |v: &[u64]| {
        // SAFETY: `v` holds 4 u64, 32 bytes; loadu has no alignment requirement.
        unsafe { _mm256_loadu_si256(v.as_ptr().cast::<__m256i>()) }
    };
    for g in (0..whole).step_by(LANES) {
        let (a0, a1) = (load(&a[g..g + 4]), load(&a[g + 4..g + 8]));
        let (c0, c1) = (load(&c[g..g + 4]), load(&c[g + 4..g + 8]));
        let (ah0, ah1) = (_mm256_srli_epi64(a0, 32), _mm256_srli_epi64(a1, 32));
        // Only the low 32 bits of each 64-bit lane count: the high ones are zero in every
        // value compared, so the 32-bit minimum is the lanes' minimum.
        let (mut m0, mut m1) = (_mm256_set1_epi64x(-1), _mm256_set1_epi64x(-1));
        for &x in sample {
            let xl = _mm256_set1_epi64x(x as i64);
            let xh = _mm256_srli_epi64(xl, 32);
            let value = |a: __m256i, ah: __m256i, c: __m256i| {
                let cross = _mm256_add_epi64(_mm256_mul_epu32(a, xh), _mm256_mul_epu32(ah, xl));
                let product =
                    _mm256_add_epi64(_mm256_mul_epu32(a, xl), _mm256_slli_epi64(cross, 32));
                _mm256_srli_epi64(_mm256_add_epi64(product, c), 32)
            };
            m0 = _mm256_min_epu32(m0, value(a0, ah0, c0));
            m1 = _mm256_min_epu32(m1, value(a1, ah1, c1));
        }
        let mut lanes = [0u64; LANES];
        // SAFETY: `lanes` holds 8 u64, 64 bytes; storeu has no alignment requirement.
        unsafe {
            _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), m0);
            _mm256_storeu_si256(lanes.as_mut_ptr().add(4).cast::<__m256i>(), m1);
        }
        for (m, l) in mins[g..g + LANES].iter_mut().zip(lanes) {
            *m = l as u32;
        }
    }
    mins_portable(sample, &a[whole..], &c[whole..], &mut mins[whole..]);
}

/// The MinHash signature of the shingles of `words` (word hashes, in order): the first
/// [`MAX_SHINGLES`] shingles are read, and of those the [`SAMPLE`] smallest distinct
/// shingle hashes enter the signature. None with fewer than [`MIN_WORDS`] words.
#[cfg(test)]
fn signature(words: &[u64]) -> Option<[u32; HASHES]> {
    if words.len() < MIN_WORDS {
        return None;
    }
    let (mut triples, _) = shingles_and_pairs(words, false);
    Some(minhash(&mut triples, &FUNCTIONS))
}

/// The fingerprint of `words` (word hashes, in order): the [`BANDS`] band values of its
/// shingle signature, then, with a Subject shape, the [`SUBJECT_BANDS`] values of its
/// word-pair signature joined to that shape ([`subject_band_keys`]). Empty with fewer
/// than [`MIN_WORDS`] words.
pub(super) fn fingerprint(words: &[u64], subject_shape: Option<&str>) -> Vec<String> {
    if words.len() < MIN_WORDS {
        return Vec::new();
    }
    let (mut triples, mut twos) = shingles_and_pairs(words, subject_shape.is_some());
    let mut keys = band_keys(&minhash(&mut triples, &FUNCTIONS));
    if let Some(shape) = subject_shape {
        keys.extend(subject_band_keys(
            shape,
            &minhash(&mut twos, &PAIR_FUNCTIONS),
        ));
    }
    keys
}

/// The `k` smallest distinct values of `v`, in any order (`v` reordered; duplicates are
/// returned too when `v` holds at most `k` values: they change no minimum).
fn smallest_distinct(v: &mut Vec<u64>, k: usize) -> &[u64] {
    if v.len() <= k {
        return v;
    }
    drop_most_repeats(v);
    let mut take = 2 * k;
    loop {
        let t = take.min(v.len());
        if t < v.len() {
            v.select_nth_unstable(t - 1);
        }
        let head = &mut v[..t];
        head.sort_unstable();
        // The distinct values to the front, the repeats behind them (swapped, not dropped:
        // the next round selects from all of `v` again).
        let mut n = usize::from(t > 0);
        for i in 1..t {
            if head[i] != head[n - 1] {
                head.swap(n, i);
                n += 1;
            }
        }
        if n >= k || t == v.len() {
            return &v[..n.min(k)];
        }
        take = take.saturating_mul(4);
    }
}

/// Drops from `v` each value equal to the last one seen in its slot of a small direct-mapped
/// table: the repeats of a text that says the same thing many times mostly go, so that
/// [`smallest_distinct`] selects among about as many values as there are distinct ones.
fn drop_most_repeats(v: &mut Vec<u64>) {
    const SLOTS: usize = 1024;
    let mut seen = [None; SLOTS];
    v.retain(|&x| {
        let slot = &mut seen[(x >> 54) as usize % SLOTS];
        let repeat = *slot == Some(x);
        *slot = Some(x);
        !repeat
    });
}

/// `{letter}{index}:{16 hex digits of value}`, written digit by digit (the formatting
/// machinery costs more than the rest of a band's key).
fn band_key(letter: char, index: usize, value: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut key = String::with_capacity(24);
    key.push(letter);
    let mut digits = [0u8; 20];
    let mut n = index;
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    key.extend(digits[at..].iter().map(|&d| char::from(d)));
    key.push(':');
    key.extend(
        (0..16)
            .rev()
            .map(|k| char::from(HEX[(value >> (4 * k)) as usize & 0xf])),
    );
    key
}

/// One key value per band of `signature`: `b{index}:{16 hex digits}`, the hex a SipHash of
/// the band's index and rows.
pub(super) fn band_keys(signature: &[u32; HASHES]) -> Vec<String> {
    signature
        .chunks_exact(ROWS)
        .enumerate()
        .map(|(i, rows)| {
            let mut h = SipHasher13::new_with_keys(BAND_KEY.0, BAND_KEY.1);
            h.write_u64(i as u64);
            for &r in rows {
                h.write_u32(r);
            }
            band_key('b', i, h.finish())
        })
        .collect()
}

/// One key value per band of the word-pair signature `pairs` joined to the Subject shape
/// `shape`: `s{index}:{16 hex digits}`, the hex a SipHash of the shape, the band's index
/// and rows. Two messages share one only under one Subject shape.
pub(super) fn subject_band_keys(shape: &str, pairs: &[u32; PAIR_HASHES]) -> Vec<String> {
    pairs
        .chunks_exact(SUBJECT_ROWS)
        .enumerate()
        .map(|(i, rows)| {
            let mut h = SipHasher13::new_with_keys(SUBJECT_KEY.0, SUBJECT_KEY.1);
            h.write(shape.as_bytes());
            h.write_u8(0xff);
            h.write_u64(i as u64);
            for &r in rows {
                h.write_u32(r);
            }
            band_key('s', i, h.finish())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(text: &str) -> Vec<u64> {
        text.split_whitespace().map(word_hash).collect()
    }

    #[test]
    fn the_functions_are_odd_and_distinct() {
        let (a, c) = &FUNCTIONS;
        let mut seen: Vec<u64> = a.to_vec();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), HASHES);
        assert!(a.iter().all(|x| x % 2 == 1));
        assert_ne!(c[0], c[1]);
    }

    proptest! {
        /// Any bytes, any key: the SipHasher13 value.
        #[test]
        fn siphash_is_the_hashers(bytes in prop::collection::vec(any::<u8>(), 0..40), k0: u64, k1: u64) {
            let mut h = SipHasher13::new_with_keys(k0, k1);
            h.write(&bytes);
            prop_assert_eq!(siphash13((k0, k1), &bytes), h.finish());
        }

        /// Any word of up to 15 bytes: padded, the hash of its bytes.
        #[test]
        fn padded_words_hash_as_their_bytes(bytes in prop::collection::vec(any::<u8>(), 0..16)) {
            let word = bytes.iter().rev().fold(0u128, |w, &b| w << 8 | u128::from(b));
            prop_assert_eq!(word_hash_padded(word, bytes.len()), word_hash_bytes(&bytes));
        }

        /// Any band, any value: the key as `format!` writes it.
        #[test]
        fn band_keys_are_written_as_formatted(index in prop_oneof![0usize..200, any::<usize>()], value: u64) {
            prop_assert_eq!(band_key('b', index, value), format!("b{index}:{value:016x}"));
            prop_assert_eq!(band_key('s', index, value), format!("s{index}:{value:016x}"));
        }
    }

    #[test]
    fn short_texts_have_no_signature() {
        let words = hashes(&"word ".repeat(MIN_WORDS - 1));
        assert_eq!(signature(&words), None);
        assert!(signature(&hashes(&"word ".repeat(MIN_WORDS))).is_some());
    }

    #[test]
    fn keys_are_one_per_band_and_stable() {
        let words = hashes("the quick brown fox jumps over the lazy dog and runs far away into the dark forest where nobody lives any more");
        let keys = band_keys(&signature(&words).expect("long enough"));
        assert_eq!(keys.len(), BANDS);
        assert!(keys[0].starts_with("b0:") && keys[23].starts_with("b23:"));
        assert!(keys.iter().all(|k| k.len() == k.find(':').unwrap() + 17));
        // Fixed keys: the same text gives the same values in every process.
        assert_eq!(keys, band_keys(&signature(&words).unwrap()));
    }

    #[test]
    fn word_order_matters() {
        let a = hashes("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty");
        let mut b = a.clone();
        b.reverse();
        let (ka, kb) = (
            band_keys(&signature(&a).unwrap()),
            band_keys(&signature(&b).unwrap()),
        );
        assert!(ka.iter().zip(&kb).all(|(x, y)| x != y));
    }

    /// The MinHash of a set of shingle hashes, every one read.
    fn minhash_of(set: &[u64]) -> [u32; HASHES] {
        let (a, c) = &FUNCTIONS;
        let mut mins = [u32::MAX; HASHES];
        for &x in set {
            for i in 0..HASHES {
                mins[i] = mins[i].min((a[i].wrapping_mul(x).wrapping_add(c[i]) >> 32) as u32);
            }
        }
        mins
    }

    #[test]
    fn a_text_of_few_distinct_shingles_enters_whole() {
        // 600 words saying one 40-word sentence 15 times: 600 shingles, 40 distinct.
        let sentence: Vec<u64> = (0..40u64).map(|i| word_hash(&format!("w{i}"))).collect();
        let words: Vec<u64> = sentence.iter().copied().cycle().take(600).collect();
        let mut set = shingles(&words);
        set.sort_unstable();
        set.dedup();
        assert_eq!(set.len(), 40);
        assert_eq!(signature(&words), Some(minhash_of(&set)));
    }

    #[test]
    fn a_long_text_enters_with_its_smallest_shingles() {
        let words: Vec<u64> = (0..2_000u64).map(|i| word_hash(&format!("w{i}"))).collect();
        let mut set = shingles(&words);
        set.sort_unstable();
        set.dedup();
        assert!(set.len() > SAMPLE);
        assert_eq!(signature(&words), Some(minhash_of(&set[..SAMPLE])));
    }

    use proptest::prelude::*;

    proptest! {
        /// Any values, any repeats: the k smallest distinct ones, as sorting finds them.
        #[test]
        fn smallest_distinct_is_what_sorting_finds(
            values in prop::collection::vec(
                (0u64..400).prop_map(|x| x.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                0..3_000,
            ),
            k in 1usize..300,
        ) {
            let mut sorted = values.clone();
            sorted.sort_unstable();
            sorted.dedup();
            let mut v = values.clone();
            let mut got = smallest_distinct(&mut v, k).to_vec();
            got.sort_unstable();
            got.dedup();
            if values.len() <= k {
                prop_assert_eq!(got, sorted);
            } else {
                sorted.truncate(k);
                prop_assert_eq!(got.len(), smallest_distinct(&mut values.clone(), k).len());
                prop_assert_eq!(got, sorted);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    proptest! {
        /// Any sample, any functions: the AVX2 minima are the portable ones.
        #[test]
        fn vector_minima_are_the_portable_ones(
            sample in prop::collection::vec(any::<u64>(), 0..300),
            functions in prop::collection::vec((any::<u64>(), any::<u64>()), 0..40),
        ) {
            if !std::is_x86_feature_detected!("avx2") {
                // Nothing to compare on a CPU without it (the portable loop is used there).
                return Ok(());
            }
            let a: Vec<u64> = functions.iter().map(|f| f.0).collect();
            let c: Vec<u64> = functions.iter().map(|f| f.1).collect();
            let mut want = vec![u32::MAX; a.len()];
            mins_portable(&sample, &a, &c, &mut want);
            let mut got = vec![u32::MAX; a.len()];
            // SAFETY: AVX2 was detected above.
            unsafe { mins_avx2(&sample, &a, &c, &mut got) };
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn rows_agree_about_as_often_as_the_jaccard_similarity() {
        // 100 words, the second text with its last 20 words changed: 77 shared shingles of
        // 97 each, Jaccard 77 / 117 ≈ 0.66.
        let a: Vec<u64> = (0..100u64).map(|i| word_hash(&format!("w{i}"))).collect();
        let mut b = a.clone();
        for (i, w) in b.iter_mut().enumerate().skip(80) {
            *w = word_hash(&format!("other{i}"));
        }
        let (sa, sb) = (signature(&a).unwrap(), signature(&b).unwrap());
        let agree = sa.iter().zip(&sb).filter(|(x, y)| x == y).count();
        let expected = HASHES as f64 * 77.0 / 117.0;
        // Binomial(120, 0.66): standard deviation 5.2; 5 of them either way.
        assert!(
            (agree as f64 - expected).abs() < 26.0,
            "{agree} rows agree, about {expected:.0} expected"
        );
    }

    #[test]
    fn one_pass_reads_the_shingles_and_pairs_of_the_first_words() {
        for n in [0, 1, 2, 3, 50, MAX_WORDS - 1, MAX_WORDS, MAX_WORDS + 40] {
            let words: Vec<u64> = (0..n as u64).map(|i| word_hash(&format!("w{i}"))).collect();
            let (triples, twos) = shingles_and_pairs(&words, true);
            assert_eq!(triples, shingles(&words), "{n} words");
            let expected: Vec<u64> = words
                .windows(PAIR_WORDS)
                .take(MAX_SHINGLES)
                .map(shingle_hash)
                .collect();
            assert_eq!(twos, expected, "{n} words");
            assert!(shingles_and_pairs(&words, false).1.is_empty());
        }
    }

    #[test]
    fn subject_bands_come_only_with_a_subject_and_differ_by_its_shape() {
        let words = hashes(&"alpha beta gamma delta epsilon zeta eta theta iota kappa ".repeat(3));
        let plain = fingerprint(&words, None);
        assert_eq!(plain.len(), BANDS);
        assert_eq!(plain, band_keys(&signature(&words).unwrap()));
        let one = fingerprint(&words, Some("offer 0"));
        let other = fingerprint(&words, Some("invoice 0"));
        assert_eq!(one.len(), BANDS + SUBJECT_BANDS);
        assert_eq!(one[..BANDS], plain[..]);
        assert!(one[BANDS..].iter().all(|k| k.starts_with('s')));
        assert!(
            one[BANDS].starts_with("s0:") && one[BANDS + SUBJECT_BANDS - 1].starts_with("s47:")
        );
        // One text under two shapes: the text's bands shared, the joined ones not.
        assert_eq!(one[..BANDS], other[..BANDS]);
        assert!(one[BANDS..]
            .iter()
            .zip(&other[BANDS..])
            .all(|(x, y)| x != y));
        assert_eq!(one, fingerprint(&words, Some("offer 0")));
        assert!(fingerprint(&words[..MIN_WORDS - 1], Some("offer 0")).is_empty());
    }

    #[test]
    fn pair_rows_agree_about_as_often_as_the_pairs_jaccard_similarity() {
        // 200 words, every fifth one replaced in the second text: 119 of 199 pairs kept
        // (those of two unchanged words), Jaccard 119 / 279 ≈ 0.43; of the 3-word
        // shingles 79 of 198, Jaccard 79 / 317 ≈ 0.25.
        let a: Vec<u64> = (0..200u64).map(|i| word_hash(&format!("w{i}"))).collect();
        let mut b = a.clone();
        for (i, w) in b.iter_mut().enumerate().filter(|(i, _)| i % 5 == 2) {
            *w = word_hash(&format!("other{i}"));
        }
        let sig = |w: &[u64]| {
            let (_, mut twos) = shingles_and_pairs(w, true);
            minhash(&mut twos, &PAIR_FUNCTIONS)
        };
        let (sa, sb) = (sig(&a), sig(&b));
        let agree = sa.iter().zip(&sb).filter(|(x, y)| x == y).count();
        let expected = PAIR_HASHES as f64 * 119.0 / 279.0;
        // Binomial(192, 0.43): standard deviation 6.9; 5 of them either way.
        assert!(
            (agree as f64 - expected).abs() < 35.0,
            "{agree} rows agree, about {expected:.0} expected"
        );
    }

    #[test]
    fn the_two_signatures_use_other_functions() {
        let (a, _) = &FUNCTIONS;
        let (p, _) = &PAIR_FUNCTIONS;
        assert!(p.iter().all(|x| x % 2 == 1 && !a.contains(x)));
    }
}
