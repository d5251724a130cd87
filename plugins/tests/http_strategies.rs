#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `fold.http`, `layout.http`, `summarizer.http` against a real endpoint on loopback: the
//! endpoint's answer is used when it checks out, and every way it can fail (too slow, 500,
//! not JSON, wrong version, an index or order that does not exist, nobody listening) makes
//! the built-in decide, with a warning in the turn and a count.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use bytes::Bytes;
use foldwire_core::{
    Budget, CharEstimator, Engine, FoldDemand, MemoryStateStore, Params, Pipeline, Ref, Registry,
    SessionId, SessionState, StageCx, Turn, TurnRequest, Wire,
};
use foldwire_stages::strategy_scope::StrategyScope;
use serde_json::{Value, json};
use tokio::sync::Notify;

async fn endpoint() -> String {
    let app = axum::Router::new()
        .route(
            "/fold/newest",
            post(|Json(req): Json<Value>| async move {
                let n = req["ranges"].as_array().unwrap().len();
                let newest: Vec<usize> = n.checked_sub(1).into_iter().collect();
                Json(json!({"version": 1, "fold": newest}))
            }),
        )
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Json(json!({"version": 1, "fold": []}))
            }),
        )
        .route(
            "/500",
            post(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .route("/notjson", post(|| async { "<html>hello</html>" }))
        .route(
            "/badindex",
            post(|| async { Json(json!({"version": 1, "fold": [99]})) }),
        )
        .route(
            "/badversion",
            post(|| async { Json(json!({"version": 2, "fold": [0]})) }),
        )
        .route(
            "/layout/reverse_groups",
            post(|Json(req): Json<Value>| async move {
                // Whole groups, newest first: a valid order that is not store order.
                let units = req["units"].as_array().unwrap();
                let mut groups: Vec<Vec<u64>> = Vec::new();
                for u in units {
                    let g = u["group"].as_u64().unwrap() as usize;
                    if groups.len() <= g {
                        groups.resize(g + 1, Vec::new());
                    }
                    groups[g].push(u["index"].as_u64().unwrap());
                }
                let order: Vec<u64> = groups.into_iter().rev().flatten().collect();
                Json(json!({"version": 1, "order": order, "state": {"calls": 1}}))
            }),
        )
        .route(
            "/layout/duplicate",
            post(|| async { Json(json!({"version": 1, "order": [0, 0]})) }),
        )
        .route(
            "/summary",
            post(|Json(req): Json<Value>| async move {
                let n = req["units"].as_array().unwrap().len();
                Json(json!({"version": 1, "summary": format!("endpoint summary of {n} units"), "topic": "from the endpoint"}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn registry() -> Arc<Registry> {
    foldwire_plugins::link();
    Arc::new(Registry::from_inventory().unwrap())
}

fn ranges() -> Vec<foldwire_core::RangeInfo> {
    (0..4u32)
        .map(|i| {
            foldwire_core::RangeInfo::new(Ref(i * 10 + 1), Ref(i * 10 + 5), 1000, 5)
                .with_tool_calls([("bash".to_owned(), 2)])
                .with_tool_units(4)
        })
        .collect()
}

fn demand() -> FoldDemand {
    FoldDemand::new(
        10_000,
        Budget {
            window: 4_000,
            reserve: 0,
            calibration: 1.0,
        },
    )
}

/// Runs `fold.http` at `url` inside a turn scope: its choice and the warnings it left.
async fn choose(registry: &Registry, url: String, timeout_ms: u64) -> (Vec<usize>, Vec<String>) {
    let policy = registry
        .fold_policy(
            "fold.http",
            &json!({"url": url, "timeout_ms": timeout_ms, "fallback": "fold.largest_first"}),
        )
        .unwrap();
    // The policy is synchronous and waits on its thread; tests call it off the runtime.
    tokio::task::spawn_blocking(move || {
        let scope = StrategyScope::default();
        let chosen = scope.enter(|| policy.choose(&ranges(), &demand()));
        let warnings = scope
            .take_warnings()
            .into_iter()
            .map(|w| format!("{} {} {}", w.strategy, w.code, w.message))
            .collect();
        (chosen, warnings)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn fold_http_uses_a_good_answer_and_falls_back_on_every_failure() {
    let registry = registry();
    let base = endpoint().await;
    let fallback_choice = registry
        .fold_policy("fold.largest_first", &Params::Null)
        .unwrap()
        .choose(&ranges(), &demand());

    let (chosen, warnings) = choose(&registry, format!("{base}/fold/newest"), 2000).await;
    assert_eq!(chosen, vec![3], "the endpoint's choice is used");
    assert!(warnings.is_empty(), "{warnings:?}");

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let failures = [
        (format!("{base}/slow"), "timeout"),
        (format!("{base}/500"), "http_status"),
        (format!("{base}/notjson"), "bad_json"),
        (format!("{base}/badindex"), "bad_answer"),
        (format!("{base}/badversion"), "bad_answer"),
        (format!("http://{closed}/fold"), "unreachable"),
    ];
    for (url, reason) in failures {
        let before = count("fold.http", reason);
        let (chosen, warnings) = choose(&registry, url.clone(), 300).await;
        assert_eq!(chosen, fallback_choice, "{url}: the fallback decides");
        assert_eq!(warnings.len(), 1, "{url}: {warnings:?}");
        assert!(
            warnings[0].starts_with("fold.http strategy_fallback ")
                && warnings[0].contains(reason)
                && warnings[0].contains("fold.largest_first decided instead"),
            "{url}: {warnings:?}"
        );
        assert_eq!(count("fold.http", reason), before + 1, "{url}: counted");
    }
}

fn count(strategy: &str, reason: &str) -> u64 {
    foldwire_plugins::fallback::counts()
        .into_iter()
        .find(|(s, r, _)| s == strategy && r == reason)
        .map_or(0, |(_, _, n)| n)
}

#[test]
fn http_strategies_refuse_params_without_a_usable_url() {
    let registry = registry();
    for (name, params) in [
        ("fold.http", Params::Null),
        ("fold.http", json!({"url": "ftp://x/"})),
        ("layout.http", json!({"url": "not a url"})),
        (
            "summarizer.http",
            json!({"url": "http://x/", "timeout_ms": 0}),
        ),
        (
            "fold.http",
            json!({"url": "http://x/", "fallback": "fold.nope"}),
        ),
    ] {
        let kind = registry.kind_of(name).unwrap();
        let err = registry.build(kind, name, &params).unwrap_err().to_string();
        assert!(err.contains(name), "{err}");
    }
}

fn body() -> Bytes {
    let mut messages = vec![json!({"role": "user", "content": "start: fix src/login.rs"})];
    for i in 0..16 {
        let id = format!("toolu_{i:02}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}: reading src/login/part{i}.rs")},
            {"type": "tool_use", "id": id, "name": "bash",
             "input": {"command": format!("cat src/login/part{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id,
             "content": format!("fn part_{i}() {{}}\n{}", "// body line of the login code\n".repeat(50))}]}));
    }
    messages.push(json!({"role": "user", "content": "continue"}));
    Bytes::from(
        serde_json::to_vec(&json!({"model": "m", "max_tokens": 64, "messages": messages})).unwrap(),
    )
}

fn pipeline(registry: &Arc<Registry>, fold: Value, layout: Value) -> Pipeline {
    let mut b = Pipeline::builder(registry);
    for name in [
        "wire.decode",
        "media.classify",
        "archive.spill",
        "refs.mint",
        "ranges.build",
    ] {
        b = b.stage_named(name, Params::Null).unwrap();
    }
    b.stage_named("fold", fold)
        .unwrap()
        .stage_named("pairing.repair", Params::Null)
        .unwrap()
        .stage_named("layout.head_window", layout)
        .unwrap()
        .stage_named("wire.encode", Params::Null)
        .unwrap()
        .build()
        .unwrap()
}

fn budget() -> Budget {
    Budget {
        window: 6_000,
        reserve: 0,
        calibration: 1.0,
    }
}

async fn run_pipeline(registry: &Arc<Registry>, fold: Value, layout: Value) -> Turn {
    let pipeline = pipeline(registry, fold, layout);
    let cx = StageCx::new(registry.clone()).with_estimator(Arc::new(CharEstimator));
    let session = SessionId::new("http-1").unwrap();
    let mut turn = Turn::new(
        session.clone(),
        Wire::Anthropic,
        body(),
        SessionState::new(session),
    );
    turn.budget = budget();
    pipeline.run(&mut turn, &cx).await.unwrap();
    turn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_pipeline_endpoint_summaries_reach_the_wire_and_failures_are_reported() {
    let registry = registry();
    let base = endpoint().await;
    let turn = run_pipeline(
        &registry,
        json!({"policy": "fold.http", "policy_params": {"url": format!("{base}/500")},
               "summarizer": "summarizer.http", "summarizer_params": {"url": format!("{base}/summary")}}),
        json!({"layout": "layout.http", "layout_params": {"url": format!("{base}/layout/duplicate")}}),
    )
    .await;
    let r = &turn.report;
    assert!(r.counter("fold.blocks_created") > 0, "{r:?}");
    let warned = |stage: &str, strategy: &str| {
        r.warnings.iter().any(|w| {
            w.stage == stage
                && w.code == "strategy_fallback"
                && w.message.starts_with(&format!("{strategy}: "))
        })
    };
    assert!(warned("fold", "fold.http"), "{:?}", r.warnings);
    assert!(
        warned("layout.head_window", "layout.http"),
        "{:?}",
        r.warnings
    );
    assert!(r.counter("strategy.fallbacks") >= 2, "{r:?}");
    let out = String::from_utf8(turn.output.clone().unwrap().to_vec()).unwrap();
    assert!(out.contains("endpoint summary of"), "{out}");
    assert!(
        turn.state
            .blocks
            .iter()
            .all(|b| b.author.as_deref() == Some("summarizer.http")),
        "{:?}",
        turn.state.blocks
    );

    // A layout endpoint that answers a valid order is followed, and its state is kept.
    let turn = run_pipeline(
        &registry,
        json!({"policy": "fold.http", "policy_params": {"url": format!("{base}/fold/newest")}}),
        json!({"layout": "layout.http", "layout_params": {"url": format!("{base}/layout/reverse_groups")}}),
    )
    .await;
    assert!(
        !turn
            .report
            .warnings
            .iter()
            .any(|w| w.code == "strategy_fallback"),
        "{:?}",
        turn.report.warnings
    );
    let out: Value = serde_json::from_slice(&turn.output.clone().unwrap()).unwrap();
    let last = out["messages"].as_array().unwrap().last().unwrap().clone();
    // Sent as a string; the layout may have put its cache marker on the string's text block.
    let text = match &last["content"] {
        Value::Array(blocks) => blocks[0]["text"].clone(),
        content => content.clone(),
    };
    assert_eq!(text, "start: fix src/login.rs", "reversed: {last}");
}

/// What the held endpoint and the test saw, in order.
type Log = Arc<std::sync::Mutex<Vec<String>>>;

/// An endpoint whose first request waits until the test lets it go (or five seconds pass,
/// so a broken engine fails the test rather than hanging it); every later request is
/// answered at once. It answers fold requests with no fold and layout requests with store
/// order.
async fn held_endpoint(log: Log, arrived: Arc<Notify>, release: Arc<Notify>) -> String {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/held",
        post(move |Json(req): Json<Value>| {
            let (log, arrived, release, calls) = (log.clone(), arrived.clone(), release.clone(), calls.clone());
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    arrived.notify_one();
                    let how = tokio::select! {
                        () = release.notified() => "held call released",
                        () = tokio::time::sleep(Duration::from_secs(5)) => "held call gave up waiting",
                    };
                    log.lock().unwrap().push(how.to_owned());
                }
                match req["units"].as_array() {
                    Some(units) => Json(json!({"version": 1, "order": (0..units.len()).collect::<Vec<_>>()})),
                    None => Json(json!({"version": 1, "fold": []})),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/held")
}

/// One session's turn waits on a held endpoint while another session on the same (only)
/// worker runs three turns to the end; only then is the endpoint let go, and the first turn
/// completes with the endpoint's answer (no fallback). Were the call made on the worker
/// itself, the second session could not finish before the endpoint gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_endpoint_holds_only_its_own_session_on_a_shared_worker() {
    let registry = registry();
    for held in ["fold.http", "layout.http"] {
        let log: Log = Arc::default();
        let (arrived, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let url = held_endpoint(log.clone(), arrived.clone(), release.clone()).await;
        let params = json!({"url": url, "timeout_ms": 10_000});
        let (fold, layout) = if held == "fold.http" {
            (
                json!({"policy": held, "policy_params": params}),
                Params::Null,
            )
        } else {
            (
                Params::Null,
                json!({"layout": held, "layout_params": params}),
            )
        };
        let engine = Engine::builder(
            pipeline(&registry, fold, layout),
            Arc::new(MemoryStateStore::new()),
            registry.clone(),
        )
        .context(StageCx::new(registry.clone()).with_estimator(Arc::new(CharEstimator)))
        .workers(1)
        .start()
        .unwrap();
        let request = || {
            let mut r = TurnRequest::new(Wire::Anthropic, body());
            r.budget = budget();
            r
        };
        let slow = tokio::spawn({
            let engine = engine.clone();
            let r = request();
            async move {
                let session = SessionId::new("held").unwrap();
                engine.run_turn(&session, r).await.unwrap()
            }
        });
        arrived.notified().await;
        let other = SessionId::new("other").unwrap();
        for i in 0..3 {
            let out = engine.run_turn(&other, request()).await.unwrap();
            assert!(out.report.fail_open.is_none(), "{held}: {:?}", out.report);
            log.lock()
                .unwrap()
                .push(format!("other session turn {i} done"));
        }
        release.notify_one();
        let out = slow.await.unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            [
                "other session turn 0 done",
                "other session turn 1 done",
                "other session turn 2 done",
                "held call released"
            ],
            "{held}"
        );
        assert!(out.report.fail_open.is_none(), "{held}: {:?}", out.report);
        assert!(
            !out.report
                .warnings
                .iter()
                .any(|w| w.code == "strategy_fallback"),
            "{held}: the held call was answered, not given up on: {:?}",
            out.report.warnings
        );
        assert!(!out.output.is_empty(), "{held}");
    }
}
