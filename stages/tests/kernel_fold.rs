#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! fold: covered units leave, summaries render where ranges began, the first-user pin,
//! nothing orphaned, and fold-then-restore is byte-identical on every wire.

mod support;

use foldwire_core::{
    AnyRef, Block, BlockId, CharEstimator, Conversation, Origin, Ref, Role, SessionState, Stage,
    Wire,
};
use foldwire_stages::fold::{Fold, FoldConfig};
use foldwire_stages::kernel::pairing_rules::violations;
use foldwire_stages::kernel::{
    CompressConfig, CompressRequest, FirstUserPin, Protection, apply_compression, fold_copy,
    fold_view, restore,
};
use support::{Conv, cx, minted, texts, turn_for};

fn block(id: u32, refs: &[u32]) -> Block {
    let effective: Vec<Ref> = refs.iter().map(|r| Ref(*r)).collect();
    Block {
        id: BlockId(id),
        summary: format!("summary {id}"),
        topic: Some(format!("topic {id}")),
        span: (effective[0], *effective.last().unwrap()),
        direct: effective.clone().into(),
        effective: effective.into(),
        ..Block::default()
    }
}

fn folded(conv: &Conv, blocks: Vec<Block>) -> (Conversation, foldwire_stages::kernel::FoldOutcome) {
    let mut state = SessionState::default();
    let mut c = minted(conv, &mut state);
    state.blocks = blocks.into();
    let outcome = fold_view(&mut c, &state);
    (c, outcome)
}

fn users(texts: &[&str]) -> Conv {
    let mut c = Conv::new(Wire::Anthropic);
    for t in texts {
        c.user(t);
    }
    c
}

#[test]
fn without_active_blocks_nothing_changes() {
    let conv = users(&["a", "b"]);
    let mut state = SessionState::default();
    let before = minted(&conv, &mut state);
    let mut after = before.clone();
    let mut inactive = block(1, &[1]);
    inactive.active = false;
    state.blocks.push(inactive);
    fold_view(&mut after, &state);
    assert_eq!(after, before);
}

#[test]
fn covered_units_are_replaced_by_one_summary_where_the_range_began() {
    let (c, outcome) = folded(&users(&["m1", "m2", "m3", "m4"]), vec![block(1, &[2, 3])]);
    assert_eq!(texts(&c), vec!["m1", "[foldwire b1 · topic 1]", "m4"]);
    let summary = &c.messages[1];
    assert_eq!(summary.text, "[foldwire b1 · topic 1]\nsummary 1");
    assert_eq!(
        (summary.role, summary.origin, summary.modified),
        (Role::User, Origin::Summary(BlockId(1)), true)
    );
    assert!(summary.raw.is_empty() && summary.r#ref.is_none());
    assert_eq!(c.entries[summary.entry].role, Role::User);
    assert_ne!(summary.entry, c.messages[0].entry);
    assert_eq!(
        (outcome.removed, outcome.summaries.clone()),
        (2, vec![BlockId(1)])
    );
}

/// acp §26 #29 and issue 17: a summary stands where its first folded message stood, never
/// before a message older than its range, even when the fold leaves two assistant messages
/// side by side (`a SR` then `a F4` once `u F1 .. u F3` left), on every wire shape.
#[test]
fn a_summary_never_lands_before_an_earlier_reply() {
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        let mut conv = Conv::new(wire);
        conv.user("FIRST")
            .assistant("FIRST-REPLY")
            .user("SECOND-USER-PLAIN")
            .assistant("SECOND-REPLY")
            .user("FILLER-1")
            .assistant("FILLER-2")
            .user("FILLER-3")
            .assistant("FILLER-4");
        // Refs: FIRST m1 .. FILLER-4 m8; the block folds FILLER-1 ..= FILLER-3.
        let (c, _) = folded(&conv, vec![block(1, &[5, 6, 7])]);
        assert_eq!(
            texts(&c),
            vec![
                "FIRST",
                "FIRST-REPLY",
                "SECOND-USER-PLAIN",
                "SECOND-REPLY",
                "[foldwire b1 · topic 1]",
                "FILLER-4"
            ],
            "{wire}"
        );
        let roles: Vec<Role> = c.messages.iter().map(|m| m.role).collect();
        assert!(
            roles.windows(2).all(|w| w[0] != w[1]),
            "{wire}: roles no longer alternate: {roles:?}"
        );
    }
}

