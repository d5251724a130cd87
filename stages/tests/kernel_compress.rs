#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! apply_compression: validation, widening, overlaps, tiers, protection, and restore.

mod support;

use foldwire_core::{AnyRef, BlockId, CharEstimator, Ref, SessionState, Wire};
use foldwire_stages::kernel::{
    CompressConfig, CompressError, CompressRequest, FirstUserPin, MinSummary, Protection,
    apply_compression, fold_view, pin_tools, restore,
};
use support::{Conv, minted, sized};

fn cfg0() -> CompressConfig {
    CompressConfig {
        protection: Protection {
            recent_messages: 0,
            recent_tokens: 0,
            last_user: false,
            protected_tools: vec!["compress".into()],
            latest_tools: vec![],
            latest_count: 0,
        },
        min_tokens: 0,
        max_summary_chars: 20_000,
        min_summary: MinSummary::OFF,
    }
}

fn m(n: u32) -> AnyRef {
    AnyRef::Message(Ref(n))
}
fn b(n: u32) -> AnyRef {
    AnyRef::Block(BlockId(n))
}
fn req(start: AnyRef, end: AnyRef, summary: &str) -> CompressRequest {
    CompressRequest::new(start, end, summary).with_topic("topic")
}

fn four() -> Conv {
    let mut c = Conv::new(Wire::Anthropic);
    c.user("alpha")
        .assistant("beta")
        .user("gamma")
        .assistant("delta");
    c
}

#[test]
fn a_message_range_makes_an_active_tier_one_block() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "first two")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(1)]);
    assert!(r.tokens_compressed > 0);
    let block = &state.blocks[0];
    assert_eq!((block.tier, block.active), (1, true));
    assert_eq!(block.direct, vec![Ref(1), Ref(2)]);
    assert_eq!(block.effective, block.direct);
    assert_eq!(block.span, (Ref(1), Ref(2)));
    assert_eq!(block.topic.as_deref(), Some("topic"));
    assert_eq!(
        block.message_ids,
        vec![view.messages[0].id.clone(), view.messages[1].id.clone()]
    );
}

#[test]
fn reversed_refs_are_normalized_with_a_note() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(3), m(1), "s")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(state.blocks[0].direct, vec![Ref(1), Ref(2), Ref(3)]);
    assert!(r.ranges[0].warnings.iter().any(|w| w.contains("reversed")));
}

#[test]
fn block_refs_make_the_next_tier_up_to_three_and_consume() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "t1")],
        &cfg0(),
        &CharEstimator,
    );
    let r = apply_compression(
        &mut state,
        &view,
        &[req(b(1), b(1), "t2")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(2)]);
    let b2 = &state.blocks[1];
    assert_eq!((b2.tier, b2.consumed.clone()), (2, vec![BlockId(1)]));
    assert_eq!(b2.effective, vec![Ref(1), Ref(2)]);
    assert!(
        b2.direct.is_empty(),
        "a block range with only a consumed block is valid"
    );
    assert!(!state.blocks[0].active);
    // Consumed summaries count as compressed tokens.
    assert!(r.tokens_compressed > 0);
    apply_compression(
        &mut state,
        &view,
        &[req(b(2), b(2), "t3")],
        &cfg0(),
        &CharEstimator,
    );
    apply_compression(
        &mut state,
        &view,
        &[req(b(3), b(3), "still t3")],
        &cfg0(),
        &CharEstimator,
    );
    let tiers: Vec<u8> = state.blocks.iter().map(|b| b.tier).collect();
    assert_eq!(tiers, vec![1, 2, 3, 3]);
    assert_eq!(state.active_blocks().count(), 1);
    // A consumed block named as an endpoint snaps to the active block holding it.
    let r = apply_compression(
        &mut state,
        &view,
        &[req(b(1), b(1), "again")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(
        r.ranges[0].warnings.iter().any(|w| w.contains("anchored")),
        "{r:?}"
    );
    assert_eq!(
        state.blocks.last().unwrap().id,
        BlockId(5),
        "block ids never reused"
    );
}

#[test]
fn a_message_range_absorbs_nested_tier_one_blocks() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(3), "inner")],
        &cfg0(),
        &CharEstimator,
    );
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(4), "outer")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(r.errors().next().is_none(), "{r:?}");
    let outer = &state.blocks[1];
    assert_eq!((outer.tier, outer.consumed.clone()), (1, vec![BlockId(1)]));
    assert_eq!(outer.direct, vec![Ref(1), Ref(4)]);
    assert_eq!(outer.effective, vec![Ref(1), Ref(2), Ref(3), Ref(4)]);
    assert!(!state.blocks[0].active);
}

