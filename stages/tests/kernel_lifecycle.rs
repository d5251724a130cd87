#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Blocks over turns: in or out of the client's view, survival and generation, and what
//! never removes a block.

mod support;

use foldwire_core::{
    AnyRef, BlockId, CharEstimator, Generation, Origin, Ref, SessionState, Stage, Wire,
};
use foldwire_stages::fold::{Fold, FoldConfig};
use foldwire_stages::kernel::{
    CompressConfig, CompressRequest, MinSummary, Protection, apply_compression, sync_blocks,
};
use support::{Conv, cx, minted, turn_for};

fn open() -> CompressConfig {
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
        min_summary: MinSummary::OFF,
    }
}

fn fold(state: &mut SessionState, view: &foldwire_core::Conversation, ranges: &[(u32, u32)]) {
    let requests: Vec<CompressRequest> = ranges
        .iter()
        .map(|&(s, e)| {
            CompressRequest::new(
                AnyRef::Message(Ref(s)),
                AnyRef::Message(Ref(e)),
                format!("summary of m{s}..m{e}"),
            )
        })
        .collect();
    let r = apply_compression(state, view, &requests, &open(), &CharEstimator);
    assert_eq!(r.blocks_created.len(), ranges.len(), "{r:?}");
}

/// Six exchanges; the client may later send only a tail of them.
fn chat(from: usize) -> Conv {
    let mut c = Conv::new(Wire::Anthropic);
    for i in from..6 {
        c.user(&format!("question {i}"))
            .assistant(&format!("answer {i}"));
    }
    c
}

fn fold_stage() -> Fold {
    Fold::new(FoldConfig {
        auto: false,
        ..FoldConfig::default()
    })
}

// acp §26 #23, #24: a block none of whose messages the client sends any more leaves the
// view and is reported once (named by the sync, counted by the stage); one that keeps a
// message stays; it comes back when its messages do. It stays active (no higher tier took
// it) and in the state.
#[tokio::test]
async fn a_block_whose_messages_all_left_the_view_is_out_of_view_and_reported() {
    let mut state = SessionState::default();
    let full = minted(&chat(0), &mut state);
    fold(&mut state, &full, &[(1, 2), (3, 7)]);
    assert!(state.blocks.iter().all(|b| b.in_view));

    // The client dropped the first three exchanges: b1 is gone, b2 keeps m00007.
    let tail = minted(&chat(3), &mut state);
    let mut named = state.clone();
    assert_eq!(
        sync_blocks(&tail, &mut named, 5).left_view,
        vec![BlockId(1)]
    );
    let mut turn = turn_for(tail.clone(), state);
    fold_stage().run(&mut turn, &cx()).await.unwrap();
    assert_eq!(turn.report.counter("fold.blocks_left_view"), 1);
    assert_eq!(turn.report.counter("fold.blocks_returned"), 0);
    let state = turn.state;
    let (b1, b2) = (&state.blocks[0], &state.blocks[1]);
    assert!(!b1.in_view && b1.active, "{b1:?}");
    assert!(b2.in_view, "a block with a message still sent stays");
    // Reported once, not every turn it stays away.
    let mut again = state.clone();
    assert!(sync_blocks(&tail, &mut again, 5).left_view.is_empty());
    // The client sends the history again (a rewind): b1 is back.
    let mut back = state.clone();
    let sync = sync_blocks(&full, &mut back, 5);
    assert_eq!(sync.returned, vec![BlockId(1)]);
    assert!(back.blocks[0].in_view);
}

// acp §26 #25 in foldwire terms: a view that holds a block's rendered summary keeps it in
// view even when none of its messages are there.
#[test]
fn a_block_seen_only_through_its_summary_stays_in_view() {
    let mut state = SessionState::default();
    let full = minted(&chat(0), &mut state);
    fold(&mut state, &full, &[(1, 4)]);
    let mut view = minted(&chat(2), &mut state);
    let entry = view.push_entry(foldwire_core::Role::User);
    view.messages.insert(
        0,
        foldwire_core::Message::synthesized(
            entry,
            foldwire_core::Role::User,
            "summary",
            Origin::Summary(BlockId(1)),
            bytes::Bytes::new(),
        ),
    );
    let sync = sync_blocks(&view, &mut state, 5);
    assert!(sync.left_view.is_empty());
    assert!(state.blocks[0].in_view);
}

