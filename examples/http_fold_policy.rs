//! A fold policy served over HTTP, for `fold.http`: a small axum program any running
//! `foldwire serve` can call. Written in Rust here; any language that speaks JSON will do.
//!
//! The policy: oldest ranges first, but never a range that called one of the tools to keep
//! (`--keep edit_file,write_file`: what was edited stays verbatim), until the request is
//! estimated under 60% of the available budget; nothing folds under 80%.
//!
//! ```text
//! cargo run -p foldwire-examples --example http_fold_policy -- --listen 127.0.0.1:9000 --keep edit_file
//! ```
//! and in the pipeline spec (`PUT /admin/pipeline`):
//! `{ name = "fold", params = { policy = "fold.http", policy_params = { url = "http://127.0.0.1:9000/fold", timeout_ms = 500 } } }`
//!
//! With `--check` (what CI runs) it serves on a free port, asks it through foldwire's own
//! `fold.http` strategy, checks that the answer was used (no fallback) and exits.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use axum::Json;
use axum::extract::State;
use axum::routing::post;
use foldwire_core::{Budget, FoldDemand, RangeInfo, Ref, Registry};
use foldwire_stages::strategy_scope::StrategyScope;
use serde_json::{Value, json};

/// The protocol version this endpoint speaks (foldwire's `protocol::VERSION`).
const VERSION: u64 = 1;

/// The tools whose ranges never fold.
struct Keep(BTreeSet<String>);

/// `POST /fold`: the ranges to fold, by index.
async fn fold(State(keep): State<Arc<Keep>>, Json(request): Json<Value>) -> Json<Value> {
    let demand = &request["demand"];
    let available = demand["available"].as_f64().unwrap_or(0.0);
    let tokens = demand["request_tokens"].as_f64().unwrap_or(0.0);
    let empty = Vec::new();
    let ranges = request["ranges"].as_array().unwrap_or(&empty);
    let mut picked = Vec::new();
    if tokens > 0.8 * available {
        let need = tokens - 0.6 * available;
        let mut saved = 0.0;
        // Ranges arrive oldest first.
        for range in ranges {
            if saved >= need {
                break;
            }
            let calls_kept_tool = range["tool_calls"]
                .as_object()
                .is_some_and(|calls| calls.keys().any(|tool| keep.0.contains(tool)));
            if calls_kept_tool {
                continue;
            }
            saved += range["tokens"].as_f64().unwrap_or(0.0) * 0.9;
            picked.push(range["index"].clone());
        }
    }
    println!(
        "fold policy: {} ranges offered, folding {picked:?} (request {tokens} of {available} tokens)",
        ranges.len()
    );
    Json(json!({ "version": VERSION, "fold": picked }))
}

fn router(keep: Keep) -> axum::Router {
    axum::Router::new()
        .route("/fold", post(fold))
        .with_state(Arc::new(keep))
}

/// Serves on a free port and runs foldwire's `fold.http` against it.
async fn check(keep: Keep) -> Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router(keep)).await });

    foldwire_plugins::link();
    let registry = Registry::from_inventory()?;
    let policy = registry.fold_policy(
        "fold.http",
        &json!({"url": format!("http://{addr}/fold"), "timeout_ms": 2000}),
    )?;
    let range = |i: u32, tool: &str| {
        RangeInfo::new(Ref(i * 10 + 1), Ref(i * 10 + 9), 3_000, 9)
            .with_tool_calls([(tool.to_owned(), 3)])
            .with_tool_units(6)
    };
    let ranges = [
        range(0, "edit_file"),
        range(1, "bash"),
        range(2, "read_file"),
    ];
    let demand = FoldDemand::new(
        12_000,
        Budget {
            window: 10_000,
            reserve: 0,
            calibration: 1.0,
        },
    );
    // fold.http waits on its thread for the endpoint, so it runs off the async workers.
    let (chosen, warnings) = tokio::task::spawn_blocking(move || {
        let scope = StrategyScope::default();
        let chosen = scope.enter(|| policy.choose(&ranges, &demand));
        (chosen, scope.take_warnings())
    })
    .await?;
    if !warnings.is_empty() {
        bail!("fold.http fell back: {warnings:?}");
    }
    if chosen != vec![1, 2] {
        bail!("expected the ranges without edit_file calls (1, 2), got {chosen:?}");
    }
    println!("fold.http used the endpoint's choice: {chosen:?}");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let keep = Keep(
        value("--keep")
            .unwrap_or_else(|| "edit_file".to_owned())
            .split(',')
            .map(str::to_owned)
            .collect(),
    );
    if args.iter().any(|a| a == "--check") {
        return check(keep).await;
    }
    let listen = value("--listen").unwrap_or_else(|| "127.0.0.1:9000".to_owned());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    println!("fold policy listening on http://{listen}/fold");
    axum::serve(listener, router(keep)).await?;
    Ok(())
}