#[test]
fn rewrapping_only_existing_blocks_by_message_refs_folds_nothing() {
    let mut state = SessionState::default();
    let mut conv = four();
    conv.user("epsilon");
    let view = minted(&conv, &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(3), "inner")],
        &cfg0(),
        &CharEstimator,
    );
    // m1..m1 widened to nothing new? No: a range whose fresh part is empty but holds b1.
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(3), "again")],
        &cfg0(),
        &CharEstimator,
    );
    // Nothing to do and nothing wrong: skipped (#59), with the way to fold it further.
    assert_eq!(
        (r.ranges[0].block, r.ranges[0].error.as_ref()),
        (None, None)
    );
    let note = r.ranges[0].skipped.as_deref().unwrap();
    assert!(
        note.contains("already folded into b1") && note.contains("use b1..b1"),
        "{note}"
    );
    // b1..b1 still promotes.
    let r = apply_compression(
        &mut state,
        &view,
        &[req(b(1), b(1), "promote")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created.len(), 1);
}

#[test]
fn one_bad_range_does_not_stop_the_batch() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[
            req(m(1), m(2), "ok"),
            req(m(50), m(60), "unknown"),
            req(m(3), m(3), "   "),
        ],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(1)]);
    assert!(matches!(
        r.ranges[1].error,
        Some(CompressError::UnknownRef { .. })
    ));
    assert!(
        r.ranges[1]
            .message
            .as_deref()
            .unwrap()
            .contains("does not exist in this session")
    );
    assert_eq!(r.ranges[2].error, Some(CompressError::EmptySummary));
}

#[test]
fn a_folded_message_cannot_be_folded_again_by_its_ref() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "s")],
        &cfg0(),
        &CharEstimator,
    );
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(4), "s")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(
        r.ranges[0].error,
        Some(CompressError::AlreadyFolded {
            given: "m00002".into(),
            block: BlockId(1)
        })
    );
    assert!(r.ranges[0].message.as_deref().unwrap().contains("use b1"));
}

#[test]
fn overlapping_ranges_resolve_earliest_first_whatever_the_order() {
    for order in [[0usize, 1, 2], [1, 0, 2], [2, 1, 0]] {
        let mut state = SessionState::default();
        let mut conv = four();
        conv.user("e").assistant("f").user("g");
        let view = minted(&conv, &mut state);
        let all = [
            req(m(1), m(3), "first"),
            req(m(2), m(4), "second"),
            req(m(6), m(7), "third"),
        ];
        let batch: Vec<CompressRequest> = order.iter().map(|&i| all[i].clone()).collect();
        let r = apply_compression(&mut state, &view, &batch, &cfg0(), &CharEstimator);
        let summaries: Vec<&str> = state.blocks.iter().map(|b| b.summary.as_str()).collect();
        assert!(
            summaries.contains(&"first") && summaries.contains(&"third"),
            "{order:?}"
        );
        assert!(!summaries.contains(&"second"));
        let loser = order.iter().position(|&i| i == 1).unwrap();
        assert!(matches!(
            r.ranges[loser].error,
            Some(CompressError::Overlaps { .. })
        ));
    }
}

#[test]
fn summary_length_is_bounded() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    let mut cfg = cfg0();
    cfg.max_summary_chars = 100;
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), &"x".repeat(200))],
        &cfg,
        &CharEstimator,
    );
    assert_eq!(
        r.ranges[0].error,
        Some(CompressError::SummaryTooLong { len: 200, max: 100 })
    );
}

#[test]
fn the_size_gate_is_batch_wide() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    let mut cfg = cfg0();
    cfg.min_tokens = 5000;
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "small")],
        &cfg,
        &CharEstimator,
    );
    assert!(matches!(
        r.ranges[0].error,
        Some(CompressError::TooSmall { min: 5000, .. })
    ));
    assert!(state.blocks.is_empty());
    // Many small ranges pass together once their sum reaches the minimum.
    let mut conv = Conv::new(Wire::Anthropic);
    for i in 0..6 {
        conv.user(&sized(&format!("u{i}"), 300));
    }
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    cfg.min_tokens = 1000;
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "a"), req(m(3), m(4), "b")],
        &cfg,
        &CharEstimator,
    );
    assert_eq!(r.blocks_created.len(), 2, "{r:?}");
}