// acp §26 #26: each turn ages the blocks in play by one and marks them old at the
// threshold; a block consumed by a higher tier and one out of view are left alone.
#[test]
fn each_turn_ages_the_blocks_in_play_and_marks_them_old_at_the_threshold() {
    let mut state = SessionState::default();
    let full = minted(&chat(0), &mut state);
    fold(&mut state, &full, &[(1, 2), (3, 4), (9, 12)]);
    // b4 consumes b1 (a tier up); b3 leaves the view below.
    let r = apply_compression(
        &mut state,
        &full,
        &[CompressRequest::new(
            AnyRef::Block(BlockId(1)),
            AnyRef::Block(BlockId(1)),
            "tier two",
        )],
        &open(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(4)]);
    for b in &mut state.blocks {
        b.survived = 4;
    }
    let view = minted(&chat(0), &mut state);
    let mut trimmed = view.clone();
    trimmed
        .messages
        .retain(|u| !u.r#ref.is_some_and(|r| (9..=12).contains(&r.0)));
    let sync = sync_blocks(&trimmed, &mut state, 5);
    let (b1, b2, b3, b4) = (
        &state.blocks[0],
        &state.blocks[1],
        &state.blocks[2],
        &state.blocks[3],
    );
    assert_eq!((b2.survived, b2.generation), (5, Generation::Old));
    assert_eq!((b4.survived, b4.generation), (5, Generation::Old));
    assert_eq!(
        (b1.survived, b1.generation),
        (4, Generation::Young),
        "consumed"
    );
    assert_eq!(
        (b3.survived, b3.generation),
        (4, Generation::Young),
        "out of view"
    );
    assert_eq!(sync.turned_old, vec![BlockId(2), BlockId(4)]);
    // Old stays old; the count goes on.
    sync_blocks(&trimmed, &mut state, 5);
    assert_eq!(
        (state.blocks[1].survived, state.blocks[1].generation),
        (6, Generation::Old)
    );
    assert!(sync_blocks(&trimmed, &mut state, 5).turned_old.is_empty());
}

// acp §26 #27: age removes nothing. A block that has stood for a thousand turns stays in
// the state, active, and its summary still stands in for its messages on a full request.
#[tokio::test]
async fn an_old_block_is_never_collected() {
    let mut state = SessionState::default();
    let full = minted(&chat(0), &mut state);
    fold(&mut state, &full, &[(1, 8)]);
    state.blocks[0].survived = 999;
    state.blocks[0].generation = Generation::Old;
    let mut turn = turn_for(full, state);
    fold_stage().run(&mut turn, &cx()).await.unwrap();
    let b1 = &turn.state.blocks[0];
    assert!(b1.active && b1.in_view);
    assert_eq!((b1.survived, b1.generation), (1000, Generation::Old));
    let conv = turn.conversation.as_ref().unwrap();
    assert_eq!(
        conv.messages
            .iter()
            .filter(|u| u.origin == Origin::Summary(BlockId(1)))
            .count(),
        1
    );
    assert!(!conv.messages.iter().any(|u| u.r#ref == Some(Ref(2))));
}

// acp §26 #68: a compress batch is no turn: however many ranges it folds, no block ages.
#[test]
fn a_compress_batch_does_not_age_blocks() {
    let mut state = SessionState::default();
    let full = minted(&chat(0), &mut state);
    fold(&mut state, &full, &[(1, 2)]);
    state.blocks[0].survived = 3;
    fold(&mut state, &full, &[(3, 4), (5, 6), (7, 8)]);
    let ages: Vec<u64> = state.blocks.iter().map(|b| b.survived).collect();
    assert_eq!(ages, vec![3, 0, 0, 0]);
    assert!(
        state
            .blocks
            .iter()
            .all(|b| b.generation == Generation::Young)
    );
}
