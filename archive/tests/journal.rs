#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The state journal: races lose nothing (two writers, each holding its state between turns
//! like a proxy replica, on one session, on a directory and on moto), earlier builds' state
//! still loads, and a steady turn's write stays within its budget in bytes and requests.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foldwire_archive::object_store::path::Path;
use foldwire_archive::object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use foldwire_archive::counting::CountingStore;
use foldwire_archive::object_store::memory::InMemory;
use foldwire_archive::object_store::{ObjectStore, ObjectStoreExt};
use foldwire_archive::{Backends, JournalConfig, JournalStateStore, ObjectStateStore};
use foldwire_core::state::ArchivedItem;
use foldwire_core::{MessageId, PendingWrites, SessionId, SessionState, StateStore, StoreError};

fn tag() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t{nanos}")
}

fn s3_store() -> Option<Arc<dyn ObjectStore>> {
    let Ok(endpoint) = std::env::var("FOLDWIRE_TEST_S3_ENDPOINT") else {
        eprintln!("FOLDWIRE_TEST_S3_ENDPOINT is unset: the moto journal tests were NOT run");
        return None;
    };
    let bucket =
        std::env::var("FOLDWIRE_TEST_S3_BUCKET").unwrap_or_else(|_| "foldwire-test".into());
    let url = format!(
        "s3://{bucket}/journal-{}?endpoint={endpoint}&allow_http=true&region=us-east-1\
         &access_key_id=foldwire-test&secret_access_key=foldwire-test",
        tag()
    );
    Some(foldwire_archive::open(&url).unwrap().store)
}

/// One turn's change: a new ref, a counter, and now and then an archive row and a
/// change to an old row (the shapes a real turn makes).
fn turn(state: &mut SessionState, writer: usize) {
    let n = state.turns;
    state.mint_ref(MessageId(format!("w{writer}-t{n}")));
    *state.counters.entry("turns".to_owned()).or_default() += 1;
    *state.counters.entry(format!("writer{writer}")).or_default() += 1;
    if n.is_multiple_of(7) {
        state.archive.push(ArchivedItem {
            key: format!("{n:064x}"),
            size: n,
            ..ArchivedItem::default()
        });
    }
    if n.is_multiple_of(11)
        && let Some(first) = state.archive.first_mut()
    {
        first.size += 1;
    }
    state.turns += 1;
}