#[test]
fn tool_pairs_are_widened_however_far_apart() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("start").turn(
        None,
        Some("calling"),
        &[("c1", "bash", r#"{"command":"ls"}"#)],
    );
    for i in 0..30 {
        conv.user(&format!("noise {i}"));
    }
    conv.results(&[("c1", "listing")]).user("end");
    let view = minted(&conv, &mut state);
    // The range names only the call: its result 30 messages later joins it.
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(3), m(3), "call")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(
        r.ranges[0].warnings.iter().any(|w| w.contains("widened")),
        "{r:?}"
    );
    let block = &state.blocks[0];
    assert!(
        block.direct.contains(&Ref(3)) && block.direct.contains(&Ref(34)),
        "{:?}",
        block.direct
    );
    // Starting at a result pulls its call in the other direction.
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(34), m(35), "result")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(
        state.blocks[0].span,
        (Ref(3), Ref(35)),
        "the call came along with its result"
    );
}

#[test]
fn reasoning_folds_with_the_act_it_precedes() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("q")
        .turn(Some("thinking hard"), Some("answer"), &[])
        .user("next");
    let view = minted(&conv, &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(2), "just the thinking")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(state.blocks[0].direct, vec![Ref(2), Ref(3)]);
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(3), m(3), "just the answer")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(state.blocks[0].direct, vec![Ref(2), Ref(3)]);
    // Reasoning + call pulls the call's result too.
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("q")
        .turn(Some("think"), None, &[("c1", "read", "{}")])
        .results(&[("c1", "r")])
        .user("n");
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(2), "s")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(state.blocks[0].direct, vec![Ref(2), Ref(3), Ref(4)]);
}

#[test]
fn protected_tools_stay_out_with_their_results() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::OpenAiChat);
    conv.user("q")
        .turn(None, None, &[("c1", "MCP_Search", "{}")])
        .results(&[("c1", "found")])
        .turn(None, None, &[("c2", "bash", "{}")])
        .results(&[("c2", "ok")])
        .user("z");
    let view = minted(&conv, &mut state);
    let mut cfg = cfg0();
    cfg.protection.protected_tools = vec!["mcp_*".into()];
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(6), "s")],
        &cfg,
        &CharEstimator,
    );
    assert_eq!(state.blocks[0].direct, vec![Ref(1), Ref(4), Ref(5), Ref(6)]);
    assert!(
        r.ranges[0]
            .warnings
            .iter()
            .any(|w| w.contains("protected tools"))
    );
    assert_eq!(state.blocks[0].summary, "s");
}

#[test]
fn the_protected_zone_excludes_or_refuses() {
    let mut conv = Conv::new(Wire::Anthropic);
    for (i, t) in ["a", "b", "c", "d", "e", "f", "g", "h"].iter().enumerate() {
        if i % 2 == 0 {
            conv.user(t)
        } else {
            conv.assistant(t)
        };
    }
    let mut cfg = cfg0();
    cfg.protection.recent_messages = 3;
    cfg.protection.last_user = true;
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(6), m(8), "tail")],
        &cfg,
        &CharEstimator,
    );
    assert!(
        matches!(r.ranges[0].error, Some(CompressError::Protected { .. })),
        "{r:?}"
    );
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(5), m(7), "edge")],
        &cfg,
        &CharEstimator,
    );
    assert_eq!(state.blocks[0].direct, vec![Ref(5)]);
    assert!(
        r.ranges[0]
            .warnings
            .iter()
            .any(|w| w.contains("m00006, m00007")),
        "{r:?}"
    );
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(3), "head")],
        &cfg,
        &CharEstimator,
    );
    assert!(r.ranges[0].warnings.is_empty());
    // The last user message is protected even outside the last N.
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a")
        .user("last user")
        .assistant("b")
        .assistant("c");
    cfg.protection.recent_messages = 1;
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(3), "s")],
        &cfg,
        &CharEstimator,
    );
    assert_eq!(state.blocks[0].direct, vec![Ref(3)]);
    assert!(r.ranges[0].warnings.iter().any(|w| w.contains("m00002")));
}

