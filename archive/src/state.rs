//! [`StateStore`] implementations: one over any object_store backend with conditional puts
//! (memory, S3), and one for a local directory with its own compare-and-swap.
//!
//! object_store's `LocalFileSystem` supports create-if-absent but not `PutMode::Update`
//! (it returns `NotImplemented`), so the local store does the conditional write itself:
//! under an exclusive lock on `state.lock` it compares the stored document's version with the
//! expected one, writes a temporary file, syncs it and renames it over `state.json`. Readers
//! never take the lock; `rename` makes them see the old or the new document, never a mix.
//! The lock is an OS file lock, so it also serializes writers in different processes.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use foldwire_core::{SessionId, SessionState, StateStore, StateVersion, StoreError};

use crate::media::backend_error;
use crate::{keys, payload};

fn format_error(session: &SessionId, source: foldwire_core::StateFormatError) -> StoreError {
    StoreError::Format {
        session: session.to_string(),
        source,
    }
}

fn conflict(session: &SessionId, expected: Option<&StateVersion>) -> StoreError {
    StoreError::Conflict {
        session: session.to_string(),
        expected: expected.map(|v| v.0.clone()),
    }
}

/// Session state over an object store that honours `PutMode::Create` and
/// `PutMode::Update` (object_store's `InMemory`, S3 with `S3ConditionalPut::ETagMatch`).
///
/// The version is the object's ETag (and version id, when the store has one).
#[derive(Debug, Clone)]
pub struct ObjectStateStore {
    store: Arc<dyn ObjectStore>,
    backend: &'static str,
}

/// The parts of an object_store version, carried inside the opaque [`StateVersion`].
#[derive(serde::Serialize, serde::Deserialize)]
struct EncodedVersion {
    e_tag: Option<String>,
    version: Option<String>,
}

impl ObjectStateStore {
    /// A state store over `store`; `backend` names it in errors (`memory`, `s3`).
    pub fn new(store: Arc<dyn ObjectStore>, backend: &'static str) -> Self {
        ObjectStateStore { store, backend }
    }

    fn encode(e_tag: Option<String>, version: Option<String>) -> StateVersion {
        let encoded = EncodedVersion { e_tag, version };
        // Serializing two optional strings cannot fail; fall back to the ETag alone anyway.
        StateVersion(
            serde_json::to_string(&encoded)
                .unwrap_or_else(|_| encoded.e_tag.clone().unwrap_or_default()),
        )
    }

    fn decode(given: &StateVersion) -> Result<UpdateVersion, StoreError> {
        let parsed: EncodedVersion =
            serde_json::from_str(&given.0).map_err(|e| StoreError::InvalidKey {
                given: given.0.clone(),
                why: format!("not a state version this store issued: {e}"),
            })?;
        Ok(UpdateVersion {
            e_tag: parsed.e_tag,
            version: parsed.version,
        })
    }
}

#[async_trait]
impl StateStore for ObjectStateStore {
    async fn load(
        &self,
        session: &SessionId,
    ) -> Result<Option<(SessionState, StateVersion)>, StoreError> {
        let path = keys::state_path(session)?;
        let got = match self.store.get(&path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(backend_error(self.backend, "get state", e)),
        };
        let version = Self::encode(got.meta.e_tag.clone(), got.meta.version.clone());
        let bytes = got
            .bytes()
            .await
            .map_err(|e| backend_error(self.backend, "read state", e))?;
        let state =
            SessionState::from_json_of(&bytes, session).map_err(|e| format_error(session, e))?;
        Ok(Some((state, version)))
    }

    async fn save(
        &self,
        session: &SessionId,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        let path = keys::state_path(session)?;
        let bytes = state.to_json().map_err(|e| format_error(session, e))?;
        let mode = match expected {
            None => PutMode::Create,
            Some(v) => PutMode::Update(Self::decode(v)?),
        };
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&path, payload::bytes_in_pieces(bytes), opts)
            .await
        {
            Ok(put) => Ok(Self::encode(put.e_tag, put.version)),
            // Create lost to an existing state, or Update lost to a newer one (or to a delete).
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => Err(conflict(session, expected)),
            Err(e) => Err(backend_error(self.backend, "put state", e)),
        }
    }
}

/// Session state in a local directory, with a compare-and-swap under an OS file lock.
///
/// Files: `<root>/sessions/<session>/state.json` (same layout as the object stores) plus
/// `state.lock` beside it. The version is the SHA-256 of the stored document: a writer whose
/// expected version no longer matches the bytes on disk gets [`StoreError::Conflict`].
#[derive(Debug, Clone)]
pub struct LocalStateStore {
    root: PathBuf,
    /// Bounds the blocking file operations in flight. Each one takes a thread of the calling
    /// runtime's blocking pool, and the pool keeps grown threads (and their allocator arenas)
    /// for a while: unbounded, 256 concurrent turns left ~200 threads and ~170 MiB resident
    /// after the load (`--bench proxy_memory`). A disk gains nothing past a few in flight.
    in_flight: Arc<tokio::sync::Semaphore>,
}

