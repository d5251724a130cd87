#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Refusal levers (issue 11, item 7): a lever is named only with the tokens it frees, and a
//! refusal says when none of them frees what the request is over.

mod support;

use foldwire_core::{AnyRef, Budget, CharEstimator, Ref, SessionState, Wire};
use foldwire_stages::kernel::{
    CompressConfig, CompressRequest, Protection, apply_compression, fold_view,
};
use foldwire_stages::layout_head_window::refusal::{Relief, ZoneTokens, refusal};
use support::{Conv, minted, sized};

fn zones(head: u64, history: u64, recent: u64, budget: u64) -> ZoneTokens {
    ZoneTokens {
        budget,
        frame: 100,
        head,
        history,
        recent,
        pinned: 0,
        recent_window: 2_000,
        after_reset: false,
    }
}

fn budget(window: u64) -> Budget {
    Budget {
        window,
        reserve: 1_000,
        calibration: 1.0,
    }
}

#[test]
fn a_queued_range_too_small_to_clear_the_excess_says_so_and_names_the_window_that_fits() {
    // The case: 1,242 tokens queued, 4,398 over.
    let z = zones(0, 1_242, 10_255, 7_199);
    assert_eq!(z.request() - z.budget, 4_398);
    let relief = Relief {
        ranges: vec![1_242],
        budget: budget(8_199),
        ..Relief::default()
    };
    let r = refusal("layout.head_window", &z, &relief);
    assert_eq!(
        r.levers[0],
        "fold the 1 compressible range(s) still queued (1242 tokens): frees about 942 tokens (not enough alone)"
    );
    assert!(
        r.reason.contains(
            "nothing that can fold frees the 4398 tokens over (all of it frees about 942)"
        ),
        "{r}"
    );
    assert_eq!(
        r.levers.last().unwrap(),
        "a larger context window: 12597 tokens or more fit the request as it is"
    );
    assert_eq!(r.numbers["frees_at_most"], 942);
    // Every lever states what it frees, except the window, which fits the request whole.
    for l in &r.levers[..r.levers.len() - 1] {
        assert!(l.contains("frees about"), "{l}");
    }
}

#[test]
fn nothing_foldable_names_no_fold_lever() {
    let r = refusal(
        "layout.head_window",
        &zones(0, 0, 9_000, 7_000),
        &Relief {
            budget: budget(8_000),
            ..Relief::default()
        },
    );
    assert_eq!(r.levers.len(), 1, "{r}");
    assert!(r.levers[0].starts_with("a larger context window"), "{r}");
    assert!(r.reason.contains("all of it frees about 0"), "{r}");
}

#[test]
fn a_lever_that_clears_the_excess_is_marked_enough_and_no_window_is_asked_for() {
    let z = zones(0, 3_000, 4_500, 7_000);
    let relief = Relief {
        ranges: vec![1_000, 2_000],
        budget: budget(8_000),
        ..Relief::default()
    };
    let r = refusal("layout.head_window", &z, &relief);
    assert_eq!(
        r.levers,
        vec![
            "fold the 2 compressible range(s) still queued (3000 tokens): frees about 2450 tokens (enough)"
                .to_owned()
        ]
    );
    assert!(!r.reason.contains("frees the"), "{r}");
    // Two levers that only clear it together are each "not enough alone", and the reason
    // says they do together.
    let z = zones(1_000, 1_000, 5_900, 7_000);
    let relief = Relief {
        ranges: vec![1_000],
        budget: budget(8_000),
        ..Relief::default()
    };
    let r = refusal("layout.head_window", &z, &relief);
    assert!(
        r.reason
            .contains("no single lever frees the 1000 tokens over (together they free about 1500)"),
        "{r}"
    );
    assert!(r.levers.iter().all(|l| !l.contains("(enough)")), "{r}");
}

#[test]
fn summaries_side_by_side_are_named_by_block_ids_with_what_folding_them_frees() {
    let mut conv = Conv::new(Wire::Anthropic);
    for i in 0..6 {
        conv.user(&sized(&format!("question {i}"), 200))
            .assistant(&sized(&format!("answer {i}"), 200));
    }
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    let open = Protection {
        recent_messages: 0,
        recent_tokens: 0,
        last_user: false,
        protected_tools: vec![],
        latest_tools: vec![],
        latest_count: 0,
    };
    let cfg = CompressConfig {
        protection: open.clone(),
        min_tokens: 0,
        max_summary_chars: 0,
        min_summary: foldwire_stages::kernel::MinSummary::OFF,
    };
    for (a, b) in [(1, 2), (3, 4), (5, 6)] {
        let long = "a long model-written summary of the exchange ".repeat(40);
        let r = apply_compression(
            &mut state,
            &view,
            &[CompressRequest::new(
                AnyRef::Message(Ref(a)),
                AnyRef::Message(Ref(b)),
                long,
            )],
            &cfg,
            &CharEstimator,
        );
        assert!(r.errors().next().is_none(), "{r:?}");
    }
    let mut folded = view.clone();
    fold_view(&mut folded, &state);
    let relief = Relief::of(&[], &folded, &state, &open, &CharEstimator, budget(4_000));
    assert_eq!(relief.summary_runs.len(), 1, "{relief:?}");
    let (first, last, tokens) = relief.summary_runs[0].clone();
    assert_eq!((first.as_str(), last.as_str()), ("b1", "b3"));
    let r = refusal(
        "layout.head_window",
        &zones(0, tokens, 3_500, 3_000),
        &relief,
    );
    let lever = r.levers.iter().find(|l| l.contains("b1..b3")).unwrap();
    assert!(
        lever.starts_with("fold the summaries b1..b3 into higher tiers"),
        "{lever}"
    );
    assert!(
        lever.contains(&format!("frees about {}", tokens - 300)),
        "{lever}"
    );
}