/// Two writers, each with its own store handle (separate replicas), run `turns` turns each
/// on one session the way the session actor does: keep the state between turns, save what
/// changed with `save_change`, and on a conflict reload and apply the turn again.
async fn two_writers(stores: [Arc<dyn StateStore>; 2], turns: u64) -> u64 {
    let session = SessionId::new(format!("race-{}", tag())).unwrap();
    let mut tasks = Vec::new();
    for (writer, store) in stores.iter().enumerate() {
        let store = Arc::clone(store);
        let session = session.clone();
        tasks.push(tokio::spawn(async move {
            let (mut state, mut version) = match store.load(&session).await.unwrap() {
                Some((s, v)) => (s, Some(v)),
                None => (SessionState::new(session.clone()), None),
            };
            let mut conflicts = 0;
            for _ in 0..turns {
                loop {
                    let mut next = state.clone();
                    turn(&mut next, writer);
                    match store
                        .save_change(&session, &state, &next, version.as_ref())
                        .await
                    {
                        Ok(v) => {
                            (state, version) = (next, Some(v));
                            break;
                        }
                        Err(StoreError::Conflict { .. }) => {
                            conflicts += 1;
                            let (s, v) = store.load(&session).await.unwrap().unwrap();
                            (state, version) = (s, Some(v));
                        }
                        Err(e) => panic!("writer {writer}: {e}"),
                    }
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for t in tasks {
        conflicts += t.await.unwrap();
    }
    let (state, _) = stores[0].load(&session).await.unwrap().unwrap();
    assert_eq!(state.counters["turns"], 2 * turns, "a turn was lost");
    assert_eq!(state.counters["writer0"], turns);
    assert_eq!(state.counters["writer1"], turns);
    assert_eq!(state.refs.len() as u64, 2 * turns);
    // Refs stay unique and monotonic across both writers.
    assert!(state.refs.windows(2).all(|w| w[0].r#ref < w[1].r#ref));
    assert!(conflicts > 0, "the writers never raced");
    conflicts
}

/// A small compaction interval, so compactions happen in the middle of the race.
fn racing_config() -> JournalConfig {
    JournalConfig {
        max_entries: 16,
        ..JournalConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_lose_nothing_on_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backends::local(dir.path()).unwrap();
    // As `Backends::local` makes them: entries staged beside their names and linked.
    let handle = || -> Arc<dyn StateStore> {
        Arc::new(JournalStateStore::with_config(
            Arc::clone(&b.store),
            "file",
            JournalConfig {
                local_root: Some(dir.path().to_owned()),
                ..racing_config()
            },
        ))
    };
    two_writers([handle(), handle()], 500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_writers_lose_nothing_on_moto() {
    let Some(store) = s3_store() else { return };
    let handle = || -> Arc<dyn StateStore> {
        Arc::new(JournalStateStore::with_config(
            Arc::clone(&store),
            "s3",
            racing_config(),
        ))
    };
    two_writers([handle(), handle()], 500).await;
}

/// A `state.json` written by an earlier build (the whole-document store) loads; the first
/// save goes to the journal, and the first compaction removes the old document.
#[tokio::test]
async fn earlier_builds_state_loads_and_migrates() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let session = SessionId::new("old").unwrap();
    let mut old = SessionState::new(session.clone());
    for i in 0..40 {
        old.mint_ref(MessageId(format!("m{i}")));
    }
    old.turns = 40;
    old.extra.insert(
        "from_an_old_build".into(),
        serde_json::json!({"kept": true}),
    );
    ObjectStateStore::new(Arc::clone(&store), "memory")
        .save(&session, &old, None)
        .await
        .unwrap();

    let journal = JournalStateStore::with_config(
        Arc::clone(&store),
        "memory",
        JournalConfig {
            grace: Duration::ZERO,
            ..JournalConfig::default()
        },
    );
    // A new-session save must not shadow the old document.
    let shadow = journal.save(&session, &old, None).await;
    assert!(
        matches!(shadow, Err(StoreError::Conflict { .. })),
        "{shadow:?}"
    );
    let (loaded, v0) = journal.load(&session).await.unwrap().unwrap();
    assert_eq!(loaded, old);
    let mut next = loaded.clone();
    turn(&mut next, 0);
    let v1 = journal
        .save_change(&session, &loaded, &next, Some(&v0))
        .await
        .unwrap();
    assert_eq!(
        journal.load(&session).await.unwrap().unwrap(),
        (next.clone(), v1.clone())
    );
    // A fresh handle (another process) reads the same.
    let other = JournalStateStore::new(Arc::clone(&store), "memory");
    assert_eq!(other.load(&session).await.unwrap().unwrap().0, next);
    // The whole-state save compacts and removes state.json.
    let mut last = next.clone();
    turn(&mut last, 0);
    journal.save(&session, &last, Some(&v1)).await.unwrap();
    let state_json = foldwire_archive::keys::state_path(&session).unwrap();
    assert!(matches!(
        store.head(&state_json).await,
        Err(foldwire_archive::object_store::Error::NotFound { .. })
    ));
    assert_eq!(other.load(&session).await.unwrap().unwrap().0, last);
}

/// A session of `messages` refs and archive rows, as a long session's state looks.
fn long_state(session: &SessionId, messages: usize) -> SessionState {
    let mut s = SessionState::new(session.clone());
    for i in 0..messages {
        s.mint_ref(MessageId(format!("{:064x}", i * 7919)));
        if i % 3 == 0 {
            s.archive.push(ArchivedItem {
                key: format!("{i:064x}"),
                media_type: "application/vnd.foldwire.original+json".into(),
                size: 1200,
                ..ArchivedItem::default()
            });
        }
    }
    s.turns = messages as u64 / 2;
    s
}

/// The write budget of a steady turn, in counts: one request (the entry's create), and no
/// more bytes than twice the new messages plus 4 KB, however long the session is, except on
/// the turns that merge many turns' deltas into one entry (one in `MERGE_FANOUT²`); and the
/// amortized cost, merges and compactions included, stays within the budget too.
#[tokio::test]
async fn a_steady_turn_writes_what_it_added() {
    let counting = Arc::new(CountingStore::new(Arc::new(InMemory::new())));
    let store = JournalStateStore::new(counting.clone(), "memory");
    let session = SessionId::new("steady").unwrap();
    let mut state = long_state(&session, 5000);
    let mut version = store.save(&session, &state, None).await.unwrap();
    let full = counting.counts().put_bytes;
    assert!(full > 500_000, "the long state is {full} bytes");
    // Two new messages of 1,150 bytes each: what the client added this turn.
    let new_message_bytes = 2 * 1150u64;
    let budget = 2 * new_message_bytes + 4096;
    let mut total = 0;
    let turns = 400u64;
    let mut max_requests = 0;
    let mut over = 0;
    for t in 0..turns {
        let before_counts = counting.counts();
        let next = steady_turn(&state, t);
        version = store
            .save_change(&session, &state, &next, Some(&version))
            .await
            .unwrap();
        state = next;
        let spent = counting.counts().since(&before_counts);
        total += spent.put_bytes;
        max_requests = max_requests.max(spent.requests());
        assert_eq!(spent.requests(), 1, "turn {t}: {spent:?}");
        if spent.put_bytes > budget {
            over += 1;
        }
    }
    let fanout = foldwire_archive::journal::MERGE_FANOUT;
    assert!(
        over <= turns / (fanout * fanout) + 1,
        "{over} of {turns} turns wrote more than {budget} bytes"
    );
    // Amortized over the run, merges and compactions included.
    assert!(total / turns <= budget, "{} per turn", total / turns);
    assert!(max_requests <= 3, "{max_requests}");
    assert_eq!(store.load(&session).await.unwrap().unwrap().0, state);
}

/// The error of a pack write refused on purpose.
fn refused_pack() -> StoreError {
    StoreError::Backend {
        backend: "test".into(),
        operation: "write a pack".into(),
        source: "refused on purpose".into(),
    }
}

/// A state whose turn left a write under way is created only after that write: the entry
/// is put once the write has landed (a first, full entry and a delta alike), and when the
/// write fails nothing is stored and its error comes back.
#[tokio::test]
async fn an_entry_is_created_only_after_the_writes_it_names() {
    let counting = Arc::new(CountingStore::new(Arc::new(InMemory::new())));
    let store = JournalStateStore::new(counting.clone(), "memory");
    let session = SessionId::new("after").unwrap();
    let first = long_state(&session, 200);
    // A write that lands after 30 ms, checking that no entry was put before it did.
    let landing = |fails: bool| {
        let counting = Arc::clone(&counting);
        let puts_before = counting.counts().puts;
        let mut ready = PendingWrites::default();
        ready.push(Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            assert_eq!(counting.counts().puts, puts_before, "put before the write");
            if fails {
                return Err(refused_pack());
            }
            Ok(())
        }));
        ready
    };
    let empty = SessionState::new(session.clone());
    let v1 = store
        .save_change_after(&session, &empty, &first, None, landing(false))
        .await
        .unwrap();
    let next = steady_turn(&first, 0);
    let v2 = store
        .save_change_after(&session, &first, &next, Some(&v1), landing(false))
        .await
        .unwrap();
    assert_eq!(
        store.load(&session).await.unwrap().unwrap(),
        (next.clone(), v2.clone())
    );
    let refused = steady_turn(&next, 1);
    let puts = counting.counts().puts;
    let failed = store
        .save_change_after(&session, &next, &refused, Some(&v2), landing(true))
        .await;
    assert!(
        matches!(failed, Err(StoreError::Backend { .. })),
        "{failed:?}"
    );
    assert_eq!(counting.counts().puts, puts, "nothing stored");
    assert_eq!(store.load(&session).await.unwrap().unwrap(), (next, v2));
}

/// In a local directory the entry is written and synced while the writes it names are
/// still under way (a staged file beside its name, the journal folder made for it on a new
/// session) and only linked into place once they have landed; when they fail, no entry and
/// no staged file are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_entry_is_staged_while_its_writes_land_and_linked_after() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backends::local(dir.path()).unwrap();
    let session = SessionId::new("staged").unwrap();
    let journal = dir.path().join("sessions/staged/journal");
    let names = move || support::names_in(&journal);
    // A write that lands once the entry it is named by has been staged (and not linked).
    let landing = |fails: bool, seq: u64| {
        let names = names.clone();
        let mut ready = PendingWrites::default();
        ready.push(Box::pin(async move {
            let entry = format!("{seq:020}.json");
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let now = names();
                assert!(!now.contains(&entry), "linked before the write: {now:?}");
                if now.iter().any(|n| n.starts_with(&format!("{entry}#"))) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "never staged while the write was under way: {now:?}"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            if fails {
                return Err(refused_pack());
            }
            Ok(())
        }));
        ready
    };
    let first = long_state(&session, 200);
    let empty = SessionState::new(session.clone());
    let v1 = b
        .state
        .save_change_after(&session, &empty, &first, None, landing(false, 1))
        .await
        .unwrap();
    assert_eq!(names(), vec![format!("{:020}.json", 1)]);
    let next = steady_turn(&first, 0);
    let v2 = b
        .state
        .save_change_after(&session, &first, &next, Some(&v1), landing(false, 2))
        .await
        .unwrap();
    let refused = steady_turn(&next, 1);
    let failed = b
        .state
        .save_change_after(&session, &next, &refused, Some(&v2), landing(true, 3))
        .await;
    assert!(
        matches!(failed, Err(StoreError::Backend { .. })),
        "{failed:?}"
    );
    assert_eq!(
        names(),
        vec![format!("{:020}.json", 1), format!("{:020}.json", 2)],
        "the refused turn left an entry or a staged file"
    );
    let reopened = Backends::local(dir.path()).unwrap();
    assert_eq!(
        reopened.state.load(&session).await.unwrap().unwrap().0,
        next
    );
}

/// A new session's first save asks whether an earlier build's state is there while the
/// writes its entry names are still under way, not before them: the write below lands only
/// once that question was asked after it started (on S3 the first turn waits for the slower
/// of the two round trips, not for both one after the other).
#[tokio::test]
async fn a_first_save_checks_for_an_earlier_builds_state_while_its_writes_land() {
    let counting = Arc::new(CountingStore::new(Arc::new(InMemory::new())));
    let store = JournalStateStore::new(counting.clone(), "memory");
    let session = SessionId::new("overlap").unwrap();
    let first = long_state(&session, 50);
    let asked = Arc::clone(&counting);
    let mut ready = PendingWrites::default();
    ready.push(Box::pin(async move {
        let before = asked.counts().gets;
        for _ in 0..500 {
            if asked.counts().gets > before {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(StoreError::Backend {
            backend: "test".into(),
            operation: "write a pack".into(),
            source: "the check for an earlier build's state never came while it was under way"
                .into(),
        })
    }));
    let empty = SessionState::new(session.clone());
    let saved = store
        .save_change_after(&session, &empty, &first, None, ready)
        .await;
    assert!(saved.is_ok(), "{saved:?}");
    assert_eq!(store.load(&session).await.unwrap().unwrap().0, first);
}

/// A store whose listings answer only once something has been read or headed (after five
/// seconds without, they fail): a load that lists first and asks afterwards cannot finish.
#[derive(Debug)]
struct ListsAfterARead {
    inner: Arc<dyn ObjectStore>,
    reads: Arc<AtomicU64>,
}

impl std::fmt::Display for ListsAfterARead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ListsAfterARead({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for ListsAfterARead {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
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
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let mut listing = Some(self.inner.list(prefix));
        let reads = Arc::clone(&self.reads);
        let gate = async move {
            for _ in 0..500 {
                if reads.load(Ordering::SeqCst) > 0 {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(object_store::Error::Generic {
                store: "lists-after-a-read",
                source: "nothing was read while the listing was under way".into(),
            })
        };
        futures::stream::once(gate)
            .map_ok(move |()| {
                listing
                    .take()
                    .unwrap_or_else(|| futures::stream::empty().boxed())
            })
            .try_flatten()
            .boxed()
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

/// Loading a session asks whether an earlier build's state is there beside listing its
/// journal, not once the listing came back empty: a new session costs one round trip on S3,
/// not two. The earlier build's state still loads when there is no journal, and a session
/// with a journal loads from it.
#[tokio::test]
async fn a_load_lists_the_journal_and_asks_for_an_earlier_builds_state_at_once() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let gated = |reads: &Arc<AtomicU64>| {
        JournalStateStore::new(
            Arc::new(ListsAfterARead {
                inner: Arc::clone(&memory),
                reads: Arc::clone(reads),
            }),
            "memory",
        )
    };
    let reads = Arc::new(AtomicU64::new(0));
    let new = SessionId::new("new").unwrap();
    let loaded = gated(&reads).load(&new).await;
    assert!(matches!(loaded, Ok(None)), "{loaded:?}");

    let old = SessionId::new("old").unwrap();
    let mut state = SessionState::new(old.clone());
    state.turns = 3;
    ObjectStateStore::new(Arc::clone(&memory), "memory")
        .save(&old, &state, None)
        .await
        .unwrap();
    let (from_old, _) = gated(&Arc::new(AtomicU64::new(0)))
        .load(&old)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(from_old, state);

    let store = gated(&Arc::new(AtomicU64::new(0)));
    let journaled = SessionId::new("journaled").unwrap();
    let first = long_state(&journaled, 30);
    store.save(&journaled, &first, None).await.unwrap();
    let (again, _) = gated(&Arc::new(AtomicU64::new(0)))
        .load(&journaled)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, first);
}

/// A first turn's state: `messages` refs, all but the last 20 folded into one block whose
/// originals sit in one pack, as the fold leaves them.
fn first_turn_state(session: &SessionId, messages: u32) -> SessionState {
    use foldwire_core::{Block, Ref, derived};
    let mut s = SessionState::new(session.clone());
    for i in 0..messages {
        s.mint_ref(MessageId(format!("{:016x}", u64::from(i) * 7919)));
    }
    let pack = format!("{:064x}", 42);
    let direct: Vec<Ref> = (1..=messages - 20).map(Ref).collect();
    s.archive = direct
        .iter()
        .map(|r| ArchivedItem {
            r#ref: Some(*r),
            key: format!("{:064x}", r.0 * 31),
            media_type: "application/vnd.foldwire.original+json".into(),
            size: 900,
            original: true,
            pack: Some(pack.clone()),
            offset: Some(u64::from(r.0) * 901),
            ..ArchivedItem::default()
        })
        .collect();
    let id = s.next_block_id();
    let keys = derived::original_keys(&s.archive);
    let fingerprints = derived::fingerprints(&s.refs);
    let block = Block {
        id,
        summary: "what the folded turns did".into(),
        span: (Ref(1), Ref(messages - 20)),
        archive_keys: derived::archive_keys_of(&direct, &keys).into(),
        message_ids: derived::message_ids_of(&direct, &fingerprints).into(),
        effective: direct.clone().into(),
        direct: direct.into(),
        ..Block::default()
    };
    s.blocks = vec![block].into();
    s.turns = 1;
    s
}

/// In a local directory a full entry is written to its staged file while it is serialized,
/// a piece at a time; a first turn's entry (several pieces) is linked whole, no staged file
/// is left, and it loads back as the state saved.
#[tokio::test]
async fn a_local_first_entry_of_many_pieces_is_linked_whole() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backends::local(dir.path()).unwrap();
    let session = SessionId::new("streamed").unwrap();
    let state = first_turn_state(&session, 10_000);
    let empty = SessionState::new(session.clone());
    b.state
        .save_change_after(&session, &empty, &state, None, PendingWrites::default())
        .await
        .unwrap();
    let journal = dir.path().join("sessions/streamed/journal");
    let entry = format!("{:020}.json", 1);
    assert_eq!(support::names_in(&journal), vec![entry.clone()]);
    let size = std::fs::metadata(journal.join(&entry)).unwrap().len();
    let piece = foldwire_archive::payload::WRITEBACK_PIECE as u64;
    assert!(size > 2 * piece, "{size} bytes: not several pieces");
    let reopened = Backends::local(dir.path()).unwrap();
    assert_eq!(
        reopened.state.load(&session).await.unwrap().unwrap().0,
        state
    );
}

/// A first turn's full entry is the compact state (packed archive rows, no block lists the
/// tables give), under a header format earlier builds refuse by name; it loads back as the
/// state saved, and a full entry an earlier build wrote (every list whole) still loads.
#[tokio::test]
async fn a_first_entry_is_compact_and_earlier_full_entries_still_load() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let journal = JournalStateStore::new(Arc::clone(&store), "memory");
    let session = SessionId::new("compact").unwrap();
    let state = first_turn_state(&session, 2000);
    journal.save(&session, &state, None).await.unwrap();
    let path = |id: &str| {
        foldwire_archive::object_store::path::Path::from(format!(
            "sessions/{id}/journal/00000000000000000001.json"
        ))
    };
    let entry = store
        .get(&path("compact"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let newline = entry.iter().position(|b| *b == b'\n').unwrap();
    let header: serde_json::Value = serde_json::from_slice(&entry[..newline]).unwrap();
    assert_eq!(header["format"], 3, "{header}");
    assert_eq!(header["kind"], "full");
    // The tables as an earlier build wrote them: every row an object, every list whole.
    let whole = serde_json::json!({
        "version": 1,
        "session": "earlier",
        "turns": state.turns,
        "next_ref": state.next_ref,
        "next_block": state.next_block,
        "refs": serde_json::to_value(&*state.refs).unwrap(),
        "archive": serde_json::to_value(&*state.archive).unwrap(),
        "blocks": serde_json::to_value(&*state.blocks).unwrap(),
    });
    let whole = serde_json::to_vec(&whole).unwrap();
    let body = entry.len() - newline - 1;
    assert!(
        body * 2 < whole.len(),
        "the compact entry is {body} bytes, the whole tables {}",
        whole.len()
    );
    assert_eq!(journal.load(&session).await.unwrap().unwrap().0, state);
    let other = JournalStateStore::new(Arc::clone(&store), "memory");
    assert_eq!(other.load(&session).await.unwrap().unwrap().0, state);

    let earlier = SessionId::new("earlier").unwrap();
    let mut written = br#"{"format":1,"seq":1,"kind":"full"}"#.to_vec();
    written.push(b'\n');
    written.extend_from_slice(&whole);
    store.put(&path("earlier"), written.into()).await.unwrap();
    let (loaded, _) = journal.load(&earlier).await.unwrap().unwrap();
    assert_eq!(
        loaded,
        SessionState {
            session: Some(earlier),
            ..state
        }
    );
}

/// One steady turn on a long session: two new refs, a turn, a counter.
fn steady_turn(state: &SessionState, t: u64) -> SessionState {
    let mut next = state.clone();
    next.mint_ref(MessageId(format!("{:064x}", 1_000_000 + 2 * t)));
    next.mint_ref(MessageId(format!("{:064x}", 1_000_001 + 2 * t)));
    next.turns += 1;
    *next.counters.entry("fold.runs".into()).or_default() += 1;
    next
}

/// A long run on a 10,000-message session: more turns than a compaction used to allow
/// (512 entries), and the bytes written stay within the budget amortized, with no whole
/// state rewritten (merged entries keep the entries a load reads few), and a load reads a
/// bounded number of objects.
#[tokio::test]
async fn a_long_run_at_ten_thousand_messages_amortizes_within_budget() {
    let counting = Arc::new(CountingStore::new(Arc::new(InMemory::new())));
    let store = JournalStateStore::new(counting.clone(), "memory");
    let session = SessionId::new("long-run").unwrap();
    let mut state = long_state(&session, 10_000);
    let mut version = store.save(&session, &state, None).await.unwrap();
    let full = counting.counts().put_bytes;
    let budget = 2 * 2 * 1150u64 + 4096;
    let turns = 1100u64;
    let start = counting.counts();
    let mut largest = 0;
    for t in 0..turns {
        let before_counts = counting.counts();
        let next = steady_turn(&state, t);
        version = store
            .save_change(&session, &state, &next, Some(&version))
            .await
            .unwrap();
        state = next;
        largest = largest.max(counting.counts().since(&before_counts).put_bytes);
    }
    let spent = counting.counts().since(&start);
    assert_eq!(spent.requests(), turns, "one request per turn: {spent:?}");
    assert!(
        spent.put_bytes / turns <= budget,
        "{} bytes per turn amortized (budget {budget})",
        spent.put_bytes / turns
    );
    assert!(
        largest < full / 2,
        "a turn wrote {largest} bytes, the whole state is {full}"
    );
    // A fresh handle loads it, reading the full entry and a few merged ones.
    let before_load = counting.counts();
    let other = JournalStateStore::new(counting.clone(), "memory");
    assert_eq!(other.load(&session).await.unwrap().unwrap().0, state);
    let fanout = foldwire_archive::journal::MERGE_FANOUT;
    let levels = u64::from(foldwire_archive::journal::MERGE_LEVELS);
    let reads = counting.counts().since(&before_load).gets;
    assert!(
        reads <= (fanout - 1) * (levels + 1) + 1,
        "a load read {reads} entries"
    );
}

/// Compaction deletes superseded entries; a writer still holding a version from before them
/// must not re-create a deleted slot and think it saved: it gets a conflict.
#[tokio::test]
async fn a_stale_writer_cannot_reuse_a_compacted_slot() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let quick = || JournalConfig {
        grace: Duration::ZERO,
        max_entries: 3,
        ..JournalConfig::default()
    };
    let a = JournalStateStore::with_config(Arc::clone(&store), "memory", quick());
    let b = JournalStateStore::with_config(Arc::clone(&store), "memory", quick());
    let session = SessionId::new("stale").unwrap();
    let first = SessionState::new(session.clone());
    let va = a.save(&session, &first, None).await.unwrap();
    let (mut state, mut vb) = b.load(&session).await.unwrap().unwrap();
    for _ in 0..6 {
        let mut next = state.clone();
        turn(&mut next, 1);
        vb = b
            .save_change(&session, &state, &next, Some(&vb))
            .await
            .unwrap();
        state = next;
    }
    let listed: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(Some(
        &foldwire_archive::keys::journal_prefix(&session).unwrap(),
    )))
    .await
    .unwrap();
    assert!(listed.len() < 7, "compaction deleted nothing: {listed:?}");
    let mut mine = first.clone();
    turn(&mut mine, 0);
    let stale = a.save_change(&session, &first, &mine, Some(&va)).await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { .. })),
        "{stale:?}"
    );
    assert_eq!(a.load(&session).await.unwrap().unwrap().0, state);
}
