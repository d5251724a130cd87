//! The folding kernel on the 2,002-message bench body (`anthropic_turns(1000, 2000)`, 3,002
//! units) with 20 active blocks: `ranges.build + fold + pairing.repair` against the
//! `serde_json::Value` round trip of the same body (the naive floor). Prints the ratio.
//! `kernel/apply_one_range_15002_units`: a session's first fold, one range over the whole
//! history of the 10,002-message body.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use foldwire_core::{
    AnyRef, CharEstimator, Conversation, Entry, Message, MessageId, MessageKind, Origin, Ref, Role,
    SessionState, ToolLink, UnitSlot, Wire,
};
use foldwire_stages::kernel::{
    CompressConfig, CompressRequest, Protection, RangesConfig, apply_compression,
    compressible_ranges, fold_view, repair,
};
use foldwire_stages::refs_mint::mint_refs;
use serde_json::Value;

/// Decodes the Anthropic bench body into units by hand (the codec lives in another crate).
fn conversation(body: &[u8]) -> Conversation {
    let v: Value = serde_json::from_slice(body).unwrap();
    let mut entries = Vec::new();
    let mut messages = Vec::new();
    for (e, m) in v["messages"].as_array().unwrap().iter().enumerate() {
        let role = if m["role"] == "assistant" {
            Role::Assistant
        } else {
            Role::User
        };
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
            Value::Array(a) => a.clone(),
            _ => Vec::new(),
        };
        for (k, b) in blocks.iter().enumerate() {
            let raw = serde_json::to_string(b).unwrap();
            let (kind, text, tool) = match b["type"].as_str().unwrap_or_default() {
                "tool_use" => (
                    MessageKind::ToolCall,
                    b["input"].to_string(),
                    Some(ToolLink {
                        call_id: b["id"].as_str().unwrap().into(),
                        name: b["name"].as_str().map(Into::into),
                    }),
                ),
                "tool_result" => (
                    MessageKind::ToolResult,
                    b["content"].as_str().unwrap_or_default().into(),
                    Some(ToolLink {
                        call_id: b["tool_use_id"].as_str().unwrap().into(),
                        name: None,
                    }),
                ),
                _ => (
                    MessageKind::Text,
                    b["text"].as_str().unwrap_or_default().into(),
                    None,
                ),
            };
            messages.push(Message {
                id: MessageId(format!("{e}:{k}:{}", raw.len())),
                r#ref: None,
                entry: e,
                slot: UnitSlot::Content(k as u32),
                role,
                kind,
                text: text.into(),
                tool,
                media: Vec::new(),
                origin: Origin::Client,
                pin: None,
                raw: Bytes::from(raw),
                modified: false,
                client_raw: None,
            });
        }
        entries.push(Entry {
            role,
            raw: Some(Bytes::from(serde_json::to_string(m).unwrap())),
            unit_count: blocks.len(),
        });
    }
    Conversation {
        wire: Wire::Anthropic,
        source: Bytes::copy_from_slice(body),
        messages_span: 0..body.len(),
        entries,
        messages,
        overrides: Vec::new(),
        model: None,
        stream: true,
    }
}

/// The conversation with refs minted and 20 active blocks over its first 800 turns.
/// Folding with nothing protected, no size limits.
fn open_config() -> CompressConfig {
    CompressConfig {
        protection: Protection {
            recent_messages: 0,
            recent_tokens: 0,
            last_user: false,
            protected_tools: vec![],
            latest_tools: vec![],
            latest_count: 0,
        },
        min_tokens: 0,
        max_summary_chars: 0,
        min_summary: foldwire_stages::kernel::MinSummary::OFF,
    }
}

fn folded_session(body: &[u8]) -> (Conversation, SessionState) {
    let mut state = SessionState::default();
    let mut conv = conversation(body);
    mint_refs(&mut state, &mut conv);
    let open = open_config();
    // Each turn is 3 units (text, call, result); a block covers 40 turns.
    let requests: Vec<CompressRequest> = (0..20u32)
        .map(|i| {
            CompressRequest::new(
                AnyRef::Message(Ref(2 + i * 120)),
                AnyRef::Message(Ref(1 + (i + 1) * 120)),
                format!(
                    "turns {} to {}: read modules, tests pass",
                    i * 40,
                    i * 40 + 39
                ),
            )
            .with_topic(format!("part {i}"))
        })
        .collect();
    let r = apply_compression(&mut state, &conv, &requests, &open, &CharEstimator);
    assert_eq!(
        r.blocks_created.len(),
        20,
        "{:?}",
        r.ranges.iter().find(|o| o.error.is_some())
    );
    (conv, state)
}

