//! The originals of folded units in the session's archive.
//!
//! [`apply_compression`](super::apply_compression) is synchronous and pure: it keeps the raw
//! bytes of every unit it folds in `state.originals`. [`archive_originals`] is the async step
//! that follows it (the `fold` stage runs it after every batch; a host or the CLI calls it
//! after its own `apply_compression`): the originals are written to the session's
//! [`MediaArchive`] in one batch ([`MediaArchive::put_contents`]: one pack object named by
//! its content, create-if-absent, so a retry is harmless), each recorded in the archive
//! index (`state.archive`, an item with the ref, the key, [`ArchivedItem::original`] and
//! its place in the pack) and on the block that folded it
//! ([`foldwire_core::Block::archive_keys`], in the order of `Block::direct`), and only then
//! removed from `state.originals`. A write that fails or times out leaves the original in
//! the state (nothing is lost) and is reported; the next call retries it.
//!
//! [`original_key`] finds an archived original's key; [`restore_with_archive`]
//! (in [`super::restore`]) reads it back, checking its SHA-256.

use foldhash::{HashMap, HashMapExt as _, HashSet, HashSetExt as _};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use foldwire_core::derived;
use foldwire_core::shared::Shared;
use foldwire_core::state::ArchivedItem;
use foldwire_core::{
    MediaArchive, Message, OriginalText, PendingWrite, PendingWrites, Ref, SessionId, SessionState,
    StoreError, StoredPart,
};
use serde::{Deserialize, Serialize};

use super::prehash::Prehashing;

/// The media type archived originals are stored under (the unit's JSON text, as received).
pub const ORIGINAL_MEDIA_TYPE: &str = "application/vnd.foldwire.original+json";

/// What [`archive_originals`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalsArchived {
    /// Refs whose originals are now in the archive (and no longer in the state).
    pub stored: Vec<Ref>,
    /// Bytes written (or found already stored).
    pub bytes: u64,
    /// Refs whose originals stay in the state, with why.
    pub failed: Vec<(Ref, String)>,
    /// Payloads whose content key was computed ahead of the fold ([`super::prehash`]), not
    /// by the archive's plan.
    #[serde(default)]
    pub prehashed: u64,
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
    item.original
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
    archive_all_but(state, archive, session, timeout, &HashSet::new()).await
}

/// [`archive_originals`] for the originals not in `skip`, as one batch: one pack (one
/// object, one PUT), not one object per folded unit.
async fn archive_all_but(
    state: &mut SessionState,
    archive: &dyn MediaArchive,
    session: &SessionId,
    timeout: Duration,
    skip: &HashSet<Ref>,
) -> OriginalsArchived {
    let (pending, payloads) = pending_originals(state, skip);
    if pending.is_empty() {
        return OriginalsArchived::default();
    }
    let items = as_items(payloads);
    let answer = match tokio::time::timeout(timeout, archive.put_contents(session, items)).await {
        Ok(Ok(parts)) => rows_of(&pending, parts),
        Ok(Err(e)) => Err(format!("archive write failed: {e}")),
        Err(_) => Err(timed_out(timeout)),
    };
    record_written(state, pending, answer)
}

/// A batch of originals being written to the archive on a blocking thread while the turn
/// goes on ([`start_archiving`]); [`finish_archiving`] records what it stored.
pub struct OriginalsInFlight {
    /// The refs of the batch, in the order their payloads were handed over.
    pending: Vec<Ref>,
    /// The archive's answer (and, when the write was deferred, the write still under way),
    /// or why the thread stopped.
    task: tokio::task::JoinHandle<Result<Planned, StoreError>>,
}

/// What a batch's thread hands back: the index rows of its parts ([`rows_of`]), the write
/// when it was left under way, and how many payloads came with their keys computed ahead
/// ([`OriginalsArchived::prehashed`]).
type Planned = (
    Result<Vec<ArchivedItem>, String>,
    Option<tokio::task::JoinHandle<Result<(), StoreError>>>,
    u64,
);

