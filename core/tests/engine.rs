#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The actor engine: per-session serialization under concurrency, persistence through the
//! state store, fail-open, and pipeline swaps.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use foldwire_core::{
    Engine, MemoryStateStore, Pipeline, Registry, SessionId, Stage, StageCx, StageError,
    StateStore, Turn, TurnRequest, Wire, async_trait,
};

/// Appends the body (a turn tag) to a list kept in the session state, with awaits in the
/// middle of the read-modify-write: without per-session serialization turns would interleave
/// and lose updates.
struct AppendTag;

#[async_trait]
impl Stage for AppendTag {
    fn name(&self) -> &'static str {
        "test.append_tag"
    }
    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        let seen = turn.state.counters.get("seen").copied().unwrap_or(0);
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
        let tag = String::from_utf8_lossy(&turn.body).into_owned();
        let list = turn
            .state
            .extra
            .entry("tags")
            .or_insert_with(|| serde_json::json!([]));
        list.as_array_mut().unwrap().push(tag.into());
        turn.state.counters.insert("seen".into(), seen + 1);
        turn.output = Some(Bytes::from(format!("seen {}", seen + 1)));
        Ok(())
    }
}

struct Explode;

#[async_trait]
impl Stage for Explode {
    fn name(&self) -> &'static str {
        "test.explode"
    }
    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        turn.state.counters.insert("half-applied".into(), 1);
        Err(StageError::Failed {
            stage: "test.explode",
            message: "boom on purpose".into(),
        })
    }
}

/// Leaves a write under way when the turn allows it: it lands after 30 ms (setting
/// `landed`) or fails, and the state records whether the turn deferred it.
struct LeavesAWrite {
    fails: bool,
    landed: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl Stage for LeavesAWrite {
    fn name(&self) -> &'static str {
        "test.leaves_a_write"
    }
    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        turn.state
            .counters
            .insert("deferred".into(), u64::from(turn.defer_writes));
        let runs = turn.state.counters.get("runs").copied().unwrap_or(0);
        turn.state.counters.insert("runs".into(), runs + 1);
        if turn.defer_writes {
            let (fails, landed) = (self.fails, Arc::clone(&self.landed));
            turn.pending_writes.push(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                if fails {
                    return Err(foldwire_core::StoreError::Backend {
                        backend: "test".into(),
                        operation: "write a pack".into(),
                        source: "refused on purpose".into(),
                    });
                }
                landed.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }));
        }
        Ok(())
    }
}

/// A state store that records, at each save, whether the write had landed.
#[derive(Debug)]
struct SeesLanding {
    inner: MemoryStateStore,
    landed: Arc<std::sync::atomic::AtomicBool>,
    at_save: std::sync::Mutex<Vec<bool>>,
}

#[async_trait]
impl StateStore for SeesLanding {
    async fn load(
        &self,
        session: &SessionId,
    ) -> Result<
        Option<(foldwire_core::SessionState, foldwire_core::StateVersion)>,
        foldwire_core::StoreError,
    > {
        self.inner.load(session).await
    }
    async fn save(
        &self,
        session: &SessionId,
        state: &foldwire_core::SessionState,
        expected: Option<&foldwire_core::StateVersion>,
    ) -> Result<foldwire_core::StateVersion, foldwire_core::StoreError> {
        let landed = self.landed.load(std::sync::atomic::Ordering::SeqCst);
        self.at_save.lock().unwrap().push(landed);
        self.inner.save(session, state, expected).await
    }
}

