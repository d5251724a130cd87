//! The `layout.head_window` stage as a plain value: windows over whole messages, the
//! tool-call pull-back, resets and transition placement, calibration, the rewrite metric,
//! refusals, turn options and cache markers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::field_reassign_with_default
)]

use foldwire_test_kit::layout as common;

use std::sync::Arc;

use common::*;
use foldwire_core::{
    CharEstimator, Component, ComponentKind, Fact, Layout, LayoutPlan, LayoutRequest, Pin, Refusal,
    Registry, Role, SessionState, Stage, StageCx, StageError, TurnOptions, Wire,
    state::UsageSample,
};
use foldwire_stages::layout_head_window::{
    self as lh, HeadState, HeadWindowConfig, HeadWindowStage, cache_markers, head_fingerprints,
    lay_out, reset, update_calibration,
};

/// Sends store order, always: the stage's own behaviour without a strategy's reordering.
#[derive(Debug)]
struct StoreOrder;

impl Layout for StoreOrder {
    fn name(&self) -> &'static str {
        "test.store_order"
    }
    fn arrange(&self, r: &LayoutRequest<'_>) -> Result<LayoutPlan, Refusal> {
        Ok(LayoutPlan::new(
            (0..r.messages.len()).collect(),
            r.state.clone(),
        ))
    }
}

/// Splits the first wire message in two: an invalid order the stage must reject.
#[derive(Debug)]
struct Splitter;

impl Layout for Splitter {
    fn name(&self) -> &'static str {
        "test.splitter"
    }
    fn arrange(&self, r: &LayoutRequest<'_>) -> Result<LayoutPlan, Refusal> {
        let mut order: Vec<usize> = (0..r.messages.len()).collect();
        order.swap(0, 2);
        Ok(LayoutPlan::new(order, r.state.clone()))
    }
}

fn config(head: u64, recent: u64) -> HeadWindowConfig {
    HeadWindowConfig {
        head_tokens: Some(head),
        recent_tokens: Some(recent),
        ..HeadWindowConfig::default()
    }
}

#[test]
fn the_head_holds_whole_messages_and_a_call_stays_with_its_result() {
    // m0 ≈ 107 tokens, m1 (text + call) ≈ 60, m2 (the result) ≈ 215.
    let with_call = vec![
        (Role::User, vec![text("m0", 400)]),
        (Role::Assistant, vec![text("m1", 100), B::Call("c1".into())]),
        (Role::User, vec![B::Result("c1".into(), 800)]),
        (Role::Assistant, vec![text("m3", 100)]),
    ];
    let mut t = turn(
        conversation(Wire::Anthropic, &with_call),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(250, 10)).unwrap();
    let head: Vec<String> = head_fingerprints(&t.state)
        .into_iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(
        head,
        ["m0"],
        "the boundary between call and result is pulled back before the call"
    );

    // The same sizes without a call: the boundary stays after m1.
    let without_call = vec![
        (Role::User, vec![text("m0", 400)]),
        (Role::Assistant, vec![text("m1", 100), text("m1b", 60)]),
        (Role::User, vec![text("m2", 800)]),
        (Role::Assistant, vec![text("m3", 100)]),
    ];
    let mut t = turn(
        conversation(Wire::Anthropic, &without_call),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(250, 10)).unwrap();
    let head: Vec<String> = head_fingerprints(&t.state)
        .into_iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(head, ["m0", "m1", "m1b"], "a wire message is taken whole");
}

#[test]
fn a_long_message_is_never_split_into_the_head() {
    let msgs = vec![
        (Role::User, vec![text("short", 200)]),
        (
            Role::Assistant,
            vec![text("long-a", 2_000), text("long-b", 20_000)],
        ),
        (Role::User, vec![text("after", 200)]),
    ];
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(1_000, 10)).unwrap();
    let head: Vec<String> = head_fingerprints(&t.state)
        .into_iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(head, ["short"]);
    let h = HeadState::load(&t.state).unwrap();
    assert!(h.sealed, "a message that did not fit seals the head");
}

#[test]
fn a_sealed_head_keeps_its_membership_when_calibration_changes() {
    let msgs = history("h", 10, 400);
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 10)).unwrap();
    let first = head_fingerprints(&t.state);
    assert_eq!(first.len(), 2);
    // A bigger head window next turn (as a calibration drop would make room): unchanged.
    let state = t.state;
    let mut t = turn(conversation(Wire::Anthropic, &msgs), state, 100_000);
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(3_000, 10)).unwrap();
    assert_eq!(head_fingerprints(&t.state), first);
}