/// Blocking file operations of one local store in flight at once (see
/// [`LocalStateStore`]); the local archive is bounded the same way.
pub const LOCAL_IO_CONCURRENCY: usize = 8;

/// Distinguishes temporary files of concurrent writers in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Temp files of a local state save are named `.state.json.<pid>.<n>.tmp`.
const TEMP_PREFIX: &str = ".state.json.";
/// See [`TEMP_PREFIX`].
const TEMP_SUFFIX: &str = ".tmp";

/// What the blocking part of a local save can end in.
enum LocalSave {
    Saved(String),
    Conflict,
}

impl LocalStateStore {
    /// A state store rooted at `root` (created on first save).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStateStore {
            root: root.into(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(LOCAL_IO_CONCURRENCY)),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &FsPath {
        &self.root
    }

    fn session_dir(&self, session: &SessionId) -> Result<PathBuf, StoreError> {
        Ok(self
            .root
            .join("sessions")
            .join(keys::session_segment(session.as_str())?))
    }

    fn io_error(operation: &str, path: &FsPath, e: std::io::Error) -> StoreError {
        StoreError::Backend {
            backend: "file".to_owned(),
            operation: format!("{operation} {}", path.display()),
            source: Box::new(e),
        }
    }

    fn read_current(file: &FsPath) -> Result<Option<Vec<u8>>, StoreError> {
        match std::fs::read(file) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io_error("read", file, e)),
        }
    }

    /// Runs blocking file work on the blocking pool, at most [`LOCAL_IO_CONCURRENCY`] at once.
    async fn blocking<T: Send + 'static>(
        &self,
        operation: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        let failed = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Backend {
            backend: "file".to_owned(),
            operation: operation.to_owned(),
            source: e,
        };
        // The semaphore is never closed, so acquiring only waits.
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|e| failed(Box::new(e)))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| failed(Box::new(e)))
    }

    /// Removes temp files of writers that died between create and rename (`kill -9`, power
    /// loss). Only called with the session's lock held. Best effort: a file that cannot be
    /// removed now is tried again on the next save.
    fn remove_leftover_temps(dir: &FsPath) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// The compare-and-swap itself; runs on a blocking thread because it waits on the lock.
    fn save_blocking(
        dir: &FsPath,
        bytes: &[u8],
        expected: Option<&str>,
    ) -> Result<LocalSave, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| Self::io_error("create", dir, e))?;
        let lock_path = dir.join("state.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Self::io_error("open", &lock_path, e))?;
        lock.lock()
            .map_err(|e| Self::io_error("lock", &lock_path, e))?;
        let file = dir.join("state.json");
        let current = Self::read_current(&file)?.map(|b| keys::sha256_hex(&b));
        if current.as_deref() != expected {
            return Ok(LocalSave::Conflict);
        }
        // Under the lock no other writer has a temp file open, so any left here is what a
        // killed writer left behind.
        Self::remove_leftover_temps(dir);
        let temp = dir.join(format!(
            "{TEMP_PREFIX}{}.{}{TEMP_SUFFIX}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut out = std::fs::File::create(&temp)?;
            payload::write_synced(&mut out, [bytes])?;
            std::fs::rename(&temp, &file)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(Self::io_error("write", &file, e));
        }
        // Make the rename itself durable; failure here does not undo the write.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        // The lock is released when `lock` is dropped, after the rename.
        drop(lock);
        Ok(LocalSave::Saved(keys::sha256_hex(bytes)))
    }
}

#[async_trait]
impl StateStore for LocalStateStore {
    async fn load(
        &self,
        session: &SessionId,
    ) -> Result<Option<(SessionState, StateVersion)>, StoreError> {
        let file = self.session_dir(session)?.join("state.json");
        let read = self
            .blocking("load state", move || Self::read_current(&file))
            .await??;
        let Some(bytes) = read else {
            return Ok(None);
        };
        let version = StateVersion(keys::sha256_hex(&bytes));
        let state =
            SessionState::from_json_of(&bytes, session).map_err(|e| format_error(session, e))?;
        Ok(Some((state, version)))
    }

    async fn save(
        &self,
        session: &SessionId,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        let dir = self.session_dir(session)?;
        let bytes = Bytes::from(state.to_json().map_err(|e| format_error(session, e))?);
        let want = expected.map(|v| v.0.clone());
        let outcome = self
            .blocking("save state", move || {
                Self::save_blocking(&dir, &bytes, want.as_deref())
            })
            .await??;
        match outcome {
            LocalSave::Saved(v) => Ok(StateVersion(v)),
            LocalSave::Conflict => Err(conflict(session, expected)),
        }
    }
}
