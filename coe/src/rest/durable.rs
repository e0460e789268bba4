//! The store made durable: every change is logged to the WAL, and fsynced, before it is
//! applied and acknowledged; opening replays the log.
//!
//! Each record is a change's effects or a snapshot of the compacted state, in
//! [`super::record`]'s binary form (logs written before 2026-12-07 hold JSON records, which
//! are still read). Sequence numbers must follow each other; a gap, an undecodable record or
//! a replayed state that fails validation under the current configuration is a startup
//! error, and the log is never emptied to get past it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::error::RequestError;
use super::record::{self, Record};
use super::store::{Change, Effect, Rules, Store, Touched};
use super::types::Kind;
use super::wal::{Framed, Torn, Wal, WalError};

/// The log's file name in the state directory.
pub const WAL_FILE: &str = "rest.wal";
/// The lock file that keeps a second process off the state directory.
pub const LOCK_FILE: &str = "rest.lock";
/// Compact once the log holds this many records.
pub const COMPACT_AT: u64 = 1024;

/// Why the durable state could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The state directory could not be created.
    #[error("state directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Another process (or northbound) has the state directory open.
    #[error(
        "state directory {0} is in use by another svcflow process (lock held on its rest.lock)"
    )]
    Locked(PathBuf),
    /// The log could not be read, or is corrupt.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// A record is intact (its checksum matches) but cannot be understood.
    #[error("{path}: record {index}: {reason}; refusing to start (the file was left as it is)")]
    Record {
        /// The log.
        path: PathBuf,
        /// The record's position, from 0.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The stored state breaks a rule of the current configuration (e.g. a narrower node
    /// port range).
    #[error(
        "{path}: the stored state is not valid under the current configuration: {error}; \
         fix the configuration, or the offending object: `svcflow store export FILE` writes \
         the state out all the same, and `svcflow store import FILE` takes it back once \
         corrected (the file was left as it is)"
    )]
    Invalid {
        /// The log.
        path: PathBuf,
        /// The first rule broken.
        error: RequestError,
    },
}

/// Takes the state directory's lock, so that two processes never append to one log.
fn lock_dir(dir: &Path) -> Result<std::fs::File, OpenError> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| OpenError::Dir {
            path: path.clone(),
            source,
        })?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(OpenError::Locked(dir.to_path_buf())),
        Err(e) => Err(OpenError::Dir {
            path,
            source: e.into(),
        }),
    }
}

/// Why a change was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The request is invalid; nothing changed.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// Logging failed; nothing changed, but the server should report a 500.
    #[error(transparent)]
    Wal(#[from] WalError),
}

/// A [`Store`] backed by a write-ahead log.
#[derive(Debug)]
pub struct DurableStore {
    /// Held open, with an exclusive `flock`, for as long as the store is.
    _lock: std::fs::File,
    store: Store,
    wal: Wal,
    rules: Rules,
    seq: u64,
    torn: Option<Torn>,
    /// What applied changes touched since the last [`DurableStore::take_changed`].
    changed: Changed,
}

/// The items that accepted changes wrote, for consumers that follow the store by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changed {
    /// Anything may have changed (a first read, a replica's state replaced): follow
    /// everything.
    pub all: bool,
    /// Lists emptied (a container replaced or cleared): every item of these kinds that
    /// was there before may be gone, and every one there now may be new, so `items` leaves
    /// them out (a 30,000-item container PUT would otherwise list each, 5 ms of its reply).
    pub cleared: BTreeSet<Kind>,
    /// Items created, replaced or removed, by kind and uid, but none of a kind in
    /// `cleared`.
    pub items: BTreeSet<(Kind, String)>,
}

impl Changed {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        !self.all && self.cleared.is_empty() && self.items.is_empty()
    }

    /// Adds what `effects` touch.
    pub fn record(&mut self, effects: &[Effect]) {
        for effect in effects {
            match effect {
                Effect::Clear(kind) => {
                    if self.cleared.insert(*kind) {
                        self.items.retain(|(k, _)| k != kind);
                    }
                }
                Effect::Upsert(item) if !self.cleared.contains(&item.kind()) => {
                    self.items.insert((item.kind(), item.uid().to_string()));
                }
                Effect::Remove(kind, uid) if !self.cleared.contains(kind) => {
                    self.items.insert((*kind, uid.clone()));
                }
                Effect::Upsert(_) | Effect::Remove(..) => {}
            }
        }
    }
}

impl DurableStore {
    /// Opens (or creates) the state in `dir` and replays it; state that `rules` refuse is an
    /// error ([`OpenError::Invalid`]).
    pub fn open(dir: &Path, rules: Rules) -> Result<Self, OpenError> {
        let (durable, invalid) = Self::open_for_repair(dir, rules)?;
        match invalid {
            None => Ok(durable),
            Some(error) => Err(OpenError::Invalid {
                path: dir.join(WAL_FILE),
                error,
            }),
        }
    }