#[tokio::test]
async fn the_stage_runs_as_a_plain_value_with_a_registered_layout() {
    let registry = Arc::new(Registry::empty());
    registry
        .register(ComponentKind::Layout, "test.store_order", "tests", |_| {
            Ok(Component::Layout(Arc::new(StoreOrder)))
        })
        .unwrap();
    let cx = StageCx::new(registry);
    let stage = HeadWindowStage::new(HeadWindowConfig {
        layout: "test.store_order".into(),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(stage.requires(), &[Fact::Decoded]);
    assert_eq!(stage.provides(), &[Fact::LaidOut]);
    let mut t = turn(
        conversation(Wire::Anthropic, &history("h", 4, 100)),
        SessionState::default(),
        100_000,
    );
    stage.run(&mut t, &cx).await.unwrap();
    assert!(t.report.counter("request_tokens") > 0);

    // An unknown strategy is an error naming it.
    let stage = HeadWindowStage::new(HeadWindowConfig {
        layout: "layout.nope".into(),
        ..Default::default()
    })
    .unwrap();
    let err = stage.run(&mut t, &cx).await.unwrap_err().to_string();
    assert!(err.contains("layout.nope"), "{err}");

    // The per-turn option picks another strategy.
    t.options.layout = Some("test.store_order".into());
    stage.run(&mut t, &cx).await.unwrap();

    // Bad params are refused at build.
    assert!(
        HeadWindowStage::new(HeadWindowConfig {
            recent_fraction: 3.0,
            ..Default::default()
        })
        .is_err()
    );
}

#[test]
fn a_strategy_that_splits_a_wire_message_is_rejected() {
    let msgs = vec![
        (Role::User, vec![text("a", 10), text("b", 10)]),
        (Role::Assistant, vec![text("c", 10)]),
    ];
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    let err = lay_out(&mut t, &Splitter, &CharEstimator, &config(10, 10)).unwrap_err();
    assert!(err.to_string().contains("split"), "{err}");
}

#[test]
fn a_turn_that_only_appends_rewrites_nothing_and_an_edit_rewrites_from_it() {
    let plain = HeadWindowConfig {
        cache_markers: false,
        ..config(100, 10)
    };
    let mut msgs = history("h", 6, 400);
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &plain).unwrap();
    assert_eq!(
        t.report.counter("rewritten_tokens"),
        t.report.counter("request_tokens"),
        "first request is all new"
    );

    msgs.extend(history("n", 2, 400));
    let mut t = turn(conversation(Wire::Anthropic, &msgs), t.state, 100_000);
    let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &plain).unwrap();
    assert_eq!(t.report.counter("rewritten_tokens"), 0);
    // A unit's tokens as sent: its bytes and its wire message's envelope.
    let unit = |conv: &foldwire_core::Conversation, i: usize| {
        foldwire_stages::kernel::measure(conv, &CharEstimator).units[i]
    };
    let conv = t.conversation.as_ref().unwrap();
    assert_eq!(out.rewrite.appended_tokens, unit(conv, 6) + unit(conv, 7));

    // h3 replaced (as a fold would): rewritten from h3's position to the end (5 units).
    msgs[3] = (Role::Assistant, vec![text("summary", 400)]);
    let mut t = turn(conversation(Wire::Anthropic, &msgs), t.state, 100_000);
    let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &plain).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    let from_edit: u64 = (3..8).map(|i| unit(conv, i)).sum();
    assert!(from_edit > 500);
    assert_eq!(out.rewrite.rewritten_tokens, from_edit, "{out:?}");
}

#[test]
fn calibration_is_a_bounded_exponential_average_updated_once_per_turn() {
    let mut state = SessionState::default();
    let mut head = HeadState::default();
    state.usage = vec![
        UsageSample {
            turn: 1,
            estimated: 1_000,
            reported: 1_200,
        },
        UsageSample {
            turn: 2,
            estimated: 0,
            reported: 500,
        },
    ];
    let c = update_calibration(&mut state, &mut head, 0.5);
    assert!((c - 1.1).abs() < 1e-9, "{c}");
    assert_eq!(head.calibrated_through, Some(2));
    // The same samples again: no change.
    assert!((update_calibration(&mut state, &mut head, 0.5) - 1.1).abs() < 1e-9);
    // An absurd report is bounded.
    state.usage.push(UsageSample {
        turn: 3,
        estimated: 10,
        reported: 10_000,
    });
    let c = update_calibration(&mut state, &mut head, 1.0);
    assert_eq!(c, foldwire_core::Budget::CALIBRATION_BOUNDS.1);
}