/// Where and how a batch of originals is written.
#[derive(Debug, Clone, Copy)]
pub struct BatchTarget<'a> {
    /// The session's archive.
    pub archive: &'a Arc<dyn MediaArchive>,
    /// The session.
    pub session: &'a SessionId,
    /// The request body the originals were cut from, when they were: runs of them are then
    /// written as they lie in it rather than copied ([`MediaArchive::plan_contents`]).
    pub source: Option<&'a Bytes>,
    /// Leave the pack's write under way once its parts are known, for the caller to see
    /// succeed before it stores the state ([`foldwire_core::Turn::defer_writes`]), rather
    /// than wait for it before answering.
    pub defer: bool,
}

/// Starts writing the originals now in `state.originals` on a blocking thread, so that
/// hashing, packing and storing them overlap what the turn computes next. `None` when
/// there is nothing to write or no Tokio runtime to write on: [`finish_archiving`] then
/// writes everything itself.
///
/// The state is not touched: the originals stay in it until [`finish_archiving`] sees the
/// write confirmed (or, deferred, planned), so a turn that fails meanwhile loses nothing.
pub fn start_archiving(state: &SessionState, to: BatchTarget<'_>) -> Option<OriginalsInFlight> {
    let (pending, payloads) = pending_originals(state, &HashSet::new());
    spawn_batch(pending, payloads, to, None)
}

/// Like [`start_archiving`], ahead of the fold: the bytes of `units` about to be folded
/// (those with a ref), written while the fold is still summarizing them.
/// [`finish_archiving`] records only those the fold then kept as originals (a unit it
/// refused, for bytes that are not UTF-8 say, leaves unused bytes in the pack, which nothing
/// points to) and writes any it kept beyond them. The keys `prehash` computed for them
/// (`archive.spill` started it, [`super::prehash`]) are not computed again.
pub fn start_archiving_units<'a>(
    units: impl IntoIterator<Item = &'a Message>,
    to: BatchTarget<'_>,
    prehash: Option<Prehashing>,
) -> Option<OriginalsInFlight> {
    let units = units.into_iter();
    // Sized once from the hint (a first turn hands over thousands of units at once).
    let room = units.size_hint().0;
    let (mut pending, mut payloads) = (Vec::with_capacity(room), Vec::with_capacity(room));
    for unit in units {
        if let Some(r) = unit.r#ref {
            pending.push(r);
            payloads.push(unit.client_bytes().clone());
        }
    }
    spawn_batch(pending, payloads, to, prehash)
}

/// The batch's items as the archive takes them: each payload under
/// [`ORIGINAL_MEDIA_TYPE`].
fn as_items(payloads: Vec<Bytes>) -> Vec<(String, Bytes)> {
    payloads
        .into_iter()
        .map(|bytes| (ORIGINAL_MEDIA_TYPE.to_owned(), bytes))
        .collect()
}

