//! Retention: what a location may forget, and the collector that forgets it.
//!
//! Two rules, each optional:
//! - a **session idle** longer than [`RetentionPolicy::session_idle`] (no state write since) is
//!   removed whole: its state (journal entries, newest first) first, so a crash half-way leaves an orphan, never a state that
//!   points at removed media; then its archive, ref pointers and anything else under it;
//! - in a live session, an archived **object nothing points to** (no block's originals, no
//!   entry of the state's archive index or originals map in any journal entry, no ref
//!   pointer) that is older than
//!   [`RetentionPolicy::media_age`] is removed: payloads a turn spilled before it failed open,
//!   writes a killed process left half-done. An object a live state, block or ref points to is
//!   never removed, however old.
//!
//! The collector works on the raw object store, so every backend (directory, memory, S3) is
//! collected the same way; `dry_run` reports without removing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use serde::Serialize;

use foldwire_core::{MediaArchive, SessionId};

use crate::media::ObjectMediaArchive;

/// What may be forgotten.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Sessions idle longer than this are removed whole; `None` keeps every session.
    pub session_idle: Option<Duration>,
    /// Unreferenced archived objects older than this are removed; `None` keeps them.
    pub media_age: Option<Duration>,
}

impl RetentionPolicy {
    /// A policy from whole days (0 = keep forever), the unit the config and CLI speak.
    pub fn from_days(session_idle_days: u64, media_days: u64) -> Self {
        let days = |d: u64| (d > 0).then(|| Duration::from_secs(d * 86_400));
        RetentionPolicy {
            session_idle: days(session_idle_days),
            media_age: days(media_days),
        }
    }

    /// True when the policy removes nothing.
    pub fn keeps_everything(&self) -> bool {
        self.session_idle.is_none() && self.media_age.is_none()
    }
}

/// What one collection removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Nothing was removed; the numbers say what would have been.
    pub dry_run: bool,
    /// Sessions looked at.
    pub sessions_seen: u64,
    /// Sessions removed whole (idle too long).
    pub sessions_removed: Vec<String>,
    /// Unreferenced objects removed from live sessions.
    pub orphans_removed: u64,
    /// Objects removed in all.
    pub objects_removed: u64,
    /// Bytes those objects held.
    pub bytes_freed: u64,
    /// Objects kept because something still points to them, though old enough to go.
    pub kept_referenced: u64,
    /// What could not be read or removed (collection goes on past each).
    pub errors: Vec<String>,
}

/// Everything stored under one session prefix.
#[derive(Default)]
struct SessionObjects {
    /// The state: journal entries and an earlier build's `state.json`.
    state: Vec<ObjectMeta>,
    others: Vec<ObjectMeta>,
}

/// The session segment of a key under `sessions/`, and whether it holds state (a journal
/// entry, or the state document of an earlier build).
fn classify(location: &Path) -> Option<(String, bool)> {
    let mut parts = location.parts();
    if parts.next()?.as_ref() != "sessions" {
        return None;
    }
    let session = parts.next()?.as_ref().to_owned();
    let rest: Vec<_> = parts.collect();
    let is_state = match rest.as_slice() {
        [name] => name.as_ref() == "state.json",
        [folder, _] => {
            folder.as_ref() == "journal" && crate::journal::entry_seq(location).is_some()
        }
        _ => false,
    };
    Some((session, is_state))
}

fn older_than(meta: &ObjectMeta, age: Duration, now: SystemTime) -> bool {
    let modified: SystemTime = meta.last_modified.into();
    now.duration_since(modified).is_ok_and(|d| d > age)
}

/// Content keys the state points to: every string in the document that has the form of a
/// content key. That takes in the typed places (blocks' originals, the archive index, the
/// originals map) and whatever pointers hosts keep in the state's extra fields (the last
/// request, for one): retention must never remove what a state names.
fn referenced_by_state(raw: &serde_json::Value) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut stack = vec![raw];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::String(s)
                if s.len() == crate::keys::CONTENT_KEY_LEN
                    && crate::keys::content_key(s).is_ok() =>
            {
                keys.insert(s.clone());
            }
            serde_json::Value::Array(a) => stack.extend(a),
            serde_json::Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    keys
}