#[test]
fn calibration_shrinks_the_budget_the_stage_checks() {
    let msgs = history("h", 10, 400);
    let mut state = SessionState::default();
    state.usage = vec![UsageSample {
        turn: 1,
        estimated: 1_000,
        reported: 2_000,
    }];
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs.clone()),
        SessionState::default(),
        1_200,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(100, 10)).unwrap();
    let mut t = turn(conversation(Wire::Anthropic, &msgs), state, 1_200);
    // ≈1,080 estimated tokens fit 1,200 at calibration 1, not at 1.3 (alpha 0.3 from 1.0 → 1.3).
    let err = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(100, 10)).unwrap_err();
    assert!(matches!(err, StageError::Refused(_)), "{err}");
    assert!((t.budget.calibration - 1.3).abs() < 1e-9);
}

#[test]
fn a_request_over_budget_is_refused_with_numbers_and_levers_and_nothing_dropped() {
    let mut msgs = history("h", 12, 400);
    msgs.push((Role::User, vec![text("pinned", 400)]));
    let mut conv = conversation(Wire::Anthropic, &msgs);
    conv.messages.last_mut().unwrap().pin = Some(Pin::Protected("host".into()));
    let before = labels(&conv);
    let mut t = turn(conv, SessionState::default(), 1_000);
    let err = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 300)).unwrap_err();
    let StageError::Refused(r) = err else {
        panic!("expected a refusal")
    };
    let n = &r.numbers;
    assert_eq!(
        n["frame"] + n["head"] + n["history"] + n["recent"],
        n["request"]
    );
    assert_eq!(n["budget"], 1_000);
    let last = t.conversation.as_ref().unwrap().messages.last().unwrap();
    assert!(n["request"] > 1_000);
    let measured =
        foldwire_stages::kernel::measure(t.conversation.as_ref().unwrap(), &CharEstimator);
    assert_eq!(n["pinned"], *measured.units.last().unwrap());
    assert!(
        n["pinned"] > (last.raw.len() as u64).div_ceil(4),
        "its envelope counts"
    );
    // No range is queued (no ranges.build ran): no fold lever; the pinned unit and a reset
    // are named with what they free.
    assert!(!r.levers.iter().any(|l| l.starts_with("fold")), "{r}");
    assert!(
        r.levers
            .iter()
            .any(|l| l.starts_with("unpin pinned (") && l.contains("frees about")),
        "{r}"
    );
    assert!(r.levers.iter().any(|l| l.starts_with("a new reset")), "{r}");
    // Neither frees the tokens over: the refusal says so and names the window that fits.
    assert!(r.reason.contains("nothing that can fold frees the"), "{r}");
    assert!(
        r.levers.last().unwrap().starts_with(&format!(
            "a larger context window: {} tokens or more",
            n["request"]
        )),
        "{r}"
    );
    assert_eq!(t.report.refusal.as_ref(), Some(&r));
    assert_eq!(
        labels(t.conversation.as_ref().unwrap()),
        before,
        "nothing dropped or moved"
    );
}

// seed 002 rule 11: while a reset head is still filling it is sent last, after the
// history; a refusal still counts it as the head (the transition and what follows it), not
// as history or the recent window.
#[test]
fn a_refusal_counts_a_filling_reset_head_as_the_head() {
    let mut msgs = history("h", 12, 400);
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 10)).unwrap();
    let mut state = t.state;
    reset(&mut state, "A new topic.").unwrap();
    msgs.extend(history("n", 1, 400));
    // The head (3,000 tokens) holds the transition and n0 and is far from full; the
    // history puts the request over its budget.
    let mut t = turn(conversation(Wire::Anthropic, &msgs), state, 1_000);
    let err = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(3_000, 10)).unwrap_err();
    let StageError::Refused(r) = err else {
        panic!("expected a refusal")
    };
    let conv = t.conversation.as_ref().unwrap();
    let names = labels(conv);
    assert_eq!(
        names[names.len() - 2..],
        ["TT", "n0"],
        "still filling: sent last"
    );
    let at = names.len() - 2;
    let units = foldwire_stages::kernel::measure(conv, &CharEstimator).units;
    let n = &r.numbers;
    assert_eq!(n["head"], units[at..].iter().sum::<u64>(), "{r}");
    assert_eq!(n["history"], units[..at].iter().sum::<u64>(), "{r}");
    assert_eq!(n["recent"], 0, "{r}");
    assert_eq!(
        n["frame"] + n["head"] + n["history"] + n["recent"],
        n["request"]
    );
}