#[test]
fn pinned_units_inside_a_range_stay_visible() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a")
        .user_remote_image("https://h/i.png")
        .user("b")
        .user("c");
    let view = minted(&conv, &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(3), "s")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(r.errors().next().is_none());
    assert_eq!(state.blocks[0].direct, vec![Ref(1), Ref(2), Ref(3)]);
    assert_eq!(view.messages[1].r#ref, None);
}

#[test]
fn restore_returns_the_original_bytes() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("héllo \"quoted\"")
        .turn(
            Some("th"),
            Some("t"),
            &[("c1", "bash", r#"{"command":"ls -la"}"#)],
        )
        .results(&[("c1", "file\nlist")])
        .user("tail");
    let view = minted(&conv, &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(5), "s")],
        &cfg0(),
        &CharEstimator,
    );
    let restored = restore(&state, BlockId(1), false).unwrap();
    let got: Vec<&[u8]> = restored.units.iter().map(|u| u.raw.as_bytes()).collect();
    let want: Vec<&[u8]> = view.messages[..5].iter().map(|u| u.raw.as_ref()).collect();
    assert_eq!(got, want);
    // After promotion, the tier-2 block restores the same bytes with `full`, none without.
    apply_compression(
        &mut state,
        &view,
        &[req(b(1), b(1), "t2")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(restore(&state, BlockId(2), false).unwrap().units.is_empty());
    let full = restore(&state, BlockId(2), true).unwrap();
    assert_eq!(
        full.units
            .iter()
            .map(|u| u.raw.as_bytes())
            .collect::<Vec<_>>(),
        want
    );
    assert!(restore(&state, BlockId(9), true).is_err());
}

#[test]
fn a_ref_inherited_by_a_higher_tier_snaps_to_that_block() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "t1")],
        &cfg0(),
        &CharEstimator,
    );
    apply_compression(
        &mut state,
        &view,
        &[req(b(1), b(1), "t2")],
        &cfg0(),
        &CharEstimator,
    );
    // m00001 now sits in b2 through the consumed b1: it anchors to b2, and the fresh m00003
    // folds into a new tier-1 block (b2 is of another tier and stays as it is).
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(3), "more")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(
        r.ranges[0]
            .warnings
            .iter()
            .any(|w| w.contains("anchored to b2")),
        "{r:?}"
    );
    let b3 = state.blocks.last().unwrap();
    assert_eq!(
        (b3.id, b3.tier, b3.direct.to_vec()),
        (BlockId(3), 1, vec![Ref(3)])
    );
    assert!(state.blocks[1].active);
}

#[test]
fn a_block_visible_only_through_its_summary_can_be_promoted() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(3), "t1")],
        &cfg0(),
        &CharEstimator,
    );
    let mut folded = view.clone();
    foldwire_stages::kernel::fold_view(&mut folded, &state);
    assert!(folded.messages.iter().all(|u| u.r#ref != Some(Ref(2))));
    let r = apply_compression(
        &mut state,
        &folded,
        &[req(b(1), b(1), "t2")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(2)]);
    let b2 = &state.blocks[1];
    assert_eq!((b2.tier, b2.effective.to_vec()), (2, vec![Ref(2), Ref(3)]));
}

#[test]
fn the_compress_tool_is_protected_by_default() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user(&sized("a", 300))
        .turn(None, None, &[("c1", "compress", r#"{"from":"m00001"}"#)])
        .results(&[("c1", "folded")]);
    for i in 0..8 {
        conv.user(&sized(&format!("later {i}"), 2000));
    }
    let view = minted(&conv, &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(4), "s")],
        &CompressConfig {
            min_summary: MinSummary::OFF,
            ..CompressConfig::default()
        },
        &CharEstimator,
    );
    assert!(r.errors().next().is_none(), "{r:?}");
    assert_eq!(state.blocks[0].direct, vec![Ref(1), Ref(4)]);
}

// acp §26 #54, #56, #58
#[test]
fn a_folded_range_is_named_as_folded_whatever_else_is_in_the_batch() {
    let mut conv = Conv::new(Wire::Anthropic);
    for i in 0..6 {
        conv.user(&sized(&format!("u{i}"), 300));
    }
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "first")],
        &cfg0(),
        &CharEstimator,
    );
    // Asked again, a done fold is skipped with a note naming its block (#59), not refused.
    let folded = |r: &foldwire_stages::kernel::CompressionResult, i: usize| {
        r.ranges[i].error.is_none()
            && r.ranges[i].block.is_none()
            && r.ranges[i]
                .skipped
                .as_deref()
                .is_some_and(|s| s.contains("already folded into b1"))
    };
    let mut cfg = cfg0();
    cfg.min_tokens = 5000;
    // #54: a retry under a size minimum is "already folded", never "too small".
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "again")],
        &cfg,
        &CharEstimator,
    );
    assert!(folded(&r, 0), "{r:?}");
    assert_eq!(r.errors().count(), 0, "never \"too small\": {r:?}");
    // #56: with an unknown range beside it, still "already folded".
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "again"), req(m(50), m(60), "unknown")],
        &cfg,
        &CharEstimator,
    );
    assert!(folded(&r, 0), "{r:?}");
    assert!(matches!(
        r.ranges[1].error,
        Some(CompressError::UnknownRef { .. })
    ));
    // #58: fresh content past the minimum folds; the folded range is skipped beside it.
    cfg.min_tokens = 500;
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "again"), req(m(3), m(6), "fresh")],
        &cfg,
        &CharEstimator,
    );
    assert!(folded(&r, 0), "{r:?}");
    assert_eq!(r.blocks_created, vec![BlockId(2)]);
    assert_eq!(state.blocks[1].direct, vec![Ref(3), Ref(4), Ref(5), Ref(6)]);
}

