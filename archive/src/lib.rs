//! # foldwire-archive
//!
//! The media archive and the session-state store, over `object_store`: a local directory,
//! memory, or S3 (and any S3-compatible server), chosen by URL (see [`url`]).
//!
//! - [`open`] returns [`Backends`]: an `Arc<dyn MediaArchive>` and an `Arc<dyn StateStore>`
//!   over the same store. State lives in a journal at `sessions/<id>/journal/` ([`journal`];
//!   earlier builds' `sessions/<id>/state.json` still loads), media at
//!   `sessions/<id>/media/<sha256>`, ref pointers at `sessions/<id>/refs/<ref>.json`
//!   (see [`keys`]).
//! - Media writes are content-addressed and create-if-absent ([`media`]); a state write
//!   creates the session's next journal entry (what the turn changed, [`delta`]) only if no
//!   other writer created it first, so concurrent writers never lose an update.
//! - [`restore`] resolves a ref to the exact bytes the client sent, joining the session's
//!   refs table with the archive index that `archive.spill` records.
//! - [`conformance`] is the suite every backend runs; [`faults`] holds stores that fail on
//!   purpose, for tests of the spill path.

pub mod breaker;
pub mod conformance;
pub mod counting;
pub mod delta;
pub mod error;
pub mod faults;
pub mod index;
pub mod journal;
pub mod keys;
pub mod local_entry;
pub mod media;
pub mod pack_layout;
pub mod payload;
pub mod restore;
pub mod retention;
pub mod state;
pub mod url;

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;

use foldwire_core::{MediaArchive, StateStore};

/// object_store, re-exported so hosts and tests can build custom backends and wrappers.
pub use object_store;

pub use breaker::{Breaker, BreakerConfig, BreakerStats};
pub use error::{ArchiveError, RestoreError};
pub use index::MediaRecord;
pub use journal::{JournalConfig, JournalStateStore};
pub use media::ObjectMediaArchive;
pub use restore::{MediaListing, RestoredMedia, list_media, restore_media, restore_media_part};
pub use retention::{GcReport, RetentionPolicy};
pub use state::{LocalStateStore, ObjectStateStore};
pub use url::{ArchiveLocation, default_location};

/// The media archive and the state store of one location, over the same object store.
#[derive(Debug, Clone)]
pub struct Backends {
    /// Where archived payloads go.
    pub media: Arc<dyn MediaArchive>,
    /// Where session state goes.
    pub state: Arc<dyn StateStore>,
    /// The underlying object store (already scoped to the S3 prefix, if any).
    pub store: Arc<dyn ObjectStore>,
    /// Backend name: `file`, `memory` or `s3`.
    pub backend: &'static str,
}

impl Backends {
    /// Both traits over an object store that honours `PutMode::Create` and `PutMode::Update`
    /// (memory, S3 with ETag preconditions, or a test wrapper around them).
    pub fn from_object_store(store: Arc<dyn ObjectStore>, backend: &'static str) -> Self {
        Backends {
            media: Arc::new(ObjectMediaArchive::new(Arc::clone(&store), backend)),
            state: Arc::new(JournalStateStore::new(Arc::clone(&store), backend)),
            store,
            backend,
        }
    }

    /// The same location with its state store and media archive behind one circuit breaker
    /// (see [`breaker`]); the breaker is returned too, for metrics.
    pub fn with_breaker(self, config: BreakerConfig) -> (Self, Arc<Breaker>) {
        let breaker = Arc::new(Breaker::new(self.backend, config));
        let guarded = Backends {
            media: Arc::new(breaker::GuardedMediaArchive::new(
                self.media,
                Arc::clone(&breaker),
            )),
            state: Arc::new(breaker::GuardedStateStore::new(
                self.state,
                Arc::clone(&breaker),
            )),
            store: self.store,
            backend: self.backend,
        };
        (guarded, breaker)
    }

    /// A fresh in-memory archive and state store.
    pub fn memory() -> Self {
        Self::from_object_store(Arc::new(InMemory::new()), "memory")
    }

    /// A local directory (created if missing). Media and the state journal go through
    /// object_store's `LocalFileSystem`, whose create-if-absent (a hard link) is the only
    /// conditional write the journal needs.
    pub fn local(dir: impl Into<std::path::PathBuf>) -> Result<Self, ArchiveError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| ArchiveError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        // fsync: an archived original must be on disk before the state that points at it is
        // saved (the state file is fsynced too), or a power loss leaves refs to nothing. On S3
        // the PUT's answer is that point.
        let fs = LocalFileSystem::new_with_prefix(&dir)
            .map_err(|source| ArchiveError::Backend {
                backend: "file",
                url: dir.display().to_string(),
                source,
            })?
            .with_fsync(true);
        // Bounded like the state store's file work (see `state::LOCAL_IO_CONCURRENCY`).
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::limit::LimitStore::new(
            fs,
            state::LOCAL_IO_CONCURRENCY,
        ));
        Ok(Backends {
            media: Arc::new(
                ObjectMediaArchive::new(Arc::clone(&store), "file").with_local_root(dir.clone()),
            ),
            state: Arc::new(JournalStateStore::with_config(
                Arc::clone(&store),
                "file",
                JournalConfig {
                    local_root: Some(dir),
                    ..JournalConfig::default()
                },
            )),
            store,
            backend: "file",
        })
    }

    /// Opens a parsed location.
    pub fn at(location: &ArchiveLocation, url_for_errors: &str) -> Result<Self, ArchiveError> {
        match location {
            ArchiveLocation::Local(dir) => Self::local(dir.clone()),
            ArchiveLocation::Memory => Ok(Self::memory()),
            ArchiveLocation::S3 {
                bucket,
                prefix,
                settings,
            } => {
                let s3 = url::s3_builder(url_for_errors, bucket, settings)?
                    .build()
                    .map_err(|source| ArchiveError::Backend {
                        backend: "s3",
                        url: url_for_errors.to_owned(),
                        source,
                    })?;
                let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(PrefixStore::new(s3, prefix.as_str()))
                };
                Ok(Self::from_object_store(store, "s3"))
            }
        }
    }
}

/// Opens the archive and state store at a URL or path (see [`url`] for the forms accepted).
pub fn open(url: &str) -> Result<Backends, ArchiveError> {
    Backends::at(&ArchiveLocation::parse(url)?, url)
}

/// Opens the default location, `<user data dir>/foldwire`.
pub fn open_default() -> Result<Backends, ArchiveError> {
    let location = default_location()?;
    Backends::at(&location, "<user data dir>/foldwire")
}
