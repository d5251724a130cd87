//! One fold-policy decision over 40 ranges, three ways, in one run: the built-in
//! `fold.oldest_first`, the same policy as a sandboxed Rhai plugin, and `fold.http` asking
//! an endpoint on loopback. Ratios against the built-in are what to read.
//!
//! Run: `cargo bench -p foldwire-benches --bench strategies -- --warm-up-time 1 --measurement-time 3`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use axum::Json;
use axum::routing::post;
use criterion::{Criterion, criterion_group, criterion_main};
use foldwire_core::{Budget, FoldDemand, Params, RangeInfo, Ref, Registry};
use foldwire_plugins::sandbox::{Limits, PluginStore};
use serde_json::{Value, json};

/// Oldest first until the demand is met: what `fold.oldest_first` decides.
const OLDEST_FIRST: &str = r#"
fn choose(request) {
    let d = request.demand;
    let available = d.available.to_float();
    if d.request_tokens.to_float() <= 0.8 * available { return []; }
    let need = d.request_tokens.to_float() - 0.6 * available;
    let saved = 0.0;
    let out = [];
    for r in request.ranges {
        if saved >= need { break; }
        saved += r.tokens.to_float() - r.tokens.to_float() / 10.0;
        out.push(r.index);
    }
    out
}
"#;

fn ranges() -> Vec<RangeInfo> {
    (0..40u32)
        .map(|i| {
            RangeInfo::new(
                Ref(i * 10 + 1),
                Ref(i * 10 + 9),
                2_000 + u64::from(i) * 10,
                9,
            )
            .with_tool_calls([("bash".to_owned(), 3), ("read_file".to_owned(), 1)])
            .with_tool_units(8)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    foldwire_plugins::link();
    let registry = Arc::new(Registry::from_inventory().unwrap());
    let store = PluginStore::new(Limits::default(), None);
    store
        .add(&registry, "fold.oldest_first_script", OLDEST_FIRST)
        .unwrap();
    // The same script with its memory unmeasured: what the memory meter costs.
    let unmetered = PluginStore::new(
        Limits {
            max_memory_bytes: 0,
            ..Limits::default()
        },
        None,
    );
    unmetered
        .add(&registry, "fold.oldest_first_unmetered", OLDEST_FIRST)
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let addr = runtime.block_on(async {
        let app = axum::Router::new().route(
            "/fold",
            post(|Json(req): Json<Value>| async move {
                let n = req["ranges"].as_array().map_or(0, Vec::len).min(20);
                Json(json!({"version": 1, "fold": (0..n).collect::<Vec<_>>()}))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    });
    let ranges = ranges();
    let demand = FoldDemand::new(
        100_000,
        Budget {
            window: 80_000,
            reserve: 0,
            calibration: 1.0,
        },
    );
    let builtin = registry
        .fold_policy("fold.oldest_first", &Params::Null)
        .unwrap();
    let script = registry
        .fold_policy("fold.oldest_first_script", &Params::Null)
        .unwrap();
    let script_unmetered = registry
        .fold_policy("fold.oldest_first_unmetered", &Params::Null)
        .unwrap();
    let http = registry
        .fold_policy(
            "fold.http",
            &json!({"url": format!("http://{addr}/fold"), "timeout_ms": 2000}),
        )
        .unwrap();
    // The script decides what the built-in decides.
    assert_eq!(
        script.choose(&ranges, &demand),
        builtin.choose(&ranges, &demand)
    );
    let mut g = c.benchmark_group("fold_policy_40_ranges");
    g.bench_function("builtin", |b| b.iter(|| builtin.choose(&ranges, &demand)));
    g.bench_function("rhai_plugin", |b| {
        b.iter(|| script.choose(&ranges, &demand))
    });
    g.bench_function("rhai_plugin_unmetered", |b| {
        b.iter(|| script_unmetered.choose(&ranges, &demand))
    });
    g.bench_function("http_loopback", |b| {
        b.iter(|| http.choose(&ranges, &demand))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
