//! The two layout strategies through the `layout.head_window` stage: the seed's four reset
//! cases under each, a tool call at the head boundary after a reset, the move riding on a
//! fold, and the cache-marker rules on every Anthropic request they send.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foldwire_test_kit::layout as common;

use common::*;
use foldwire_core::{CharEstimator, ComponentKind, Layout, Registry, Role, SessionState, Wire};
use foldwire_plugins::layout::{
    HeadFill, HeadFirst, HeadFirstConfig, MoveHead, StoreOrderFill, StoreOrderFillConfig,
};
use foldwire_stages::layout_head_window::{
    HeadState, HeadWindowConfig, LayoutOutcome, cache_markers, lay_out, reset,
};

struct Session {
    state: SessionState,
    config: HeadWindowConfig,
    layout: Box<dyn Layout>,
    window: u64,
}

impl Session {
    fn new(layout: Box<dyn Layout>, head: u64, recent: u64) -> Self {
        Session {
            state: SessionState::default(),
            config: HeadWindowConfig {
                head_tokens: Some(head),
                recent_tokens: Some(recent),
                ..HeadWindowConfig::default()
            },
            layout,
            window: 1_000_000,
        }
    }

    fn send(&mut self, msgs: &[(Role, Vec<B>)]) -> (Vec<String>, LayoutOutcome) {
        let mut t = turn(
            conversation(Wire::Anthropic, msgs),
            std::mem::take(&mut self.state),
            self.window,
        );
        let out = lay_out(&mut t, self.layout.as_ref(), &CharEstimator, &self.config).unwrap();
        let conv = t.conversation.as_ref().unwrap();
        cache_markers::check_rules(conv).unwrap();
        self.state = t.state;
        (labels(conv), out)
    }
}

type MakeLayout = fn() -> Box<dyn Layout>;

