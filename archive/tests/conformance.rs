#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every backend runs the same conformance suite: memory, a local directory, and a real
//! S3-compatible server (moto, started by `scripts/s3-server`; the S3 test says so when the
//! endpoint variable is unset and it did not run).

use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use foldwire_archive::faults::UnconditionalStore;
use foldwire_archive::{Backends, conformance, open};
use object_store::memory::InMemory;

fn tag() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t{nanos}")
}

/// The moto endpoint and bucket from `scripts/s3-server`, if it was started.
fn s3_url() -> Option<String> {
    let Ok(endpoint) = std::env::var("FOLDWIRE_TEST_S3_ENDPOINT") else {
        eprintln!(
            "FOLDWIRE_TEST_S3_ENDPOINT is unset: the S3 conformance tests were NOT run \
             (start a server with: eval \"$(scripts/s3-server start)\")"
        );
        return None;
    };
    let bucket =
        std::env::var("FOLDWIRE_TEST_S3_BUCKET").unwrap_or_else(|_| "foldwire-test".into());
    // moto accepts any credentials; passing them here keeps the test independent of AWS_*.
    Some(format!(
        "s3://{bucket}/conformance-{}?endpoint={endpoint}&allow_http=true&region=us-east-1\
         &access_key_id=foldwire-test&secret_access_key=foldwire-test",
        tag()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_backend_conforms() {
    let b = open("memory://").unwrap();
    assert_eq!(b.backend, "memory");
    conformance::run_all(&b, &tag()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let b = open(&format!(
        "file://{}",
        dir.path().join("nested/archive").display()
    ))
    .unwrap();
    assert_eq!(b.backend, "file");
    // The documented layout is what lands on disk (checked before the whole suite, whose
    // retention check removes every session at its end).
    conformance::state_round_trip(&b, &tag()).await.unwrap();
    let sessions = dir.path().join("nested/archive/sessions");
    assert!(sessions.is_dir());
    let any_state = std::fs::read_dir(&sessions).unwrap().any(|e| {
        e.unwrap()
            .path()
            .join("journal/00000000000000000001.json")
            .is_file()
    });
    assert!(
        any_state,
        "no sessions/<id>/journal/00000000000000000001.json under {}",
        sessions.display()
    );
    conformance::run_all(&b, &tag()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bare_paths_open_the_local_backend() {
    let dir = tempfile::tempdir().unwrap();
    let b = open(dir.path().to_str().unwrap()).unwrap();
    assert_eq!(b.backend, "file");
    conformance::media_round_trip(&b, &tag()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_writers_hammering_one_session_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backends::local(dir.path()).unwrap();
    let conflicts = conformance::concurrent_writers(&b, &[], &tag(), 4, 40)
        .await
        .unwrap();
    eprintln!("local: 4 writers x 40 increments, {conflicts} conflicts retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_local_handles_on_one_directory_lose_nothing() {
    // Two proxy replicas sharing a directory: separate store values, one lock file.
    let dir = tempfile::tempdir().unwrap();
    let one = Backends::local(dir.path()).unwrap();
    let two = Backends::local(dir.path()).unwrap();
    let conflicts = conformance::concurrent_writers(&one, &[&two], &tag(), 2, 30)
        .await
        .unwrap();
    eprintln!("local, two handles: 4 writers x 30 increments, {conflicts} conflicts retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_writers_hammering_one_session_lose_nothing() {
    let b = Backends::memory();
    conformance::concurrent_writers(&b, &[], &tag(), 4, 40)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_backend_conforms() {
    let Some(url) = s3_url() else { return };
    let b = open(&url).unwrap();
    assert_eq!(b.backend, "s3");
    let seen = conformance::run_all(&b, &tag()).await.unwrap();
    eprintln!("s3 (moto): conformance passed, {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_writers_hammering_one_session_lose_nothing() {
    let Some(url) = s3_url() else { return };
    let one = open(&url).unwrap();
    let two = open(&url).unwrap();
    let conflicts = conformance::concurrent_writers(&one, &[&two], &tag(), 2, 15)
        .await
        .unwrap();
    assert!(
        conflicts > 0,
        "4 writers never contended; the test proves nothing"
    );
    eprintln!("s3 (moto): two handles, 4 writers x 15 increments, {conflicts} conflicts retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_suite_catches_a_store_that_ignores_preconditions() {
    // Negative control: without conditional writes, concurrent writers lose updates and
    // the stale-update check sees its write accepted.
    let broken = Backends::from_object_store(
        Arc::new(UnconditionalStore::new(Arc::new(InMemory::new()))),
        "memory",
    );
    let err = conformance::state_round_trip(&broken, &tag())
        .await
        .unwrap_err();
    assert_eq!(err.check, "state_round_trip");
    assert!(err.to_string().contains("second create"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_urls_fail_with_a_clear_message() {
    let err = open("gopher://x").unwrap_err().to_string();
    assert!(
        err.contains("unknown scheme") && err.contains("s3://"),
        "{err}"
    );
    let err = open("s3://bucket/p?nonsense=1").unwrap_err().to_string();
    assert!(err.contains("nonsense"), "{err}");
}

/// A writer killed half-way leaves a staged entry (`<entry>#<n>`) in the journal folder or a
/// staged pack in the packs folder, and earlier builds left `.state.json.*.tmp` files; the next compaction removes both once they
/// are older than the grace, along with the entries it superseded, and the state is the last
/// one saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_compactions_remove_what_killed_writers_left() {
    use foldwire_archive::{JournalConfig, JournalStateStore};
    use foldwire_core::{SessionId, SessionState, StateStore};
    let dir = tempfile::tempdir().unwrap();
    let b = Backends::local(dir.path()).unwrap();
    let store = JournalStateStore::with_config(
        Arc::clone(&b.store),
        "file",
        JournalConfig {
            grace: std::time::Duration::ZERO,
            local_root: Some(dir.path().to_owned()),
            ..JournalConfig::default()
        },
    );
    let session = SessionId::new("crashed").unwrap();
    let mut state = SessionState::new(session.clone());
    let v1 = store.save(&session, &state, None).await.unwrap();
    let session_dir = dir.path().join("sessions/crashed");
    let journal = session_dir.join("journal");
    let leftovers = [
        journal.join("00000000000000000002.json#17"),
        session_dir.join("packs/00ff#3"),
        session_dir.join(".state.json.4242.0.tmp"),
    ];
    std::fs::create_dir_all(session_dir.join("packs")).unwrap();
    for path in &leftovers {
        std::fs::write(path, b"{half a state").unwrap();
    }
    state.turns = 7;
    // A whole-state save is a compaction.
    store.save(&session, &state, Some(&v1)).await.unwrap();
    for path in &leftovers {
        assert!(!path.exists(), "{} is still there", path.display());
    }
    let names: Vec<String> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["00000000000000000002.json"],
        "superseded entry 1 stays"
    );
    assert_eq!(b.state.load(&session).await.unwrap().unwrap().0.turns, 7);
}

// acp §26 #128: foldwire loads a session's state by its id, never all at once, so one bad
// file cannot stop the others: a corrupt document and one that names another session are
// refused by name, other sessions load as before, and the bad file is left as it was (no
// fresh state is written over it) for a person to look at. Temp leftovers of killed writers
// are not read at all (see `local_saves_remove_what_killed_writers_left`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_or_misplaced_state_is_refused_by_name_and_left_as_it_is() {
    use foldwire_core::{SessionId, SessionState};
    let dir = tempfile::tempdir().unwrap();
    let b = Backends::local(dir.path()).unwrap();
    let id = |s: &str| SessionId::new(s).unwrap();
    for name in ["good", "corrupt", "misplaced"] {
        let mut state = SessionState::new(id(name));
        state.turns = 3;
        b.state.save(&id(name), &state, None).await.unwrap();
    }
    // Each session's state is its journal's one full entry: a header line, then the state.
    let file = |name: &str| {
        dir.path()
            .join(format!("sessions/{name}/journal/00000000000000000001.json"))
    };
    std::fs::write(
        file("corrupt"),
        b"{\"format\":1,\"seq\":1,\"kind\":\"full\"}\n{\"version\":1,\"blocks\":[{\"id\":",
    )
    .unwrap();
    std::fs::copy(file("good"), file("misplaced")).unwrap();
    std::fs::write(
        dir.path().join("sessions/good/.state.json.99.0.tmp"),
        b"{half",
    )
    .unwrap();
    let before = |name: &str| std::fs::read(file(name)).unwrap();
    let (corrupt, misplaced) = (before("corrupt"), before("misplaced"));

    let err = b.state.load(&id("corrupt")).await.unwrap_err().to_string();
    assert!(
        err.contains("corrupt") && err.contains("unreadable"),
        "{err}"
    );
    let err = b
        .state
        .load(&id("misplaced"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("session misplaced belongs to session good"),
        "{err}"
    );
    let (good, _) = b.state.load(&id("good")).await.unwrap().unwrap();
    assert_eq!((good.session, good.turns), (Some(id("good")), 3));
    assert_eq!(before("corrupt"), corrupt);
    assert_eq!(before("misplaced"), misplaced);
}
