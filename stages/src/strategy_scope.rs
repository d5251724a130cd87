//! What a strategy sees of its turn beyond its trait's arguments, and how it tells the turn
//! that it fell back.
//!
//! The strategy traits take only what a decision needs (ranges and demand, units to
//! summarize, a layout request). Strategies that call out — an HTTP endpoint, a sandboxed
//! plugin, a model — also need the turn's options (the session's upstream, for
//! `summarizer.llm`) and a way to say "I failed and the built-in strategy decided instead"
//! that lands in the turn's report. A stage that consults a strategy runs the call inside a
//! [`StrategyScope`]: [`StrategyScope::enter`] for a synchronous call,
//! [`StrategyScope::scoped`] for a future (the scope is installed around every poll, so it
//! follows the future across threads). Inside, [`options`] reads the turn's options,
//! [`extension`] a value the host handed over by type, and [`warn`] records a warning;
//! afterwards the stage moves the warnings into the report with
//! [`StrategyScope::report_into`]. Outside any scope, `warn` only logs and the readers give
//! `None`.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use foldwire_core::{TurnOptions, TurnReport};

/// Report counter of strategy fallbacks in one turn.
pub const FALLBACK_COUNTER: &str = "strategy.fallbacks";

/// Warning code of a strategy call that died (panicked) on the blocking pool.
pub const FAILED_CODE: &str = "strategy_failed";

/// One fallback (or other trouble) a strategy reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrategyWarning {
    /// The strategy that reported it (`fold.http`, a plugin's name, …).
    pub strategy: String,
    /// A stable code (`strategy_fallback`).
    pub code: String,
    /// What happened and what decided instead.
    pub message: String,
}

#[derive(Debug, Default)]
struct Inner {
    options: TurnOptions,
    warnings: Vec<StrategyWarning>,
}

/// The turn context strategy calls run in; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct StrategyScope {
    inner: Arc<Mutex<Inner>>,
}

thread_local! {
    static CURRENT: RefCell<Option<StrategyScope>> = const { RefCell::new(None) };
}

/// Puts the previous scope back when a call inside a scope ends (also on unwinding).
struct Restore(Option<StrategyScope>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

impl StrategyScope {
    /// A scope exposing these turn options.
    pub fn new(options: &TurnOptions) -> Self {
        StrategyScope {
            inner: Arc::new(Mutex::new(Inner {
                options: options.clone(),
                warnings: Vec::new(),
            })),
        }
    }

    /// Runs a synchronous strategy call inside the scope.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        let _restore = Restore(previous);
        f()
    }

    /// Runs a synchronous call inside the scope on tokio's blocking pool and awaits it, so
    /// a call that waits (an endpoint, a script at its time limit) frees the worker thread
    /// the stage runs on; other sessions' turns on that worker go on meanwhile. The scope
    /// is shared, so what the call records lands in this turn. Outside a tokio runtime the
    /// call runs in place.
    ///
    /// # Errors
    /// The call panicked (or the runtime shut down under it).
    pub async fn off_worker<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, OffWorkerError> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Ok(self.enter(f));
        };
        let scope = self.clone();
        runtime
            .spawn_blocking(move || scope.enter(f))
            .await
            .map_err(OffWorkerError)
    }

    /// A future that runs inside the scope at every poll.
    pub fn scoped<F: Future>(&self, future: F) -> Scoped<F> {
        Scoped {
            scope: self.clone(),
            future: Box::pin(future),
        }
    }

    /// The warnings recorded so far, removed from the scope.
    pub fn take_warnings(&self) -> Vec<StrategyWarning> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut inner.warnings)
    }

    /// Moves the recorded warnings into a turn's report (as the stage's warnings, counted
    /// under [`FALLBACK_COUNTER`]).
    pub fn report_into(&self, report: &mut TurnReport, stage: &str) {
        for w in self.take_warnings() {
            report.count(FALLBACK_COUNTER, 1);
            report.warn(stage, &w.code, format!("{}: {}", w.strategy, w.message));
        }
    }
}

