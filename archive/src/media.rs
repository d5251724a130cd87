//! [`MediaArchive`] over any object_store backend.
//!
//! Payloads are content-addressed (`sessions/<s>/media/<sha256>`) and written
//! create-if-absent, so a retried or duplicated spill is harmless: `AlreadyExists` is
//! success. A ref names its newest payload through a small JSON pointer object
//! (`sessions/<s>/refs/<ref>.json`) holding the key, media type and size.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use foldwire_core::{ArchivedObject, MediaArchive, Ref, SessionId, StoreError, StoredContent};

use crate::keys;

/// Wraps an object_store error with the backend and operation that failed; a missing object
/// becomes [`StoreError::NotFound`].
pub(crate) fn backend_error(
    backend: &'static str,
    operation: &str,
    e: object_store::Error,
) -> StoreError {
    StoreError::Backend {
        backend: backend.to_owned(),
        operation: operation.to_owned(),
        source: Box::new(e),
    }
}

fn not_found(session: &SessionId, what: String) -> StoreError {
    StoreError::NotFound {
        session: session.to_string(),
        what,
    }
}

/// The pointer object stored per ref.
#[derive(Debug, Serialize, Deserialize)]
struct RefPointer {
    key: String,
    media_type: String,
    size: u64,
}

/// A media archive over an object store; every key is scoped to one session.
#[derive(Debug, Clone)]
pub struct ObjectMediaArchive {
    store: Arc<dyn ObjectStore>,
    backend: &'static str,
}

impl ObjectMediaArchive {
    /// An archive over `store`; `backend` names it in errors (`memory`, `file`, `s3`).
    pub fn new(store: Arc<dyn ObjectStore>, backend: &'static str) -> Self {
        ObjectMediaArchive { store, backend }
    }

    async fn read_pointer(&self, session: &SessionId, r: Ref) -> Result<RefPointer, StoreError> {
        let path = keys::ref_pointer_path(session, r)?;
        let got = match self.store.get(&path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(not_found(session, format!("archived media under ref {r}")));
            }
            Err(e) => return Err(backend_error(self.backend, "get ref pointer", e)),
        };
        let bytes = got
            .bytes()
            .await
            .map_err(|e| backend_error(self.backend, "read ref pointer", e))?;
        let pointer: RefPointer =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Backend {
                backend: self.backend.to_owned(),
                operation: format!("parse ref pointer {path}"),
                source: Box::new(e),
            })?;
        // A pointer is data read from the store; never follow it outside this session.
        keys::content_key(&pointer.key)?;
        Ok(pointer)
    }
}

#[async_trait]
impl MediaArchive for ObjectMediaArchive {
    async fn put(
        &self,
        session: &SessionId,
        r: Ref,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArchivedObject, StoreError> {
        let stored = self.put_content(session, media_type, bytes).await?;
        let pointer = RefPointer {
            key: stored.key.clone(),
            media_type: stored.media_type.clone(),
            size: stored.size,
        };
        let body = serde_json::to_vec(&pointer).map_err(|e| StoreError::Backend {
            backend: self.backend.to_owned(),
            operation: "encode ref pointer".to_owned(),
            source: Box::new(e),
        })?;
        // Overwrite: the pointer names the newest payload stored under the ref.
        self.store
            .put(&keys::ref_pointer_path(session, r)?, PutPayload::from(body))
            .await
            .map_err(|e| backend_error(self.backend, "put ref pointer", e))?;
        Ok(ArchivedObject {
            key: stored.key,
            r#ref: r,
            media_type: stored.media_type,
            size: stored.size,
        })
    }

    async fn get(
        &self,
        session: &SessionId,
        r: Ref,
    ) -> Result<(ArchivedObject, Bytes), StoreError> {
        let pointer = self.read_pointer(session, r).await?;
        let bytes = self.get_content(session, &pointer.key).await?;
        Ok((
            ArchivedObject {
                key: pointer.key,
                r#ref: r,
                media_type: pointer.media_type,
                size: pointer.size,
            },
            bytes,
        ))
    }

    async fn list(&self, session: &SessionId) -> Result<Vec<ArchivedObject>, StoreError> {
        let prefix = keys::refs_prefix(session)?;
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| backend_error(self.backend, "list refs", e))?;
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            let Some(r) = meta
                .location
                .filename()
                .and_then(|f| f.strip_suffix(".json"))
                .and_then(|stem| stem.parse::<Ref>().ok())
            else {
                continue; // not a pointer this archive wrote
            };
            let pointer = self.read_pointer(session, r).await?;
            out.push(ArchivedObject {
                key: pointer.key,
                r#ref: r,
                media_type: pointer.media_type,
                size: pointer.size,
            });
        }
        out.sort_by_key(|o| o.r#ref);
        Ok(out)
    }

    async fn put_content(
        &self,
        session: &SessionId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<StoredContent, StoreError> {
        let key = keys::sha256_hex(&bytes);
        let path = keys::media_path(session, &key)?;
        let size = bytes.len() as u64;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from(bytes), opts)
            .await
        {
            // Same key, same bytes: a duplicate or retried spill is already done.
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(StoredContent {
                key,
                media_type: media_type.to_owned(),
                size,
            }),
            Err(e) => Err(backend_error(self.backend, "put media", e)),
        }
    }

    async fn get_content(&self, session: &SessionId, key: &str) -> Result<Bytes, StoreError> {
        let path = keys::media_path(session, key)?;
        let got = match self.store.get(&path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(not_found(session, format!("archived media {key}")));
            }
            Err(e) => return Err(backend_error(self.backend, "get media", e)),
        };
        got.bytes()
            .await
            .map_err(|e| backend_error(self.backend, "read media", e))
    }
}
