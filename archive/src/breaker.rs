//! A circuit breaker in front of a backend: when the store keeps failing (S3 unreachable,
//! a frozen server), turns stop waiting on it.
//!
//! Closed, it passes calls through and counts backend failures in a row; after
//! [`BreakerConfig::failures`] of them it opens, and every call fails at once with
//! [`StoreError::Backend`] (backend `breaker`) for [`BreakerConfig::cooldown`]. Then one call
//! is let through as a probe: success closes the circuit, failure opens it again. Each call
//! is also bounded by [`BreakerConfig::call_timeout`], so a frozen server costs one timeout,
//! not the object store client's whole retry schedule.
//!
//! Only failures of the backend itself count: a conflict, a missing object or a refused key
//! is an answer from a working store.

use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use foldwire_core::{
    ArchivedObject, KnownDigests, MediaArchive, PackLocation, PendingWrites, PlannedContents, Ref,
    SessionId, SessionState, StateStore, StateVersion, StoreError, StoredContent, StoredPart,
};

/// When the breaker opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Backend failures in a row that open the circuit.
    pub failures: u32,
    /// How long an open circuit fails calls at once before it lets a probe through.
    pub cooldown: Duration,
    /// The longest one call may take; a call that takes longer counts as a failure.
    pub call_timeout: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 3,
            cooldown: Duration::from_secs(15),
            call_timeout: Duration::from_secs(5),
        }
    }
}

/// What `/metrics` and the log report about a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerStats {
    /// The circuit is open (or half-open, a probe in flight): calls fail at once.
    pub open: bool,
    /// How many times it opened.
    pub trips: u64,
    /// Calls failed at once without reaching the backend.
    pub skipped: u64,
}

#[derive(Debug)]
enum Circuit {
    Closed { failures: u32 },
    Open { until: Instant },
    Probing,
}

/// The breaker shared by a location's state store and media archive (one backend, one
/// health).
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    backend: &'static str,
    circuit: Mutex<Circuit>,
    trips: AtomicU64,
    skipped: AtomicU64,
}

/// Whether a call may go to the backend, and if so whether it is the probe.
enum Admission {
    Pass,
    Probe,
}

impl Breaker {
    /// A closed breaker for the named backend.
    pub fn new(backend: &'static str, config: BreakerConfig) -> Self {
        Breaker {
            config,
            backend,
            circuit: Mutex::new(Circuit::Closed { failures: 0 }),
            trips: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// The current numbers.
    pub fn stats(&self) -> BreakerStats {
        let open = !matches!(*self.lock(), Circuit::Closed { .. });
        BreakerStats {
            open,
            trips: self.trips.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Circuit> {
        // The guarded data is a small enum: a panic elsewhere cannot leave it half-written.
        self.circuit.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn admit(&self, operation: &str) -> Result<Admission, StoreError> {
        let mut circuit = self.lock();
        match *circuit {
            Circuit::Closed { .. } => Ok(Admission::Pass),
            Circuit::Open { until } if Instant::now() >= until => {
                *circuit = Circuit::Probing;
                tracing::info!(
                    backend = self.backend,
                    "Store circuit half-open: probing the backend."
                );
                Ok(Admission::Probe)
            }
            Circuit::Open { until } => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                let wait = until.saturating_duration_since(Instant::now());
                Err(self.unavailable(operation, Some(wait)))
            }
            Circuit::Probing => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                Err(self.unavailable(operation, None))
            }
        }
    }

    /// The error a call would fail with at once now (open and not yet due a probe, or a
    /// probe in flight), without admitting one or changing the circuit.
    fn refusing(&self, operation: &str) -> Option<StoreError> {
        let wait = match *self.lock() {
            Circuit::Open { until } if Instant::now() < until => {
                Some(until.saturating_duration_since(Instant::now()))
            }
            Circuit::Probing => None,
            _ => return None,
        };
        self.skipped.fetch_add(1, Ordering::Relaxed);
        Some(self.unavailable(operation, wait))
    }

    fn unavailable(&self, operation: &str, wait: Option<Duration>) -> StoreError {
        let when = match wait {
            Some(w) => format!("the next probe in {:.1} s", w.as_secs_f64()),
            None => "a probe is in flight".to_owned(),
        };
        StoreError::Backend {
            backend: "breaker".to_owned(),
            operation: operation.to_owned(),
            source: format!(
                "the {} store failed {} times in a row, so calls are skipped for {} s ({when})",
                self.backend,
                self.config.failures,
                self.config.cooldown.as_secs()
            )
            .into(),
        }
    }

    fn record(&self, admission: Admission, healthy: bool) {
        let mut circuit = self.lock();
        if healthy {
            if matches!(admission, Admission::Probe) {
                tracing::info!(
                    backend = self.backend,
                    "Store circuit closed: the backend answers again."
                );
            }
            *circuit = Circuit::Closed { failures: 0 };
            return;
        }
        let failures = match (&admission, &*circuit) {
            (Admission::Probe, _) => self.config.failures,
            (Admission::Pass, Circuit::Closed { failures }) => failures + 1,
            // Another call already opened it; this failure changes nothing.
            (Admission::Pass, _) => return,
        };
        if failures >= self.config.failures {
            self.trips.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                backend = self.backend,
                cooldown_secs = self.config.cooldown.as_secs(),
                "Store circuit open: failing store calls at once until a probe succeeds."
            );
            *circuit = Circuit::Open {
                until: Instant::now() + self.config.cooldown,
            };
        } else {
            *circuit = Circuit::Closed { failures };
        }
    }

    /// Runs one backend call under the breaker.
    async fn call<T, F>(&self, operation: &str, call: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let admission = self.admit(operation)?;
        let result = match tokio::time::timeout(self.config.call_timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Backend {
                backend: self.backend.to_owned(),
                operation: operation.to_owned(),
                source: format!(
                    "no answer within {} ms",
                    self.config.call_timeout.as_millis()
                )
                .into(),
            }),
        };
        let healthy = !matches!(result, Err(StoreError::Backend { .. }));
        self.record(admission, healthy);
        result
    }
}

/// A state store behind a [`Breaker`].
#[derive(Debug)]
pub struct GuardedStateStore {
    inner: Arc<dyn StateStore>,
    breaker: Arc<Breaker>,
}

impl GuardedStateStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn StateStore>, breaker: Arc<Breaker>) -> Self {
        GuardedStateStore { inner, breaker }
    }
}

