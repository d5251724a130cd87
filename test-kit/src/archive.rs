//! Archives for tests that look at how the stages use one.

use std::sync::Arc;

use bytes::Bytes;
use foldwire_core::{
    ArchivedObject, KnownDigests, MediaArchive, PackLocation, PlannedContents, Ref, SessionId,
    StoreError, StoredContent, StoredPart, async_trait,
};

/// An archive that notes the thread each batch write ([`MediaArchive::put_contents`]) ran
/// on and when the writes it planned got under way, and otherwise is the archive it wraps.
#[derive(Debug)]
pub struct BatchThreads {
    inner: Arc<dyn MediaArchive>,
    batches: std::sync::Mutex<Vec<std::thread::ThreadId>>,
    /// How many planned writes have been polled for the first time.
    writes_begun: Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>,
}

impl BatchThreads {
    /// Wraps `inner`.
    pub fn over(inner: Arc<dyn MediaArchive>) -> Arc<Self> {
        Arc::new(BatchThreads {
            inner,
            batches: std::sync::Mutex::new(Vec::new()),
            writes_begun: Arc::default(),
        })
    }

    /// Blocks this thread (it does not yield to an async runtime) until `n` of the writes
    /// [`MediaArchive::plan_contents`] handed out have begun, or `timeout` passes; whether
    /// they did.
    pub fn wait_for_writes(&self, n: usize, timeout: std::time::Duration) -> bool {
        let (begun, changed) = &*self.writes_begun;
        let guard = begun.lock().unwrap();
        let (guard, _) = changed
            .wait_timeout_while(guard, timeout, |begun| *begun < n)
            .unwrap();
        *guard >= n
    }

    /// The thread of each [`MediaArchive::put_contents`] call so far, in order.
    pub fn batches(&self) -> Vec<std::thread::ThreadId> {
        self.batches.lock().unwrap().clone()
    }
}

#[async_trait]
impl MediaArchive for BatchThreads {
    async fn put(
        &self,
        session: &SessionId,
        r#ref: Ref,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArchivedObject, StoreError> {
        self.inner.put(session, r#ref, media_type, bytes).await
    }

    async fn get(
        &self,
        session: &SessionId,
        r#ref: Ref,
    ) -> Result<(ArchivedObject, Bytes), StoreError> {
        self.inner.get(session, r#ref).await
    }

    async fn list(&self, session: &SessionId) -> Result<Vec<ArchivedObject>, StoreError> {
        self.inner.list(session).await
    }

    async fn put_content(
        &self,
        session: &SessionId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<StoredContent, StoreError> {
        self.inner.put_content(session, media_type, bytes).await
    }

    async fn get_content(&self, session: &SessionId, key: &str) -> Result<Bytes, StoreError> {
        self.inner.get_content(session, key).await
    }

    async fn put_contents(
        &self,
        session: &SessionId,
        items: Vec<(String, Bytes)>,
    ) -> Result<Vec<StoredPart>, StoreError> {
        self.batches
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.inner.put_contents(session, items).await
    }

    async fn plan_contents_known(
        &self,
        session: &SessionId,
        source: Option<&Bytes>,
        items: Vec<(String, Bytes)>,
        known: &KnownDigests,
    ) -> Result<PlannedContents, StoreError> {
        self.batches
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        let mut planned = self
            .inner
            .plan_contents_known(session, source, items, known)
            .await?;
        let write = planned.write;
        let begun = Arc::clone(&self.writes_begun);
        planned.write = Box::pin(async move {
            {
                let (count, changed) = &*begun;
                *count.lock().unwrap() += 1;
                changed.notify_all();
            }
            write.await
        });
        Ok(planned)
    }

    async fn get_packed(
        &self,
        session: &SessionId,
        key: &str,
        location: &PackLocation,
    ) -> Result<Bytes, StoreError> {
        self.inner.get_packed(session, key, location).await
    }
}
