//! [`MediaArchive`] over any object_store backend.
//!
//! Payloads are content-addressed (`sessions/<s>/media/<sha256>`) and written
//! create-if-absent, so a retried or duplicated spill is harmless: `AlreadyExists` is
//! success. A ref names its newest payload through a small JSON pointer object
//! (`sessions/<s>/refs/<ref>.json`) holding the key, media type and size.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use foldwire_core::{
    ArchivedObject, KnownDigests, MediaArchive, PackLocation, PlannedContents, Ref, SessionId,
    StoreError, StoredContent, StoredPart,
};

use crate::{keys, local_entry, pack_layout, payload};

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
    /// The directory under a local store, where a session's pack folder is made while its
    /// first pack is planned.
    local_root: Option<PathBuf>,
}

impl ObjectMediaArchive {
    /// An archive over `store`; `backend` names it in errors (`memory`, `file`, `s3`).
    pub fn new(store: Arc<dyn ObjectStore>, backend: &'static str) -> Self {
        ObjectMediaArchive {
            store,
            backend,
            local_root: None,
        }
    }

    /// The same archive, knowing `store` is the local directory `root`.
    pub fn with_local_root(mut self, root: PathBuf) -> Self {
        self.local_root = Some(root);
        self
    }

    /// On a local store, starts making the folder of the session's packs (a first fold's
    /// pack otherwise waits for it, and its fsyncs, after planning).
    fn prepare_packs_folder(
        &self,
        session: &SessionId,
    ) -> Result<Option<tokio::task::JoinHandle<std::io::Result<()>>>, StoreError> {
        let Some(root) = &self.local_root else {
            return Ok(None);
        };
        let folder = root.join(keys::packs_prefix(session)?.as_ref());
        Ok(tokio::runtime::Handle::try_current()
            .ok()
            .map(|rt| rt.spawn_blocking(move || local_entry::make_folder(&folder))))
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
            .put_opts(&path, payload::bytes_in_pieces(bytes), opts)
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
    async fn put_contents(
        &self,
        session: &SessionId,
        items: Vec<(String, Bytes)>,
    ) -> Result<Vec<StoredPart>, StoreError> {
        let planned = self.plan_contents(session, None, items).await?;
        planned.write.await?;
        Ok(planned.parts)
    }

    async fn plan_contents_known(
        &self,
        session: &SessionId,
        source: Option<&Bytes>,
        items: Vec<(String, Bytes)>,
        known: &KnownDigests,
    ) -> Result<PlannedContents, StoreError> {
        let folder = match items.len() {
            0 | 1 => None,
            _ => self.prepare_packs_folder(session)?,
        };
        let (parts, writes) = self.plan_packs(session, source, items, known)?;
        // Planning reads and writes nothing (on a local directory, it makes the folder the
        // pack goes in); every request to the backend is in here.
        let (archive, session) = (self.clone(), session.clone());
        let write = async move {
            if let Some(folder) = folder {
                local_entry::finished(folder, archive.backend, "make the packs folder").await?;
            }
            for write in writes {
                match write {
                    PackWrite::Pack(path, pieces) => archive.put_pack(path, pieces).await?,
                    PackWrite::Single(media_type, bytes) => {
                        archive.put_content(&session, &media_type, bytes).await?;
                    }
                }
            }
            Ok(())
        };
        Ok(PlannedContents {
            parts,
            write: Box::pin(write),
        })
    }

    async fn get_packed(
        &self,
        session: &SessionId,
        key: &str,
        location: &PackLocation,
    ) -> Result<Bytes, StoreError> {
        keys::content_key(key)?;
        let path = keys::pack_path(session, &location.pack)?;
        let range = location.offset..location.offset.saturating_add(location.size);
        match self.store.get_range(&path, range).await {
            Ok(bytes) => Ok(bytes),
            // Not in its pack (never written there, or collected): the payload may still be
            // an object of its own.
            Err(object_store::Error::NotFound { .. }) => self.get_content(session, key).await,
            Err(e) => Err(backend_error(self.backend, "get pack range", e)),
        }
    }
}

/// One object a planned batch writes.
enum PackWrite {
    /// A pack: its path and bytes.
    Pack(ObjectPath, PutPayload),
    /// A batch of one payload: an object of its own, as `put_content` stores it.
    Single(String, Bytes),
}

impl ObjectMediaArchive {
    /// Creates a pack unless it exists: its name is its content's, so one already there holds
    /// the same bytes. In a local directory foldwire writes it itself ([`local_entry`]), each
    /// piece handed to the disk as soon as it is written, which takes a first turn's pack
    /// (megabytes) to synced in about half the time object_store's write-then-sync does.
    async fn put_pack(&self, path: ObjectPath, pieces: PutPayload) -> Result<(), StoreError> {
        if let Some(root) = &self.local_root {
            let dest = root.join(path.as_ref());
            let created = tokio::task::spawn_blocking(move || {
                local_entry::stage(&dest, &pieces)?.publish(&dest)
            });
            // `false` is a pack that was there already.
            local_entry::finished(created, self.backend, "put pack").await?;
            return Ok(());
        }
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self.store.put_opts(&path, pieces, opts).await {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(backend_error(self.backend, "put pack", e)),
        }
    }