#[test]
fn turn_options_override_window_and_head() {
    let msgs = history("h", 12, 400);
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    t.options.window = Some(500);
    assert!(matches!(
        lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 10)),
        Err(StageError::Refused(_))
    ));

    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    let mut options = TurnOptions::default();
    options.head_tokens = Some(700);
    options.recent_tokens = Some(5);
    let cfg = config(300, 10).with_options(&options);
    assert_eq!((cfg.head_tokens, cfg.recent_tokens), (Some(700), Some(5)));
    lay_out(&mut t, &StoreOrder, &CharEstimator, &cfg).unwrap();
    assert_eq!(head_fingerprints(&t.state).len(), 6);
}

#[test]
fn a_reset_places_its_transition_after_the_last_sent_unit_and_keeps_it_there() {
    let mut msgs = history("h", 6, 400);
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 10)).unwrap();
    let mut state = t.state;
    assert!(
        reset(&mut state, "  ").is_err(),
        "an empty transition is refused"
    );
    assert_eq!(reset(&mut state, "A new topic.").unwrap(), 1);

    // The client's next request already carries a new message: the transition goes before it.
    msgs.extend(history("n", 1, 400));
    let mut t = turn(conversation(Wire::Anthropic, &msgs), state, 100_000);
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 10)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    assert_eq!(labels(conv)[5..], ["h5", "TT", "n0"]);
    let tt = &conv.messages[6];
    assert_eq!(tt.role, Role::User);
    assert_eq!(tt.origin, foldwire_core::Origin::Injected);
    assert_eq!(&tt.raw[..], br#"{"type":"text","text":"A new topic."}"#);
    let heads: Vec<String> = head_fingerprints(&t.state)
        .into_iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(
        heads,
        ["foldwire-transition-1", "n0"],
        "the old head became history"
    );

    // Next turn, the old history's front is gone (folded): the transition stays before n0.
    let later: Vec<_> = msgs[2..].to_vec();
    let mut t = turn(conversation(Wire::Anthropic, &later), t.state, 100_000);
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 10)).unwrap();
    assert_eq!(
        labels(t.conversation.as_ref().unwrap())[3..],
        ["h5", "TT", "n0"]
    );
}

#[test]
fn a_transition_never_lands_between_a_call_and_its_result() {
    let mut msgs = history("h", 2, 100);
    msgs.push((Role::Assistant, vec![B::Call("c9".into())]));
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(50, 10)).unwrap();
    let mut state = t.state;
    reset(&mut state, "Next.").unwrap();
    msgs.push((Role::User, vec![B::Result("c9".into(), 100)]));
    let mut t = turn(conversation(Wire::Anthropic, &msgs), state, 100_000);
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(50, 10)).unwrap();
    assert_eq!(
        labels(t.conversation.as_ref().unwrap()),
        ["h0", "h1", "call-c9", "result-c9", "TT"]
    );
}

#[test]
fn head_state_loads_when_fields_are_missing_and_keeps_unknown_ones() {
    let mut state = SessionState::default();
    state.head = serde_json::json!({"generation": 2, "from_the_future": [1]});
    let h = HeadState::load(&state).unwrap();
    assert_eq!(h.generation, 2);
    assert!(!h.sealed && h.previous.is_empty());
    let mut out = SessionState::default();
    h.store(&mut out).unwrap();
    assert_eq!(out.head["from_the_future"], serde_json::json!([1]));
    // A head field of another shape is reported, not a panic.
    state.head = serde_json::json!([1, 2]);
    assert!(HeadState::load(&state).is_err());
    assert!(head_fingerprints(&state).is_empty());
}

const SYSTEM_1H: &str = r#"{"model":"m","system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[]}"#;