/// Plans and writes a batch on a blocking thread (a deferred write goes on as a task of its
/// own); `None` when it is empty or there is no runtime.
fn spawn_batch(
    pending: Vec<Ref>,
    payloads: Vec<Bytes>,
    to: BatchTarget<'_>,
    prehash: Option<Prehashing>,
) -> Option<OriginalsInFlight> {
    if pending.is_empty() {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let archive = Arc::clone(to.archive);
    let session = to.session.clone();
    let source = to.source.cloned();
    let defer = to.defer;
    let refs = pending.clone();
    // A blocking thread rather than a task: the stage goes on computing without yielding,
    // so a task would not run until it is done. The archive's own I/O is driven by the
    // runtime as usual (`Handle::block_on`). The items are made there too: a first turn's
    // thousands of media-type strings are no work for the request's thread.
    let task = tokio::task::spawn_blocking(move || {
        // The keys hashed ahead, once done (the fold picked its ranges as the hashing ended,
        // on a first turn): only what they lack is hashed here.
        let known = prehash.map(|p| p.wait_on(&runtime)).unwrap_or_default();
        let prehashed = payloads.iter().filter(|p| known.get(p).is_some()).count() as u64;
        runtime.block_on(async move {
            let planned = archive
                .plan_contents_known(&session, source.as_ref(), as_items(payloads), &known)
                .await?;
            if defer {
                // On a thread of its own, not as a task: the runtime this runs on may be the
                // one the stage computes on (a current-thread runtime, the engine's), which
                // would not poll a task until the turn's stages are done, and the write
                // would only start then.
                let write = planned.write;
                let on = tokio::runtime::Handle::current();
                let writing = tokio::task::spawn_blocking(move || on.block_on(write));
                return Ok((rows_of(&refs, planned.parts), Some(writing), prehashed));
            }
            planned.write.await?;
            Ok((rows_of(&refs, planned.parts), None, prehashed))
        })
    });
    Some(OriginalsInFlight { pending, task })
}

/// Waits (at most `timeout`) for the batch [`start_archiving`] (or
/// [`start_archiving_units`]) began and records what it stored, then writes the originals
/// the batch did not hold as a second one; without a batch, [`archive_originals`].
/// Originals whose write failed stay in the state and are listed, as with
/// [`archive_originals`]; they are retried next turn, not again now.
///
/// A batch started with [`BatchTarget::defer`] is recorded once its parts are known, and
/// its write, still under way, is added to `pending` (bounded by `timeout` from now): the
/// state must not be stored before it succeeds.
pub async fn finish_archiving(
    state: &mut SessionState,
    in_flight: Option<OriginalsInFlight>,
    archive: &dyn MediaArchive,
    session: &SessionId,
    timeout: Duration,
    pending: &mut PendingWrites,
) -> OriginalsArchived {
    let Some(in_flight) = in_flight else {
        return archive_originals(state, archive, session, timeout).await;
    };
    let mut prehashed = 0;
    let answer = match tokio::time::timeout(timeout, in_flight.task).await {
        Ok(Ok(Ok((rows, write, known)))) => {
            if let Some(write) = write {
                pending.push(bounded(write, timeout));
            }
            prehashed = known;
            rows
        }
        Ok(Ok(Err(e))) => Err(format!("archive write failed: {e}")),
        Ok(Err(stopped)) => Err(format!("archive write stopped: {stopped}")),
        Err(_) => Err(timed_out(timeout)),
    };
    let tried: HashSet<Ref> = in_flight.pending.iter().copied().collect();
    let mut done = record_written(state, in_flight.pending, answer);
    done.prehashed = prehashed;
    let rest = archive_all_but(state, archive, session, timeout, &tried).await;
    done.stored.extend(rest.stored);
    done.bytes += rest.bytes;
    done.failed.extend(rest.failed);
    done
}

/// A deferred write as a [`PendingWrite`] that fails after `timeout`.
fn bounded(
    write: tokio::task::JoinHandle<Result<(), StoreError>>,
    timeout: Duration,
) -> PendingWrite {
    let failed = |why: String| StoreError::Backend {
        backend: "archive".to_owned(),
        operation: "write the originals' pack".to_owned(),
        source: why.into(),
    };
    Box::pin(async move {
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(written)) => written,
            Ok(Err(stopped)) => Err(failed(format!("the write stopped: {stopped}"))),
            Err(_) => Err(failed(timed_out(timeout))),
        }
    })
}

/// Why a write that took too long failed.
fn timed_out(timeout: Duration) -> String {
    format!("archive write timed out after {} ms", timeout.as_millis())
}

/// The originals in the state except those in `skip`: their refs and, in the same order,
/// each payload to write (shared with the state, which keeps it until the write is
/// confirmed).
fn pending_originals(state: &SessionState, skip: &HashSet<Ref>) -> (Vec<Ref>, Vec<Bytes>) {
    state
        .originals
        .iter()
        .filter(|(r, _)| !skip.contains(r))
        // Shared with the state, not copied: the bytes do not change.
        .map(|(r, raw)| (*r, raw.bytes()))
        .unzip()
}

