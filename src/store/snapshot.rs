//! Snapshots of the memory store: a versioned binary file with an MD5
//! trailer, written atomically (temporary file, fsync, rename, fsync of the
//! directory), and refused with a clear error when corrupt or foreign.
//!
//! Layout (little endian): magic `FLOODGATE-STATE\n` (16 bytes), version
//! `u32`, payload length `u64`, payload, MD5 of the payload (16 bytes).
//! Payload: record count `u64`, then per record: kind `u8`, key length `u32`,
//! key bytes, and the kind's fields. Kind 5 is a restriction of the restricted set: its key,
//! then the restriction as JSON text. Kind 6 is a limit's per-key baselines: the limit's
//! name, then the [`super::BaselineSet`] as JSON text.

use super::{MemoryStore, Record, Restriction, UniqueRecord};
use crate::limit::bucket::BucketState;
use crate::limit::ewma::EwmaState;
use crate::limit::unique::UniqueSet;
use md5::{Digest, Md5};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const MAGIC: &[u8; 16] = b"FLOODGATE-STATE\n";
const VERSION: u32 = 1;
/// Largest key or set element accepted from a snapshot.
const MAX_TEXT: usize = 1 << 20;

/// Why a snapshot could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// File system error.
    #[error("state snapshot {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file does not start with floodgate's magic bytes.
    #[error("state snapshot {0}: not a floodgate state snapshot (wrong magic bytes); refusing to load it")]
    Foreign(PathBuf),
    /// Written by an unknown format version.
    #[error("state snapshot {path}: format version {version} is not supported (this floodgate reads version {VERSION})")]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        version: u32,
    },
    /// Length, checksum or record structure is wrong.
    #[error("state snapshot {path} is corrupt: {detail}; refusing to load it (move it away to start with empty state)")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: Corruption,
    },
}

/// What is wrong inside a corrupt snapshot.
#[derive(Debug, thiserror::Error)]
pub enum Corruption {
    /// Fewer bytes than the header.
    #[error("the header is truncated")]
    TruncatedHeader,
    /// The file's length is not the one its header announces.
    #[error("the file is {file} bytes but its header announces {announced} bytes of records")]
    Length {
        /// The file's length.
        file: usize,
        /// The record bytes announced.
        announced: u64,
    },
    /// The records do not match their checksum.
    #[error("the checksum does not match")]
    Checksum,
    /// A record is cut short.
    #[error("record data ends early at byte {0}")]
    EndsEarly(usize),
    /// A length field beyond the largest key or set element accepted.
    #[error("length {len} at byte {at} is too large")]
    TooLarge {
        /// The length read.
        len: usize,
        /// Where (just after it).
        at: usize,
    },
    /// A text field that is not UTF-8.
    #[error("text at byte {0} is not UTF-8")]
    NotUtf8(usize),
    /// A restriction record whose JSON cannot be read.
    #[error("bad restriction in the record at byte {at}: {source}")]
    Restriction {
        /// The record's offset.
        at: usize,
        /// Why.
        source: serde_json::Error,
    },
    /// A baselines record whose JSON cannot be read.
    #[error("bad baselines in the record at byte {at}: {source}")]
    Baselines {
        /// The record's offset.
        at: usize,
        /// Why.
        source: serde_json::Error,
    },
    /// A Bloom filter of no bytes.
    #[error("empty Bloom filter in the record at byte {0}")]
    EmptyBloom(usize),
    /// An unknown kind of unique set.
    #[error("unknown set kind {kind} in the record at byte {at}")]
    SetKind {
        /// The kind byte.
        kind: u8,
        /// The record's offset.
        at: usize,
    },
    /// An unknown kind of record.
    #[error("unknown record kind {kind} at byte {at}")]
    RecordKind {
        /// The kind byte.
        kind: u8,
        /// The record's offset.
        at: usize,
    },
    /// Bytes left after the announced records.
    #[error("{0} bytes after the last record")]
    Trailing(usize),
}

