#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Batches go to the archive as one pack: payloads read back byte-identical by their range,
//! duplicates are stored once, and retention keeps a pack a live state names (in any
//! journal entry) and removes one nothing names.

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use foldwire_archive::counting::CountingStore;
use foldwire_archive::object_store::ObjectStoreExt as _;
use foldwire_archive::object_store::memory::InMemory;
use foldwire_archive::retention::{RetentionPolicy, collect};
use foldwire_archive::{Backends, index, keys};
use foldwire_core::state::ArchivedItem;
use foldwire_core::{KnownDigests, SessionId, SessionState, StoredPart};

const ORIGINAL: &str = "application/vnd.foldwire.original+json";

/// In-memory backends whose requests are counted, and a session.
fn counted(session: &str) -> (Arc<CountingStore>, Backends, SessionId) {
    let counting = Arc::new(CountingStore::new(Arc::new(InMemory::new())));
    let b = Backends::from_object_store(counting.clone(), "memory");
    (counting, b, SessionId::new(session).unwrap())
}

/// Every part names its payload's digest and reads back byte-identical from its place in
/// its pack.
async fn assert_each_reads_back<'a>(
    b: &Backends,
    s: &SessionId,
    parts: &[StoredPart],
    payloads: impl IntoIterator<Item = &'a Bytes>,
) {
    let payloads: Vec<&Bytes> = payloads.into_iter().collect();
    assert_eq!(parts.len(), payloads.len());
    for (part, bytes) in parts.iter().zip(payloads) {
        assert_eq!(part.content.key, keys::sha256_hex(bytes));
        let at = part.location.as_ref().expect("packed");
        let back = b.media.get_packed(s, &part.content.key, at).await.unwrap();
        assert_eq!(&back, bytes);
    }
}

#[tokio::test]
async fn a_batch_is_one_pack_and_reads_back_by_range() {
    let (counting, b, s) = counted("packs");
    let payloads: Vec<Bytes> = (0..50u8)
        .map(|i| Bytes::from(vec![i; 100 + usize::from(i)]))
        .collect();
    let mut items: Vec<(String, Bytes)> = payloads
        .iter()
        .map(|p| ("application/octet-stream".to_owned(), p.clone()))
        .collect();
    items.push(("image/png".to_owned(), payloads[3].clone()));
    let parts = b.media.put_contents(&s, items).await.unwrap();
    assert_eq!(counting.counts().puts, 1);
    assert_eq!(parts.len(), 51);
    // The duplicate points at its first copy.
    assert_eq!(parts[50].location, parts[3].location);
    assert_each_reads_back(&b, &s, &parts, payloads.iter().chain([&payloads[3]])).await;
    // A batch of one is an object of its own, readable by key alone.
    let single = b
        .media
        .put_contents(
            &s,
            vec![("text/plain".into(), Bytes::from_static(b"alone"))],
        )
        .await
        .unwrap();
    assert!(single[0].location.is_none());
    assert_eq!(
        b.media
            .get_content(&s, &single[0].content.key)
            .await
            .unwrap(),
        Bytes::from_static(b"alone")
    );
}

/// A batch over 1 MiB (a pack written in several pieces): still one put, every payload back
/// by its range, the duplicate stored once.
#[tokio::test]
async fn a_large_batch_is_one_pack_in_pieces_and_reads_back_by_range() {
    let (counting, b, s) = counted("large-packs");
    let payloads: Vec<Bytes> = (0..40u32)
        .map(|i| {
            let size = 60_000 + i as usize * 1_013;
            Bytes::from(
                (0..size)
                    .map(|j| (j as u32 * 31 + i) as u8)
                    .collect::<Vec<u8>>(),
            )
        })
        .collect();
    let mut items: Vec<(String, Bytes)> = payloads
        .iter()
        .map(|p| (ORIGINAL.to_owned(), p.clone()))
        .collect();
    items.push((ORIGINAL.to_owned(), payloads[17].clone()));
    let parts = b.media.put_contents(&s, items).await.unwrap();
    assert_eq!(counting.counts().puts, 1);
    assert_eq!(parts[40].location, parts[17].location);
    assert_each_reads_back(&b, &s, &parts, payloads.iter().chain([&payloads[17]])).await;
    let mut ends: Vec<(u64, u64)> = parts
        .iter()
        .filter_map(|p| p.location.as_ref().map(|at| (at.offset, at.size)))
        .collect();
    // The payloads lie end to end in the pack, in batch order, the duplicate not again.
    ends.pop();
    for w in ends.windows(2) {
        assert_eq!(w[0].0 + w[0].1, w[1].0);
    }
}

