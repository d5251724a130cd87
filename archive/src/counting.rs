//! An object store wrapper that counts the requests that reach the store and the bytes
//! written: how the state journal's and the archive's write budgets are measured (tests
//! assert them, `--bench state_io` reports them). One request is counted per call a remote
//! store would answer: a put, a get, a head, a listing, one per path deleted.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Requests and bytes seen by a [`CountingStore`] since it was made or last reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Puts (whole objects; a multipart upload counts once when started).
    pub puts: u64,
    /// Bytes of the puts.
    pub put_bytes: u64,
    /// Gets and heads.
    pub gets: u64,
    /// Listings.
    pub lists: u64,
    /// Paths deleted.
    pub deletes: u64,
    /// Copies.
    pub copies: u64,
}

impl Counts {
    /// Every request, of every kind.
    pub fn requests(&self) -> u64 {
        self.puts + self.gets + self.lists + self.deletes + self.copies
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            puts: self.puts - earlier.puts,
            put_bytes: self.put_bytes - earlier.put_bytes,
            gets: self.gets - earlier.gets,
            lists: self.lists - earlier.lists,
            deletes: self.deletes - earlier.deletes,
            copies: self.copies - earlier.copies,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    puts: AtomicU64,
    put_bytes: AtomicU64,
    gets: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
    copies: AtomicU64,
}

/// Wraps a store and counts what passes through (see the module docs).
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    counters: Arc<Counters>,
    /// Puts and their bytes by the folder under the session (`journal`, `media`, `packs`,
    /// `state.json`, `last_request.d` …).
    by_folder: std::sync::Mutex<BTreeMap<String, Counts>>,
}

/// The part of a key under `sessions/<id>/` that says what it is.
fn folder_of(location: &Path) -> String {
    let parts: Vec<_> = location.parts().collect();
    match parts.as_slice() {
        [first, _, what, ..] if first.as_ref() == "sessions" => what.as_ref().to_owned(),
        _ => location.as_ref().to_owned(),
    }
}

impl CountingStore {
    /// A counting wrapper around `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        CountingStore {
            inner,
            counters: Arc::new(Counters::default()),
            by_folder: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Puts and bytes per folder under the session so far (see [`CountingStore`]).
    pub fn puts_by_folder(&self) -> BTreeMap<String, Counts> {
        self.by_folder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        let c = &self.counters;
        Counts {
            puts: c.puts.load(Ordering::SeqCst),
            put_bytes: c.put_bytes.load(Ordering::SeqCst),
            gets: c.gets.load(Ordering::SeqCst),
            lists: c.lists.load(Ordering::SeqCst),
            deletes: c.deletes.load(Ordering::SeqCst),
            copies: c.copies.load(Ordering::SeqCst),
        }
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let bytes = payload.content_length() as u64;
        self.counters.puts.fetch_add(1, Ordering::SeqCst);
        self.counters.put_bytes.fetch_add(bytes, Ordering::SeqCst);
        {
            let mut by_folder = self.by_folder.lock().unwrap_or_else(|p| p.into_inner());
            let entry = by_folder.entry(folder_of(location)).or_default();
            entry.puts += 1;
            entry.put_bytes += bytes;
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.counters.puts.fetch_add(1, Ordering::SeqCst);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.counters.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let counters = Arc::clone(&self.counters);
        let counted = locations
            .map(move |p| {
                counters.deletes.fetch_add(1, Ordering::SeqCst);
                p
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counters.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.counters.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.counters.copies.fetch_add(1, Ordering::SeqCst);
        self.inner.copy_opts(from, to, options).await
    }
}