#[test]
fn cache_markers_go_at_the_boundaries_within_the_rules() {
    let msgs = history("h", 20, 400);
    let conv = conversation_with_frame(Wire::Anthropic, &msgs, SYSTEM_1H);
    let mut t = turn(conv, SessionState::default(), 100_000);
    let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 1_000)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    assert_eq!(
        cache_markers::check_rules(conv).unwrap(),
        4,
        "system + head end + history end + request end"
    );
    assert_eq!(out.markers.placed, 3);
    let marked: Vec<usize> = conv
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.raw.windows(13).any(|w| w == b"cache_control"))
        .map(|(i, _)| i)
        .collect();
    // Head = h0,h1 (≈231 tokens of 300); recent = the last 8 (≈924 of 1,000: each message
    // is ≈115 tokens with its envelope).
    assert_eq!(marked, [1, 11, 19]);
    // Key order is kept, the marker appended.
    assert!(
        conv.messages[1]
            .raw
            .starts_with(br#"{"type":"text","text":"h1 "#)
    );
    assert!(conv.messages[1].modified);
    assert_eq!(t.report.counter("layout.cache_markers_placed"), 3);
}

#[test]
fn a_top_level_marker_takes_a_slot_and_its_ttl_counts_last() {
    // The system marker (1h) and the client's top-level automatic marker: foldwire places
    // two of its own, not three, so the API's four hold.
    let both = r#"{"model":"m","cache_control":{"type":"ephemeral"},"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[]}"#;
    let conv = conversation_with_frame(Wire::Anthropic, &history("h", 20, 400), both);
    let mut t = turn(conv, SessionState::default(), 100_000);
    let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 1_000)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    assert_eq!(out.markers.placed, 2);
    assert_eq!(out.markers.kept, 1, "the top-level marker stands");
    let all = cache_markers::markers(conv).unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all.last().unwrap().site, cache_markers::MarkerSite::Request);
    assert_eq!(cache_markers::check_rules(conv).unwrap(), 4);

    // A top-level 1h marker: foldwire's markers before it take 1h too.
    let hour = r#"{"model":"m","cache_control":{"type":"ephemeral","ttl":"1h"},"messages":[]}"#;
    let conv = conversation_with_frame(Wire::Anthropic, &history("h", 20, 400), hour);
    let mut t = turn(conv, SessionState::default(), 100_000);
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 1_000)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    let all = cache_markers::markers(conv).unwrap();
    assert_eq!(all.len(), 4, "three of foldwire's and the top-level one");
    assert!(
        all.iter().all(|m| m.ttl == cache_markers::Ttl::Hour),
        "{all:?}"
    );
    cache_markers::check_rules(conv).unwrap();

    // A top-level 1h marker after a client's 5m system marker cannot stand: it is dropped
    // (set to null), the rest of the request within the rules.
    let late = r#"{"model":"m","cache_control":{"type":"ephemeral","ttl":"1h"},"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[]}"#;
    let conv = conversation_with_frame(Wire::Anthropic, &history("h", 20, 400), late);
    let mut t = turn(conv, SessionState::default(), 100_000);
    let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 1_000)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    assert!(out.markers.dropped >= 1);
    let all = cache_markers::markers(conv).unwrap();
    assert!(
        all.iter()
            .all(|m| m.site != cache_markers::MarkerSite::Request)
    );
    cache_markers::check_rules(conv).unwrap();
}

#[test]
fn client_markers_are_kept_where_allowed_and_dropped_with_a_count_otherwise() {
    let mut msgs = history("h", 10, 400);
    // Four client markers in messages, the last one 1h after 5m ones.
    msgs[2].1.push(B::Marked("c2".into(), "5m"));
    msgs[4].1.push(B::Marked("c4".into(), "5m"));
    msgs[6].1.push(B::Marked("c6".into(), "5m"));
    msgs[8].1.push(B::Marked("c8".into(), "1h"));
    let conv = conversation_with_frame(Wire::Anthropic, &msgs, SYSTEM_1H);
    let mut t = turn(conv, SessionState::default(), 100_000);
    let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 1_000)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    let count = cache_markers::check_rules(conv).unwrap();
    assert!(count <= 4);
    assert_eq!(out.markers.kept + out.markers.dropped, 4);
    assert!(out.markers.dropped >= 1);
    assert_eq!(
        t.report.counter("layout.cache_markers_client_dropped"),
        out.markers.dropped
    );
    // The checker itself catches both rules.
    let mut bad = conversation_with_frame(
        Wire::Anthropic,
        &[(
            Role::User,
            vec![B::Marked("a".into(), "5m"), B::Marked("b".into(), "1h")],
        )],
        SYSTEM_1H,
    );
    assert!(matches!(
        cache_markers::check_rules(&bad),
        Err(cache_markers::MarkerRuleViolation::TtlOrder { .. })
    ));
    bad.messages[0] = bad.messages[1].clone();
    bad.messages.extend([
        bad.messages[1].clone(),
        bad.messages[1].clone(),
        bad.messages[1].clone(),
    ]);
    assert!(matches!(
        cache_markers::check_rules(&bad),
        Err(cache_markers::MarkerRuleViolation::TooMany(6))
    ));
}