/// The session stores a turn's state only after the writes its stages left under way
/// succeeded; when one fails, the turn runs again with the stages writing for themselves,
/// and that run's state is stored.
#[tokio::test]
async fn a_state_is_stored_only_after_the_writes_its_turn_left_under_way() {
    for fails in [false, true] {
        let landed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let store = Arc::new(SeesLanding {
            inner: MemoryStateStore::new(),
            landed: Arc::clone(&landed),
            at_save: std::sync::Mutex::new(Vec::new()),
        });
        let pipeline = Pipeline::builder(&Registry::empty())
            .name("defers")
            .stage(LeavesAWrite {
                fails,
                landed: Arc::clone(&landed),
            })
            .build()
            .unwrap();
        let engine = engine_with(pipeline, store.clone(), 1);
        let session = SessionId::new("defers").unwrap();
        let body = Bytes::from_static(b"{}");
        let out = engine
            .run_turn(&session, TurnRequest::new(Wire::OpenAiChat, body))
            .await
            .unwrap();
        assert!(out.report.fail_open.is_none(), "{:?}", out.report.fail_open);
        let (state, _) = store.load(&session).await.unwrap().unwrap();
        let at_save = store.at_save.lock().unwrap().clone();
        if fails {
            // Nothing stored from the deferring run; the second run wrote for itself.
            assert_eq!(at_save, vec![false], "fails");
            assert_eq!(state.counters.get("deferred"), Some(&0));
            assert_eq!(
                state.counters.get("runs"),
                Some(&1),
                "the first run's state is gone"
            );
        } else {
            assert_eq!(at_save, vec![true], "stored before the write landed");
            assert_eq!(state.counters.get("deferred"), Some(&1));
        }
    }
}

fn engine_with(pipeline: Pipeline, store: Arc<dyn StateStore>, workers: usize) -> Engine {
    Engine::builder(pipeline, store, Arc::new(Registry::empty()))
        .workers(workers)
        .start()
        .unwrap()
}

fn append_pipeline(name: &str) -> Pipeline {
    Pipeline::builder(&Registry::empty())
        .name(name)
        .stage(AppendTag)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_turns_over_a_hundred_sessions_apply_in_order() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let engine = engine_with(append_pipeline("append"), store.clone(), 3);
    let mut tasks = Vec::new();
    for s in 0..100 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let session = SessionId::new(format!("session-{s}")).unwrap();
            // All ten turns of a session are in flight at once, submitted in order.
            let turns = (0..10).map(|i| {
                let engine = engine.clone();
                let session = session.clone();
                async move {
                    let req = TurnRequest::new(Wire::Anthropic, Bytes::from(format!("{s}:{i}")));
                    engine.run_turn(&session, req).await.unwrap()
                }
            });
            futures::future::join_all(turns).await
        }));
    }
    for (s, task) in tasks.into_iter().enumerate() {
        let outcomes = task.await.unwrap();
        assert_eq!(outcomes.len(), 10);
        // Each turn saw exactly the turns before it.
        for (i, o) in outcomes.iter().enumerate() {
            assert_eq!(o.output, Bytes::from(format!("seen {}", i + 1)));
            assert_eq!(o.report.turn, i as u64 + 1);
        }
        let session = SessionId::new(format!("session-{s}")).unwrap();
        let (state, _) = store.load(&session).await.unwrap().unwrap();
        assert_eq!(state.turns, 10);
        assert_eq!(state.counters["seen"], 10);
        let expected: Vec<serde_json::Value> = (0..10).map(|i| format!("{s}:{i}").into()).collect();
        assert_eq!(state.extra["tags"], serde_json::Value::Array(expected));
    }
    assert_eq!(engine.sessions().len(), 100);
}

#[tokio::test]
async fn state_survives_a_new_engine_on_the_same_store() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let session = SessionId::new("persist").unwrap();
    {
        let engine = engine_with(append_pipeline("a"), store.clone(), 1);
        for i in 0..3 {
            engine
                .run_turn(
                    &session,
                    TurnRequest::new(Wire::Gemini, Bytes::from(format!("t{i}"))),
                )
                .await
                .unwrap();
        }
    }
    let engine = engine_with(append_pipeline("a"), store.clone(), 2);
    let out = engine
        .run_turn(
            &session,
            TurnRequest::new(Wire::Gemini, Bytes::from_static(b"t3")),
        )
        .await
        .unwrap();
    assert_eq!(out.output, Bytes::from_static(b"seen 4"));
    assert_eq!(engine.snapshot(&session).await.unwrap().turns, 4);
}

