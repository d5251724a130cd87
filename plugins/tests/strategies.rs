#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The bundled strategies, and the fold stage folding on its own when a request is over its
//! budget.

use foldwire_test_kit::conv as support;

use std::sync::Arc;

use foldwire_core::{
    BlockId, Budget, CharEstimator, ComponentKind, FoldDemand, Message, MessageKind, Origin,
    Params, RangeInfo, Ref, Registry, Role, SessionState, Stage, StageCx, SummaryRequest, Wire,
};
use foldwire_plugins::summarizer::{Extractive, ExtractiveConfig};
use foldwire_stages::kernel::pairing_rules::violations;
use foldwire_stages::kernel::restore;
use support::{Conv, sized, turn_for};

fn registry() -> Arc<Registry> {
    foldwire_plugins::link();
    Arc::new(Registry::from_inventory().unwrap())
}

#[test]
fn every_kernel_component_is_registered() {
    let r = registry();
    let policies = r.names(ComponentKind::FoldPolicy);
    assert!(
        policies.contains(&"fold.oldest_first".into())
            && policies.contains(&"fold.largest_first".into())
    );
    assert!(
        r.names(ComponentKind::Summarizer)
            .contains(&"summarizer.extractive".into())
    );
    let stages = r.names(ComponentKind::Stage);
    for s in ["refs.mint", "ranges.build", "fold", "pairing.repair"] {
        assert!(stages.contains(&s.to_string()), "{s}");
    }
}

fn range(start: u32, tokens: u64) -> RangeInfo {
    RangeInfo::new(Ref(start), Ref(start), tokens, 1)
}

fn demand(request_tokens: u64) -> FoldDemand {
    FoldDemand::new(
        request_tokens,
        Budget {
            window: 10_000,
            reserve: 0,
            calibration: 1.0,
        },
    )
}

#[test]
fn policies_fold_only_over_the_threshold_in_their_order() {
    let r = registry();
    let ranges = [range(1, 1000), range(10, 3000), range(20, 500)];
    let oldest = r.fold_policy("fold.oldest_first", &Params::Null).unwrap();
    let largest = r.fold_policy("fold.largest_first", &Params::Null).unwrap();
    assert!(
        oldest.choose(&ranges, &demand(7_000)).is_empty(),
        "under 80 %"
    );
    // 9 000 tokens, target 6 000: 3 000 to save.
    assert_eq!(oldest.choose(&ranges, &demand(9_000)), vec![0, 1]);
    assert_eq!(largest.choose(&ranges, &demand(9_000)), vec![0, 1]);
    // 2 500 to save: the largest range alone does it; oldest-first needs two.
    assert_eq!(oldest.choose(&ranges, &demand(8_500)), vec![0, 1]);
    assert_eq!(largest.choose(&ranges, &demand(8_500)), vec![1]);
    let tuned = r
        .fold_policy(
            "fold.oldest_first",
            &serde_json::json!({"threshold": 0.5, "target": 0.4}),
        )
        .unwrap();
    assert_eq!(tuned.choose(&ranges, &demand(5_500)), vec![0, 1]);
    assert!(
        r.fold_policy(
            "fold.oldest_first",
            &serde_json::json!({"threshold": 0.5, "target": 0.9})
        )
        .is_err()
    );
    assert!(
        r.fold_policy("fold.largest_first", &serde_json::json!({"when": 1}))
            .is_err()
    );
}

/// A range that starts with an earlier fold's summary names the new block after that
/// summary's topic, not after its header (which nested: `[foldwire b11 · [foldwire b9 · …`
/// in a real Codex session whose tool outputs held no paths or words to name it by).
#[tokio::test]
async fn a_summary_folded_again_lends_its_topic_not_its_header() {
    let summary = |block: u32, text: &str| {
        Message::synthesized(
            0,
            Role::User,
            text.to_owned(),
            Origin::Summary(BlockId(block)),
            bytes::Bytes::new(),
        )
    };
    let plain = |text: &str| {
        Message::synthesized(
            0,
            Role::User,
            text.to_owned(),
            Origin::Client,
            bytes::Bytes::new(),
        )
    };
    let s = Extractive(ExtractiveConfig::default());
    let cases = [
        (
            vec![
                summary(
                    9,
                    "[foldwire b9 · setup]\n(extractive summary of 2 messages)",
                ),
                plain("1\n2\n3"),
            ],
            Some("setup"),
        ),
        // A summary without a topic lends none: the next text names the block.
        (
            vec![
                summary(9, "[foldwire b9]\n(extractive summary of 2 messages)"),
                plain("Ran the numbered steps\n1\n2"),
            ],
            Some("Ran the numbered steps"),
        ),
    ];
    for (units, topic) in cases {
        let got = s.summarize_units(&units, 2000);
        assert_eq!(got.topic.as_deref(), topic, "{}", got.text);
    }
}