// acp §26 #75
#[test]
fn the_default_zone_refuses_a_range_inside_it() {
    let mut state = SessionState::default();
    let mut conv = four();
    conv.user("epsilon");
    let view = minted(&conv, &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(4), m(5), "newest")],
        &CompressConfig::default(),
        &CharEstimator,
    );
    assert!(
        matches!(r.ranges[0].error, Some(CompressError::Protected { .. })),
        "{r:?}"
    );
    assert!(state.blocks.is_empty());
}

// acp §26 #85
#[test]
fn a_block_reached_only_by_widening_is_nested() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("start")
        .turn(None, None, &[("c1", "bash", "{}")])
        .user("x")
        .user("y")
        .results(&[("c1", "out")])
        .user("end");
    let view = minted(&conv, &mut state);
    // m1 start, m2 call, m3 x, m4 y, m5 result, m6 end. b1 folds x and y.
    apply_compression(
        &mut state,
        &view,
        &[req(m(3), m(4), "inner")],
        &cfg0(),
        &CharEstimator,
    );
    // m1..m2 widens to the result at m5, over b1: b1 is nested, not overlapped.
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "outer")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(r.errors().next().is_none(), "{r:?}");
    let outer = state.blocks.last().unwrap();
    assert_eq!(outer.consumed, vec![BlockId(1)], "{outer:?}");
    assert_eq!(outer.direct, vec![Ref(1), Ref(2), Ref(5)]);
    assert_eq!(outer.effective, (1..=5).map(Ref).collect::<Vec<_>>());
    assert!(!state.blocks[0].active);
}

// acp §26 #79, #80
#[test]
fn a_tool_result_with_an_image_folds_with_its_call_only_when_the_image_is_stored() {
    use foldwire_core::{MediaClass, MediaRef};
    let image = |class: MediaClass| MediaRef {
        kind: "image".into(),
        media_type: Some("image/png".into()),
        class,
        pointer: "/content/0/source".into(),
        size: Some(10),
    };
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("take a screenshot")
        .turn(None, None, &[("c1", "screenshot", "{}")])
        .results(&[("c1", "shot")])
        .user("thanks");
    let run = |class: MediaClass| {
        let mut c = conv.build();
        c.messages[2].media.push(image(class));
        let mut state = SessionState::default();
        foldwire_stages::refs_mint::mint_refs(&mut state, &mut c);
        let last = state.next_ref - 1;
        let r = apply_compression(
            &mut state,
            &c,
            &[req(m(1), m(last), "s")],
            &cfg0(),
            &CharEstimator,
        );
        (state, r)
    };
    // #79: an inline (stored) image: call and result fold together, no pair warning.
    let (state, r) = run(MediaClass::Archivable);
    assert!(r.errors().next().is_none(), "{r:?}");
    assert_eq!(state.blocks[0].direct, (1..=4).map(Ref).collect::<Vec<_>>());
    assert!(
        !r.ranges[0]
            .warnings
            .iter()
            .any(|w| w.contains("tool call/result")),
        "{r:?}"
    );
    // #80: a remote image: the result stays, and its call is withdrawn with it.
    let (state, r) = run(MediaClass::Unrecoverable {
        reason: "remote URL https://h/x.png".into(),
    });
    assert_eq!(state.blocks[0].direct, vec![Ref(1), Ref(3)], "{r:?}");
    let warnings = r.ranges[0].warnings.join(" | ");
    assert!(
        warnings.contains("tool call/result") && warnings.contains("unrecoverable media"),
        "{warnings}"
    );
}