    /// What [`MediaArchive::plan_contents`] answers, and the objects to write: the batch in
    /// packs, runs of slices of `source` laid out as they lie in it ([`pack_layout`]).
    fn plan_packs(
        &self,
        session: &SessionId,
        source: Option<&Bytes>,
        items: Vec<(String, Bytes)>,
        known: &KnownDigests,
    ) -> Result<(Vec<StoredPart>, Vec<PackWrite>), StoreError> {
        let digests = keys::sha256_hex_all_known(&items, known);
        // The first item of each digest (a turn may carry one payload twice; it is stored
        // once). One map over the digests, none copied: a first fold archives thousands.
        let first_of: Vec<usize> = {
            let mut seen: foldhash::HashMap<&str, usize> =
                foldhash::HashMapExt::with_capacity(digests.len());
            digests
                .iter()
                .enumerate()
                .map(|(i, key)| *seen.entry(key.as_str()).or_insert(i))
                .collect()
        };
        let mut parts: Vec<StoredPart> = Vec::with_capacity(items.len());
        // Payloads of the batch in pack order, each once.
        let mut packed: Vec<(usize, Bytes)> = Vec::with_capacity(items.len());
        for (i, ((media_type, bytes), key)) in items.into_iter().zip(digests).enumerate() {
            let content = StoredContent {
                key,
                media_type,
                size: bytes.len() as u64,
            };
            if first_of.get(i) == Some(&i) {
                packed.push((i, bytes));
            }
            parts.push(StoredPart {
                content,
                location: None,
            });
        }
        let mut packs = Vec::new();
        if packed.len() == 1 {
            for (i, bytes) in packed {
                let media_type = parts[i].content.media_type.clone();
                packs.push(PackWrite::Single(media_type, bytes));
            }
            return Ok((parts, packs));
        }
        for group in pack_groups(&packed) {
            let layout = pack_layout::lay_out(group, source);
            // The pack is named by the digest of its manifest, each payload's key, offset and
            // size in order: that fixes every byte anything points at as surely as their own
            // digest (every key is one), without hashing them a second time. (Bytes between
            // payloads, framing cut from the source, are pointed at by nothing.)
            // Hashed as it is written, never held whole (a first turn's is a megabyte).
            let mut manifest = keys::KeyWriter::new();
            let mut number = itoa::Buffer::new();
            for (i, offset, size) in &layout.places {
                let key = parts.get(*i).map_or("", |p| p.content.key.as_str());
                manifest.write(key.as_bytes());
                manifest.write(b" ");
                manifest.write(number.format(*offset).as_bytes());
                manifest.write(b" ");
                manifest.write(number.format(*size).as_bytes());
                manifest.write(b"\n");
            }
            let pack_key = manifest.finish();
            packs.push(PackWrite::Pack(
                keys::pack_path(session, &pack_key)?,
                payload::in_pieces(layout.pieces),
            ));
            for (i, offset, size) in layout.places {
                let location = PackLocation {
                    pack: pack_key.clone(),
                    offset,
                    size,
                };
                parts[i].location = Some(location);
            }
        }
        // Duplicates point where their first copy went.
        for (i, first) in first_of.into_iter().enumerate() {
            if first != i {
                let location = parts.get(first).and_then(|p| p.location.clone());
                if let Some(part) = parts.get_mut(i) {
                    part.location = location;
                }
            }
        }
        Ok((parts, packs))
    }
}

/// Largest pack written in one put; a bigger batch is split at payload boundaries.
pub const MAX_PACK_BYTES: usize = 32 << 20;

/// Splits a batch into packs of at most [`MAX_PACK_BYTES`] (a payload larger than that is a
/// pack of its own).
fn pack_groups(items: &[(usize, Bytes)]) -> Vec<&[(usize, Bytes)]> {
    let mut groups = Vec::new();
    let mut start = 0;
    let mut size = 0;
    for (i, (_, bytes)) in items.iter().enumerate() {
        if i > start && size + bytes.len() > MAX_PACK_BYTES {
            groups.push(&items[start..i]);
            start = i;
            size = 0;
        }
        size += bytes.len();
    }
    if start < items.len() {
        groups.push(&items[start..]);
    }
    groups
}