/// A strategy call sent to the blocking pool did not come back with an answer.
#[derive(Debug, thiserror::Error)]
#[error("the strategy call on the blocking pool did not finish")]
pub struct OffWorkerError(#[source] pub tokio::task::JoinError);

/// A future running inside a [`StrategyScope`] (see [`StrategyScope::scoped`]).
pub struct Scoped<F> {
    scope: StrategyScope,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let scope = this.scope.clone();
        scope.enter(|| this.future.as_mut().poll(cx))
    }
}

/// Reads the turn options of the current scope (`None` outside a scope).
pub fn options<R>(read: impl FnOnce(&TurnOptions) -> R) -> Option<R> {
    CURRENT.with(|c| {
        let scope = c.borrow();
        let inner = scope.as_ref()?.inner.lock().ok()?;
        Some(read(&inner.options))
    })
}

/// The value of type `T` the host put in the current scope's
/// [`TurnOptions::extensions`] (`None` outside a scope or when unset).
pub fn extension<T: Clone + Send + Sync + 'static>() -> Option<T> {
    options(|o| o.extensions.get::<T>().cloned()).flatten()
}

/// Records a warning in the current scope, and logs it either way.
pub fn warn(strategy: &str, code: &str, message: impl Into<String>) {
    let message = message.into();
    tracing::warn!(strategy, code, "{message}");
    CURRENT.with(|c| {
        if let Some(scope) = c.borrow().as_ref() {
            let mut inner = scope.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.warnings.push(StrategyWarning {
                strategy: strategy.to_owned(),
                code: code.to_owned(),
                message,
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host-defined value handed to strategies.
    #[derive(Debug, Clone, PartialEq)]
    struct Upstream(&'static str);

    #[test]
    fn warnings_and_options_reach_only_calls_inside_the_scope() {
        let mut turn_options = TurnOptions::default();
        turn_options.extensions.insert(Upstream("anthropic"));
        turn_options.head_tokens = Some(700);
        let scope = StrategyScope::new(&turn_options);
        warn("outside", "strategy_fallback", "not recorded");
        assert!(extension::<Upstream>().is_none());
        assert!(options(|o| o.head_tokens).is_none());
        let seen = scope.enter(|| {
            warn("fold.http", "strategy_fallback", "timed out");
            (extension::<Upstream>(), options(|o| o.head_tokens))
        });
        assert_eq!(seen, (Some(Upstream("anthropic")), Some(Some(700))));
        assert!(
            extension::<Upstream>().is_none(),
            "the scope ends with the call"
        );
        let mut report = TurnReport::default();
        scope.report_into(&mut report, "fold");
        assert_eq!(report.counter(FALLBACK_COUNTER), 1);
        assert_eq!(report.warnings.len(), 1);
        assert_eq!(report.warnings[0].message, "fold.http: timed out");
        assert!(scope.take_warnings().is_empty());
    }

    #[tokio::test]
    async fn a_scoped_future_sees_the_scope_at_every_poll() {
        let scope = StrategyScope::default();
        scope
            .scoped(async {
                tokio::task::yield_now().await;
                warn("summarizer.llm", "strategy_fallback", "after a yield");
            })
            .await;
        assert_eq!(scope.take_warnings().len(), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_call_off_the_worker_sees_the_scope_and_reports_into_it() {
        let mut turn_options = TurnOptions::default();
        turn_options.extensions.insert(Upstream("u"));
        let scope = StrategyScope::new(&turn_options);
        let worker = std::thread::current().id();
        let (seen, thread) = scope
            .off_worker(|| {
                warn("fold.http", "strategy_fallback", "from the blocking pool");
                (extension::<Upstream>(), std::thread::current().id())
            })
            .await
            .unwrap();
        assert_eq!(seen, Some(Upstream("u")));
        assert_ne!(thread, worker, "the call ran off the worker thread");
        assert_eq!(scope.take_warnings().len(), 1);
        assert!(
            extension::<Upstream>().is_none(),
            "the worker never entered the scope"
        );
    }
}
