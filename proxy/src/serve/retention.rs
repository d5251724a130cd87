//! The server's retention job: applies the configured [`RetentionPolicy`] to the state
//! location at start and then every `retention_interval_secs`, logs what it freed and counts
//! it in `/metrics`. `foldwire gc` runs the same collection by hand.

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use foldwire_archive::{RetentionPolicy, retention};

use super::AppState;

/// Starts the job unless the policy keeps everything. It holds the app weakly and ends with
/// it.
pub fn spawn(app: &Arc<AppState>, backend: &'static str) {
    let store = Arc::clone(&app.store);
    let config = &app.config;
    let policy =
        RetentionPolicy::from_days(config.retention_session_days, config.retention_media_days);
    if policy.keeps_everything() {
        return;
    }
    let every = Duration::from_secs(config.retention_interval_secs.max(60));
    let app: Weak<AppState> = Arc::downgrade(app);
    tokio::spawn(async move {
        loop {
            let Some(strong) = app.upgrade() else { return };
            match retention::collect(&store, backend, policy, SystemTime::now(), false).await {
                Ok(report) => {
                    if report.objects_removed > 0 || !report.errors.is_empty() {
                        tracing::info!(
                            sessions_removed = report.sessions_removed.len(),
                            objects_removed = report.objects_removed,
                            bytes_freed = report.bytes_freed,
                            errors = report.errors.len(),
                            "Retention applied."
                        );
                    }
                    strong.metrics.retention(&report);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "Retention could not list the state location.")
                }
            }
            drop(strong);
            tokio::time::sleep(every).await;
        }
    });
}