fn strategies() -> Vec<(&'static str, MakeLayout)> {
    vec![
        ("head_first", || Box::new(HeadFirst::default())),
        ("head_first_fill", || {
            Box::new(HeadFirst::new(HeadFirstConfig {
                fill: HeadFill::Fill,
            }))
        }),
        ("on_fill", || {
            Box::new(StoreOrderFill::new(StoreOrderFillConfig {
                move_head: MoveHead::OnFill,
            }))
        }),
        ("with_rewrite", || Box::new(StoreOrderFill::default())),
    ]
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

fn hs() -> Vec<String> {
    (0..6).map(|i| format!("h{i}")).collect()
}

fn cat(parts: &[Vec<String>]) -> Vec<String> {
    parts.concat()
}

#[test]
fn both_strategies_are_registered() {
    foldwire_plugins::link();
    let registry = Registry::from_inventory().unwrap();
    let names = registry.names(ComponentKind::Layout);
    assert!(names.contains(&"layout.head_first".to_owned()));
    assert!(names.contains(&"layout.store_order_fill".to_owned()));
    assert!(
        registry
            .layout(
                "layout.store_order_fill",
                &serde_json::json!({"move_head": "on_fill"})
            )
            .is_ok()
    );
    assert!(
        registry
            .layout(
                "layout.store_order_fill",
                &serde_json::json!({"move_head": "later"})
            )
            .is_err()
    );
    assert!(
        registry
            .stage("layout.head_window", &serde_json::Value::Null)
            .is_ok()
    );
}

/// Seed case 1: reset, then short messages. While the head fills, store order, newest last
/// (store_order_fill); the head first under head_first.
#[test]
fn reset_then_short_messages() {
    for (name, make) in strategies() {
        let mut sess = Session::new(make(), 4_000, 1_000);
        let mut msgs = history("h", 6, 200);
        sess.send(&msgs);
        reset(&mut sess.state, "A new topic.").unwrap();
        let (sent, _) = sess.send(&msgs);
        let expected = if name.starts_with("head_first") {
            cat(&[s(&["TT"]), hs()])
        } else {
            cat(&[hs(), s(&["TT"])])
        };
        assert_eq!(sent, expected, "{name}: the reset's own request");
        let mut after = Vec::new();
        for label in ["after1", "after2", "batch1", "batch2"] {
            msgs.push((Role::User, vec![text(label, 400)]));
            after.push(label.to_owned());
            let (sent, out) = sess.send(&msgs);
            let expected = match name {
                "head_first_fill" => cat(&[s(&["TT"]), after.clone(), hs()]),
                // Sealed at the reset's request: the head is the transition; the rest appends.
                "head_first" => cat(&[s(&["TT"]), hs(), after.clone()]),
                _ => cat(&[hs(), s(&["TT"]), after.clone()]),
            };
            assert_eq!(sent, expected, "{name} after {label}");
            assert_eq!(out.head.filling, name != "head_first", "{name}");
            if name != "head_first_fill" {
                assert_eq!(out.rewrite.rewritten_tokens, 0, "{name}: only appends");
            }
        }
    }
}

/// Seed case 2: a 34,920-character transition, then a short message: the transition is
/// whole in the head, never split around the history.
#[test]
fn a_transition_bigger_than_the_head() {
    let big = "t".repeat(34_920);
    for (name, make) in strategies() {
        let mut sess = Session::new(make(), 4_000, 1_000);
        let mut msgs = history("h", 6, 200);
        sess.send(&msgs);
        reset(&mut sess.state, &big).unwrap();
        let (sent, out) = sess.send(&msgs);
        assert_eq!(
            out.head.end - out.head.start,
            1,
            "{name}: the transition alone, whole"
        );
        let tt_first = cat(&[s(&["TT"]), hs()]);
        assert_eq!(
            sent,
            if name.starts_with("head_first") {
                tt_first
            } else {
                cat(&[hs(), s(&["TT"])])
            },
            "{name}"
        );
        msgs.push((Role::User, vec![text("after1", 400)]));
        let (sent, out) = sess.send(&msgs);
        assert!(
            !out.head.filling,
            "{name}: after1 does not fit beside the transition"
        );
        let head_first = cat(&[s(&["TT"]), hs(), s(&["after1"])]);
        let store = cat(&[hs(), s(&["TT", "after1"])]);
        assert_eq!(
            sent,
            if name == "with_rewrite" {
                store
            } else {
                head_first
            },
            "{name}"
        );
        let h = HeadState::load(&sess.state).unwrap();
        assert_eq!(h.head_ids.len(), 1);
    }
}

/// Seed case 3: a short transition, then a 34,899-character first message and a reply: the
/// long message is not in the head and goes out whole after the history.
#[test]
fn a_first_message_bigger_than_the_head() {
    for (name, make) in strategies() {
        let mut sess = Session::new(make(), 4_000, 1_000);
        let mut msgs = history("h", 6, 200);
        sess.send(&msgs);
        reset(&mut sess.state, "A new topic.").unwrap();
        sess.send(&msgs);
        msgs.push((Role::User, vec![text("longfirst", 34_899)]));
        msgs.push((Role::Assistant, vec![text("reply", 400)]));
        let (sent, _) = sess.send(&msgs);
        let head_first = cat(&[s(&["TT"]), hs(), s(&["longfirst", "reply"])]);
        let store = cat(&[hs(), s(&["TT", "longfirst", "reply"])]);
        assert_eq!(
            sent,
            if name == "with_rewrite" {
                store
            } else {
                head_first
            },
            "{name}"
        );
        let h = HeadState::load(&sess.state).unwrap();
        assert_eq!(
            h.head_ids.len(),
            1,
            "{name}: the long message is not cut into the head"
        );
    }
}

/// Seed case 4: the head full. The head (transition + new0–new2) goes first, then the
/// history, then the rest. (With `with_rewrite` too: the six short history messages cost
/// less to rewrite than the head would cost on the next fold.)
#[test]
fn the_head_full() {
    for (name, make) in strategies() {
        let mut sess = Session::new(make(), 4_000, 1_000);
        let mut msgs = history("h", 6, 200);
        sess.send(&msgs);
        reset(&mut sess.state, "A new topic.").unwrap();
        sess.send(&msgs);
        let news: Vec<String> = (0..8).map(|i| format!("new{i}")).collect();
        for (i, label) in news.iter().enumerate() {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            msgs.push((role, vec![text(label, 4_400)]));
        }
        let (sent, out) = sess.send(&msgs);
        assert!(!out.head.filling);
        if name == "head_first" {
            assert_eq!(
                sent,
                cat(&[s(&["TT"]), hs(), news.clone()]),
                "sealed at the reset"
            );
        } else {
            let head = cat(&[s(&["TT"]), news[..3].to_vec()]);
            assert_eq!(sent, cat(&[head, hs(), news[3..].to_vec()]), "{name}");
        }
        // It stays first, and appending rewrites nothing.
        msgs.push((Role::User, vec![text("more", 400)]));
        let (sent2, out2) = sess.send(&msgs);
        assert_eq!(sent2[..sent.len()], sent[..], "{name}");
        assert_eq!(out2.rewrite.rewritten_tokens, 0, "{name}");
    }
}

/// With a history larger than the head, `with_rewrite` keeps store order after the head is
/// full, rewriting nothing, until a fold rewrites the request from its start anyway; the
/// head moves inside that rewrite. `on_fill` pays a whole-request rewrite at the fill.
#[test]
fn the_move_rides_on_a_fold_at_the_front() {
    let long_hs: Vec<String> = (0..6).map(|i| format!("H{i}")).collect();
    for (name, make) in strategies().into_iter().skip(2) {
        let mut sess = Session::new(make(), 4_000, 1_000);
        let mut msgs = history("H", 6, 4_000);
        sess.send(&msgs);
        reset(&mut sess.state, "A new topic.").unwrap();
        sess.send(&msgs);
        let news: Vec<String> = (0..5).map(|i| format!("new{i}")).collect();
        for (i, label) in news.iter().enumerate() {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            msgs.push((role, vec![text(label, 4_400)]));
        }
        let (sent, out) = sess.send(&msgs);
        let head = cat(&[s(&["TT"]), news[..3].to_vec()]);
        if name == "on_fill" {
            assert_eq!(
                sent,
                cat(&[head.clone(), long_hs.clone(), news[3..].to_vec()])
            );
            assert_eq!(
                out.rewrite.rewritten_tokens,
                out.rewrite.request_tokens - 11,
                "all but the frame"
            );
            continue;
        }
        let store = cat(&[long_hs.clone(), head.clone(), news[3..].to_vec()]);
        assert_eq!(sent, store);
        assert_eq!(out.rewrite.rewritten_tokens, 0);
        let (sent, out) = sess.send(&msgs);
        assert_eq!(
            (sent, out.rewrite.rewritten_tokens),
            (store, 0),
            "no fold, no move"
        );
        // H0–H2 fold into a summary at the front: the request is rewritten from its start
        // anyway, and the head moves inside that rewrite.
        let mut folded = vec![(Role::User, vec![text("summary-b1", 200)])];
        folded.extend(msgs[3..].iter().cloned());
        let (sent, out) = sess.send(&folded);
        assert_eq!(
            sent,
            cat(&[
                head.clone(),
                s(&["summary-b1", "H3", "H4", "H5"]),
                news[3..].to_vec()
            ])
        );
        assert!(out.reordered);
        assert_eq!(
            out.rewrite.rewritten_tokens,
            out.rewrite.request_tokens - 11
        );
        let (sent2, out2) = sess.send(&folded);
        assert_eq!(
            (sent2, out2.rewrite.rewritten_tokens),
            (sent, 0),
            "it stays first"
        );
    }
}

/// A tool call whose result would cross the head boundary after a reset stays with it: the
/// boundary is pulled back before the call and both go out together.
#[test]
fn a_call_whose_result_crosses_the_head_boundary_stays_with_it() {
    for (name, make) in strategies() {
        let mut sess = Session::new(make(), 1_000, 100);
        let mut msgs = history("h", 6, 200);
        sess.send(&msgs);
        reset(&mut sess.state, "A new topic.").unwrap();
        sess.send(&msgs);
        msgs.push((Role::User, vec![text("ask", 400)]));
        msgs.push((
            Role::Assistant,
            vec![text("calling", 200), B::Call("c1".into())],
        ));
        msgs.push((Role::User, vec![B::Result("c1".into(), 6_000)]));
        msgs.push((Role::Assistant, vec![text("done", 200)]));
        let (sent, _) = sess.send(&msgs);
        let h = HeadState::load(&sess.state).unwrap();
        let head: Vec<String> = h.head_ids.iter().map(|m| m.0.clone()).collect();
        if name != "head_first" {
            assert_eq!(
                head[1..],
                s(&["ask"]),
                "{name}: the call's message is left out of the head"
            );
        }
        let call = sent.iter().position(|l| l == "call-c1").unwrap();
        assert_eq!(sent[call + 1], "result-c1", "{name}: {sent:?}");
        assert_eq!(sent[call - 1], "calling");
        if name == "on_fill" || name == "head_first_fill" {
            assert_eq!(sent[..2], s(&["TT", "ask"]), "{name}");
        }
    }
}

/// A second reset while the first head is sent first (and still filling, so the newest
/// message is not the last one sent) still places its transition after the newest message;
/// the first transition stays, as history.
#[test]
fn a_second_reset_anchors_after_the_newest_message_in_store_order() {
    let mut sess = Session::new(
        Box::new(HeadFirst::new(HeadFirstConfig {
            fill: HeadFill::Fill,
        })),
        4_000,
        1_000,
    );
    let mut msgs = history("h", 6, 200);
    sess.send(&msgs);
    reset(&mut sess.state, "First topic.").unwrap();
    msgs.push((Role::User, vec![text("a1", 200)]));
    let (sent, _) = sess.send(&msgs);
    assert_eq!(
        sent,
        cat(&[s(&["TT", "a1"]), hs()]),
        "the newest is not last"
    );
    reset(&mut sess.state, "Second topic.").unwrap();
    msgs.push((Role::Assistant, vec![text("b1", 200)]));
    let (sent, _) = sess.send(&msgs);
    // The first transition is history now, still on the wire, in its place before a1.
    assert_eq!(sent, cat(&[s(&["TT", "b1"]), hs(), s(&["TT", "a1"])]));
    let conv_text: Vec<String> = HeadState::load(&sess.state)
        .unwrap()
        .head_ids
        .iter()
        .map(|m| m.0.clone())
        .collect();
    assert_eq!(conv_text, ["foldwire-transition-2", "b1"]);
}

/// Seed rule: a transition bigger than what the budget leaves is refused as the head, with
/// the numbers, and nothing is cut or dropped.
#[test]
fn a_transition_bigger_than_the_budget_is_refused_not_cut() {
    let big = "t".repeat(34_920);
    for (name, make) in strategies() {
        let mut sess = Session::new(make(), 4_000, 1_000);
        let msgs = history("h", 6, 200);
        sess.send(&msgs);
        reset(&mut sess.state, &big).unwrap();
        let mut t = turn(
            conversation(Wire::Anthropic, &msgs),
            std::mem::take(&mut sess.state),
            5_000,
        );
        let err = lay_out(&mut t, sess.layout.as_ref(), &CharEstimator, &sess.config).unwrap_err();
        let foldwire_core::StageError::Refused(r) = err else {
            panic!("{name}: expected a refusal, got {err:?}")
        };
        assert!(
            r.numbers["head"] >= 34_920 / 4,
            "{name}: the transition is counted whole in the head: {:?}",
            r.numbers
        );
        assert_eq!(r.numbers["budget"], 5_000, "{name}");
        let conv = t.conversation.as_ref().unwrap();
        assert_eq!(
            labels(conv),
            cat(&[hs(), s(&["TT"])]),
            "{name}: nothing dropped"
        );
        assert_eq!(
            conv.messages.last().unwrap().text.len(),
            big.len(),
            "{name}: the transition is whole"
        );
    }
}

/// Seed rule: while a reset head fills (sent last), the cache marker sits at the end of the
/// history before it; once the head goes first, at the head's end.
#[test]
fn the_cache_marker_follows_the_history_while_the_head_fills() {
    let marked = |sess: &mut Session, msgs: &[(Role, Vec<B>)]| {
        let mut t = turn(
            conversation(Wire::Anthropic, msgs),
            std::mem::take(&mut sess.state),
            sess.window,
        );
        lay_out(&mut t, sess.layout.as_ref(), &CharEstimator, &sess.config).unwrap();
        let conv = t.conversation.clone().unwrap();
        sess.state = t.state;
        let names = labels(&conv);
        let at: Vec<String> = conv
            .messages
            .iter()
            .zip(&names)
            .filter(|(m, _)| m.raw.windows(13).any(|w| w == b"cache_control"))
            .map(|(_, l)| l.clone())
            .collect();
        (names, at)
    };
    let mut sess = Session::new(
        Box::new(StoreOrderFill::new(StoreOrderFillConfig {
            move_head: MoveHead::OnFill,
        })),
        4_000,
        100,
    );
    let mut msgs = history("h", 6, 400);
    sess.send(&msgs);
    reset(&mut sess.state, "A new topic.").unwrap();
    sess.send(&msgs);
    msgs.push((Role::User, vec![text("after1", 400)]));
    let (sent, at) = marked(&mut sess, &msgs);
    assert_eq!(sent, cat(&[hs(), s(&["TT", "after1"])]));
    assert_eq!(
        at,
        s(&["h5", "after1"]),
        "the history's end and the request's end"
    );
    let news: Vec<String> = (0..8).map(|i| format!("new{i}")).collect();
    for (i, label) in news.iter().enumerate() {
        let role = if i % 2 == 0 {
            Role::User
        } else {
            Role::Assistant
        };
        msgs.push((role, vec![text(label, 4_400)]));
    }
    let (sent, at) = marked(&mut sess, &msgs);
    assert_eq!(
        sent[..4],
        s(&["TT", "after1", "new0", "new1"]),
        "the head goes first"
    );
    assert_eq!(
        at.first().map(String::as_str),
        Some("new2"),
        "the head's end: {at:?}"
    );
    assert_eq!(
        at.last().map(String::as_str),
        Some("new7"),
        "the request's end: {at:?}"
    );
}