/// A request body of `results` tool results (each of about `chars` characters), and the
/// span of each result's fields in it.
fn tool_results_body(results: u32, chars: usize) -> (Bytes, Vec<std::ops::Range<usize>>) {
    let mut body = Vec::new();
    let mut spans = Vec::new();
    for i in 0..results {
        body.extend_from_slice(br#"]},{"role":"user","content":[{"type":"tool_result","#);
        let start = body.len();
        let text = format!(
            r#""tool_use_id":"t{i}","content":"{}"}}"#,
            "x".repeat(chars + i as usize)
        );
        body.extend_from_slice(text.as_bytes());
        spans.push(start..body.len());
    }
    (Bytes::from(body), spans)
}

/// The originals a fold would archive: each span of `body`, sliced from it.
fn originals_of(body: &Bytes, spans: &[std::ops::Range<usize>]) -> Vec<(String, Bytes)> {
    spans
        .iter()
        .map(|r| (ORIGINAL.to_owned(), body.slice(r.clone())))
        .collect()
}

/// A batch of slices of one request body (a first turn's originals) is written as the
/// stretch of the body that holds them: one put of about the body's size, every payload
/// back byte-identical by its range; one from elsewhere and a duplicate still find their
/// place, and the same batch again names the same pack.
#[tokio::test]
async fn slices_of_one_body_are_packed_as_the_body_holds_them() {
    let (counting, b, s) = counted("body-packs");
    let (body, spans) = tool_results_body(300, 2_000);
    let mut items = originals_of(&body, &spans);
    items.push((
        ORIGINAL.to_owned(),
        Bytes::from_static(b"{\"rewritten\":true}"),
    ));
    items.push(items[5].clone());
    let planned = b
        .media
        .plan_contents(&s, Some(&body), items.clone())
        .await
        .unwrap();
    // Planned, not written: the write is the caller's to run.
    assert_eq!(counting.counts().puts, 0);
    planned.write.await.unwrap();
    let parts = planned.parts;
    assert_eq!(counting.counts().puts, 1);
    assert_eq!(parts[301].location, parts[5].location);
    assert_each_reads_back(&b, &s, &parts, items.iter().map(|(_, bytes)| bytes)).await;
    // The pack holds the body from the first payload on (the framing between payloads
    // included), then the payload from elsewhere: not one copy per payload.
    let pack = &parts[0].location.as_ref().unwrap().pack;
    let stored = b
        .store
        .head(&keys::pack_path(&s, pack).unwrap())
        .await
        .unwrap();
    let from_first = (body.len() - spans[0].start) as u64;
    assert_eq!(stored.size, from_first + 18);
    // Content-named: the same batch names the same pack, and a second put is harmless.
    let again = b.media.plan_contents(&s, Some(&body), items).await.unwrap();
    again.write.await.unwrap();
    assert_eq!(again.parts, parts);
}

/// Keys computed ahead for some payloads (the units a fold is about to archive, hashed
/// while a core was idle) plan the very pack a cold plan makes; a key given is taken as
/// given, only the payloads without one are hashed, and equal bytes in another buffer are
/// not taken for the buffer a key was computed from.
#[tokio::test]
async fn keys_known_ahead_plan_the_same_pack_without_hashing_again() {
    let (_, b, s) = counted("known-keys");
    let (body, spans) = tool_results_body(120, 1_500);
    let items = originals_of(&body, &spans);
    let cold = b
        .media
        .plan_contents(&s, Some(&body), items.clone())
        .await
        .unwrap()
        .parts;
    let mut known = KnownDigests::new();
    for (_, bytes) in items.iter().step_by(2) {
        known.insert(bytes.clone(), keys::sha256_hex(bytes));
    }
    let warm = b
        .media
        .plan_contents_known(&s, Some(&body), items.clone(), &known)
        .await
        .unwrap();
    assert_eq!(warm.parts, cold);
    warm.write.await.unwrap();
    assert_each_reads_back(&b, &s, &warm.parts, items.iter().map(|(_, bytes)| bytes)).await;

    // Taken as given: a key recorded for payload 1's buffer is what its part names.
    let mut told = KnownDigests::new();
    told.insert(items[1].1.clone(), "f".repeat(64));
    let parts = b
        .media
        .plan_contents_known(&s, Some(&body), items.clone(), &told)
        .await
        .unwrap()
        .parts;
    assert_eq!(parts[1].content.key, "f".repeat(64));
    assert_eq!(
        parts[2].content, cold[2].content,
        "a payload without a key is hashed"
    );
    // The same bytes in a buffer of their own are hashed, not looked up.
    let copy = Bytes::copy_from_slice(&items[1].1);
    let parts = b
        .media
        .plan_contents_known(&s, None, vec![(ORIGINAL.to_owned(), copy.clone())], &told)
        .await
        .unwrap()
        .parts;
    assert_eq!(parts[0].content.key, keys::sha256_hex(&copy));
}

/// On a local directory (where the packs folder is made while the batch is planned): a plan
/// never run writes no pack, every payload reads back byte-identical by its range once the
/// write has run, a payload sent twice is stored once, no staged file is left, and the same
/// batch again names the same pack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_pack_is_written_only_when_its_write_runs_and_reads_back_by_range() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backends::local(dir.path()).unwrap();
    let s = SessionId::new("local-packs").unwrap();
    let packs = dir.path().join("sessions/local-packs/packs");
    let listed = || support::names_in(&packs);
    let (body, spans) = tool_results_body(200, 3_000);
    let mut items = originals_of(&body, &spans);
    items.push((
        ORIGINAL.to_owned(),
        Bytes::from_static(b"{\"elsewhere\":1}"),
    ));
    items.push(items[7].clone());

    drop(
        b.media
            .plan_contents(&s, Some(&body), items.clone())
            .await
            .unwrap(),
    );
    // The folder is made while the plan is, not when the pack is put.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !packs.is_dir() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(packs.is_dir(), "planning did not make the packs folder");
    assert_eq!(
        listed(),
        Vec::<String>::new(),
        "a plan never run wrote a pack"
    );

    let planned = b
        .media
        .plan_contents(&s, Some(&body), items.clone())
        .await
        .unwrap();
    let pack = planned.parts[0].location.clone().expect("packed").pack;
    planned.write.await.unwrap();
    assert!(packs.is_dir());
    assert_eq!(
        listed(),
        vec![pack.clone()],
        "one pack, no staged file left"
    );
    let parts = planned.parts;
    assert_eq!(parts[201].location, parts[7].location);
    assert_each_reads_back(&b, &s, &parts, items.iter().map(|(_, bytes)| bytes)).await;
    assert!(
        parts
            .iter()
            .all(|p| p.location.as_ref().is_some_and(|at| at.pack == pack)),
        "every payload is in the one pack"
    );
    let again = b.media.plan_contents(&s, Some(&body), items).await.unwrap();
    again.write.await.unwrap();
    assert_eq!(again.parts, parts);
    assert_eq!(listed(), vec![pack]);
}