#[async_trait]
impl StateStore for GuardedStateStore {
    async fn load(
        &self,
        session: &SessionId,
    ) -> Result<Option<(SessionState, StateVersion)>, StoreError> {
        self.breaker
            .call("load state", self.inner.load(session))
            .await
    }

    async fn save(
        &self,
        session: &SessionId,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        self.breaker
            .call("save state", self.inner.save(session, state, expected))
            .await
    }

    async fn save_change(
        &self,
        session: &SessionId,
        before: &SessionState,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        self.breaker
            .call(
                "save state",
                self.inner.save_change(session, before, state, expected),
            )
            .await
    }

    async fn save_change_after(
        &self,
        session: &SessionId,
        before: &SessionState,
        state: &SessionState,
        expected: Option<&StateVersion>,
        ready: PendingWrites,
    ) -> Result<StateVersion, StoreError> {
        // `ready` is another backend's writes (the archive's pack), bounded and judged by
        // their own breaker: this one times and judges only the save, from when they have
        // finished, and a failure of theirs comes back as it is. The save runs beside them
        // all along, so it still prepares its entry while they finish.
        let (finished, relayed) = tokio::sync::oneshot::channel();
        let mut relay = PendingWrites::default();
        relay.push(Box::pin(async move {
            relayed.await.unwrap_or_else(|_| {
                Err(StoreError::Backend {
                    backend: "breaker".to_owned(),
                    operation: "wait for pending writes".to_owned(),
                    source: "the pending writes were dropped unfinished".into(),
                })
            })
        }));
        let save = self
            .inner
            .save_change_after(session, before, state, expected, relay);
        let settle = async move {
            let settled = ready.finish().await;
            let failed = settled.is_err();
            let _ = finished.send(settled);
            failed
        };
        tokio::pin!(save, settle);
        let failed = tokio::select! {
            failed = &mut settle => failed,
            // Done without them (a lost race found before the entry was ready).
            saved = &mut save => return saved,
        };
        if failed {
            return save.await;
        }
        self.breaker.call("save state", save).await
    }
}

/// A media archive behind a [`Breaker`].
#[derive(Debug)]
pub struct GuardedMediaArchive {
    inner: Arc<dyn MediaArchive>,
    breaker: Arc<Breaker>,
}

impl GuardedMediaArchive {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn MediaArchive>, breaker: Arc<Breaker>) -> Self {
        GuardedMediaArchive { inner, breaker }
    }
}

#[async_trait]
impl MediaArchive for GuardedMediaArchive {
    async fn put(
        &self,
        session: &SessionId,
        r#ref: Ref,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArchivedObject, StoreError> {
        self.breaker
            .call(
                "put media",
                self.inner.put(session, r#ref, media_type, bytes),
            )
            .await
    }

    async fn get(
        &self,
        session: &SessionId,
        r#ref: Ref,
    ) -> Result<(ArchivedObject, Bytes), StoreError> {
        self.breaker
            .call("get media", self.inner.get(session, r#ref))
            .await
    }

    async fn list(&self, session: &SessionId) -> Result<Vec<ArchivedObject>, StoreError> {
        self.breaker
            .call("list media", self.inner.list(session))
            .await
    }

    async fn put_content(
        &self,
        session: &SessionId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<StoredContent, StoreError> {
        self.breaker
            .call(
                "put content",
                self.inner.put_content(session, media_type, bytes),
            )
            .await
    }

    async fn get_content(&self, session: &SessionId, key: &str) -> Result<Bytes, StoreError> {
        self.breaker
            .call("get content", self.inner.get_content(session, key))
            .await
    }

    async fn put_contents(
        &self,
        session: &SessionId,
        items: Vec<(String, Bytes)>,
    ) -> Result<Vec<StoredPart>, StoreError> {
        self.breaker
            .call("put contents", self.inner.put_contents(session, items))
            .await
    }

    async fn plan_contents_known(
        &self,
        session: &SessionId,
        source: Option<&Bytes>,
        items: Vec<(String, Bytes)>,
        known: &KnownDigests,
    ) -> Result<PlannedContents, StoreError> {
        // Planning touches no backend (the object-store archive hashes and lays out in
        // memory), so it is not judged: a plan that succeeds says nothing of the backend, and
        // counting it would reset the failures of the writes between. The write is what
        // reaches the backend, so the breaker guards and judges that. While the circuit is
        // open the plan fails at once too, so the fold keeps its originals in the state
        // rather than record a write that will be refused.
        if let Some(refused) = self.breaker.refusing("put contents") {
            return Err(refused);
        }
        let mut planned = self
            .inner
            .plan_contents_known(session, source, items, known)
            .await?;
        let (breaker, write) = (Arc::clone(&self.breaker), planned.write);
        planned.write = Box::pin(async move { breaker.call("put contents", write).await });
        Ok(planned)
    }

    async fn get_packed(
        &self,
        session: &SessionId,
        key: &str,
        location: &PackLocation,
    ) -> Result<Bytes, StoreError> {
        self.breaker
            .call("get packed", self.inner.get_packed(session, key, location))
            .await
    }
}
