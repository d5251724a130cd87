#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! search and inspect: what the CLI's `search` and `inspect` print.

mod support;

use foldwire_core::{AnyRef, BlockId, CharEstimator, Ref, SessionState, Wire};
use foldwire_stages::kernel::{
    CompressConfig, CompressRequest, Protection, RangesConfig, apply_compression, inspect, search,
    search_top,
};
use support::{Conv, minted};

fn session() -> (SessionState, foldwire_core::Conversation) {
    let mut conv = Conv::new(Wire::Anthropic);
    for i in 0..8 {
        conv.user(&format!("user {i}"))
            .assistant(&format!("assistant {i}"));
    }
    let mut state = SessionState::default();
    let view = minted(&conv, &mut state);
    let cfg = CompressConfig {
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
    };
    let reqs = [
        (
            "auth module",
            "refactored the auth module; login tests pass",
            1,
            4,
        ),
        (
            "database",
            "migrated the database schema; auth untouched",
            5,
            8,
        ),
        ("docs", "wrote the README", 9, 10),
    ];
    let batch: Vec<CompressRequest> = reqs
        .iter()
        .map(|(topic, summary, s, e)| {
            CompressRequest::new(AnyRef::Message(Ref(*s)), AnyRef::Message(Ref(*e)), *summary)
                .with_topic(*topic)
                .with_author("test")
        })
        .collect();
    let r = apply_compression(&mut state, &view, &batch, &cfg, &CharEstimator);
    assert_eq!(r.blocks_created.len(), 3);
    (state, view)
}

#[test]
fn search_ranks_topic_matches_above_summary_matches() {
    let (state, _) = session();
    let hits = search(&state, "AUTH");
    let ids: Vec<BlockId> = hits.iter().map(|h| h.block).collect();
    assert_eq!(ids, vec![BlockId(1), BlockId(2)]);
    assert!(hits[0].score > hits[1].score);
    assert_eq!(hits[0].span, (Ref(1), Ref(4)));
    assert!(hits[1].snippet.contains("auth"));
    assert!(search(&state, "kubernetes").is_empty());
    assert!(search(&state, "   ").is_empty());
    let json = serde_json::to_value(&hits).unwrap();
    assert_eq!(json[0]["block"], "b1");
}

#[test]
fn inspect_lists_refs_blocks_and_ranges() {
    let (state, view) = session();
    let report = inspect(
        &state,
        &view,
        &RangesConfig {
            protection: Protection {
                recent_tokens: 0,
                ..Protection::default()
            },
            min_tokens: 1,
            ..RangesConfig::default()
        },
        &CharEstimator,
    );
    assert_eq!(report.refs.len(), 16);
    let m3 = &report.refs[2];
    assert_eq!((m3.wire_index, m3.block), (Some(2), Some(BlockId(1))));
    assert_eq!(m3.preview.as_deref(), Some("user 1"));
    assert_eq!(report.refs[12].block, None);
    assert_eq!(report.blocks.len(), 3);
    assert_eq!(
        (report.blocks[1].span, report.blocks[1].topic.as_deref()),
        ((Ref(5), Ref(8)), Some("database"))
    );
    // m00011..m00016 are not folded; the newest five are protected, m00011 is offered.
    assert_eq!(report.ranges.len(), 1);
    assert_eq!(
        (report.ranges[0].start, report.ranges[0].end),
        (Ref(11), Ref(11))
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["refs"][0]["ref"], "m00001");
    assert_eq!(json["refs"][0]["role"], "user");
}

// acp §26 #132 (in part)
#[test]
fn search_finds_blocks_a_higher_tier_consumed() {
    let (mut state, view) = session();
    let r = apply_compression(
        &mut state,
        &view,
        &[CompressRequest::new(
            AnyRef::Block(BlockId(1)),
            AnyRef::Block(BlockId(1)),
            "earlier work",
        )
        .with_topic("history")],
        &CompressConfig {
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
        },
        &CharEstimator,
    );
    assert_eq!(r.blocks_created, vec![BlockId(4)]);
    let hits = search(&state, "login");
    assert_eq!(hits.len(), 1);
    assert_eq!((hits[0].block, hits[0].active), (BlockId(1), false));
}

// acp §26 #132: results come best first and at most as many as asked for.
#[test]
fn search_returns_the_best_hits_up_to_the_limit() {
    let (state, _) = session();
    let all = search(&state, "auth database readme");
    assert_eq!(all.len(), 3);
    for pair in all.windows(2) {
        assert!(pair[0].score >= pair[1].score);
    }
    let top = search_top(&state, "auth database readme", 2);
    assert_eq!(top, all[..2].to_vec());
    assert!(search_top(&state, "auth", 0).is_empty());
    assert_eq!(search_top(&state, "auth", 10), search(&state, "auth"));
}
