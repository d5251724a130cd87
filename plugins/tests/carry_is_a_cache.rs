#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What a turn carries to the next (`Turn::carry`: the last body's decode, per-unit facts,
//! ranges, digests, cache markers) is a cache: the same turn gives the same result without
//! it. Issue 12's one-pass turn leans on that claim at every stage, so it is checked here on
//! random sessions rather than on the shapes each stage's own tests thought of.
//!
//! A session is a run of turns on one wire, each changing the history the way agents do:
//! exchanges, parallel tool calls and their results, inline images, bulky tool outputs, the
//! client trimming its oldest messages, editing an earlier one, or starting over; and between
//! turns, the model's own `compress` calls change the state outside any turn. Each turn goes
//! through an engine that keeps its session's carry, and through a fresh engine that starts
//! from the stored state alone. Both must forward the same bytes, answer the model's calls
//! alike and keep the same state. Each forwarded body must also be JSON, decode with no
//! broken tool pairing, and every active block must restore byte-identical.

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use foldwire_archive::Backends;
use foldwire_core::{
    Conversation, Engine, MessageId, Ref, Registry, SessionId, SessionState, TurnOutcome, Wire,
};
use foldwire_stages::kernel::pairing_rules::violations;
use foldwire_stages::tool_loop::{CallCx, CallResult, run_call};
use foldwire_wire::request;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{
    Item, assert_blocks_restore_exactly, assert_trims_restore_exactly, body, engine, offered, png,
    text, turn,
};

/// What the client does to its history before a request.
#[derive(Debug, Clone)]
enum Op {
    /// A user message and a text reply, of these many characters.
    Exchange(usize, usize),
    /// Parallel tool calls, then their results of these many characters each (in the
    /// reverse order of the calls when the flag is set).
    Tools(Vec<usize>, bool),
    /// A tool call the user interrupted: no result, then a user message.
    Interrupted,
    /// A user message with an inline image (its bytes' seed).
    Image(u8),
    /// Drops this many entries after the first (a client trimming its history; pairs may
    /// break, which the pipeline must repair).
    TrimOldest(usize),
    /// Rewrites the text of the user message at this position (modulo their count).
    EditUser(usize),
    /// Starts over: the history becomes one new user message.
    Reset,
}

/// Applies `op` to `history`; `n` counts what was made so far (ids and texts stay unique).
fn apply(history: &mut Vec<Item>, op: &Op, n: &mut usize) {
    *n += 1;
    let k = *n;
    match op {
        Op::Exchange(ask, reply) => {
            history.push(Item::User(text("ask", k, *ask)));
            history.push(Item::Assistant(text("reply", k, *reply)));
        }
        Op::Tools(outputs, reversed) => {
            let calls: Vec<(String, String)> = (0..outputs.len())
                .map(|i| (format!("call_{k}_{i}"), format!("cat src/part_{k}_{i}.rs")))
                .collect();
            let mut results: Vec<(String, String)> = calls
                .iter()
                .zip(outputs)
                .map(|((id, _), len)| (id.clone(), text("output", k, *len)))
                .collect();
            if *reversed {
                results.reverse();
            }
            let said = k.is_multiple_of(2).then(|| text("checking", k, 60));
            history.push(Item::Calls(said, calls));
            history.push(Item::Results(results));
        }
        Op::Interrupted => {
            let call = (format!("call_{k}_0"), format!("sleep {k}"));
            history.push(Item::Calls(None, vec![call]));
            history.push(Item::User(text("stop that", k, 30)));
        }
        Op::Image(seed) => history.push(Item::Image(png(*seed), text("look", k, 40))),
        Op::TrimOldest(count) => {
            let end = (1 + count).min(history.len());
            if end > 1 {
                history.drain(1..end);
            }
        }
        Op::EditUser(at) => {
            let users: Vec<usize> = (0..history.len())
                .filter(|&i| matches!(history[i], Item::User(_)))
                .collect();
            if let Some(&i) = users.get(at % users.len().max(1)) {
                history[i] = Item::User(text("edited", k, 80));
            }
        }
        Op::Reset => {
            history.clear();
            history.push(Item::User(text("new topic", k, 120)));
        }
    }
}