#[test]
fn other_wires_get_no_markers_and_prompt_cache_key_passes_through() {
    let body = r#"{"model":"m","prompt_cache_key":"k-1","messages":[]}"#;
    for wire in [Wire::OpenAiChat, Wire::Gemini] {
        let conv = conversation_with_frame(wire, &history("h", 8, 400), body);
        let mut t = turn(conv, SessionState::default(), 100_000);
        let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 500)).unwrap();
        let conv = t.conversation.as_ref().unwrap();
        assert_eq!(out.markers.placed, 0);
        assert!(conv.overrides.is_empty());
        assert!(conv.messages.iter().all(|m| !m.modified));
        assert_eq!(&conv.source[..], body.as_bytes());
    }
    let _ = lh::NAME;
}

#[test]
fn parallel_calls_whose_results_arrive_in_separate_messages_stay_together() {
    // One assistant message calls A and B; result A (short) and result B (long, crossing
    // the head's end) come as two messages. The head ends before the calls.
    let msgs = vec![
        (Role::User, vec![text("ask", 200)]),
        (
            Role::Assistant,
            vec![B::Call("A".into()), B::Call("B".into())],
        ),
        (Role::User, vec![B::Result("A".into(), 100)]),
        (Role::User, vec![B::Result("B".into(), 8_000)]),
        (Role::Assistant, vec![text("done", 100)]),
    ];
    let mut t = turn(
        conversation(Wire::Anthropic, &msgs),
        SessionState::default(),
        100_000,
    );
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(500, 10)).unwrap();
    let head: Vec<String> = head_fingerprints(&t.state)
        .into_iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(head, ["ask"]);
}

#[test]
fn replay_reports_tokens_and_rewrite_per_turn() {
    let first = history("h", 6, 400);
    let mut second = first.clone();
    second.extend(history("n", 1, 400));
    let mut third = second.clone();
    third.extend(history("m", 1, 400));
    let events = vec![
        lh::ReplayEvent::Request(Box::new(conversation(Wire::Anthropic, &first))),
        lh::ReplayEvent::Request(Box::new(conversation(Wire::Anthropic, &second))),
        lh::ReplayEvent::Reset("Another topic.".into()),
        lh::ReplayEvent::Request(Box::new(conversation(Wire::Anthropic, &third))),
        lh::ReplayEvent::Request(Box::new(conversation(Wire::Anthropic, &third))),
    ];
    let mut state = SessionState::default();
    let budget = foldwire_core::Budget {
        window: 100_000,
        reserve: 0,
        calibration: 1.0,
    };
    let turns = lh::replay(
        events,
        &mut state,
        &StoreOrder,
        &CharEstimator,
        &config(300, 10),
        budget,
    )
    .unwrap();
    assert_eq!(turns.len(), 4);
    assert_eq!(
        turns[0].rewrite.rewritten_tokens,
        turns[0].rewrite.request_tokens
    );
    assert_eq!(turns[1].rewrite.rewritten_tokens, 0);
    assert_eq!(
        turns[1].rewrite.request_tokens,
        turns[0].rewrite.request_tokens + 115,
        "107 tokens of text and 8 of envelope"
    );
    // The reset's transition lands before m0 (after n0): an append, no rewrite.
    assert_eq!(turns[2].rewrite.rewritten_tokens, 0);
    assert!(turns[2].rewrite.appended_tokens > 107);
    assert_eq!(turns[3].rewrite.rewritten_tokens, 0);
    assert_eq!(turns[3].rewrite.appended_tokens, 0);
    // A budget too small is reported per turn as a refusal, not an error.
    let small = foldwire_core::Budget {
        window: 100,
        ..budget
    };
    let turns = lh::replay(
        vec![lh::ReplayEvent::Request(Box::new(conversation(
            Wire::Anthropic,
            &first,
        )))],
        &mut SessionState::default(),
        &StoreOrder,
        &CharEstimator,
        &config(300, 10),
        small,
    )
    .unwrap();
    assert!(turns[0].refusal.is_some());
}