/// Applies `policy` to every session under `store`, as of `now`.
///
/// # Errors
/// Only a failure to list the store at all; per-object failures land in
/// [`GcReport::errors`] and the rest is still collected.
pub async fn collect(
    store: &Arc<dyn ObjectStore>,
    backend: &'static str,
    policy: RetentionPolicy,
    now: SystemTime,
    dry_run: bool,
) -> Result<GcReport, object_store::Error> {
    let mut report = GcReport {
        dry_run,
        ..GcReport::default()
    };
    let mut sessions: BTreeMap<String, SessionObjects> = BTreeMap::new();
    let prefix = Path::from("sessions");
    let mut listing = store.list(Some(&prefix));
    while let Some(meta) = listing.try_next().await? {
        let Some((session, is_state)) = classify(&meta.location) else {
            continue;
        };
        let entry = sessions.entry(session).or_default();
        if is_state {
            entry.state.push(meta);
        } else {
            entry.others.push(meta);
        }
    }
    report.sessions_seen = sessions.len() as u64;
    let archive = ObjectMediaArchive::new(Arc::clone(store), backend);
    for (segment, objects) in sessions {
        // A session's last activity is its last state write; one without a state (a crash
        // between its first spill and its first save) is as old as its newest object.
        let newest = objects
            .state
            .iter()
            .chain(&objects.others)
            .max_by_key(|m| m.last_modified);
        let idle = match (policy.session_idle, newest) {
            (Some(age), Some(newest)) => older_than(newest, age, now),
            _ => false,
        };
        if idle {
            // State first, newest entry first: a collection stopped half-way leaves an
            // older state whose payloads are all still there (they go last), or none.
            let mut state = objects.state.clone();
            state.sort_by(|a, b| b.location.cmp(&a.location));
            let all = state.iter().chain(&objects.others);
            for meta in all {
                remove(store, meta, dry_run, &mut report).await;
            }
            report.sessions_removed.push(segment);
            continue;
        }
        let Some(age) = policy.media_age else {
            continue;
        };
        let candidates: Vec<&ObjectMeta> = objects
            .others
            .iter()
            .filter(|m| is_media(&m.location) && older_than(m, age, now))
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let Some(referenced) = references(store, &archive, &segment, &objects, &mut report).await
        else {
            // Without the full picture of what is referenced, nothing of it is removed.
            continue;
        };
        for meta in candidates {
            let key = meta.location.filename().unwrap_or_default();
            if referenced.contains(key) {
                report.kept_referenced += 1;
            } else {
                remove(store, meta, dry_run, &mut report).await;
                report.orphans_removed += 1;
            }
        }
    }
    Ok(report)
}

/// `sessions/<id>/media/<key>` or `sessions/<id>/packs/<key>`, or a write a killed process
/// left beside one.
fn is_media(location: &Path) -> bool {
    let parts: Vec<_> = location.parts().collect();
    parts.len() == 4 && matches!(parts[2].as_ref(), "media" | "packs")
}

/// Every content key the session's state and ref pointers name, or `None` (with the error
/// reported) when either cannot be read.
async fn references(
    store: &Arc<dyn ObjectStore>,
    archive: &ObjectMediaArchive,
    segment: &str,
    objects: &SessionObjects,
    report: &mut GcReport,
) -> Option<BTreeSet<String>> {
    let mut keys = BTreeSet::new();
    // Every entry of the journal, superseded ones too: a superset of what the live state
    // names, so nothing it names can be missed.
    for state_meta in &objects.state {
        let read = async {
            let bytes = store.get(&state_meta.location).await?.bytes().await?;
            Ok::<_, object_store::Error>(bytes)
        };
        let bytes = match read.await {
            Ok(bytes) => bytes,
            // Superseded by a compaction since the listing: what it named is in a newer one.
            Err(object_store::Error::NotFound { .. })
                if state_meta.location.as_ref().contains("/journal/") =>
            {
                continue;
            }
            Err(e) => {
                report.errors.push(format!("{segment}: reading state: {e}"));
                return None;
            }
        };
        let document = if crate::journal::entry_seq(&state_meta.location).is_some() {
            crate::journal::entry_body(&bytes)
        } else {
            &bytes[..]
        };
        match serde_json::from_slice::<serde_json::Value>(document) {
            Ok(raw) => keys.extend(referenced_by_state(&raw)),
            Err(e) => {
                report
                    .errors
                    .push(format!("{segment}: unreadable state: {e}"));
                return None;
            }
        }
    }
    let session = match SessionId::new(segment.to_owned()) {
        Ok(s) => s,
        Err(e) => {
            report.errors.push(format!("{segment}: {e}"));
            return None;
        }
    };
    match archive.list(&session).await {
        Ok(listed) => keys.extend(listed.into_iter().map(|o| o.key)),
        Err(e) => {
            report
                .errors
                .push(format!("{segment}: reading ref pointers: {e}"));
            return None;
        }
    }
    Some(keys)
}

async fn remove(
    store: &Arc<dyn ObjectStore>,
    meta: &ObjectMeta,
    dry_run: bool,
    report: &mut GcReport,
) {
    if !dry_run && let Err(e) = store.delete(&meta.location).await {
        report
            .errors
            .push(format!("removing {}: {e}", meta.location));
        return;
    }
    report.objects_removed += 1;
    report.bytes_freed += meta.size;
}
