//! An append-only write-ahead log of checksummed records, fsynced before a write is
//! acknowledged.
//!
//! File layout: the 8-byte magic `SVCFWAL1`, then records, each
//! `len: u32 LE | crc32(payload): u32 LE | payload` with `1 <= len <= MAX_RECORD`.
//!
//! [`Wal::append`] writes one record with a single `write` and returns only after
//! `fdatasync`. If either fails it truncates the file back to the last record and, if even
//! that fails, refuses every later append ([`WalError::Poisoned`]) until reopened.
//!
//! [`Wal::open`] reads every record. A bad record that is the last thing in the file — a short
//! header, a body running past the end, a checksum mismatch on a record that ends exactly at
//! the end of the file, or a tail of zero bytes — is a torn append: the process died before
//! its `fdatasync` returned, so it was never acknowledged. Its bytes are copied to
//! `<log>.torn-<offset>` (`.torn-<offset>.<n>` if that exists), the file is truncated to
//! the last good record and synced, and the recovery is reported in [`Opened::torn`]. Any
//! other damage (bad magic, a bad record with more data after it, a zero length) is
//! [`WalError::Corrupt`]: the log is left untouched.
//!
//! [`Wal::rewrite`] compacts: it writes the new records to `<log>.tmp`, syncs it, renames it
//! over the log and syncs the directory, so a crash leaves either the old or the new log.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The file's first eight bytes.
pub const MAGIC: &[u8; 8] = b"SVCFWAL1";
/// The largest record accepted: 256 MiB.
pub const MAX_RECORD: u32 = 256 << 20;
const HEADER: usize = 8;

/// Log errors.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A file operation failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The log is damaged somewhere other than a torn final append. Nothing was changed.
    #[error(
        "{path}: corrupt write-ahead log at byte {offset}: {reason}; refusing to start \
         (the file was left as it is; restore it from a backup or move it away to start empty)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record is larger than [`MAX_RECORD`].
    #[error("record of {0} bytes is larger than the limit")]
    TooLarge(usize),
    /// An earlier failure left the file in an unknown state; reopen the log.
    #[error("{0}: an earlier write failed and could not be undone; restart to recover")]
    Poisoned(PathBuf),
}

/// A torn final record that [`Wal::open`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    /// Where it started.
    pub offset: u64,
    /// How many bytes were removed.
    pub len: u64,
    /// Where those bytes were saved.
    pub saved_to: PathBuf,
}

/// What [`Wal::open`] found.
#[derive(Debug)]
pub struct Opened {
    /// The log, ready to append.
    pub wal: Wal,
    /// Every record's payload, in order.
    pub records: Vec<Vec<u8>>,
    /// The torn final record that was removed, if any.
    pub torn: Option<Torn>,
}

/// An open log.
#[derive(Debug)]
pub struct Wal {
    path: PathBuf,
    file: File,
    len: u64,
    records: u64,
    poisoned: bool,
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> WalError + 'a {
    move |source| WalError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Frames a payload.
pub fn frame(payload: &[u8]) -> Result<Vec<u8>, WalError> {
    let mut out = Framed::buffer(payload.len());
    out.extend_from_slice(payload);
    Ok(Framed::seal(out)?.0)
}

/// A record framed for [`Wal::append_framed`]: its header, then its payload, in one buffer,
/// so that a large record (a container PUT's, megabytes) is written where it is encoded
/// instead of being copied behind its header.
#[derive(Debug)]
pub struct Framed(Vec<u8>);

impl Framed {
    /// A buffer to encode a payload into, after room for its header, with room for about
    /// `hint` bytes of payload; [`Framed::seal`] frames what was appended.
    pub fn buffer(hint: usize) -> Vec<u8> {
        let mut buf = Vec::with_capacity(hint.saturating_add(HEADER).min(MAX_RECORD as usize));
        buf.extend_from_slice(&[0; HEADER]);
        buf
    }

    /// Frames the payload appended to a [`Framed::buffer`].
    pub fn seal(mut buf: Vec<u8>) -> Result<Framed, WalError> {
        let payload = buf.get(HEADER..).unwrap_or_default();
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|l| (1..=MAX_RECORD).contains(l))
            .ok_or(WalError::TooLarge(payload.len()))?;
        let crc = crc32fast::hash(payload);
        let mut header = [0; HEADER];
        header[..4].copy_from_slice(&len.to_le_bytes());
        header[4..].copy_from_slice(&crc.to_le_bytes());
        if let Some(room) = buf.get_mut(..HEADER) {
            room.copy_from_slice(&header);
        }
        Ok(Framed(buf))
    }
}