#[tokio::test]
async fn a_failing_stage_forwards_the_original_body_and_discards_its_changes() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let pipeline = Pipeline::builder(&Registry::empty())
        .name("explodes")
        .stage(AppendTag)
        .stage(Explode)
        .build()
        .unwrap();
    let engine = engine_with(pipeline, store.clone(), 1);
    let session = SessionId::new("fails").unwrap();
    let body = Bytes::from_static(b"{\"keep\":\"me\"}");
    let out = engine
        .run_turn(&session, TurnRequest::new(Wire::OpenAiChat, body.clone()))
        .await
        .unwrap();
    assert_eq!(out.output, body, "the body passes through unchanged");
    let why = out.report.fail_open.unwrap();
    assert!(
        why.contains("test.explode") && why.contains("boom on purpose"),
        "{why}"
    );
    let state = engine.snapshot(&session).await.unwrap();
    assert_eq!(state.turns, 1, "the turn is counted");
    assert!(
        state.counters.is_empty(),
        "half-applied changes are discarded: {:?}",
        state.counters
    );
}

#[tokio::test]
async fn a_swapped_pipeline_serves_the_next_turns() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let engine = engine_with(append_pipeline("first"), store, 2);
    let session = SessionId::new("swap").unwrap();
    let before = engine
        .run_turn(
            &session,
            TurnRequest::new(Wire::Anthropic, Bytes::from_static(b"a")),
        )
        .await
        .unwrap();
    assert_eq!(before.report.pipeline, "first");
    engine.swap_pipeline(append_pipeline("second"));
    let after = engine
        .run_turn(
            &session,
            TurnRequest::new(Wire::Anthropic, Bytes::from_static(b"b")),
        )
        .await
        .unwrap();
    assert_eq!(after.report.pipeline, "second");
    assert_eq!(after.output, Bytes::from_static(b"seen 2"));
    assert_eq!(engine.pipeline().name(), "second");
}

#[tokio::test]
async fn updates_between_turns_are_saved_and_serialized() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let engine = engine_with(append_pipeline("u"), store.clone(), 1);
    let session = SessionId::new("upd").unwrap();
    let answer = engine
        .update(&session, |s: &mut foldwire_core::SessionState| {
            s.counters.insert("seen".into(), 41);
            "ok"
        })
        .await
        .unwrap();
    assert_eq!(answer, "ok");
    let out = engine
        .run_turn(
            &session,
            TurnRequest::new(Wire::Anthropic, Bytes::from_static(b"x")),
        )
        .await
        .unwrap();
    assert_eq!(out.output, Bytes::from_static(b"seen 42"));
    assert_eq!(
        store.load(&session).await.unwrap().unwrap().0.counters["seen"],
        42
    );
}

/// Two engines on one store are two replicas: each caches the state it loaded, so the second
/// writer's save conflicts. A state change (usage, a learned window, the model's compress call)
/// must be applied again on the fresh state, never dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_that_lose_a_conditional_write_are_applied_again() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let a = engine_with(append_pipeline("a"), store.clone(), 1);
    let b = engine_with(append_pipeline("b"), store.clone(), 1);
    let session = SessionId::new("replicas").unwrap();
    let bump = |key: &'static str| {
        move |s: &mut foldwire_core::SessionState| {
            let count = s.counters.entry(key.into()).or_insert(0);
            *count += 1;
            *count
        }
    };
    for round in 1..=20u64 {
        // Each replica works from its cached copy; every second write is a conflict.
        assert_eq!(a.update(&session, bump("a")).await.unwrap(), round);
        assert_eq!(b.update(&session, bump("b")).await.unwrap(), round);
    }
    let (state, _) = store.load(&session).await.unwrap().unwrap();
    assert_eq!(state.counters["a"], 20);
    assert_eq!(state.counters["b"], 20);
}

/// Reports the calibration every stage of the turn budgets with.
struct SeeCalibration;

#[async_trait]
impl Stage for SeeCalibration {
    fn name(&self) -> &'static str {
        "test.see_calibration"
    }
    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        turn.output = Some(Bytes::from(format!("{:.2}", turn.budget.calibration)));
        Ok(())
    }
}