#[tokio::test]
async fn retention_keeps_a_pack_a_journal_entry_names() {
    let b = Backends::memory();
    let s = SessionId::new("kept").unwrap();
    let batch = |tag: u8| -> Vec<(String, Bytes)> {
        (0..3u8)
            .map(|i| ("x/y".to_owned(), Bytes::from(vec![tag, i, 7])))
            .collect()
    };
    let named = b.media.put_contents(&s, batch(1)).await.unwrap();
    let orphan = b.media.put_contents(&s, batch(2)).await.unwrap();
    let mut state = SessionState::new(s.clone());
    let v = b.state.save(&s, &state, None).await.unwrap();
    // The pack is named by a delta entry, not by the first (full) one.
    let before = state.clone();
    for part in &named {
        let mut item = ArchivedItem {
            key: part.content.key.clone(),
            size: part.content.size,
            ..ArchivedItem::default()
        };
        index::set_location(&mut item, part.location.as_ref().unwrap());
        state.archive.push(item);
    }
    state.turns = 1;
    b.state
        .save_change(&s, &before, &state, Some(&v))
        .await
        .unwrap();

    let later = SystemTime::now() + Duration::from_secs(30 * 86_400);
    let report = collect(
        &b.store,
        b.backend,
        RetentionPolicy::from_days(0, 7),
        later,
        false,
    )
    .await
    .unwrap();
    assert_eq!(report.orphans_removed, 1, "{report:?}");
    let at = named[0].location.as_ref().unwrap();
    assert!(
        b.media
            .get_packed(&s, &named[0].content.key, at)
            .await
            .is_ok()
    );
    let gone = orphan[0].location.as_ref().unwrap();
    assert!(
        b.media
            .get_packed(&s, &orphan[0].content.key, gone)
            .await
            .is_err()
    );
    assert_eq!(b.state.load(&s).await.unwrap().unwrap().0, state);
}

/// A pack is named by the SHA-256 of its manifest, one `key offset size` line per payload
/// in pack order: the same batch written by any build names the same pack (a write of a
/// pack that exists already is not an error), so the manifest's bytes must not change.
#[tokio::test]
async fn a_pack_is_named_by_the_digest_of_its_manifest() {
    let (_, b, s) = counted("manifest");
    let payloads: Vec<Bytes> = (0..3u8)
        .map(|i| Bytes::from(vec![b'a' + i; 10 * (usize::from(i) + 1)]))
        .collect();
    let items = payloads
        .iter()
        .map(|p| (ORIGINAL.to_owned(), p.clone()))
        .collect();
    let parts = b.media.put_contents(&s, items).await.unwrap();
    let mut manifest = String::new();
    for part in &parts {
        let at = part.location.as_ref().unwrap();
        manifest.push_str(&format!("{} {} {}\n", part.content.key, at.offset, at.size));
    }
    let expected = keys::sha256_hex(manifest.as_bytes());
    assert!(
        parts
            .iter()
            .all(|p| p.location.as_ref().unwrap().pack == expected)
    );
    // Laid out back to back: offsets 0, 10, 30.
    let offsets: Vec<u64> = parts
        .iter()
        .map(|p| p.location.as_ref().unwrap().offset)
        .collect();
    assert_eq!(offsets, [0, 10, 30]);
}
