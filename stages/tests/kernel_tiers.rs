#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Tiers (issue 11, item 4): runs of summaries that sit together fold again into one block a
//! tier up, which consumes every block of the run whatever its tier and restores down to the
//! originals.

mod support;

use foldwire_core::{AnyRef, BlockId, CharEstimator, Ref, SessionState, Wire};
use foldwire_stages::kernel::{
    CompressConfig, CompressRequest, Protection, apply_compression, fold_view, restore,
    summary_runs,
};
use support::{Conv, minted, sized};

fn open() -> Protection {
    Protection {
        recent_messages: 0,
        recent_tokens: 0,
        last_user: false,
        protected_tools: vec!["compress".into()],
        latest_tools: vec![],
        latest_count: 0,
    }
}

fn cfg() -> CompressConfig {
    CompressConfig {
        protection: open(),
        min_tokens: 0,
        max_summary_chars: 20_000,
        min_summary: foldwire_stages::kernel::MinSummary::OFF,
    }
}

fn fold(state: &mut SessionState, view: &foldwire_core::Conversation, start: AnyRef, end: AnyRef) {
    let r = apply_compression(
        state,
        view,
        &[CompressRequest::new(
            start,
            end,
            format!("summary of {start}..{end}"),
        )],
        &cfg(),
        &CharEstimator,
    );
    assert!(r.errors().next().is_none(), "{r:?}");
}

fn m(n: u32) -> AnyRef {
    AnyRef::Message(Ref(n))
}

fn b(n: u32) -> AnyRef {
    AnyRef::Block(BlockId(n))
}

/// Ten exchanges of ~50 tokens a message.
fn ten() -> Conv {
    let mut c = Conv::new(Wire::Anthropic);
    for i in 0..10 {
        c.user(&sized(&format!("question {i}"), 50))
            .assistant(&sized(&format!("answer {i}"), 50));
    }
    c
}

#[test]
fn summaries_side_by_side_form_a_run_and_fold_a_tier_up_down_to_the_originals() {
    let mut state = SessionState::default();
    let view = minted(&ten(), &mut state);
    fold(&mut state, &view, m(1), m(2));
    fold(&mut state, &view, m(3), m(4));
    // m00005..m00006 stay fresh between b2 and b3: they fold with the run.
    fold(&mut state, &view, m(7), m(8));
    let runs = summary_runs(&view, &state, &open(), &CharEstimator);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(run.blocks, vec![BlockId(1), BlockId(2), BlockId(3)]);
    assert_eq!(run.tier, 2);
    // The fresh units it folds are named, the same the block takes directly below.
    assert_eq!(run.fresh, vec![Ref(5), Ref(6)]);
    let range = run.as_range(&state).unwrap();
    assert_eq!(
        (range.start, range.end, range.messages),
        (Ref(1), Ref(8), 3)
    );
    assert!(range.tokens > 0);

    fold(&mut state, &view, b(1), b(3));
    let b4 = state.blocks.last().unwrap().clone();
    assert_eq!((b4.id, b4.tier), (BlockId(4), 2));
    assert_eq!(b4.consumed, vec![BlockId(1), BlockId(2), BlockId(3)]);
    assert_eq!(b4.direct, vec![Ref(5), Ref(6)]);
    assert_eq!(b4.effective, (1..=8).map(Ref).collect::<Vec<_>>());

    // A tier-2 block beside a new tier-1 block: the run folds both into tier 3.
    fold(&mut state, &view, m(9), m(10));
    let runs = summary_runs(&view, &state, &open(), &CharEstimator);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].blocks, vec![BlockId(4), BlockId(5)]);
    assert_eq!(runs[0].tier, 3);
    fold(&mut state, &view, b(4), b(5));
    let b6 = state.blocks.last().unwrap().clone();
    assert_eq!((b6.id, b6.tier), (BlockId(6), 3));
    assert_eq!(b6.consumed, vec![BlockId(4), BlockId(5)]);
    assert_eq!(state.active_blocks().count(), 1);

    // Restored in full, the tier-3 block gives back every original byte for byte.
    let full = restore(&state, BlockId(6), true).unwrap();
    let want: Vec<&[u8]> = view.messages[..10].iter().map(|u| u.raw.as_ref()).collect();
    let got: Vec<&[u8]> = full.units.iter().map(|u| u.raw.as_bytes()).collect();
    assert_eq!(got, want);
    // Each consumed block still restores its own originals.
    let b2 = restore(&state, BlockId(2), false).unwrap();
    assert_eq!(
        b2.units.iter().map(|u| u.r#ref).collect::<Vec<_>>(),
        vec![Ref(3), Ref(4)]
    );

    // On the wire the whole history is one summary.
    let mut wire = view.clone();
    fold_view(&mut wire, &state);
    let summaries = wire
        .messages
        .iter()
        .filter(|u| u.text.starts_with("[foldwire b"))
        .count();
    assert_eq!(summaries, 1);
    assert!(
        wire.messages
            .iter()
            .all(|u| u.r#ref.is_none_or(|r| r.0 > 10))
    );
}

#[test]
fn a_visible_unit_that_cannot_fold_ends_a_run_and_lone_blocks_make_none() {
    let mut state = SessionState::default();
    let view = minted(&ten(), &mut state);
    fold(&mut state, &view, m(1), m(2));
    fold(&mut state, &view, m(5), m(6));
    fold(&mut state, &view, m(7), m(8));
    // Fresh m00003..m00004 between b1 and b2 fold with the run; the protected last user
    // message after it stays out.
    let protected = Protection {
        recent_messages: 0,
        recent_tokens: 0,
        last_user: true,
        protected_tools: vec![],
        latest_tools: vec![],
        latest_count: 0,
    };
    let mut with_last_user = ten();
    with_last_user.user("the last question");
    let view2 = minted(&with_last_user, &mut state);
    let runs = summary_runs(&view2, &state, &protected, &CharEstimator);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].blocks, vec![BlockId(1), BlockId(2), BlockId(3)]);
    // The fresh units between b1 and b2 are named; the last user message, after the run,
    // is not.
    assert_eq!(runs[0].fresh, vec![Ref(3), Ref(4)]);
    // The head protects m00003 and m00004 (head ids recorded by the layout): they end the run.
    let mut zoned = state.clone();
    let head_ids: Vec<_> = view.messages[..4].iter().map(|u| u.id.clone()).collect();
    foldwire_stages::layout_head_window::HeadState {
        head_ids,
        ..Default::default()
    }
    .store(&mut zoned)
    .unwrap();
    let runs = summary_runs(&view, &zoned, &open(), &CharEstimator);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].blocks, vec![BlockId(2), BlockId(3)]);
    assert!(runs[0].fresh.is_empty(), "{runs:?}");
}