#[test]
fn summaries_anchor_by_position_not_block_order() {
    let (c, _) = folded(
        &users(&["u", "w", "x", "z"]),
        vec![block(1, &[3]), block(2, &[2])],
    );
    assert_eq!(
        texts(&c),
        vec![
            "u",
            "[foldwire b2 · topic 2]",
            "[foldwire b1 · topic 1]",
            "z"
        ]
    );
}

#[test]
fn first_user_drops_when_a_plain_user_text_survives_behind_it() {
    let (c, outcome) = folded(&users(&["u1", "u2", "u3"]), vec![block(1, &[1, 2])]);
    assert_eq!(texts(&c), vec!["[foldwire b1 · topic 1]", "u3"]);
    assert_eq!(outcome.first_user, FirstUserPin::Dropped);
}

#[test]
fn first_user_holds_when_a_tool_result_follows_it() {
    // The client trimmed the call; the orphan result is the first thing behind u1.
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("u1").results(&[("c0", "old output")]).user("u2");
    let (c, outcome) = folded(&conv, vec![block(1, &[1])]);
    assert_eq!(outcome.first_user, FirstUserPin::Held);
    assert_eq!(
        texts(&c),
        vec!["u1", "old output", "u2"],
        "nothing left the wire, so no summary"
    );
}

#[test]
fn residual_case_keeps_the_pin_and_is_reported() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("u1").assistant("a1");
    let (c, outcome) = folded(&conv, vec![block(1, &[1])]);
    assert_eq!(outcome.first_user, FirstUserPin::Residual);
    assert_eq!(texts(&c), vec!["u1", "a1"]);
    let (c, _) = folded(&users(&["u1"]), vec![block(1, &[1])]);
    assert_eq!(texts(&c), vec!["u1"]);
}

#[tokio::test]
async fn the_stage_reports_the_residual_pin() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("u1").assistant("a1");
    let mut state = SessionState::default();
    let c = minted(&conv, &mut state);
    state.blocks.push(block(1, &[1]));
    let mut turn = turn_for(c, state);
    let stage = Fold::new(FoldConfig {
        auto: false,
        ..FoldConfig::default()
    });
    stage.run(&mut turn, &cx()).await.unwrap();
    assert!(
        turn.report
            .warnings
            .iter()
            .any(|w| w.code == "first_user_pin_residual")
    );
}

#[test]
fn only_the_first_user_is_pinned() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("u1").assistant("a1").user("u2").assistant("a2");
    let (c, outcome) = folded(&conv, vec![block(1, &[1, 2, 3])]);
    // u2 (a later covered user) drops; u1 stays because only a2 survives behind it.
    assert_eq!(outcome.first_user, FirstUserPin::Residual);
    assert_eq!(texts(&c), vec!["[foldwire b1 · topic 1]", "u1", "a2"]);
}

#[test]
fn an_uncovered_first_user_always_survives() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("u1").assistant("a1").user("u2");
    let (c, outcome) = folded(&conv, vec![block(1, &[2])]);
    assert_eq!(outcome.first_user, FirstUserPin::NotCovered);
    assert_eq!(texts(&c), vec!["u1", "[foldwire b1 · topic 1]", "u2"]);
}