fn put_text(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_ewma(out: &mut Vec<u8>, s: &EwmaState) {
    out.extend_from_slice(&s.time_us.to_le_bytes());
    out.extend_from_slice(&s.rate.to_bits().to_le_bytes());
}

/// Appends one record to a payload.
fn encode(out: &mut Vec<u8>, key: &str, rec: &Record) {
    match rec {
        Record::Ewma(s) => {
            out.push(1);
            put_text(out, key);
            put_ewma(out, s);
        }
        Record::Unique(r) => {
            out.push(2);
            put_text(out, key);
            put_ewma(out, &r.state);
            out.extend_from_slice(&r.created_s.to_le_bytes());
            match &r.set {
                UniqueSet::Bloom(bits) => {
                    out.push(0);
                    out.extend_from_slice(&(bits.len() as u32).to_le_bytes());
                    out.extend_from_slice(bits);
                }
                UniqueSet::Exact(set) => {
                    out.push(1);
                    out.extend_from_slice(&(set.len() as u32).to_le_bytes());
                    let mut items: Vec<&str> = set.iter().map(|s| &**s).collect();
                    items.sort_unstable();
                    for s in items {
                        put_text(out, s);
                    }
                }
            }
        }
        Record::Gcra { tat_ns } => {
            out.push(3);
            put_text(out, key);
            out.extend_from_slice(&tat_ns.to_le_bytes());
        }
        Record::Bucket(b) => {
            out.push(4);
            put_text(out, key);
            for v in [b.last_ms, b.level, b.pending] {
                out.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            out.extend_from_slice(&b.dyn_rate.to_le_bytes());
            out.extend_from_slice(&b.dyn_burst.to_le_bytes());
        }
    }
}

/// A bounds-checked reader over the payload.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Corruption> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(Corruption::EndsEarly(self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Corruption> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, Corruption> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Corruption> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, Corruption> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, Corruption> {
        Ok(self.u64()? as i64)
    }
    fn f64(&mut self) -> Result<f64, Corruption> {
        Ok(f64::from_bits(self.u64()?))
    }
    fn len(&mut self) -> Result<usize, Corruption> {
        let n = self.u32()? as usize;
        if n > MAX_TEXT {
            return Err(Corruption::TooLarge {
                len: n,
                at: self.pos,
            });
        }
        Ok(n)
    }
    fn text(&mut self) -> Result<String, Corruption> {
        let n = self.len()?;
        let at = self.pos;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| Corruption::NotUtf8(at))
    }
    fn ewma(&mut self) -> Result<EwmaState, Corruption> {
        Ok(EwmaState {
            time_us: self.i64()?,
            rate: self.f64()?,
        })
    }
}

/// What a snapshot holds.
#[derive(Default)]
struct Contents {
    records: Vec<(String, Record)>,
    restrictions: Vec<Restriction>,
    baselines: Vec<(String, super::BaselineSet)>,
}

/// Decodes a payload into records.
fn decode(payload: &[u8]) -> Result<Contents, Corruption> {
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let count = r.u64()?;
    let mut out = Vec::new();
    let mut restrictions = Vec::new();
    let mut baselines = Vec::new();
    for _ in 0..count {
        let at = r.pos;
        let kind = r.u8()?;
        let key = r.text()?;
        let rec = match kind {
            5 => {
                let json = r.text()?;
                let mut res: Restriction = serde_json::from_str(&json)
                    .map_err(|source| Corruption::Restriction { at, source })?;
                res.key = key;
                restrictions.push(res);
                continue;
            }
            6 => {
                let json = r.text()?;
                let set: super::BaselineSet = serde_json::from_str(&json)
                    .map_err(|source| Corruption::Baselines { at, source })?;
                baselines.push((key, set));
                continue;
            }
            1 => Record::Ewma(r.ewma()?),
            2 => {
                let state = r.ewma()?;
                let created_s = r.i64()?;
                let set = match r.u8()? {
                    0 => {
                        let n = r.len()?;
                        if n == 0 {
                            return Err(Corruption::EmptyBloom(at));
                        }
                        UniqueSet::Bloom(r.take(n)?.to_vec().into_boxed_slice())
                    }
                    1 => {
                        let n = r.len()?;
                        let mut set = std::collections::HashSet::with_capacity(n.min(1024));
                        for _ in 0..n {
                            set.insert(r.text()?.into_boxed_str());
                        }
                        UniqueSet::Exact(set)
                    }
                    kind => return Err(Corruption::SetKind { kind, at }),
                };
                Record::Unique(UniqueRecord {
                    state,
                    created_s,
                    set,
                })
            }
            3 => Record::Gcra { tat_ns: r.i64()? },
            4 => Record::Bucket(BucketState {
                last_ms: r.f64()?,
                level: r.f64()?,
                pending: r.f64()?,
                dyn_rate: r.u32()?,
                dyn_burst: r.u32()?,
            }),
            kind => return Err(Corruption::RecordKind { kind, at }),
        };
        out.push((key, rec));
    }
    if r.pos != payload.len() {
        return Err(Corruption::Trailing(payload.len() - r.pos));
    }
    Ok(Contents {
        records: out,
        restrictions,
        baselines,
    })
}

