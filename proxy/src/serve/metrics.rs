//! Prometheus metrics, kept as plain atomics and rendered in the text exposition format.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use foldwire_archive::{Breaker, GcReport};
use foldwire_core::{TurnReport, Wire};

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: DashMap<&'static str, AtomicU64>,
    fail_open: AtomicU64,
    refused: AtomicU64,
    upstream_errors: AtomicU64,
    passthrough: AtomicU64,
    provider_held: AtomicU64,
    websocket_refused: AtomicU64,
    proxy_calls: AtomicU64,
    loop_rounds: AtomicU64,
    stage_micros: DashMap<String, (u64, u64)>,
    counters: DashMap<String, u64>,
    store_breaker: Option<Arc<Breaker>>,
    retention_objects: AtomicU64,
    retention_bytes: AtomicU64,
    retention_sessions: AtomicU64,
}

impl Metrics {
    /// Reports the state store's circuit breaker too.
    pub fn with_store_breaker(mut self, breaker: Option<Arc<Breaker>>) -> Self {
        self.store_breaker = breaker;
        self
    }

    /// Counts a processed request of a wire.
    pub fn request(&self, wire: Wire) {
        self.requests
            .entry(wire.as_str())
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request forwarded without processing (unknown shape, GET).
    pub fn passthrough(&self) {
        self.passthrough.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request forwarded unchanged because it continues a conversation the
    /// provider keeps (a passthrough too).
    pub fn provider_held(&self) {
        self.provider_held.fetch_add(1, Ordering::Relaxed);
        self.passthrough();
    }

    /// Counts a WebSocket upgrade answered with 426 (the client falls back to HTTP).
    pub fn websocket_refused(&self) {
        self.websocket_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request forwarded unchanged because the pipeline failed.
    pub fn fail_open(&self) {
        self.fail_open.fetch_add(1, Ordering::Relaxed);
    }

    /// True while the store's circuit is open (calls to it fail at once).
    pub fn store_circuit_open(&self) -> bool {
        self.store_breaker.as_ref().is_some_and(|b| b.stats().open)
    }

    /// Adds what a retention run removed.
    pub fn retention(&self, report: &GcReport) {
        self.retention_objects
            .fetch_add(report.objects_removed, Ordering::Relaxed);
        self.retention_bytes
            .fetch_add(report.bytes_freed, Ordering::Relaxed);
        self.retention_sessions
            .fetch_add(report.sessions_removed.len() as u64, Ordering::Relaxed);
    }

    /// Counts a refused request.
    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an upstream that could not be reached.
    pub fn upstream_error(&self) {
        self.upstream_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one model call to a proxy tool that the proxy ran.
    pub fn proxy_call(&self) {
        self.proxy_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the upstream rounds one client request took.
    pub fn rounds(&self, n: u64) {
        self.loop_rounds.fetch_add(n, Ordering::Relaxed);
    }

    /// Folds a turn report's stage timings and counters into the totals.
    pub fn report(&self, report: &TurnReport) {
        for s in &report.stages {
            let mut e = self.stage_micros.entry(s.stage.clone()).or_default();
            e.0 += 1;
            e.1 += s.micros;
        }
        for (k, v) in &report.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# TYPE foldwire_requests_total counter\n");
        let mut reqs: Vec<_> = self
            .requests
            .iter()
            .map(|e| (*e.key(), e.value().load(Ordering::Relaxed)))
            .collect();
        reqs.sort();
        for (wire, n) in reqs {
            let _ = writeln!(out, "foldwire_requests_total{{wire=\"{wire}\"}} {n}");
        }
        for (name, v) in [
            ("foldwire_passthrough_total", &self.passthrough),
            ("foldwire_provider_held_total", &self.provider_held),
            ("foldwire_websocket_refused_total", &self.websocket_refused),
            ("foldwire_fail_open_total", &self.fail_open),
            ("foldwire_refused_total", &self.refused),
            ("foldwire_upstream_errors_total", &self.upstream_errors),
            ("foldwire_proxy_tool_calls_total", &self.proxy_calls),
            ("foldwire_loop_rounds_total", &self.loop_rounds),
            (
                "foldwire_retention_objects_removed_total",
                &self.retention_objects,
            ),
            (
                "foldwire_retention_bytes_freed_total",
                &self.retention_bytes,
            ),
            (
                "foldwire_retention_sessions_removed_total",
                &self.retention_sessions,
            ),
        ] {
            let _ = writeln!(
                out,
                "# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        if let Some(b) = &self.store_breaker {
            let stats = b.stats();
            let _ = writeln!(
                out,
                "# TYPE foldwire_store_circuit_open gauge\nfoldwire_store_circuit_open {}\n\
                 # TYPE foldwire_store_circuit_trips_total counter\nfoldwire_store_circuit_trips_total {}\n\
                 # TYPE foldwire_store_calls_skipped_total counter\nfoldwire_store_calls_skipped_total {}",
                u8::from(stats.open),
                stats.trips,
                stats.skipped
            );
        }
        out.push_str("# TYPE foldwire_stage_seconds summary\n");
        let mut stages: Vec<_> = self
            .stage_micros
            .iter()
            .map(|e| (e.key().clone(), *e.value()))
            .collect();
        stages.sort();
        for (stage, (count, micros)) in stages {
            let _ = writeln!(
                out,
                "foldwire_stage_seconds_sum{{stage=\"{stage}\"}} {:.6}\nfoldwire_stage_seconds_count{{stage=\"{stage}\"}} {count}",
                micros as f64 / 1e6
            );
        }
        out.push_str("# TYPE foldwire_pipeline_counter_total counter\n");
        let mut counters: Vec<_> = self
            .counters
            .iter()
            .map(|e| (e.key().clone(), *e.value()))
            .collect();
        counters.sort();
        for (name, v) in counters {
            let name = name.replace(['"', '\\', '\n'], "_");
            let _ = writeln!(
                out,
                "foldwire_pipeline_counter_total{{name=\"{name}\"}} {v}"
            );
        }
        out
    }
}