#[test]
fn client_trimmed_history_lets_the_fold_apply() {
    // Turn 1 folded u1..a2. The client then trimmed u1/a1 itself and resends the rest.
    let mut full = Conv::new(Wire::Anthropic);
    full.user("u1")
        .assistant("a1")
        .user("u2")
        .assistant("a2")
        .user("u3");
    let mut state = SessionState::default();
    minted(&full, &mut state);
    state.blocks.push(block(1, &[1, 2, 3, 4]));
    let mut trimmed = Conv::new(Wire::Anthropic);
    trimmed
        .user("u2")
        .assistant("a2")
        .user("u3")
        .assistant("a3");
    let mut c = minted(&trimmed, &mut state);
    assert_eq!(
        c.messages[0].r#ref,
        Some(Ref(3)),
        "same fingerprint, same ref"
    );
    let outcome = fold_view(&mut c, &state);
    assert_eq!(outcome.first_user, FirstUserPin::Dropped);
    assert_eq!(texts(&c), vec!["[foldwire b1 · topic 1]", "u3", "a3"]);
    assert!(
        !c.messages.iter().any(|u| u.text == "u2"),
        "the folded payload is not re-sent"
    );
}

#[test]
fn a_folded_call_takes_its_result_and_a_lone_half_stays() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("u0")
        .assistant("a0")
        .user("u1")
        .turn(None, None, &[("c1", "bash", "{}")])
        .results(&[("c1", "out")])
        .user("u2");
    let (c, _) = folded(&conv, vec![block(1, &[3, 4, 5])]);
    assert_eq!(texts(&c), vec!["u0", "a0", "[foldwire b1 · topic 1]", "u2"]);
    // A block that (from an older view) covers only the call: folding it would orphan the
    // result, so both stay.
    let (c, outcome) = folded(&conv, vec![block(1, &[4])]);
    assert_eq!(outcome.kept_for_pairing, 1);
    assert_eq!(c.messages.len(), 6);
    assert!(violations(Wire::Anthropic, &c.messages).is_empty());
}

#[test]
fn reasoning_never_loses_its_act() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("q")
        .turn(Some("think"), Some("answer"), &[])
        .user("next");
    let (c, outcome) = folded(&conv, vec![block(1, &[3])]);
    assert_eq!(outcome.kept_for_pairing, 1);
    assert_eq!(texts(&c), vec!["q", "think", "answer", "next"]);
    let (c, _) = folded(&conv, vec![block(1, &[2, 3])]);
    assert_eq!(texts(&c), vec!["q", "[foldwire b1 · topic 1]", "next"]);
}

#[test]
fn a_summary_never_splits_an_assistant_run_or_a_call_from_its_result() {
    // Assistant run across wire messages (Chat): the summary goes before the run.
    let mut conv = Conv::new(Wire::OpenAiChat);
    conv.user("q")
        .assistant("a1")
        .assistant("a2")
        .assistant("a3")
        .user("z");
    let (c, _) = folded(&conv, vec![block(1, &[3])]);
    assert_eq!(
        texts(&c),
        vec!["q", "[foldwire b1 · topic 1]", "a1", "a3", "z"]
    );
    // A covered text behind the results of a call: the summary lands after the results,
    // never between the call and them, and never inside a wire message.
    // Build the user message [tool_result, text] by hand.
    let mut conv2 = Conv::new(Wire::Anthropic);
    conv2
        .user("q")
        .turn(None, Some("doing"), &[("c1", "bash", "{}")])
        .results(&[("c1", "out")])
        .user("after");
    let mut c = conv2.build();
    let last_entry = c.messages[3].entry;
    c.messages[4].entry = last_entry; // text joins the results' user message
    let mut state = SessionState::default();
    foldwire_stages::refs_mint::mint_refs(&mut state, &mut c);
    state.blocks.push(block(1, &[5]));
    let mut extra_user = c.messages[4].clone();
    extra_user.text = "tail".into();
    extra_user.id = foldwire_core::MessageId("tail".into());
    extra_user.entry = 99;
    extra_user.r#ref = Some(Ref(6));
    c.messages.push(extra_user);
    fold_view(&mut c, &state);
    assert_eq!(
        texts(&c),
        vec!["q", "doing", "{}", "out", "[foldwire b1 · topic 1]", "tail"]
    );
}

fn cfg0() -> CompressConfig {
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
        max_summary_chars: 1000,
        min_summary: foldwire_stages::kernel::MinSummary::OFF,
    }
}