// acp §26 #83
#[test]
fn folding_half_of_a_chat_reasoning_pair_folds_both() {
    use foldwire_core::MessageKind;
    let body = br#"{"model":"deepseek-reasoner","messages":[{"role":"user","content":"question"},{"role":"assistant","content":"the answer","reasoning_content":"long thought"},{"role":"user","content":"next"}]}"#;
    for half in [MessageKind::Reasoning, MessageKind::Text] {
        let mut view =
            foldwire_wire::request::decode(Wire::OpenAiChat, bytes::Bytes::from_static(body))
                .unwrap();
        let mut state = SessionState::default();
        foldwire_stages::refs_mint::mint_refs(&mut state, &mut view);
        let target = view
            .messages
            .iter()
            .find(|u| u.role == foldwire_core::Role::Assistant && u.kind == half)
            .and_then(|u| u.r#ref)
            .unwrap();
        let r = apply_compression(
            &mut state,
            &view,
            &[req(AnyRef::Message(target), AnyRef::Message(target), "s")],
            &cfg0(),
            &CharEstimator,
        );
        assert_eq!(r.blocks_created.len(), 1, "{half:?}: {r:?}");
        assert_eq!(state.blocks[0].direct.len(), 2, "{half:?}: both halves");
        let mut out = view.clone();
        foldwire_stages::kernel::fold_view(&mut out, &state);
        let sent = foldwire_wire::request::encode(&out).unwrap();
        let sent = std::str::from_utf8(&sent).unwrap();
        assert!(
            !sent.contains("long thought") && !sent.contains("the answer"),
            "{half:?}: {sent}"
        );
        assert!(sent.contains("question") && sent.contains("next"), "{sent}");
    }
}

#[test]
fn an_explicit_compress_leaves_the_latest_read_results_out() {
    // acp §26 #76 (protectedLatestTools): the newest read results never fold, even when the
    // model names them; the older read in the same range folds.
    let mut conv = Conv::new(Wire::OpenAiChat);
    conv.user("q")
        .turn(None, None, &[("c1", "read", "{}")])
        .results(&[("c1", "old file")])
        .turn(None, None, &[("c2", "bash", "{}")])
        .results(&[("c2", "ok")])
        .turn(None, None, &[("c3", "Read", "{}")])
        .results(&[("c3", "new file")]);
    let mut cfg = cfg0();
    cfg.protection.latest_tools = vec!["read".into()];
    cfg.protection.latest_count = 1;
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(7), "s")],
        &cfg,
        &CharEstimator,
    );
    // m6–m7 (the newest Read and its result) stay; everything older folds.
    assert_eq!(
        state.blocks[0].direct,
        vec![Ref(1), Ref(2), Ref(3), Ref(4), Ref(5)]
    );
    assert!(
        r.ranges[0]
            .warnings
            .iter()
            .any(|w| w.contains("excluded 2") && w.contains("the latest 1 call(s) of read")),
        "{:?}",
        r.ranges[0].warnings
    );
    // A range of only the protected result is refused, with the reason.
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(6), m(7), "s")],
        &cfg,
        &CharEstimator,
    );
    assert!(state.blocks.is_empty());
    let err = r.ranges[0].error.as_ref().unwrap();
    assert!(matches!(err, CompressError::Protected { .. }), "{err}");
    assert!(err.to_string().contains("protected tools"), "{err}");
}