/// Parses a whole snapshot file's bytes.
fn parse_file(path: &Path, bytes: &[u8]) -> Result<Contents, SnapshotError> {
    let corrupt = |detail: Corruption| SnapshotError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::Foreign(path.to_path_buf()));
    }
    if bytes.len() < 28 {
        return Err(corrupt(Corruption::TruncatedHeader));
    }
    let version = u32::from_le_bytes(bytes[16..20].try_into().unwrap_or_default());
    if version != VERSION {
        return Err(SnapshotError::Version {
            path: path.to_path_buf(),
            version,
        });
    }
    let len = u64::from_le_bytes(bytes[20..28].try_into().unwrap_or_default());
    let expect = 28u64.checked_add(len).and_then(|v| v.checked_add(16));
    if expect != Some(bytes.len() as u64) {
        return Err(corrupt(Corruption::Length {
            file: bytes.len(),
            announced: len,
        }));
    }
    let payload = &bytes[28..bytes.len() - 16];
    let sum = Md5::digest(payload);
    if sum.as_slice() != &bytes[bytes.len() - 16..] {
        return Err(corrupt(Corruption::Checksum));
    }
    decode(payload).map_err(corrupt)
}

impl MemoryStore {
    /// Serialises every record into snapshot bytes.
    pub fn snapshot_bytes(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        payload.extend_from_slice(&0u64.to_le_bytes());
        let mut count = 0u64;
        self.for_each_record(|key, rec| {
            encode(&mut payload, key, &rec);
            count += 1;
        });
        for r in self.restricted_set().all() {
            payload.push(5);
            put_text(&mut payload, &r.key);
            put_text(
                &mut payload,
                &serde_json::to_string(&r).unwrap_or_else(|_| "{}".into()),
            );
            count += 1;
        }
        for (limit, set) in self.baseline_shelf().all() {
            payload.push(6);
            put_text(&mut payload, &limit);
            put_text(
                &mut payload,
                &serde_json::to_string(&set).unwrap_or_else(|_| "{}".into()),
            );
            count += 1;
        }
        payload[..8].copy_from_slice(&count.to_le_bytes());
        let mut out = Vec::with_capacity(payload.len() + 44);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&payload);
        out.extend_from_slice(&Md5::digest(&payload));
        out
    }

    /// Writes a snapshot atomically: a temporary file next to `path`,
    /// fsync, rename over `path`, fsync of the directory. Returns the number
    /// of bytes written.
    pub fn save_snapshot(&self, path: &Path) -> Result<usize, SnapshotError> {
        let bytes = self.snapshot_bytes();
        write_atomic(path, &bytes)?;
        Ok(bytes.len())
    }

    /// Loads a snapshot into the store (records replace those with the same
    /// key and kind). A missing file is an `Io` error with `NotFound`; see
    /// [`MemoryStore::load_snapshot_if_present`].
    pub fn load_snapshot(&self, path: &Path) -> Result<usize, SnapshotError> {
        let bytes = std::fs::read(path).map_err(|source| SnapshotError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_snapshot_bytes(path, &bytes)
    }

    /// Loads snapshot bytes (read from `path`, which is only used in error
    /// messages). Nothing is loaded unless the whole snapshot is valid.
    pub fn load_snapshot_bytes(&self, path: &Path, bytes: &[u8]) -> Result<usize, SnapshotError> {
        let contents = parse_file(path, bytes)?;
        let n = contents.records.len() + contents.restrictions.len() + contents.baselines.len();
        for (key, rec) in contents.records {
            self.insert_record(&key, rec);
        }
        for r in contents.restrictions {
            self.restricted_set().restore(r);
        }
        for (limit, set) in contents.baselines {
            self.baseline_shelf().put(&limit, set);
        }
        Ok(n)
    }

    /// Like [`MemoryStore::load_snapshot`], but a missing file gives `Ok(None)`
    /// (first start). Corrupt or foreign files are still errors.
    pub fn load_snapshot_if_present(&self, path: &Path) -> Result<Option<usize>, SnapshotError> {
        match self.load_snapshot(path) {
            Err(SnapshotError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            other => other.map(Some),
        }
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    let io = |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        // The records name users and client addresses: readable by floodgate's user only.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        // Make the rename itself durable.
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

/// Saves `store` to `path` every `interval` and once more when `shutdown`
/// is cancelled. Each save runs on the blocking pool. Errors are returned
/// from the final save; failed periodic saves are logged and retried.
pub async fn run_snapshots(
    store: Arc<MemoryStore>,
    path: PathBuf,
    interval: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), SnapshotError> {
    let save = |store: Arc<MemoryStore>, path: PathBuf| async move {
        match tokio::task::spawn_blocking(move || store.save_snapshot(&path)).await {
            Ok(r) => r.map(|_| ()),
            Err(e) => Err(SnapshotError::Io {
                path: PathBuf::new(),
                source: std::io::Error::other(e.to_string()),
            }),
        }
    };
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {
                if let Err(e) = save(store.clone(), path.clone()).await {
                    tracing::warn!(error = %e, "periodic state snapshot failed");
                }
            }
        }
    }
    save(store, path).await
}