fn kernel_pass(
    mut conv: Conversation,
    state: &SessionState,
    config: &RangesConfig,
) -> Conversation {
    let ranges = compressible_ranges(&conv, state, config, &CharEstimator);
    black_box(&ranges);
    fold_view(&mut conv, state);
    repair(&mut conv);
    conv
}

fn bench(c: &mut Criterion) {
    let body = foldwire_benches::anthropic_turns(1000, 2000);
    let (conv, state) = folded_session(&body);
    let config = RangesConfig::default();
    let out = kernel_pass(conv.clone(), &state, &config);
    assert_eq!(
        out.messages
            .iter()
            .filter(|u| matches!(u.origin, Origin::Summary(_)))
            .count(),
        20
    );

    // A quick side-by-side for the ratio (criterion reports each precisely below). Inputs
    // are cloned before the clock starts, so only the work itself is timed.
    const N: usize = 20;
    fn timed<T: Clone, R>(input: &T, mut f: impl FnMut(T) -> R) -> f64 {
        black_box(f(input.clone()));
        let inputs: Vec<T> = (0..N).map(|_| input.clone()).collect();
        let t = Instant::now();
        for i in inputs {
            black_box(f(i));
        }
        t.elapsed().as_secs_f64() / N as f64
    }
    let kernel = timed(&conv, |cv| kernel_pass(cv, &state, &config));
    let ranges_only = timed(&conv, |cv| {
        compressible_ranges(&cv, &state, &config, &CharEstimator)
    });
    let fold_only = timed(&conv, |mut cv| {
        fold_view(&mut cv, &state);
        cv
    });
    let mut folded = conv.clone();
    fold_view(&mut folded, &state);
    let repair_only = timed(&folded, |mut cv| {
        repair(&mut cv);
        cv
    });
    let naive = timed(&body, |b| foldwire_benches::value_round_trip(&b));
    println!(
        "kernel (ranges.build + fold + pairing.repair, {} units, 20 blocks): {:.3} ms \
         (ranges.build {:.3}, fold {:.3}, pairing.repair {:.3}); serde_json::Value round trip: \
         {:.3} ms; ratio {:.3}",
        conv.messages.len(),
        kernel * 1e3,
        ranges_only * 1e3,
        fold_only * 1e3,
        repair_only * 1e3,
        naive * 1e3,
        kernel / naive
    );

    let mut g = c.benchmark_group("kernel");
    g.bench_function("ranges_fold_repair_3002_units_20_blocks", |b| {
        b.iter_batched(
            || conv.clone(),
            |cv| kernel_pass(cv, &state, &config),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("serde_json_value_round_trip", |b| {
        b.iter(|| foldwire_benches::value_round_trip(black_box(&body)))
    });
    g.finish();
}

/// A session's first fold: one range over the whole history of a 10,002-message body
/// (15,002 units), as a first turn of a resumed session folds it.
fn first_fold(c: &mut Criterion) {
    let body = foldwire_benches::anthropic_turns(5000, 2000);
    let mut conv = conversation(&body);
    let mut state = SessionState::default();
    mint_refs(&mut state, &mut conv);
    let last = Ref(state.next_ref - 10);
    let request = [CompressRequest::new(
        AnyRef::Message(Ref(2)),
        AnyRef::Message(last),
        "the whole session so far",
    )];
    let open = open_config();
    let mut g = c.benchmark_group("kernel");
    g.sample_size(20);
    g.bench_function("apply_one_range_15002_units", |b| {
        b.iter_batched(
            || state.clone(),
            |mut st| {
                let r = apply_compression(&mut st, &conv, &request, &open, &CharEstimator);
                assert_eq!(r.blocks_created.len(), 1);
                st
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench, first_fold);
criterion_main!(benches);
