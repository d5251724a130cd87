//! The originals of folded units in the session's archive.
//!
//! [`apply_compression`](super::apply_compression) is synchronous and pure: it keeps the raw
//! bytes of every unit it folds in `state.originals`. [`archive_originals`] is the async step
//! that follows it (the `fold` stage runs it after every batch; a host or the CLI calls it
//! after its own `apply_compression`): the originals are written to the session's
//! [`MediaArchive`] in one batch ([`MediaArchive::put_contents`]: one pack object named by
//! its content, create-if-absent, so a retry is harmless), each recorded in the archive
//! index (`state.archive`, an item with the ref, the key, `"original": true` and its place
//! in the pack) and on the block that folded it
//! ([`foldwire_core::Block::archive_keys`], in the order of `Block::direct`), and only then
//! removed from `state.originals`. A write that fails or times out leaves the original in
//! the state (nothing is lost) and is reported; the next call retries it.
//!
//! [`original_key`] finds an archived original's key; [`restore_with_archive`]
//! (in [`super::restore`]) reads it back, checking its SHA-256.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use foldwire_core::state::ArchivedItem;
use foldwire_core::{MediaArchive, Ref, SessionId, SessionState};
use serde::{Deserialize, Serialize};

/// The media type archived originals are stored under (the unit's JSON text, as received).
pub const ORIGINAL_MEDIA_TYPE: &str = "application/vnd.foldwire.original+json";

/// The extra field that marks an archive item as a folded unit's original (not media).
const ORIGINAL_FIELD: &str = "original";

/// What [`archive_originals`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalsArchived {
    /// Refs whose originals are now in the archive (and no longer in the state).
    pub stored: Vec<Ref>,
    /// Bytes written (or found already stored).
    pub bytes: u64,
    /// Refs whose originals stay in the state, with why.
    pub failed: Vec<(Ref, String)>,
}

/// The archive key of `r`'s original, when it was archived.
pub fn original_key(state: &SessionState, r: Ref) -> Option<&str> {
    state
        .archive
        .iter()
        .rev()
        .find(|item| item.r#ref == Some(r) && is_original(item))
        .map(|item| item.key.as_str())
}

/// True for archive items that hold a folded unit's original.
pub fn is_original(item: &ArchivedItem) -> bool {
    item.extra
        .get(ORIGINAL_FIELD)
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// Moves every original kept in `state.originals` into `archive` under `session`.
///
/// Each write may take at most `timeout`. An original leaves the state only once its bytes
/// are stored; failures are listed in the result (with the reason) and stay in the state.
pub async fn archive_originals(
    state: &mut SessionState,
    archive: &dyn MediaArchive,
    session: &SessionId,
    timeout: Duration,
) -> OriginalsArchived {
    let mut done = OriginalsArchived::default();
    let pending: Vec<Ref> = state.originals.keys().copied().collect();
    if pending.is_empty() {
        return done;
    }
    // One batch: the archive writes the turn's originals as one pack (one object, one PUT),
    // not one object per folded unit. One copy of each: the state keeps its own until the
    // write is confirmed.
    let items: Vec<(String, Bytes)> = state
        .originals
        .values()
        .map(|raw| {
            (
                ORIGINAL_MEDIA_TYPE.to_owned(),
                Bytes::from(raw.clone().into_bytes()),
            )
        })
        .collect();
    let written = match tokio::time::timeout(timeout, archive.put_contents(session, items)).await {
        Ok(Ok(parts)) if parts.len() == pending.len() => parts,
        Ok(Ok(parts)) => {
            let why = format!(
                "the archive answered {} parts for {} originals",
                parts.len(),
                pending.len()
            );
            done.failed = pending.iter().map(|r| (*r, why.clone())).collect();
            return done;
        }
        Ok(Err(e)) => {
            let why = format!("archive write failed: {e}");
            done.failed = pending.iter().map(|r| (*r, why.clone())).collect();
            return done;
        }
        Err(_) => {
            let why = format!("archive write timed out after {} ms", timeout.as_millis());
            done.failed = pending.iter().map(|r| (*r, why.clone())).collect();
            return done;
        }
    };
    // The keys already recorded, read once (not once per unit: a first turn folds thousands).
    let mut recorded: HashMap<Ref, String> = state
        .archive
        .iter()
        .filter(|item| is_original(item))
        .filter_map(|item| item.r#ref.map(|r| (r, item.key.clone())))
        .collect();
    for (r, part) in pending.into_iter().zip(written) {
        let stored = part.content;
        let mut item = ArchivedItem {
            r#ref: Some(r),
            key: stored.key.clone(),
            media_type: stored.media_type,
            size: stored.size,
            ..ArchivedItem::default()
        };
        item.extra
            .insert(ORIGINAL_FIELD.to_owned(), serde_json::Value::Bool(true));
        if let Some(location) = &part.location {
            foldwire_archive::index::set_location(&mut item, location);
        }
        if recorded.get(&r) != Some(&stored.key) {
            recorded.insert(r, stored.key.clone());
            state.archive.push(item);
        }
        done.bytes += stored.size;
        state.originals.remove(&r);
        done.stored.push(r);
    }
    if !done.stored.is_empty() {
        record_on_blocks(state);
    }
    done
}

/// Refreshes each block's `archive_keys`: the keys of its direct units' archived
/// originals, in the order of `direct` (units whose original is still in the state are
/// skipped).
fn record_on_blocks(state: &mut SessionState) {
    // One pass over the index (newest record of a ref wins), then one lookup per ref.
    let by_ref: HashMap<Ref, &str> = state
        .archive
        .iter()
        .filter(|item| is_original(item))
        .filter_map(|item| item.r#ref.map(|r| (r, item.key.as_str())))
        .collect();
    let keys: Vec<Vec<String>> = state
        .blocks
        .iter()
        .map(|b| {
            b.direct
                .iter()
                .filter_map(|r| by_ref.get(r).map(|k| (*k).to_owned()))
                .collect()
        })
        .collect();
    for (block, keys) in state.blocks.iter_mut().zip(keys) {
        block.archive_keys = keys;
    }
}