/// The session's calibration reaches every stage, not only the layout that updates it: a
/// fold policy budgeting at 1.0 while the provider counts 1.3x leaves requests that the
/// layout must then refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stage_budgets_with_the_sessions_calibration() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let session = SessionId::new("calibrated").unwrap();
    let mut state = foldwire_core::SessionState::new(session.clone());
    state.calibration = 1.3;
    store.save(&session, &state, None).await.unwrap();
    let pipeline = Pipeline::builder(&Registry::empty())
        .name("see")
        .stage(SeeCalibration)
        .build()
        .unwrap();
    let engine = engine_with(pipeline, store, 1);
    let out = engine
        .run_turn(
            &session,
            TurnRequest::new(Wire::Anthropic, Bytes::from_static(b"x")),
        )
        .await
        .unwrap();
    assert_eq!(out.output, Bytes::from_static(b"1.30"));
}

fn retiring_engine(store: Arc<dyn StateStore>, after: Duration) -> Engine {
    Engine::builder(
        append_pipeline("append"),
        store,
        Arc::new(Registry::empty()),
    )
    .workers(2)
    .retire_idle_sessions(Some(after))
    .start()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_retired_and_come_back_with_their_state() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    let engine = retiring_engine(store.clone(), Duration::from_millis(40));
    // Every session actor holds the store: its count shows whether the actor still lives.
    let baseline = Arc::strong_count(&store);
    let session = SessionId::new("idle").unwrap();
    let turn =
        |tag: &'static str| TurnRequest::new(Wire::Anthropic, Bytes::from_static(tag.as_bytes()));
    let out = engine.run_turn(&session, turn("t0")).await.unwrap();
    assert_eq!(out.output, Bytes::from_static(b"seen 1"));
    assert_eq!(engine.sessions(), vec![session.clone()]);
    assert_eq!(Arc::strong_count(&store), baseline + 1);

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !(engine.sessions().is_empty() && Arc::strong_count(&store) == baseline) {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle session was never retired"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The next turn loads the saved state into a new actor.
    let out = engine.run_turn(&session, turn("t1")).await.unwrap();
    assert_eq!(out.output, Bytes::from_static(b"seen 2"));
    assert_eq!(
        engine.snapshot(&session).await.unwrap().extra["tags"],
        serde_json::json!(["t0", "t1"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_in_use_are_never_retired_and_no_turn_is_lost_at_the_edge() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    // Retire after 2 ms idle, swept every 5 ms: turns keep landing right at the edge.
    let engine = retiring_engine(store.clone(), Duration::from_millis(2));
    let mut tasks = Vec::new();
    for s in 0..12 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let session = SessionId::new(format!("edge-{s}")).unwrap();
            for i in 0..25u64 {
                // Bursts of two concurrent turns, then a pause around the retirement age.
                let a = engine.run_turn(
                    &session,
                    TurnRequest::new(Wire::OpenAiChat, Bytes::from(format!("{i}a"))),
                );
                let b = engine.run_turn(
                    &session,
                    TurnRequest::new(Wire::OpenAiChat, Bytes::from(format!("{i}b"))),
                );
                let (a, b) = tokio::join!(a, b);
                a.unwrap();
                b.unwrap();
                tokio::time::sleep(Duration::from_millis((i * 7 + s) % 9)).await;
            }
            session
        }));
    }
    for task in tasks {
        let session = task.await.unwrap();
        let (state, _) = store.load(&session).await.unwrap().unwrap();
        assert_eq!(state.turns, 50, "{session}");
        assert_eq!(state.counters["seen"], 50, "{session}");
        let tags = state.extra["tags"].as_array().unwrap();
        for i in 0..25 {
            // Each burst's two turns land after the previous burst's, in either order.
            let mut pair: Vec<&str> = tags[2 * i..2 * i + 2]
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            pair.sort_unstable();
            assert_eq!(pair, [format!("{i}a"), format!("{i}b")], "{session}");
        }
    }
}
