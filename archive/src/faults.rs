//! Stores that fail on purpose, for tests of the spill path ("nothing leaves the wire unless
//! its bytes are stored"). Slow stores come from object_store's `ThrottledStore`.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Wraps a store and makes every write fail while `failing` is set; reads, lists and
/// deletes pass through, so a test can check that nothing was stored and later recover.
#[derive(Debug)]
pub struct FailingStore {
    inner: Arc<dyn ObjectStore>,
    failing: AtomicBool,
    refused: AtomicU64,
}

impl FailingStore {
    /// A wrapper whose writes fail until [`FailingStore::set_failing`]`(false)`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FailingStore {
            inner,
            failing: AtomicBool::new(true),
            refused: AtomicU64::new(0),
        }
    }

    /// Turns write failures on or off.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// How many writes were refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    fn check(&self, what: &str, location: &Path) -> object_store::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(object_store::Error::Generic {
                store: "failing",
                source: format!("injected failure: {what} {location} refused").into(),
            });
        }
        Ok(())
    }
}

impl fmt::Display for FailingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FailingStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FailingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check("put", location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check("multipart put", location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.check("copy", to)?;
        self.inner.copy_opts(from, to, options).await
    }
}

/// Wraps a store and silently turns every conditional put into a plain overwrite: a broken
/// backend, used to show that the conformance suite catches lost updates.
#[derive(Debug)]
pub struct UnconditionalStore {
    inner: Arc<dyn ObjectStore>,
}

impl UnconditionalStore {
    /// A wrapper that ignores `PutMode::Create` and `PutMode::Update`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        UnconditionalStore { inner }
    }
}

impl fmt::Display for UnconditionalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnconditionalStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for UnconditionalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let opts = PutOptions {
            mode: object_store::PutMode::Overwrite,
            ..opts
        };
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// How a [`FaultyStateStore`] behaves right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Calls pass through.
    Healthy,
    /// Calls fail with a backend error at once (connection refused).
    Down,
    /// Calls never answer (a frozen server); only a caller's timeout ends them.
    Frozen,
}

/// A state store whose backend can be taken down or frozen, counting the calls that reach
/// it: for tests of what the engine and the circuit breaker do during an outage.
#[derive(Debug)]
pub struct FaultyStateStore {
    inner: Arc<dyn foldwire_core::StateStore>,
    fault: std::sync::Mutex<Fault>,
    calls: AtomicU64,
}

impl FaultyStateStore {
    /// A healthy wrapper around `inner`.
    pub fn new(inner: Arc<dyn foldwire_core::StateStore>) -> Self {
        FaultyStateStore {
            inner,
            fault: std::sync::Mutex::new(Fault::Healthy),
            calls: AtomicU64::new(0),
        }
    }

    /// Changes the behaviour for the next calls.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    }

    /// Calls that reached this store so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    async fn gate(&self, operation: &str) -> Result<(), foldwire_core::StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let fault = *self.fault.lock().unwrap_or_else(|p| p.into_inner());
        match fault {
            Fault::Healthy => Ok(()),
            Fault::Down => Err(foldwire_core::StoreError::Backend {
                backend: "faulty".to_owned(),
                operation: operation.to_owned(),
                source: "injected outage: connection refused".into(),
            }),
            Fault::Frozen => {
                futures::future::pending::<()>().await;
                Ok(())
            }
        }
    }
}

#[async_trait]
impl foldwire_core::StateStore for FaultyStateStore {
    async fn load(
        &self,
        session: &foldwire_core::SessionId,
    ) -> Result<
        Option<(foldwire_core::SessionState, foldwire_core::StateVersion)>,
        foldwire_core::StoreError,
    > {
        self.gate("load state").await?;
        self.inner.load(session).await
    }

    async fn save(
        &self,
        session: &foldwire_core::SessionId,
        state: &foldwire_core::SessionState,
        expected: Option<&foldwire_core::StateVersion>,
    ) -> Result<foldwire_core::StateVersion, foldwire_core::StoreError> {
        self.gate("save state").await?;
        self.inner.save(session, state, expected).await
    }

    async fn save_change(
        &self,
        session: &foldwire_core::SessionId,
        before: &foldwire_core::SessionState,
        state: &foldwire_core::SessionState,
        expected: Option<&foldwire_core::StateVersion>,
    ) -> Result<foldwire_core::StateVersion, foldwire_core::StoreError> {
        self.gate("save state").await?;
        self.inner
            .save_change(session, before, state, expected)
            .await
    }

    async fn save_change_after(
        &self,
        session: &foldwire_core::SessionId,
        before: &foldwire_core::SessionState,
        state: &foldwire_core::SessionState,
        expected: Option<&foldwire_core::StateVersion>,
        ready: foldwire_core::PendingWrites,
    ) -> Result<foldwire_core::StateVersion, foldwire_core::StoreError> {
        self.gate("save state").await?;
        self.inner
            .save_change_after(session, before, state, expected, ready)
            .await
    }
}
