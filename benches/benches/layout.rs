//! `layout.head_window`: the seed's reset probe (rewrite from a reset through the request
//! where the new head fills, in units of R, at budgets 30,000 and 100,000, per strategy),
//! printed once, then the stage's time on the probe's 480-message request.
//!
//! Run: `cargo bench -p foldwire-benches --bench layout -- --warm-up-time 1 --measurement-time 3`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foldwire_test_kit::probe;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use foldwire_core::{CharEstimator, Layout, SessionState, Wire};
use foldwire_plugins::layout::{
    HeadFill, HeadFirst, HeadFirstConfig, MoveHead, StoreOrderFill, StoreOrderFillConfig,
};
use foldwire_stages::layout_head_window::{HeadWindowConfig, lay_out, reset};
use foldwire_test_kit::layout::{conversation, history, turn};

fn print_probe() {
    let strategies: Vec<(&str, Box<dyn Layout>)> = vec![
        (
            "layout.store_order_fill",
            Box::new(StoreOrderFill::default()),
        ),
        (
            "layout.store_order_fill move_head=on_fill",
            Box::new(StoreOrderFill::new(StoreOrderFillConfig {
                move_head: MoveHead::OnFill,
            })),
        ),
        ("layout.head_first", Box::new(HeadFirst::default())),
        (
            "layout.head_first fill=fill",
            Box::new(HeadFirst::new(HeadFirstConfig {
                fill: HeadFill::Fill,
            })),
        ),
    ];
    println!(
        "strategy | budget | R | head full at | rewrite | counting appends | +90 requests | head first from"
    );
    for budget in [30_000u64, 100_000] {
        for (name, layout) in &strategies {
            let p = probe::run(layout.as_ref(), budget, 90);
            println!(
                "{name} | {budget} | {} | {} | {:.2}R | {:.2}R | {:.2}R | {:?}",
                p.r,
                p.fill_requests,
                p.ratio(),
                p.ratio_with_appends(),
                p.extended_ratio(),
                p.moved_at
            );
        }
    }
}

fn bench(c: &mut Criterion) {
    print_probe();
    let config = HeadWindowConfig {
        head_tokens: Some(400),
        recent_tokens: Some(12_000),
        ..HeadWindowConfig::default()
    };
    let conv = conversation(Wire::Anthropic, &history("hist", 480, 300));
    let layout = StoreOrderFill::default();
    // A state after a reset whose head is full and sent first.
    let mut state = SessionState::default();
    let mut t = turn(conv.clone(), state, 100_000);
    lay_out(&mut t, &layout, &CharEstimator, &config).unwrap();
    state = t.state;
    reset(&mut state, "A new topic.").unwrap();
    let mut t = turn(conv.clone(), state, 100_000);
    lay_out(&mut t, &layout, &CharEstimator, &config).unwrap();
    let state = t.state;
    c.bench_function(
        "layout.head_window 480 messages, reset head, anthropic markers",
        |b| {
            b.iter_batched(
                || turn(conv.clone(), state.clone(), 100_000),
                |mut t| lay_out(&mut t, &layout, &CharEstimator, &config).unwrap(),
                BatchSize::SmallInput,
            )
        },
    );
    let source = conversation(Wire::Anthropic, &history("hist", 480, 300));
    let body = serde_json::to_vec(&serde_json::Value::Array(
        source
            .messages
            .iter()
            .map(|m| serde_json::from_slice(&m.raw).unwrap())
            .collect(),
    ))
    .unwrap();
    c.bench_function("serde_json::Value round-trip of the same 480 blocks", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            serde_json::to_vec(&v).unwrap()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