/// The forwarded body is JSON, decodes for its wire with no broken tool pairing, and every
/// active block and trimmed tool output restores exactly as the client once sent it (`sent`).
async fn check_output(
    wire: Wire,
    output: &Bytes,
    state: &SessionState,
    backends: &Backends,
    session: &SessionId,
    sent: &HashMap<MessageId, Bytes>,
) {
    if let Err(e) = serde_json::from_slice::<Value>(output) {
        panic!("{wire}: the forwarded body is not JSON: {e}");
    }
    let decoded = request::decode(wire, output.clone())
        .unwrap_or_else(|e| panic!("{wire}: the forwarded body does not decode: {e}"));
    let broken = violations(wire, &decoded.messages);
    assert!(
        broken.is_empty(),
        "{wire}: {broken:?} in {}",
        String::from_utf8_lossy(output)
    );
    assert_blocks_restore_exactly(state, backends.media.as_ref(), session, sent).await;
    assert_trims_restore_exactly(state, backends.media.as_ref(), session, sent).await;
}

/// The arguments of the model's `compress` call after turn `t`. Like a model, it takes the
/// `a`-th range the note offers, and the next one too when `b` is odd. When none is
/// offered it tries the `a`-th to the `b`-th ref it saw (which the kernel may refuse).
fn compress_args(
    view: &Conversation,
    offered: &[(String, String)],
    (a, b): (usize, usize),
    t: usize,
) -> Option<String> {
    let mut spans: Vec<(String, String)> = Vec::new();
    if offered.is_empty() {
        let refs: Vec<Ref> = view.messages.iter().filter_map(|u| u.r#ref).collect();
        let (i, j) = (a % refs.len().max(1), b % refs.len().max(1));
        let (start, end) = (refs.get(i.min(j))?, refs.get(i.max(j))?);
        spans.push((start.to_string(), end.to_string()));
    } else {
        spans.push(offered[a % offered.len()].clone());
        if !b.is_multiple_of(2) && offered.len() > 1 {
            spans.push(offered[(a + 1) % offered.len()].clone());
        }
    }
    let ranges: Vec<Value> = spans
        .iter()
        .enumerate()
        .map(|(k, (start, end))| {
            json!({"start": start, "end": end,
            "summary": text(&format!("the model's summary {k} after turn {t}"), t, 400),
            "topic": "work"})
        })
        .collect();
    Some(json!({ "ranges": ranges }).to_string())
}

/// The model's `compress` call through `engine`, on the view its last turn produced.
async fn compress(
    engine: &Engine,
    session: &SessionId,
    wire: Wire,
    outcome: &TurnOutcome,
    pick: (usize, usize),
    t: usize,
) -> Option<(CallResult, SessionState)> {
    let view = outcome.conversation.as_ref()?;
    let offered = offered(wire, &outcome.output);
    let args = compress_args(view, &offered, pick, t)?;
    let cx = CallCx {
        engine,
        session,
        view: Some(view),
    };
    let result = run_call(&cx, "compress", &args).await;
    // What the note offers, the handler takes: no range it listed is refused (as
    // protected, as a ref the model was not sent, as too small to be worth a summary). Two
    // offers the call joins may overlap (a run of summaries folds the fresh messages
    // between them); the later one is then refused for that alone.
    let refused: Vec<&str> = result
        .text
        .lines()
        .filter(|l| l.contains("not folded") && !l.contains("overlaps range #"))
        .collect();
    assert!(
        offered.is_empty() || refused.is_empty(),
        "{wire}: an offered range was refused: {refused:?}\nafter {args}"
    );
    Some((result, engine.snapshot(session).await.unwrap()))
}

/// One request of a session: the client's ops before it, and the model's `compress` call
/// after it (which refs it spans), if any.
type Step = (Vec<Op>, Option<(usize, usize)>);

/// Plays `turns` on `wire` in a window of `window` tokens.
async fn session(wire: Wire, gemini_ids: bool, window: u64, turns: &[Step]) {
    foldwire_plugins::link();
    let registry = Arc::new(Registry::from_inventory().unwrap());
    let session = SessionId::new(format!("carry-{wire}")).unwrap();
    let (kept_backends, fresh_backends) = (Backends::memory(), Backends::memory());
    let keeps = engine(&registry, &kept_backends);
    let mut sent: HashMap<MessageId, Bytes> = HashMap::new();
    let mut history = vec![Item::User(text("task", 0, 200))];
    let mut made = 0;
    for (t, (ops, pick)) in turns.iter().enumerate() {
        for op in ops {
            apply(&mut history, op, &mut made);
        }
        let body = body(wire, &history, gemini_ids);
        for unit in request::decode(wire, body.clone()).unwrap().messages {
            sent.entry(unit.id).or_insert(unit.raw);
        }
        let (kept, kept_state) = turn(&keeps, &session, wire, &body, window).await;
        // A new engine each turn: nothing carried, the state read back from the store.
        let fresh_engine = engine(&registry, &fresh_backends);
        let (fresh, fresh_state) = turn(&fresh_engine, &session, wire, &body, window).await;
        let context = format!("{wire}, window {window}, turn {t} after {ops:?}");
        assert!(
            kept.output == fresh.output,
            "{context}: the carry changed what is forwarded\nkept:  {}\nfresh: {}",
            String::from_utf8_lossy(&kept.output),
            String::from_utf8_lossy(&fresh.output)
        );
        assert!(
            kept_state == fresh_state,
            "{context}: the carry changed the state\nkept:  {kept_state:?}\nfresh: {fresh_state:?}"
        );
        assert_eq!(kept.report.refusal, fresh.report.refusal, "{context}");
        // A refused turn is answered with the refusal, not forwarded (its output is the
        // client's body as it came).
        if kept.report.refusal.is_none() {
            check_output(
                wire,
                &kept.output,
                &kept_state,
                &kept_backends,
                &session,
                &sent,
            )
            .await;
        }
        if let Some(pick) = *pick {
            let kept = compress(&keeps, &session, wire, &kept, pick, t).await;
            let fresh = compress(&fresh_engine, &session, wire, &fresh, pick, t).await;
            assert!(
                kept == fresh,
                "{context}: the model's compress call went differently\nkept:  {kept:?}\nfresh: {fresh:?}"
            );
            if let Some((_, state)) = &kept {
                assert_blocks_restore_exactly(state, kept_backends.media.as_ref(), &session, &sent)
                    .await;
            }
        }
    }
}

fn wire() -> impl Strategy<Value = Wire> {
    prop::sample::select(Wire::ALL.to_vec())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (10..600usize, 10..900usize).prop_map(|(a, r)| Op::Exchange(a, r)),
        4 => (prop::collection::vec(20..2_500usize, 1..4), any::<bool>())
            .prop_map(|(outputs, reversed)| Op::Tools(outputs, reversed)),
        1 => Just(Op::Interrupted),
        1 => any::<u8>().prop_map(Op::Image),
        1 => (1..6usize).prop_map(Op::TrimOldest),
        1 => any::<usize>().prop_map(Op::EditUser),
        1 => Just(Op::Reset),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(foldwire_test_kit::proptest_cases(96)))]

    #[test]
    fn a_turn_gives_the_same_result_with_or_without_what_the_last_one_carried(
        wire in wire(),
        gemini_ids in any::<bool>(),
        window in prop::sample::select(vec![1_500u64, 4_000, 12_000]),
        turns in prop::collection::vec(
            (prop::collection::vec(op(), 1..3), prop::option::weighted(0.3, any::<(usize, usize)>())),
            2..14,
        ),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(session(wire, gemini_ids, window, &turns));
    }
}