impl Wal {
    /// Opens the log at `path`, creating it (and syncing its directory) if missing.
    pub fn open(path: &Path) -> Result<Opened, WalError> {
        let tmp = tmp_path(path);
        if tmp.exists() {
            // A compaction that never reached its rename; the log itself is intact.
            fs::remove_file(&tmp).map_err(io(&tmp, "remove stale temporary file"))?;
        }
        if !path.exists() {
            create(path, &[])?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io(path, "open"))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io(path, "read"))?;
        let scan = scan(&bytes).map_err(|(offset, reason)| WalError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason,
        })?;
        let mut torn = None;
        if scan.end < bytes.len() {
            let offset = scan.end as u64;
            // Never overwrite the bytes an earlier recovery saved.
            let mut saved_to = PathBuf::from(format!("{}.torn-{offset}", path.display()));
            for n in 1.. {
                if !saved_to.exists() {
                    break;
                }
                saved_to = PathBuf::from(format!("{}.torn-{offset}.{n}", path.display()));
            }
            let slice = bytes.get(scan.end..).unwrap_or_default();
            let mut out = File::create(&saved_to).map_err(io(&saved_to, "create"))?;
            out.write_all(slice).map_err(io(&saved_to, "write"))?;
            out.sync_all().map_err(io(&saved_to, "fsync"))?;
            file.set_len(offset)
                .map_err(io(path, "truncate torn record"))?;
            file.sync_all().map_err(io(path, "fsync"))?;
            torn = Some(Torn {
                offset,
                len: slice.len() as u64,
                saved_to,
            });
        }
        file.seek(SeekFrom::End(0)).map_err(io(path, "seek"))?;
        let records = scan.records.len() as u64;
        Ok(Opened {
            wal: Wal {
                path: path.to_path_buf(),
                file,
                len: scan.end as u64,
                records,
                poisoned: false,
            },
            records: scan.records,
            torn,
        })
    }

    /// Appends one record and syncs it to disk. When this returns `Ok`, the record survives
    /// a crash.
    pub fn append(&mut self, payload: &[u8]) -> Result<(), WalError> {
        self.append_framed(&Framed(frame(payload)?))
    }

    /// Appends one framed record ([`Framed::seal`]) and syncs it to disk, as
    /// [`Wal::append`].
    pub fn append_framed(&mut self, framed: &Framed) -> Result<(), WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned(self.path.clone()));
        }
        let framed = &framed.0;
        let result = self
            .file
            .write_all(framed)
            .map_err(io(&self.path, "append"))
            .and_then(|()| self.file.sync_data().map_err(io(&self.path, "fdatasync")));
        match result {
            Ok(()) => {
                self.len += framed.len() as u64;
                self.records += 1;
                Ok(())
            }
            Err(e) => {
                // Undo the partial record; if that fails too, a later append would land after
                // garbage, so refuse them all.
                let undone = self.file.set_len(self.len).is_ok()
                    && self.file.seek(SeekFrom::Start(self.len)).is_ok()
                    && self.file.sync_all().is_ok();
                if !undone {
                    self.poisoned = true;
                }
                Err(e)
            }
        }
    }

    /// Replaces the whole log with `payloads`, atomically.
    pub fn rewrite(&mut self, payloads: &[Vec<u8>]) -> Result<(), WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned(self.path.clone()));
        }
        // If this fails after the rename, our handle may point at the replaced file; refuse
        // further appends until reopened, which reads whichever complete log is in place.
        let len = create(&self.path, payloads).inspect_err(|_| self.poisoned = true)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io(&self.path, "open"))
            .inspect_err(|_| self.poisoned = true)?;
        file.seek(SeekFrom::End(0))
            .map_err(io(&self.path, "seek"))
            .inspect_err(|_| self.poisoned = true)?;
        self.file = file;
        self.len = len;
        self.records = payloads.len() as u64;
        Ok(())
    }

    /// How many records the log holds.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds no records.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.tmp", path.display()))
}

/// Writes a complete log to `<path>.tmp`, syncs it, renames it to `path` and syncs the
/// directory. Returns its length.
fn create(path: &Path, payloads: &[Vec<u8>]) -> Result<u64, WalError> {
    let tmp = tmp_path(path);
    let mut bytes = MAGIC.to_vec();
    for p in payloads {
        bytes.extend_from_slice(&frame(p)?);
    }
    let mut file = File::create(&tmp).map_err(io(&tmp, "create"))?;
    file.write_all(&bytes).map_err(io(&tmp, "write"))?;
    file.sync_all().map_err(io(&tmp, "fsync"))?;
    drop(file);
    fs::rename(&tmp, path).map_err(io(path, "rename"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "fsync directory"))?;
    Ok(bytes.len() as u64)
}

struct Scan {
    records: Vec<Vec<u8>>,
    /// End of the last good record.
    end: usize,
}

/// Reads the records of a log image. `Err((offset, reason))` is corruption; a torn final
/// record shows as `end < bytes.len()`.
fn scan(bytes: &[u8]) -> Result<Scan, (u64, String)> {
    if bytes.len() < MAGIC.len() {
        // A crash while creating the file leaves it shorter than the magic only if the
        // directory entry was synced before the data, which `create` never does.
        return Err((
            0,
            format!("file is {} bytes, shorter than its header", bytes.len()),
        ));
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err((0, "not a svcflow write-ahead log (bad magic)".into()));
    }
    let mut records = Vec::new();
    let mut at = MAGIC.len();
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.iter().all(|b| *b == 0) {
            // Space the file system allocated for an append that never completed.
            break;
        }
        let Some((len, crc)) = header(rest) else {
            break; // Short header: torn.
        };
        if len == 0 || len > MAX_RECORD {
            return Err((at as u64, format!("impossible record length {len}")));
        }
        let body_end = HEADER + len as usize;
        let Some(body) = rest.get(HEADER..body_end) else {
            break; // Body runs past the end: torn.
        };
        if crc32fast::hash(body) != crc {
            if body_end == rest.len() {
                break; // The last record, damaged: torn.
            }
            return Err((
                at as u64,
                "checksum mismatch with more records after it".into(),
            ));
        }
        records.push(body.to_vec());
        at += body_end;
    }
    Ok(Scan { records, end: at })
}

fn header(rest: &[u8]) -> Option<(u32, u32)> {
    let len = u32::from_le_bytes(rest.get(0..4)?.try_into().ok()?);
    let crc = u32::from_le_bytes(rest.get(4..8)?.try_into().ok()?);
    Some((len, crc))
}