    /// Opens the state as [`DurableStore::open`] does, also when `rules` refuse it (after an
    /// upgrade that tightened a rule, or a narrower configuration): with the first rule it
    /// breaks, so that it can still be exported, corrected and imported back
    /// (`svcflow store`). Every write is still checked against `rules`.
    pub fn open_for_repair(
        dir: &Path,
        rules: Rules,
    ) -> Result<(Self, Option<RequestError>), OpenError> {
        let dir_err = |source| OpenError::Dir {
            path: dir.to_path_buf(),
            source,
        };
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(dir_err)?;
            // Make the new directory's entry durable before the log inside it.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::File::open(parent)
                    .and_then(|d| d.sync_all())
                    .map_err(dir_err)?;
            }
        }
        let lock = lock_dir(dir)?;
        let path = dir.join(WAL_FILE);
        let opened = Wal::open(&path)?;
        let mut store = Store::default();
        let mut seq = 0;
        for (index, payload) in opened.records.iter().enumerate() {
            let bad = |reason: String| OpenError::Record {
                path: path.clone(),
                index,
                reason,
            };
            let record = record::decode(payload).map_err(|e| bad(format!("cannot decode: {e}")))?;
            match record {
                Record::Snapshot {
                    seq: s,
                    store: snap,
                } => {
                    if index > 0 && s < seq {
                        return Err(bad(format!("snapshot sequence {s} goes back from {seq}")));
                    }
                    store = *snap;
                    seq = s;
                }
                Record::Effects { seq: s, effects } => {
                    if index > 0 && s != seq + 1 {
                        return Err(bad(format!(
                            "sequence {s} does not follow {seq}: a record is missing"
                        )));
                    }
                    store.apply_effects(&effects);
                    seq = s;
                }
            }
        }
        let invalid = store.check(&rules, &Touched::default()).err();
        let mut durable = Self {
            _lock: lock,
            store,
            wal: opened.wal,
            rules,
            seq,
            torn: opened.torn,
            changed: Changed {
                all: true,
                ..Changed::default()
            },
        };
        // A refused state stays in the file exactly as it is until a write.
        if invalid.is_none() && durable.wal.records() > COMPACT_AT {
            durable.compact()?;
        }
        Ok((durable, invalid))
    }

    /// Validates, logs and applies `change`. On `Ok` the change is on disk.
    pub fn apply(&mut self, change: Change) -> Result<&Store, ApplyError> {
        let seq = self.seq + 1;
        // The log record is encoded while the change is applied and checked (beside it, for
        // a large change: a container PUT of 30,000 items takes tens of milliseconds for
        // each), and thrown away if the change is refused.
        let (applied, encoded) = self.store.apply_beside(change, &self.rules, |effects| {
            let mut buf = Framed::buffer(effects.len().saturating_mul(record::BYTES_PER_EFFECT));
            record::encode_effects(&mut buf, seq, effects);
            buf
        })?;
        let mut changed = std::mem::take(&mut self.changed);
        changed.record(&applied.effects);
        let logged = Framed::seal(encoded).and_then(|framed| self.wal.append_framed(&framed));
        if let Err(e) = logged {
            // Not durable, so not applied either. What it touched is recorded anyway: a
            // consumer that looks again at an unchanged item finds nothing to do.
            self.changed = changed;
            self.store.revert(applied.undo);
            return Err(e.into());
        }
        self.changed = changed;
        self.seq = seq;
        // The written items (and any list they replaced) are freed beside, not under the
        // caller's lock: for a container PUT that is milliseconds the publisher would wait.
        let items = applied.effects.len();
        crate::par::drop_beside(applied, items);
        if self.wal.records() > COMPACT_AT {
            // The change is already durable; a failed compaction only delays the next one.
            if let Err(e) = self.compact() {
                tracing::warn!("compacting {}: {e}", self.wal.path().display());
            }
        }
        Ok(&self.store)
    }

    /// Whether the store's validation index is unbuilt ([`Store::needs_index`]).
    pub fn needs_index(&self) -> bool {
        self.store.needs_index()
    }

    /// Builds the store's validation index if it is unbuilt ([`Store::build_index`]).
    pub fn build_index(&mut self) {
        self.store.build_index();
    }

    /// What accepted changes touched since the last call (everything, the first time).
    pub fn take_changed(&mut self) -> Changed {
        std::mem::take(&mut self.changed)
    }

    /// Rewrites the log as one snapshot of the current state.
    pub fn compact(&mut self) -> Result<(), WalError> {
        let mut payload = Vec::new();
        record::encode_snapshot(&mut payload, self.seq, &self.store);
        self.wal.rewrite(&[payload])
    }

    /// The current state.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// How many changes the log holds, snapshots included; the sequence number of the last.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The rules changes are checked against.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The torn final record removed when opening, if any.
    pub fn torn(&self) -> Option<&Torn> {
        self.torn.as_ref()
    }

    /// The log.
    pub fn wal(&self) -> &Wal {
        &self.wal
    }
}