#[test]
fn the_default_head_is_a_share_of_the_budget_capped_at_4000() {
    // A twentieth of the budget: small windows keep the opening task, large ones the cap.
    assert_eq!(lh::default_head_tokens(6_000), 300);
    assert_eq!(lh::default_head_tokens(45_000), 2_250);
    assert_eq!(lh::default_head_tokens(184_000), lh::DEFAULT_HEAD_TOKENS);
    let msgs = history("h", 40, 400);
    for (window, max_head) in [(8_000u64, 400u64), (60_000, 3_000), (200_000, 4_000)] {
        let mut t = turn(
            conversation(Wire::Anthropic, &msgs),
            SessionState::default(),
            window,
        );
        let cfg = HeadWindowConfig::default();
        let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &cfg).unwrap_or_else(|e| {
            panic!("{window}: {e}");
        });
        let head = out.zones.head;
        assert!(
            head <= max_head && head + 120 > max_head,
            "{window}: head of {head} tokens"
        );
    }
}

#[test]
fn ranges_build_sees_the_head_before_the_first_layout() {
    let msgs = history("h", 12, 400);
    let conv = conversation(Wire::Anthropic, &msgs);
    let state = SessionState::default();
    let seen = lh::with_first_head(&state, &conv, &CharEstimator, 300, None)
        .unwrap()
        .unwrap();
    let head: Vec<String> = head_fingerprints(&seen).into_iter().map(|m| m.0).collect();
    assert_eq!(head, ["h0", "h1"], "whole messages within 300 tokens");
    // The layout records the same head.
    let mut t = turn(conv.clone(), state, 100_000);
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 10)).unwrap();
    assert_eq!(head_fingerprints(&t.state), head_fingerprints(&seen));
    // Once recorded, or while a reset waits, the state is used as it is.
    assert!(
        lh::with_first_head(&t.state, &conv, &CharEstimator, 3_000, None)
            .unwrap()
            .is_none()
    );
    let mut fresh = SessionState::default();
    reset(&mut fresh, "New topic.").unwrap();
    assert!(
        lh::with_first_head(&fresh, &conv, &CharEstimator, 300, None)
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_client_marker_on_a_compaction_block_keeps_its_slot_and_no_marker_lands_there() {
    // An Anthropic compaction block goes back byte for byte (the decoder marks it opaque):
    // its client marker is kept, never taken off, and counts against the four; foldwire
    // places none of its own there. The system marker and three message markers of the
    // client make five wanted markers: one of the message markers goes.
    let mut messages = vec![serde_json::json!({"role": "assistant", "content": [
        {"type": "compaction", "content": "Earlier: the repo was set up.", "signature": "sig", "cache_control": {"type": "ephemeral"}}
    ]})];
    for i in 0..20 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let mut block =
            serde_json::json!({"type": "text", "text": format!("m{i} {}", "x".repeat(400))});
        if matches!(i, 4 | 10 | 16) {
            block["cache_control"] = serde_json::json!({"type": "ephemeral"});
        }
        messages.push(serde_json::json!({"role": role, "content": [block]}));
    }
    let body = serde_json::json!({"model": "m", "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}], "messages": messages});
    let conv = foldwire_wire::request::decode(Wire::Anthropic, body.to_string().into()).unwrap();
    let compaction = conv.messages[0].raw.clone();
    let mut t = turn(conv, SessionState::default(), 100_000);
    let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 1_000)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    assert_eq!(cache_markers::check_rules(conv).unwrap(), 4);
    assert!(
        !conv.messages[0].modified,
        "the compaction block was rewritten"
    );
    assert_eq!(conv.messages[0].raw, compaction);
    assert!(out.markers.dropped >= 1, "{:?}", out.markers);
    let sent: serde_json::Value =
        serde_json::from_slice(&foldwire_wire::request::encode(conv).unwrap()).unwrap();
    assert_eq!(
        sent["messages"][0]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
}

#[test]
fn a_message_sent_as_a_plain_string_takes_a_marker_as_its_text_block() {
    // A client that sends every message as a string: the markers go on the strings' text
    // blocks (the form the string stands for), the text unchanged; before, such a client got
    // no marker of foldwire's at all.
    let messages: Vec<serde_json::Value> = (0..20)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": format!("m{i} {}", "x".repeat(400))})
        })
        .collect();
    let body = serde_json::json!({"model": "m", "system": "sys", "messages": messages});
    let conv = foldwire_wire::request::decode(Wire::Anthropic, body.to_string().into()).unwrap();
    let mut t = turn(conv, SessionState::default(), 100_000);
    let out = lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 1_000)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    assert!(out.markers.placed >= 2, "{:?}", out.markers);
    assert_eq!(
        cache_markers::check_rules(conv).unwrap() as u64,
        out.markers.placed
    );
    let sent: serde_json::Value =
        serde_json::from_slice(&foldwire_wire::request::encode(conv).unwrap()).unwrap();
    let mut marked = 0;
    for (i, m) in sent["messages"].as_array().unwrap().iter().enumerate() {
        let text = &messages[i]["content"];
        match &m["content"] {
            serde_json::Value::String(_) => assert_eq!(&m["content"], text),
            serde_json::Value::Array(blocks) => {
                assert_eq!(blocks.len(), 1, "{m}");
                assert_eq!(&blocks[0]["text"], text);
                assert_eq!(blocks[0]["type"], "text");
                assert_eq!(blocks[0]["cache_control"]["type"], "ephemeral");
                marked += 1;
            }
            other => panic!("{other}"),
        }
    }
    assert_eq!(marked, out.markers.placed);
    // A fold archives what the client sent: the string.
    let unit = conv.messages.iter().find(|u| u.modified).unwrap();
    assert_eq!(
        unit.client_bytes().as_ref(),
        serde_json::to_string(&messages[unit.entry]["content"])
            .unwrap()
            .as_bytes()
    );
}