/// The index rows of a batch's stored `parts`, one per part in order, `refs[i]` naming part
/// `i`; an error when the archive answered another number of parts than it was given.
///
/// Made where the batch was planned (on its blocking thread, for a batch started ahead):
/// a first turn records thousands, and building them is no work for the request's thread.
fn rows_of(refs: &[Ref], parts: Vec<StoredPart>) -> Result<Vec<ArchivedItem>, String> {
    if parts.len() != refs.len() {
        return Err(format!(
            "the archive answered {} parts for {} originals",
            parts.len(),
            refs.len()
        ));
    }
    let rows = refs.iter().zip(parts).map(|(r, part)| {
        let stored = part.content;
        let mut item = ArchivedItem {
            r#ref: Some(*r),
            key: stored.key,
            media_type: stored.media_type,
            size: stored.size,
            original: true,
            ..ArchivedItem::default()
        };
        if let Some(location) = part.location {
            foldwire_archive::index::put_location(&mut item, location);
        }
        item
    });
    Ok(rows.collect())
}

/// Records the archive's answer for the originals of `pending` (its rows, [`rows_of`]):
/// each stored one gets its index row (unless the same key is already recorded for its ref)
/// and leaves `state.originals`; on an error every one stays and is listed with the reason.
/// Refs of the batch that are not originals in the state (written ahead of a fold that did
/// not take them) are passed over.
fn record_written(
    state: &mut SessionState,
    mut pending: Vec<Ref>,
    mut answer: Result<Vec<ArchivedItem>, String>,
) -> OriginalsArchived {
    let mut done = OriginalsArchived::default();
    if !holds_all(&state.originals, &pending) {
        let kept: Vec<bool> = pending
            .iter()
            .map(|r| state.originals.contains_key(r))
            .collect();
        if let Ok(rows) = &mut answer {
            let mut keep = kept.iter();
            rows.retain(|_| keep.next().copied().unwrap_or(false));
        }
        let mut keep = kept.iter();
        pending.retain(|_| keep.next().copied().unwrap_or(false));
    }
    let rows = match answer {
        Ok(rows) => rows,
        Err(why) => {
            done.failed = pending.iter().map(|r| (*r, why.clone())).collect();
            detach_originals(state);
            return done;
        }
    };
    // The refs of the batch whose newest record already has the same key, found in one pass
    // over the index (not one per unit: a first turn folds thousands); a batch names each
    // ref once.
    let has_originals = state.archive.iter().any(is_original);
    let skip: HashSet<Ref> = if !has_originals {
        // Nothing archived before (a first turn): nothing to compare with.
        HashSet::new()
    } else {
        let new_keys: HashMap<Ref, &str> = rows
            .iter()
            .filter_map(|row| Some((row.r#ref?, row.key.as_str())))
            .collect();
        let mut newest: HashMap<Ref, &str> = HashMap::new();
        for item in state.archive.iter().filter(|item| is_original(item)) {
            if let Some(r) = item.r#ref
                && new_keys.contains_key(&r)
            {
                newest.insert(r, item.key.as_str());
            }
        }
        newest
            .into_iter()
            .filter(|(r, key)| new_keys.get(r) == Some(key))
            .map(|(r, _)| r)
            .collect()
    };
    take_originals(&mut state.originals, &pending);
    done.bytes = rows.iter().map(|row| row.size).sum();
    done.stored = pending;
    if state.archive.is_empty() && skip.is_empty() {
        // A first turn's index is this batch: its rows become it as they are.
        state.archive = Shared::new(rows);
    } else {
        // One growth for the batch: growing the index one doubling at a time copies it
        // into fresh pages a dozen times.
        let archive = &mut *state.archive;
        archive.reserve(rows.len().saturating_sub(skip.len()));
        let recorded = |row: &ArchivedItem| !row.r#ref.is_some_and(|r| skip.contains(&r));
        archive.extend(rows.into_iter().filter(recorded));
    }
    if !done.stored.is_empty() {
        record_on_blocks(state);
    }
    done
}

/// True when `originals` holds every one of `refs`. A batch names its refs in order, so
/// they are checked in one walk along the map's range (a first turn's thousands of
/// lookups, each down the tree, cost a millisecond); refs out of order are looked up.
fn holds_all(originals: &BTreeMap<Ref, OriginalText>, refs: &[Ref]) -> bool {
    let (Some(first), Some(last)) = (refs.first(), refs.last()) else {
        return true;
    };
    if !refs.is_sorted() {
        return refs.iter().all(|r| originals.contains_key(r));
    }
    let mut held = originals.range(first..=last).map(|(r, _)| r).peekable();
    refs.iter().all(|r| {
        while held.next_if(|h| *h < r).is_some() {}
        held.peek() == Some(&r)
    })
}

/// Removes the originals of `refs` from `originals`. A first turn archives thousands at
/// once: the map is rebuilt from what stays (one pass, built in order) rather than
/// rebalanced once per removal, unless only a few go; when every one goes (a first turn
/// archives all it folded), it is emptied.
fn take_originals(originals: &mut BTreeMap<Ref, OriginalText>, refs: &[Ref]) {
    // Distinct refs (strictly ascending), as many as the map holds, all of them in it: the
    // map's own keys.
    if refs.len() == originals.len()
        && refs.windows(2).all(|w| matches!(w, [a, b] if a < b))
        && holds_all(originals, refs)
    {
        originals.clear();
        return;
    }
    if refs.len() < 64 {
        for r in refs {
            originals.remove(r);
        }
        return;
    }
    let gone: HashSet<Ref> = refs.iter().copied().collect();
    *originals = std::mem::take(originals)
        .into_iter()
        .filter(|(r, _)| !gone.contains(r))
        .collect();
}

/// Copies every original the state keeps out of the request body it is a slice of, so an
/// original that stays beyond its turn (its write failed, or there is no archive) does not
/// keep that whole body in memory. Originals that own their bytes are left as they are.
pub fn detach_originals(state: &mut SessionState) {
    for original in state.originals.values_mut() {
        original.detach();
    }
}

/// Refreshes each block's `archive_keys`: the keys of its direct units' archived
/// originals, in the order of `direct` (units whose original is still in the state are
/// skipped).
fn record_on_blocks(state: &mut SessionState) {
    // One pass over the index (newest record of a ref wins), then one lookup per ref; the
    // same functions make the lists again when a stored state is loaded.
    // Only the lists of blocks whose keys changed are made and written (compared borrowed:
    // a long session has thousands of keys on blocks a batch leaves as they were), so the
    // blocks stay shared with the state before the turn when nothing did.
    let by_ref = derived::original_keys(&state.archive);
    let keys: Vec<Option<Vec<String>>> = state
        .blocks
        .iter()
        .map(|b| {
            let same = derived::archive_keys_are(b.direct.iter(), &by_ref, &b.archive_keys);
            (!same).then(|| derived::archive_keys_of(b.direct.iter(), &by_ref))
        })
        .collect();
    if keys.iter().all(Option::is_none) {
        return;
    }
    for (block, keys) in state.blocks.iter_mut().zip(keys) {
        if let Some(keys) = keys {
            block.archive_keys = keys.into();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn originals(n: u32) -> BTreeMap<Ref, OriginalText> {
        (1..=n)
            .map(|i| {
                let text = OriginalText::from_utf8(Bytes::from(format!("unit {i}")));
                (Ref(i), text.unwrap_or_default())
            })
            .collect()
    }

    #[test]
    fn holds_all_agrees_with_looking_each_ref_up() {
        let mut map = originals(50);
        map.remove(&Ref(20));
        let cases: Vec<Vec<u32>> = vec![
            vec![],
            (1..=19).collect(),
            (1..=50).collect(),
            (15..=25).collect(),
            vec![3, 3, 7, 9],
            vec![9, 3, 7],
            vec![9, 20, 7],
            vec![49, 50, 51],
            vec![0, 1],
        ];
        for refs in cases {
            let refs: Vec<Ref> = refs.into_iter().map(Ref).collect();
            let looked_up = refs.iter().all(|r| map.contains_key(r));
            assert_eq!(holds_all(&map, &refs), looked_up, "{refs:?}");
        }
    }

    #[test]
    fn taking_originals_leaves_exactly_the_others_few_or_many() {
        for (held, taken) in [
            (10u32, vec![2u32, 5]),
            (500, (1..=400).step_by(2).collect()),
            // Every one of them: emptied.
            (100, (1..=100).collect()),
            (3, vec![1, 2, 3]),
            // As many refs as originals, one named twice: the one not named stays.
            (4, vec![1, 1, 2, 3]),
            (70, [1].into_iter().chain(1..=69).collect()),
        ] {
            let mut map = originals(held);
            let refs: Vec<Ref> = taken.iter().copied().map(Ref).collect();
            take_originals(&mut map, &refs);
            let left: Vec<u32> = map.keys().map(|r| r.0).collect();
            let expected: Vec<u32> = (1..=held).filter(|i| !taken.contains(i)).collect();
            assert_eq!(left, expected, "{held} held, {} taken", taken.len());
            // What stays keeps its bytes.
            for (r, text) in &map {
                assert_eq!(text.as_str(), format!("unit {}", r.0));
            }
        }
    }

    fn part(key: &str, size: u64, offset: Option<u64>) -> StoredPart {
        StoredPart {
            content: foldwire_core::StoredContent {
                key: key.to_owned(),
                media_type: ORIGINAL_MEDIA_TYPE.to_owned(),
                size,
            },
            location: offset.map(|offset| foldwire_core::PackLocation {
                pack: "pack1".to_owned(),
                offset,
                size,
            }),
        }
    }

    fn keys(state: &SessionState) -> Vec<(Option<u32>, &str)> {
        let rows = state.archive.iter();
        rows.map(|item| (item.r#ref.map(|r| r.0), item.key.as_str()))
            .collect()
    }

    #[test]
    fn rows_name_each_part_by_its_ref_and_a_short_answer_is_an_error() {
        let refs = [Ref(4), Ref(9)];
        let parts = vec![part("k4", 3, Some(0)), part("k9", 5, None)];
        let rows = rows_of(&refs, parts).unwrap();
        let first = &rows[0];
        assert_eq!(
            (first.r#ref, first.key.as_str(), first.size),
            (Some(Ref(4)), "k4", 3)
        );
        assert_eq!(
            (first.pack.as_deref(), first.offset),
            (Some("pack1"), Some(0))
        );
        assert_eq!(
            (rows[1].r#ref, rows[1].pack.as_deref()),
            (Some(Ref(9)), None)
        );
        assert!(rows.iter().all(|row| row.original));
        assert!(rows.iter().all(|row| row.media_type == ORIGINAL_MEDIA_TYPE));
        let short = rows_of(&refs, vec![part("k4", 3, None)]).unwrap_err();
        assert!(short.contains("1 parts for 2 originals"), "{short}");
    }

    #[test]
    fn a_batch_is_recorded_once_per_key_and_what_failed_stays() {
        let mut state = SessionState::new(SessionId::new("s").unwrap());
        state.originals = originals(4);
        // A first batch: the empty index becomes its rows.
        let refs = vec![Ref(1), Ref(2)];
        let rows = rows_of(&refs, vec![part("a", 6, Some(0)), part("b", 6, Some(6))]);
        let done = record_written(&mut state, refs.clone(), rows);
        assert_eq!((done.stored, done.bytes), (refs, 12));
        assert_eq!(keys(&state), [(Some(1), "a"), (Some(2), "b")]);
        let left: Vec<u32> = state.originals.keys().map(|r| r.0).collect();
        assert_eq!(left, [3, 4]);
        // Ref 2 kept again with the key it already has (not recorded twice), ref 3 new, and
        // ref 7, written ahead of a fold that did not keep it, passed over.
        state.originals.insert(
            Ref(2),
            OriginalText::from_utf8(Bytes::from("unit 2")).unwrap(),
        );
        let refs = vec![Ref(2), Ref(3), Ref(7)];
        let parts = vec![part("b", 6, None), part("c", 6, None), part("x", 9, None)];
        let done = record_written(&mut state, refs.clone(), rows_of(&refs, parts));
        assert_eq!((done.stored, done.bytes), (vec![Ref(2), Ref(3)], 12));
        assert_eq!(
            keys(&state),
            [(Some(1), "a"), (Some(2), "b"), (Some(3), "c")]
        );
        // A failed write keeps the original, listed with the reason.
        let done = record_written(&mut state, vec![Ref(4)], Err("down".to_owned()));
        assert_eq!(done.failed, [(Ref(4), "down".to_owned())]);
        assert!(done.stored.is_empty() && state.originals.contains_key(&Ref(4)));
        assert_eq!(state.archive.len(), 3);
    }
}