#[tokio::test]
async fn the_extractive_summary_keeps_what_an_agent_needs() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("Please fix the login bug in src/auth/login.rs")
        .turn(None, Some("I'll run the tests first, then patch validate_token."), &[("c1", "bash", r#"{"command":"cargo test -p auth"}"#)])
        .results(&[("c1", "running 3 tests\nerror[E0308]: mismatched types in AuthConfig::load\ntest result: FAILED")])
        .assistant("Decided to switch to the SessionStore::refresh path instead.");
    let c = conv.build();
    let r = registry();
    let s = r
        .summarizer("summarizer.extractive", &Params::Null)
        .unwrap();
    let req = SummaryRequest {
        wire: Wire::Anthropic,
        messages: &c.messages,
        max_chars: 2000,
    };
    let summary = s.summarize(req).await.unwrap();
    let t = &summary.text;
    assert!(t.starts_with("(extractive summary of 5 messages)"), "{t}");
    for needle in [
        "src/auth/login.rs",
        "validate_token",
        "error[E0308]: mismatched types",
        "cargo test -p auth",
        "Decided to switch",
        "SessionStore::refresh",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in {t}");
    }
    assert_eq!(summary.author, "summarizer.extractive");
    assert_eq!(summary.topic.as_deref(), Some("src/auth/login.rs"));
    assert_eq!(s.summarize(req).await.unwrap(), summary, "deterministic");
    let short = Extractive(ExtractiveConfig {
        max_chars: 80,
        max_items: 12,
    })
    .summarize_units(&c.messages, 2000);
    assert!(short.text.len() <= 80, "{}", short.text);
    assert!(
        s.summarize(SummaryRequest {
            messages: &[],
            ..req
        })
        .await
        .is_err()
    );
}

#[tokio::test]
async fn an_over_budget_request_folds_by_itself_and_restores_exactly() {
    for wire in Wire::ALL {
        let mut conv = Conv::new(wire);
        conv.user("refactor src/lib.rs");
        for i in 0..20 {
            let id = format!("call{i}");
            conv.turn(
                None,
                Some(&format!("step {i}: reading src/mod{i}.rs")),
                &[(&id, "bash", r#"{"command":"cat"}"#)],
            )
            .results(&[(&id, &sized(&format!("output {i}"), 400))]);
        }
        conv.user("continue");
        let registry = registry();
        let cx = StageCx::new(registry.clone()).with_estimator(Arc::new(CharEstimator));
        let mut turn = turn_for(conv.build(), SessionState::default());
        turn.budget = Budget {
            window: 6_000,
            reserve: 0,
            calibration: 1.0,
        };
        let original = turn.conversation.clone().unwrap();
        let params = |name: &str| match name {
            "ranges.build" => serde_json::json!({"protection": {"recent_tokens": 1000}}),
            "fold" => serde_json::json!({"compress": {"protection": {"recent_tokens": 1000}}}),
            _ => Params::Null,
        };
        for name in ["refs.mint", "ranges.build", "fold", "pairing.repair"] {
            registry
                .stage(name, &params(name))
                .unwrap()
                .run(&mut turn, &cx)
                .await
                .unwrap();
        }
        let c = turn.conversation.as_ref().unwrap();
        assert!(
            turn.report.counter("fold.blocks_created") > 0,
            "{wire}: {:?}",
            turn.report
        );
        assert!(turn.report.counter("fold.units_removed") > 0);
        assert!(
            violations(wire, &c.messages).is_empty(),
            "{wire}: {:?}",
            violations(wire, &c.messages)
        );
        let visible: usize = c
            .messages
            .iter()
            .map(|u| u.raw.len().max(u.text.len()))
            .sum();
        let before: usize = original.messages.iter().map(|u| u.raw.len()).sum();
        assert!(
            visible * 2 < before,
            "{wire}: {visible} of {before} bytes still sent"
        );
        assert!(
            c.messages
                .iter()
                .any(|u| u.kind == MessageKind::Text && u.text.starts_with("[foldwire b1"))
        );
        for block in &turn.state.blocks {
            let back = restore(&turn.state, block.id, true).unwrap();
            for unit in back.units {
                let orig = original
                    .messages
                    .iter()
                    .find(|u| u.id == turn.state.refs[(unit.r#ref.0 - 1) as usize].message)
                    .unwrap();
                assert_eq!(unit.raw.as_bytes(), orig.raw.as_ref(), "{wire}");
            }
        }
        // The next turn (same history resent) folds the same blocks again, without new ones.
        let blocks = turn.state.blocks.len();
        let mut next = turn_for(conv.build(), turn.state.clone());
        next.budget = Budget {
            window: 1_000_000,
            reserve: 0,
            calibration: 1.0,
        };
        for name in ["refs.mint", "ranges.build", "fold", "pairing.repair"] {
            registry
                .stage(name, &params(name))
                .unwrap()
                .run(&mut next, &cx)
                .await
                .unwrap();
        }
        assert_eq!(next.state.blocks.len(), blocks);
        assert_eq!(
            next.conversation.as_ref().unwrap().messages.len(),
            c.messages.len(),
            "{wire}"
        );
    }
}

#[test]
fn a_known_summary_size_folds_no_more_than_needed() {
    let r = registry();
    let oldest = r.fold_policy("fold.oldest_first", &Params::Null).unwrap();
    let ranges: Vec<_> = (0..5).map(|i| range(10 * i + 1, 1000)).collect();
    // 8,940 tokens against a 6,000 target: 2,940 to save.
    let mut d = demand(8_940);
    // Unknown summary size: a summary may cost a tenth of its range, 900 saved per fold.
    assert_eq!(oldest.choose(&ranges, &d).len(), 4);
    // Summaries of at most 20 tokens: 980 saved per fold, three are enough.
    d.summary_tokens = 20;
    assert_eq!(oldest.choose(&ranges, &d), vec![0, 1, 2]);
}

fn demand_after(request_tokens: u64, floor_tokens: u64) -> FoldDemand {
    demand(request_tokens).with_floor_tokens(floor_tokens)
}

#[test]
fn the_scheduled_policy_folds_rarely_and_a_lot_at_a_time() {
    let r = registry();
    // The growth's floor in tokens (34,000) is off: this budget is far below it.
    let scheduled = r
        .fold_policy(
            "fold.scheduled",
            &serde_json::json!({"min_growth_tokens": 0}),
        )
        .unwrap();
    // Budget 10,000: trigger 4,500, growth 4,500, ceiling 9,000, target 500.
    let ranges = [
        range(1, 1000),
        range(10, 1000),
        range(20, 1000),
        range(30, 1000),
    ];
    let none = |d: FoldDemand| scheduled.choose(&ranges, &d).is_empty();
    assert!(none(demand(4_400)), "under the trigger");
    // Past the trigger: down to the target in one go, oldest first (4,100 to save at
    // 900 a range: all four ranges).
    assert_eq!(scheduled.choose(&ranges, &demand(4_600)), vec![0, 1, 2, 3]);
    // A fold that could only bring the request to 4,000 does not fold again on the next
    // turns: the growth since it (4,500, as much as the trigger) gates the next one.
    assert!(none(demand_after(5_000, 4_000)));
    assert!(none(demand_after(8_400, 4_000)));
    assert_eq!(
        scheduled.choose(&ranges, &demand_after(8_500, 4_000)),
        vec![0, 1, 2, 3]
    );
    // The target is deep (500): from 4,600 a fifth range folds too (4,100 to save), where
    // a target of a tenth (3,600 to save) would stop at four.
    let five: Vec<_> = (0..5).map(|i| range(10 * i + 1, 1000)).collect();
    assert_eq!(scheduled.choose(&five, &demand(4_600)), vec![0, 1, 2, 3, 4]);
    // Past the ceiling it folds whatever the growth.
    assert!(none(demand_after(8_900, 8_800)));
    assert!(!none(demand_after(9_100, 9_000)));
    // With the default floor of 34,000 tokens of growth, a budget this small folds only
    // at the ceiling: its 4,500 of growth would rewrite the recent window too often.
    let floored = r.fold_policy("fold.scheduled", &Params::Null).unwrap();
    assert!(floored.choose(&ranges, &demand(8_900)).is_empty());
    assert!(
        floored
            .choose(&ranges, &demand_after(8_900, 1_000))
            .is_empty()
    );
    assert!(!floored.choose(&ranges, &demand(9_100)).is_empty());
    // Its params are checked.
    assert!(
        r.fold_policy(
            "fold.scheduled",
            &serde_json::json!({"trigger": 0.9, "ceiling": 0.8})
        )
        .is_err()
    );
    assert!(
        r.fold_policy(
            "fold.scheduled",
            &serde_json::json!({"target": 0.5, "trigger": 0.4})
        )
        .is_err()
    );
}

/// With `cost_aware`, the growth a fold waits for follows the request's growth per turn:
/// the fold comes once the cached reads it saves over its cycle pay for its rewrite
/// (`√(2 · 1.25 · floor · per_turn / 0.1)`), earlier than the fixed growth when the request
/// grows slowly and later when it grows fast; unknown growth falls back to the fixed rule.
#[test]
fn the_cost_aware_schedule_folds_when_the_saving_pays_for_the_rewrite() {
    let r = registry();
    // Without the growth's floor in tokens, which this small budget would never reach.
    let aware = r
        .fold_policy(
            "fold.scheduled",
            &serde_json::json!({"cost_aware": true, "min_growth_tokens": 0}),
        )
        .unwrap();
    let fixed = r
        .fold_policy(
            "fold.scheduled",
            &serde_json::json!({"min_growth_tokens": 0}),
        )
        .unwrap();
    let ranges = [range(1, 1000), range(10, 1000), range(20, 1000)];
    let at =
        |request: u64, per_turn: u64| demand_after(request, 4_000).with_per_turn_tokens(per_turn);
    let folds =
        |p: &Arc<dyn foldwire_core::FoldPolicy>, d: FoldDemand| !p.choose(&ranges, &d).is_empty();
    // 100 tokens a turn from a floor of 4,000: the rewrite pays for itself after a growth
    // of √(2 · 1.25 · 4,000 · 100 / 0.1) ≈ 3,162, before the fixed 4,500.
    assert!(!folds(&aware, at(7_100, 100)));
    assert!(folds(&aware, at(7_200, 100)));
    assert!(!folds(&fixed, at(7_200, 100)));
    // 400 a turn: ≈ 6,325 of growth, later than the fixed rule (the ceiling still binds).
    assert!(folds(&fixed, at(8_500, 400)));
    assert!(!folds(&aware, at(8_500, 400)));
    assert!(folds(&aware, at(9_100, 400)));
    // Growth per turn unknown: the fixed growth gates it.
    assert!(!folds(&aware, at(7_200, 0)));
    assert!(folds(&aware, at(8_500, 0)));
    // Prices are checked.
    assert!(
        r.fold_policy("fold.scheduled", &serde_json::json!({"read_price": 0.0}))
            .is_err()
    );
}

/// A stage built from the registry resolves its strategies then: an unknown name fails the
/// build, naming the stage and its param; a built stage folds and lays out against a turn
/// whose registry is empty (nothing is looked up per turn), while a strategy registered at
/// runtime (a hot-added plugin may be replaced) is built again on each turn.
#[tokio::test]
async fn stages_resolve_their_strategies_when_they_are_built() {
    let registry = registry();
    let typo = registry
        .stage("fold", &serde_json::json!({"policy": "fold.oldets_first"}))
        .err()
        .unwrap()
        .to_string();
    assert!(
        typo.contains("fold: param policy: ")
            && typo.contains("did you mean \"fold.oldest_first\"?"),
        "{typo}"
    );
    let layout_typo = registry
        .stage(
            "layout.head_window",
            &serde_json::json!({"layout": "layout.nope"}),
        )
        .err()
        .unwrap()
        .to_string();
    assert!(
        layout_typo.contains("layout.head_window: param layout: "),
        "{layout_typo}"
    );

    // A runtime policy that counts how often it is built.
    static BUILT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    registry
        .register(ComponentKind::FoldPolicy, "test.counted", "tests", |p| {
            BUILT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            registry_free_oldest(p)
        })
        .unwrap();

    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("refactor src/lib.rs");
    for i in 0..20 {
        let id = format!("call{i}");
        conv.turn(None, Some(&format!("step {i}")), &[(&id, "bash", "{}")])
            .results(&[(&id, &sized(&format!("output {i}"), 400))]);
    }
    conv.user("continue");
    let run = |policy: &'static str, cx: StageCx| {
        let registry = registry.clone();
        let body = conv.build();
        async move {
            let mut turn = turn_for(body, SessionState::default());
            turn.budget = Budget {
                window: 6_000,
                reserve: 0,
                calibration: 1.0,
            };
            let params = |name: &str| match name {
                "ranges.build" => serde_json::json!({"protection": {"recent_tokens": 1000}}),
                "fold" => serde_json::json!({"policy": policy}),
                _ => Params::Null,
            };
            for name in ["refs.mint", "ranges.build", "fold", "layout.head_window"] {
                let stage = registry.stage(name, &params(name)).unwrap();
                stage.run(&mut turn, &cx).await.unwrap();
            }
            turn.report.counter("fold.blocks_created")
        }
    };
    // Built with the pipeline: the turn's (empty) registry is never asked.
    let empty = StageCx::new(Arc::new(Registry::empty()));
    assert!(run("fold.oldest_first", empty).await > 0);
    // Registered at runtime: built when the stage is built, and again for the turn.
    let full = StageCx::new(registry.clone());
    let before = BUILT.load(std::sync::atomic::Ordering::SeqCst);
    assert!(run("test.counted", full).await > 0);
    assert_eq!(BUILT.load(std::sync::atomic::Ordering::SeqCst) - before, 2);
}

fn registry_free_oldest(
    params: &Params,
) -> Result<foldwire_core::Component, foldwire_core::BuildError> {
    foldwire_core::config::build_with::<foldwire_plugins::fold_policy::OldestFirst>(
        params,
        &foldwire_core::BuildCx::new(&Registry::empty()),
    )
}