#[test]
fn fold_then_restore_is_byte_identical_and_pairing_holds_on_every_wire() {
    for wire in Wire::ALL {
        let mut conv = Conv::new(wire);
        conv.user("please fix src/lib.rs")
            .turn(
                Some("plan"),
                Some("reading"),
                &[
                    ("c1", "read", r#"{"path":"src/lib.rs"}"#),
                    ("c2", "bash", r#"{"command":"cargo test"}"#),
                ],
            )
            .results(&[
                ("c1", "fn main() {}"),
                ("c2", "error[E0425]: cannot find value"),
            ])
            .assistant("fixed")
            .user("thanks, now the docs")
            .turn(None, None, &[("c3", "read", r#"{"path":"README.md"}"#)])
            .results(&[("c3", "# readme")])
            .user("done?");
        let mut state = SessionState::default();
        let view = minted(&conv, &mut state);
        assert!(
            violations(wire, &view.messages).is_empty(),
            "{wire}: fixture itself is valid"
        );
        let r = apply_compression(
            &mut state,
            &view,
            &[CompressRequest::new(
                AnyRef::Message(Ref(2)),
                AnyRef::Message(Ref(4)),
                "read lib.rs, tests failed",
            )],
            &cfg0(),
            &CharEstimator,
        );
        assert_eq!(r.blocks_created.len(), 1, "{wire}: {r:?}");
        let block = state.blocks[0].clone();
        // Widened from the reasoning to both calls and both results.
        assert_eq!(block.direct, (2..=7).map(Ref).collect::<Vec<_>>(), "{wire}");
        let mut out = view.clone();
        fold_view(&mut out, &state);
        assert!(
            violations(wire, &out.messages).is_empty(),
            "{wire}: {:?}",
            violations(wire, &out.messages)
        );
        assert!(
            out.messages
                .iter()
                .all(|u| u.r#ref.is_none_or(|r| !block.effective.contains(&r)))
        );
        let restored = restore(&state, block.id, true).unwrap();
        let original: Vec<&[u8]> = view
            .messages
            .iter()
            .filter(|u| u.r#ref.is_some_and(|r| block.effective.contains(&r)))
            .map(|u| u.raw.as_ref())
            .collect();
        let back: Vec<&[u8]> = restored.units.iter().map(|u| u.raw.as_bytes()).collect();
        assert_eq!(back, original, "{wire}");
    }
}

#[test]
fn a_pinned_first_user_tool_result_keeps_its_call() {
    // Client-trimmed history that starts with the assistant: the first user unit is the
    // result of c1. The block folds call and result; an assistant text follows.
    let mut conv = Conv::new(Wire::Anthropic);
    conv.turn(None, None, &[("c1", "bash", "{}")])
        .results(&[("c1", "out")])
        .assistant("a");
    let (c, outcome) = folded(&conv, vec![block(1, &[1, 2])]);
    assert_eq!(outcome.first_user, FirstUserPin::Residual);
    assert_eq!(texts(&c), vec!["{}", "out", "a"]);
    assert!(violations(Wire::Anthropic, &c.messages).is_empty());
}

mod property {
    use super::*;
    use foldwire_core::{MessageKind, Role};
    use proptest::prelude::*;

    fn wire_strategy() -> impl Strategy<Value = Wire> {
        prop_oneof![
            Just(Wire::Anthropic),
            Just(Wire::OpenAiChat),
            Just(Wire::OpenAiResponses),
            Just(Wire::Gemini)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(foldwire_test_kit::proptest_cases(200)))]
        #[test]
        fn any_blocks_fold_without_orphans_and_keep_a_user(
            wire in wire_strategy(),
            turns in prop::collection::vec((0usize..3, any::<bool>()), 1..6),
            spans in prop::collection::vec((any::<u32>(), 0u32..8), 1..4),
        ) {
            let mut conv = Conv::new(wire);
            conv.user("start");
            let mut n = 0;
            for (t, (calls, reasoning)) in turns.iter().enumerate() {
                let ids: Vec<String> = (0..*calls).map(|_| { n += 1; format!("k{n}") }).collect();
                let specs: Vec<(&str, &str, &str)> = ids.iter().map(|i| (i.as_str(), "t", "{}")).collect();
                conv.turn(reasoning.then_some("think"), Some(&format!("act {t}")), &specs);
                let outs: Vec<(&str, &str)> = ids.iter().map(|i| (i.as_str(), "out")).collect();
                if !outs.is_empty() { conv.results(&outs); }
                conv.user(&format!("user {t}"));
            }
            let mut state = SessionState::default();
            let view = minted(&conv, &mut state);
            let total = state.next_ref - 1;
            // Disjoint blocks over arbitrary spans (not widened: blocks from an older view).
            let mut taken = std::collections::HashSet::new();
            for (i, (start, len)) in spans.iter().enumerate() {
                let s = 1 + start % total;
                let refs: Vec<u32> = (s..=(s + len).min(total)).filter(|r| taken.insert(*r)).collect();
                if !refs.is_empty() { state.blocks.push(block(i as u32 + 1, &refs)); }
            }
            let mut out = view.clone();
            let outcome = fold_view(&mut out, &state);
            // Folding a copy (what measuring does) gives the same view and outcome, and
            // leaves the conversation it copied as it was.
            let (copy, copied) = fold_copy(&view, &state);
            prop_assert_eq!(&copy, &out);
            prop_assert_eq!(&copied, &outcome);
            let v = violations(wire, &out.messages);
            prop_assert!(v.is_empty(), "{wire}: {v:?}");
            prop_assert!(out.messages.iter().any(|u| u.role == Role::User && u.origin == Origin::Client));
            for (i, u) in out.messages.iter().enumerate() {
                if u.kind == MessageKind::Reasoning {
                    let next = out.messages[i + 1..].iter().find(|x| x.kind != MessageKind::Reasoning);
                    prop_assert!(next.is_some_and(|x| x.role == Role::Assistant && matches!(x.kind, MessageKind::Text | MessageKind::ToolCall)));
                }
            }
            // Only covered units left the wire.
            let covered: std::collections::HashSet<Ref> = state.blocks.iter().flat_map(|b| b.effective.to_vec()).collect();
            for u in &view.messages {
                if !out.messages.iter().any(|o| o.id == u.id) {
                    prop_assert!(u.r#ref.is_some_and(|r| covered.contains(&r)));
                }
            }
        }
    }
}

#[test]
fn folding_an_already_folded_view_changes_nothing() {
    let conv = users(&["m1", "m2", "m3", "m4"]);
    let mut state = SessionState::default();
    let mut c = minted(&conv, &mut state);
    state.blocks.push(block(1, &[2, 3]));
    fold_view(&mut c, &state);
    let once = c.clone();
    let outcome = fold_view(&mut c, &state);
    assert_eq!(c, once);
    assert!(outcome.summaries.is_empty() && outcome.removed == 0);
}

// seed 001: the one image the first-user pin keeps on the wire.
#[test]
fn an_image_on_the_pinned_opening_message_stays_on_the_wire() {
    use foldwire_core::{MediaClass, MediaRef};
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("opening with a screenshot").assistant("a1");
    let mut c = conv.build();
    c.messages[0].media.push(MediaRef {
        kind: "image".into(),
        media_type: Some("image/png".into()),
        class: MediaClass::Archivable,
        pointer: "/source/data".into(),
        size: Some(10),
    });
    let mut state = SessionState::default();
    foldwire_stages::refs_mint::mint_refs(&mut state, &mut c);
    assert_eq!(
        c.messages[0].r#ref,
        Some(Ref(1)),
        "archivable media is foldable"
    );
    state.blocks.push(block(1, &[1, 2]));
    let outcome = fold_view(&mut c, &state);
    assert_eq!(outcome.first_user, FirstUserPin::Residual);
    assert_eq!(texts(&c)[1], "opening with a screenshot");
    assert_eq!(c.messages[1].media.len(), 1, "the image is still sent");
}

/// A request decoded by `wire`'s real codec: `u1`, `a1`, then a user message of an inline
/// image and a text (in that order), and a reply.
fn image_and_text_behind(wire: Wire) -> Conversation {
    use serde_json::json;
    let data = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let url = format!("data:image/png;base64,{data}");
    let v = match wire {
        Wire::Anthropic => json!({"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                {"type": "text", "text": "what is this?"}]},
            {"role": "assistant", "content": "a cat"}]}),
        Wire::OpenAiChat => json!({"model": "m", "messages": [
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": "what is this?"}]},
            {"role": "assistant", "content": "a cat"}]}),
        Wire::OpenAiResponses => json!({"model": "m", "input": [
            {"type": "message", "role": "user", "content": "u1"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a1"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_image", "image_url": url},
                {"type": "input_text", "text": "what is this?"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a cat"}]}]}),
        Wire::Gemini => json!({"contents": [
            {"role": "user", "parts": [{"text": "u1"}]},
            {"role": "model", "parts": [{"text": "a1"}]},
            {"role": "user", "parts": [
                {"inlineData": {"mimeType": "image/png", "data": data}},
                {"text": "what is this?"}]},
            {"role": "model", "parts": [{"text": "a cat"}]}]}),
    };
    let body = bytes::Bytes::from(serde_json::to_vec(&v).unwrap());
    foldwire_wire::request::decode(wire, body).unwrap()
}

// seed 000: the pin's "plain user text" is judged on the wire message, as the kernel's
// Anthropic image core counts as text: a user message of `[image, text]` behind the covered
// first user lets it go, on every wire.
#[test]
fn an_image_and_text_user_message_behind_the_pin_lets_it_go_on_every_wire() {
    for wire in Wire::ALL {
        let mut state = SessionState::default();
        let mut c = image_and_text_behind(wire);
        foldwire_stages::refs_mint::mint_refs(&mut state, &mut c);
        let image = c
            .messages
            .iter()
            .position(|u| u.kind == foldwire_core::MessageKind::Media)
            .unwrap_or_else(|| panic!("{wire}: no media unit in {:?}", texts(&c)));
        assert_eq!(
            c.messages[image + 1].entry,
            c.messages[image].entry,
            "{wire}: image and text share one wire message"
        );
        // The block covers u1 and a1: the first thing surviving behind u1 is the image.
        state.blocks.push(block(1, &[1, 2]));
        let outcome = fold_view(&mut c, &state);
        assert_eq!(outcome.first_user, FirstUserPin::Dropped, "{wire}");
        assert_eq!(texts(&c)[0], "[foldwire b1 · topic 1]", "{wire}");
        assert!(
            !texts(&c).iter().any(|t| t == "u1" || t == "a1"),
            "{wire}: {:?}",
            texts(&c)
        );
        assert_eq!(
            c.messages[1].kind,
            foldwire_core::MessageKind::Media,
            "{wire}"
        );
        assert!(violations(wire, &c.messages).is_empty(), "{wire}");
    }
}

// seed 000: an image left alone in its wire message (its text folded) still holds the pin.
#[test]
fn an_image_without_its_text_behind_the_pin_holds_it() {
    for wire in Wire::ALL {
        let mut state = SessionState::default();
        let mut c = image_and_text_behind(wire);
        foldwire_stages::refs_mint::mint_refs(&mut state, &mut c);
        let text = c
            .messages
            .iter()
            .find(|u| u.text.as_str() == "what is this?")
            .and_then(|u| u.r#ref)
            .unwrap();
        state.blocks.push(block(1, &[1, 2]));
        state.blocks.push(block(2, &[text.0]));
        let outcome = fold_view(&mut c, &state);
        assert_eq!(outcome.first_user, FirstUserPin::Held, "{wire}");
        assert!(
            texts(&c).iter().any(|t| t == "u1"),
            "{wire}: {:?}",
            texts(&c)
        );
    }
}