#[test]
fn a_folds_summary_at_the_end_of_the_history_takes_the_history_marker() {
    // Head, the summaries of what was folded, the recent window: the history's marker goes
    // on its last summary, so the head and the summaries are one cached prefix a later fold
    // reads back, where it fell back into the head before (summaries have no bytes of their
    // own until they are written out).
    let messages: Vec<serde_json::Value> = (0..20)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": [{"type": "text", "text": format!("m{i} {}", "x".repeat(400))}]})
        })
        .collect();
    let body = serde_json::json!({"model": "m", "system": "sys", "messages": messages});
    let mut conv =
        foldwire_wire::request::decode(Wire::Anthropic, body.to_string().into()).unwrap();
    // Messages 2..=11 folded into one summary, in their place: the head holds m0 and m1,
    // the recent window m12 on, so the summary is the whole history.
    let text = "[foldwire b1 · setup]\nThe setup, folded.";
    let entry = conv.push_entry(Role::User);
    let summary = foldwire_core::Message::synthesized(
        entry,
        Role::User,
        text,
        foldwire_core::Origin::Summary(foldwire_core::BlockId(1)),
        bytes::Bytes::new(),
    );
    let mut units: Vec<foldwire_core::Message> = conv.messages.drain(..).collect();
    units.retain(|u| !(2..=11).contains(&u.entry));
    let at = units.iter().position(|u| u.entry > 11).unwrap();
    units.insert(at, summary);
    conv.messages = units;
    let mut t = turn(conv, SessionState::default(), 100_000);
    lay_out(&mut t, &StoreOrder, &CharEstimator, &config(300, 1_000)).unwrap();
    let conv = t.conversation.as_ref().unwrap();
    cache_markers::check_rules(conv).unwrap();
    let sent: serde_json::Value =
        serde_json::from_slice(&foldwire_wire::request::encode(conv).unwrap()).unwrap();
    let written = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"][0]["text"] == text)
        .unwrap_or_else(|| panic!("no summary in {sent}"));
    assert_eq!(
        written["content"][0]["cache_control"]["type"], "ephemeral",
        "{written}"
    );
    assert_eq!(written["content"].as_array().unwrap().len(), 1);
}
