#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `fold.http`, `layout.http`, `summarizer.http` against a real endpoint on loopback: the
//! endpoint's answer is used when it checks out, and every way it can fail (too slow, 500,
//! not JSON, wrong version, an index or order that does not exist, nobody listening) makes
//! the built-in decide, with a warning in the turn and a count.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use bytes::Bytes;
use foldwire_core::{
    Budget, CharEstimator, FoldDemand, Params, Pipeline, Ref, Registry, SessionId, SessionState,
    StageCx, Turn, Wire,
};
use foldwire_stages::strategy_scope::StrategyScope;
use serde_json::{Value, json};

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

async fn run_pipeline(registry: &Arc<Registry>, fold: Value, layout: Value) -> Turn {
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
    let pipeline = b
        .stage_named("fold", fold)
        .unwrap()
        .stage_named("pairing.repair", Params::Null)
        .unwrap()
        .stage_named("layout.head_window", layout)
        .unwrap()
        .stage_named("wire.encode", Params::Null)
        .unwrap()
        .build()
        .unwrap();
    let cx = StageCx::new(registry.clone()).with_estimator(Arc::new(CharEstimator));
    let session = SessionId::new("http-1").unwrap();
    let mut turn = Turn::new(
        session.clone(),
        Wire::Anthropic,
        body(),
        SessionState::new(session),
    );
    turn.budget = Budget {
        window: 6_000,
        reserve: 0,
        calibration: 1.0,
    };
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
    assert_eq!(
        last["content"], "start: fix src/login.rs",
        "reversed: {last}"
    );
}