// acp §26 #61: a summary shorter than the minimum is refused, naming its length and the
// minimum; one at the minimum is accepted.
#[test]
fn a_summary_below_the_minimum_is_refused_with_its_length_and_the_minimum() {
    let cfg = CompressConfig {
        min_summary: MinSummary::default(),
        ..cfg0()
    };
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "  too short  ")],
        &cfg,
        &CharEstimator,
    );
    assert!(r.blocks_created.is_empty(), "{r:?}");
    assert!(
        matches!(
            r.ranges[0].error,
            Some(CompressError::SummaryTooShort {
                len: 9,
                min: 40,
                ..
            })
        ),
        "{r:?}"
    );
    let message = r.ranges[0].message.clone().unwrap_or_default();
    assert!(
        message.contains("9 chars") && message.contains("min 40"),
        "{message}"
    );
    assert!(state.blocks.is_empty());

    let at_min = "x".repeat(40);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), &at_min)],
        &cfg,
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(1)], "{r:?}");
}

// acp §26 #61: the minimum grows with what the range replaces, up to a cap.
#[test]
fn the_minimum_grows_with_the_replaced_size_up_to_its_cap() {
    let rule = MinSummary::default();
    assert_eq!(rule.for_tokens(0), 40);
    assert_eq!(rule.for_tokens(5_000), 200);
    assert_eq!(rule.for_tokens(10_000_000), 400);
    assert_eq!(MinSummary::OFF.for_tokens(10_000_000), 0);

    let cfg = CompressConfig {
        min_summary: MinSummary::default(),
        ..cfg0()
    };
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user(&sized("big", 5_000)).assistant("ok").user("next");
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    let medium = "y".repeat(100);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), &medium)],
        &cfg,
        &CharEstimator,
    );
    match &r.ranges[0].error {
        Some(CompressError::SummaryTooShort { len, min, tokens }) => {
            assert_eq!(*len, 100);
            assert!(*tokens >= 5_000, "{tokens}");
            assert_eq!(*min, rule.for_tokens(*tokens));
            assert!(*min > 100, "{min}");
        }
        other => panic!("expected SummaryTooShort, got {other:?}"),
    }
}

// acp §26 #59: with no minimum, a fold asked again is skipped with a note naming the block
// that holds it; nothing is wrong, so it is no error. A range that reaches past the folded
// messages into fresh ones is still refused with the way to fold it (#43).
#[test]
fn a_fold_asked_again_is_skipped_with_a_note_not_refused() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(2), "s")],
        &cfg0(),
        &CharEstimator,
    );
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(2), m(1), "again")],
        &cfg0(),
        &CharEstimator,
    );
    let o = &r.ranges[0];
    assert_eq!((o.block, o.error.as_ref()), (None, None), "{r:?}");
    let note = o.skipped.as_deref().unwrap();
    assert!(
        note.contains("already folded into b1") && note.contains("nothing new"),
        "{note}"
    );
    assert_eq!(o.message.as_deref(), Some(note));
    assert_eq!(r.errors().count(), 0);
    assert_eq!(state.blocks.len(), 1);
    // Reaching into fresh messages is a request to change, so it errs.
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(3), "more")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(matches!(
        r.ranges[0].error,
        Some(CompressError::AlreadyFolded { .. })
    ));
    assert_eq!(r.ranges[0].skipped, None);
}

// acp §26 #55: a batch none of whose refs exist gets one explanation for the batch (refs
// belong to one session: these come from another) besides the error of each range.
#[test]
fn a_batch_of_only_unknown_refs_is_explained_once() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(50), m(60), "a"), req(m(70), m(80), "b")],
        &cfg0(),
        &CharEstimator,
    );
    assert!(r.blocks_created.is_empty());
    assert_eq!(r.errors().count(), 2);
    assert!(
        r.errors()
            .all(|e| matches!(e, CompressError::UnknownRef { .. }))
    );
    let note = r.note.as_deref().unwrap();
    assert!(note.contains("none of the 2 range(s) resolved"), "{note}");
    assert!(note.contains("another session"), "{note}");
    assert!(
        note.contains("m00001..m00004"),
        "names the refs that exist: {note}"
    );
    // One range that resolves: the per-range errors say it all.
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(50), m(60), "a"), req(m(1), m(2), "ok")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(r.note, None);
    assert_eq!(r.blocks_created.len(), 1);
}

