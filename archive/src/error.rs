//! Errors of the archive crate: opening a backend by URL, and restoring archived media.

use std::path::PathBuf;

use foldwire_core::{Ref, StoreError};

/// Why an archive location could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The URL could not be understood.
    #[error(
        "archive URL {url:?}: {why} (expected file://DIR, a bare path, memory:// or s3://BUCKET/PREFIX)"
    )]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What was wrong with it.
        why: String,
    },
    /// The local archive directory could not be created.
    #[error("cannot create archive directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// object_store refused the configuration.
    #[error("cannot configure the {backend} backend for {url:?}: {source}")]
    Backend {
        /// Backend name (`file`, `s3`).
        backend: &'static str,
        /// The URL as given.
        url: String,
        /// The underlying error.
        #[source]
        source: object_store::Error,
    },
    /// No default location exists on this system.
    #[error("this system has no user data directory; pass an explicit archive URL or directory")]
    NoDataDir,
}

/// Why archived media could not be listed or restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The session never minted that ref.
    #[error("session {session} has no ref {r}; list the session's media to see its refs")]
    UnknownRef {
        /// The session.
        session: String,
        /// The ref asked for.
        r: Ref,
    },
    /// The ref exists but no media of its unit is archived.
    #[error(
        "ref {r} of session {session} has no archived media (its unit carried no inline media, or its spill failed and it stayed on the wire)"
    )]
    NotArchived {
        /// The session.
        session: String,
        /// The ref asked for.
        r: Ref,
    },
    /// The unit has fewer archived payloads than the part asked for.
    #[error(
        "ref {r} of session {session} has {count} archived payload(s); part {part} does not exist (parts count from 0)"
    )]
    NoSuchPart {
        /// The session.
        session: String,
        /// The ref asked for.
        r: Ref,
        /// The part asked for.
        part: usize,
        /// How many payloads the ref has.
        count: usize,
    },
    /// The archive failed or refused the key.
    #[error(transparent)]
    Store(#[from] StoreError),
}