// acp §26 #62: a summary over the batch's maximum is refused unless its range raises its own.
#[test]
fn a_range_may_raise_its_own_summary_maximum() {
    let mut state = SessionState::default();
    let view = minted(&four(), &mut state);
    let mut cfg = cfg0();
    cfg.max_summary_chars = 100;
    let long = "x".repeat(200);
    let mut raised = req(m(1), m(2), &long);
    raised.max_summary_chars = Some(300);
    let r = apply_compression(
        &mut state,
        &view,
        &[raised, req(m(3), m(4), &long)],
        &cfg,
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(1)]);
    assert_eq!(state.blocks[0].summary.len(), 200);
    assert_eq!(
        r.ranges[1].error,
        Some(CompressError::SummaryTooLong { len: 200, max: 100 })
    );
}

// acp §26 #47: the first user message stays on the wire after its block folded it (the next
// survivor is no user text); the model sees it beside the summary, so a range from it nests
// that block through it: the new block consumes b1, covers everything and folds only the
// fresh messages directly.
#[test]
fn a_range_from_the_pinned_first_message_nests_its_block() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("first")
        .assistant("a2")
        .user("u3")
        .assistant("a4")
        .user("u5");
    for i in 6..=13 {
        if i % 2 == 0 {
            conv.assistant(&format!("a{i}"));
        } else {
            conv.user(&format!("u{i}"));
        }
    }
    let mut state = SessionState::default();
    let raw = minted(&conv, &mut state);
    apply_compression(
        &mut state,
        &raw,
        &[req(m(1), m(5), "opening")],
        &cfg0(),
        &CharEstimator,
    );
    let mut view = raw.clone();
    let outcome = fold_view(&mut view, &state);
    assert_eq!(outcome.first_user, FirstUserPin::Held);
    assert!(view.messages.iter().any(|u| u.r#ref == Some(Ref(1))));
    let r = apply_compression(
        &mut state,
        &view,
        &[req(m(1), m(13), "everything")],
        &cfg0(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(2)], "{r:?}");
    assert!(
        r.ranges[0]
            .warnings
            .iter()
            .any(|w| w.contains("pinned first message; anchored to b1")),
        "{r:?}"
    );
    let b2 = &state.blocks[1];
    assert_eq!(b2.consumed, vec![BlockId(1)]);
    assert_eq!(b2.effective, (1..=13).map(Ref).collect::<Vec<_>>());
    assert_eq!(b2.direct, (6..=13).map(Ref).collect::<Vec<_>>());
    assert!(!state.blocks[0].active);
}

// acp §26 #72: besides name patterns, a host protects tools by its own rule: `pin_tools`
// pins every call the predicate accepts, with its result, and no fold takes them; a
// predicate that accepts nothing protects nothing.
#[test]
fn a_host_predicate_protects_tools_by_code() {
    let build = || {
        let mut c = Conv::new(Wire::Anthropic);
        c.user("deploy it")
            .turn(None, Some("deploying"), &[("d1", "deploy_prod", "{}")])
            .results(&[("d1", "deployed v2")])
            .turn(None, None, &[("l1", "ls", "{}")])
            .results(&[("l1", "a b c")])
            .user("thanks");
        c
    };
    for protect in [true, false] {
        let mut state = SessionState::default();
        let mut view = minted(&build(), &mut state);
        let pinned = pin_tools(
            &mut view,
            |name| protect && name.starts_with("deploy"),
            "host rule: deployments",
        );
        let r = apply_compression(
            &mut state,
            &view,
            &[req(m(1), m(7), "s")],
            &cfg0(),
            &CharEstimator,
        );
        let direct = &state.blocks[0].direct;
        let call_and_result = [Ref(3), Ref(4)];
        if protect {
            assert_eq!(pinned, 2, "the call and its result: {r:?}");
            assert!(
                call_and_result.iter().all(|x| !direct.contains(x)),
                "{direct:?}"
            );
            assert!(
                r.ranges[0]
                    .warnings
                    .iter()
                    .any(|w| w.contains("protected (host rule: deployments)")),
                "{r:?}"
            );
            assert!(
                direct.contains(&Ref(5)) && direct.contains(&Ref(6)),
                "ls folds"
            );
        } else {
            assert_eq!(pinned, 0);
            assert!(
                call_and_result.iter().all(|x| direct.contains(x)),
                "{direct:?}"
            );
        }
    }
}
