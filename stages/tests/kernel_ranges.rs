#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! ranges.build: compressible ranges outside the protected zone, protected tools and pinned
//! units; never splitting linked units; small fragments dropped; no overlaps.

mod support;

use foldwire_core::{Block, BlockId, CharEstimator, RangeInfo, Ref, Registry, SessionState, Wire};
use foldwire_stages::kernel::{Protection, RangesConfig, compressible_ranges};
use foldwire_stages::ranges_build::CLIENT_TOKENS_COUNTER;
use support::{Conv, cx, minted, sized, turn_for};

fn open() -> RangesConfig {
    RangesConfig {
        protection: Protection {
            recent_messages: 0,
            recent_tokens: 0,
            last_user: false,
            protected_tools: vec![],
            latest_tools: vec![],
            latest_count: 0,
        },
        min_tokens: 1,
        split_at_user_after: 0,
        max_tokens: None,
    }
}

fn spans(ranges: &[RangeInfo]) -> Vec<(u32, u32)> {
    ranges.iter().map(|r| (r.start.0, r.end.0)).collect()
}

fn ranges_of(conv: &Conv, config: &RangesConfig) -> Vec<RangeInfo> {
    let mut state = SessionState::default();
    let c = minted(conv, &mut state);
    compressible_ranges(&c, &state, config, &CharEstimator)
}

fn chat(n: usize) -> Conv {
    let mut c = Conv::new(Wire::OpenAiChat);
    for i in 0..n {
        if i % 2 == 0 {
            c.user(&format!("user {i}"));
        } else {
            c.assistant(&format!("assistant {i}"));
        }
    }
    c
}

#[test]
fn everything_is_one_range_when_nothing_is_protected() {
    let r = ranges_of(&chat(6), &open());
    assert_eq!(spans(&r), vec![(1, 6)]);
    assert_eq!(r[0].messages, 6);
    assert!(r[0].tokens > 0);
}

#[test]
fn the_last_messages_the_last_tokens_and_the_last_user_are_protected() {
    let mut cfg = open();
    cfg.protection.recent_messages = 2;
    assert_eq!(spans(&ranges_of(&chat(8), &cfg)), vec![(1, 6)]);
    cfg.protection.last_user = true;
    // The last user (m00007) is protected too, even if the count rule would not reach it.
    let mut conv = chat(7);
    conv.assistant("a7").assistant("a8");
    assert_eq!(spans(&ranges_of(&conv, &cfg)), vec![(1, 6)]);
    // By tokens: the newest units holding 300 tokens.
    let mut conv = Conv::new(Wire::Anthropic);
    for i in 0..6 {
        conv.user(&sized(&format!("u{i}"), 100));
    }
    let mut cfg = open();
    cfg.protection.recent_tokens = 250;
    assert_eq!(spans(&ranges_of(&conv, &cfg)), vec![(1, 3)]);
    // Defaults: 5 messages.
    let defaults = RangesConfig {
        min_tokens: 1,
        ..RangesConfig::default()
    };
    let mut conv = Conv::new(Wire::Anthropic);
    for i in 0..10 {
        conv.user(&sized(&format!("u{i}"), 2000));
    }
    assert_eq!(spans(&ranges_of(&conv, &defaults)).last().unwrap().1, 5);
}

#[test]
fn protected_tools_and_pinned_units_are_barriers() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a")
        .turn(None, None, &[("c1", "Skill_Load", "{}")])
        .results(&[("c1", "skill text")])
        .user("b")
        .user_remote_image("https://h/x.png")
        .user("c")
        .user("d");
    let mut cfg = open();
    cfg.protection.protected_tools = vec!["skill_*".into()];
    // m1=a, m2 call, m3 result (protected), m4=b, image pinned (no ref), m5=c, m6=d.
    assert_eq!(spans(&ranges_of(&conv, &cfg)), vec![(1, 1), (4, 4), (5, 6)]);
}

#[test]
fn a_call_is_never_split_from_its_result_nor_reasoning_from_its_act() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a")
        .turn(
            Some("think"),
            Some("act"),
            &[("c1", "bash", r#"{"command":"ls"}"#)],
        )
        .results(&[("c1", "out")]);
    let mut cfg = open();
    cfg.protection.recent_messages = 1; // only the result is protected…
    // …so its call, and the reasoning and text of that act, are withdrawn with it.
    assert_eq!(spans(&ranges_of(&conv, &cfg)), vec![(1, 1)]);
    cfg.protection.recent_messages = 0;
    let r = ranges_of(&conv, &cfg);
    assert_eq!(spans(&r), vec![(1, 5)]);
    assert_eq!(r[0].tool_calls.get("bash"), Some(&1));
}

#[test]
fn small_fragments_are_dropped_and_long_runs_cut_at_user_messages() {
    let mut cfg = open();
    cfg.min_tokens = 10_000;
    assert!(ranges_of(&chat(6), &cfg).is_empty());
    let mut cfg = open();
    cfg.split_at_user_after = 3;
    // user at 1,3,5,7: cut before a user once the run holds 3 units.
    assert_eq!(spans(&ranges_of(&chat(8), &cfg)), vec![(1, 4), (5, 8)]);
    // A cut that would separate a call from its result does not happen.
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a")
        .assistant("b")
        .assistant("c")
        .turn(None, None, &[("c1", "t", "{}")]);
    conv.user("interjection").results(&[("c1", "late")]);
    let r = ranges_of(&conv, &cfg);
    for range in &r {
        let covers = |n: u32| range.start.0 <= n && n <= range.end.0;
        assert_eq!(
            covers(4),
            covers(6),
            "call m00004 and result m00006 together: {r:?}"
        );
    }
}

// acp §26 #91
#[test]
fn ranges_span_archivable_media_and_leave_an_unrecoverable_result_with_its_call() {
    use foldwire_core::{MediaClass, MediaRef};
    let media = |class: MediaClass| MediaRef {
        kind: "image".into(),
        media_type: Some("image/png".into()),
        class,
        pointer: "/source".into(),
        size: Some(10),
    };
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a")
        .user("inline image")
        .user("b")
        .turn(None, None, &[("c1", "screenshot", "{}")])
        .results(&[("c1", "remote image")])
        .user("c");
    let mut c = conv.build();
    c.messages[1].media.push(media(MediaClass::Archivable));
    c.messages[4].media.push(media(MediaClass::Unrecoverable {
        reason: "remote URL https://h/x.png".into(),
    }));
    let mut state = SessionState::default();
    foldwire_stages::refs_mint::mint_refs(&mut state, &mut c);
    // a, inline, b, call get m1..m4; the result holds unrecoverable media (no ref); c is m5.
    assert_eq!(c.messages[4].r#ref, None);
    let r = compressible_ranges(&c, &state, &open(), &CharEstimator);
    assert_eq!(
        spans(&r),
        vec![(1, 3), (5, 5)],
        "the call m00004 is never offered"
    );
}

// acp §26 #87
#[test]
fn the_count_and_token_rules_protect_their_union_with_the_counter_given() {
    let mut conv = Conv::new(Wire::Anthropic);
    for i in 0..6 {
        conv.user(&sized(&format!("u{i}"), 100));
    }
    let mut cfg = open();
    cfg.protection.recent_tokens = 250;
    cfg.protection.recent_messages = 1;
    assert_eq!(
        spans(&ranges_of(&conv, &cfg)),
        vec![(1, 3)],
        "tokens reach further"
    );
    cfg.protection.recent_messages = 4;
    assert_eq!(
        spans(&ranges_of(&conv, &cfg)),
        vec![(1, 2)],
        "the count reaches further"
    );
    // A counter that sees twice the tokens shrinks the token zone to half the messages.
    #[derive(Debug)]
    struct Double;
    impl foldwire_core::TokenEstimator for Double {
        fn name(&self) -> &'static str {
            "double"
        }
        fn text_tokens(&self, text: &str) -> u64 {
            2 * CharEstimator.text_tokens(text)
        }
    }
    cfg.protection.recent_messages = 0;
    let mut state = SessionState::default();
    let c = minted(&conv, &mut state);
    let by_chars = compressible_ranges(&c, &state, &cfg, &CharEstimator);
    let doubled = compressible_ranges(&c, &state, &cfg, &Double);
    assert_eq!(spans(&by_chars), vec![(1, 3)]);
    assert_eq!(spans(&doubled), vec![(1, 4)]);
}

// acp §26 #92
#[test]
fn ranges_at_the_minimum_are_kept_and_one_token_less_is_dropped() {
    let conv = chat(6);
    let size = ranges_of(&conv, &open())[0].tokens;
    let mut cfg = open();
    cfg.min_tokens = size;
    assert_eq!(
        spans(&ranges_of(&conv, &cfg)),
        vec![(1, 6)],
        "exactly the minimum"
    );
    cfg.min_tokens = size + 1;
    assert!(ranges_of(&conv, &cfg).is_empty(), "one token short");
}

#[test]
fn folded_units_are_not_offered_again_and_ranges_never_overlap() {
    let conv = chat(8);
    let mut state = SessionState::default();
    let c = minted(&conv, &mut state);
    state.blocks.push(Block {
        id: BlockId(1),
        effective: vec![Ref(3), Ref(4)].into(),
        direct: vec![Ref(3), Ref(4)].into(),
        span: (Ref(3), Ref(4)),
        ..Block::default()
    });
    let r = compressible_ranges(&c, &state, &open(), &CharEstimator);
    assert_eq!(spans(&r), vec![(1, 2), (5, 8)]);
    for w in r.windows(2) {
        assert!(w[0].end < w[1].start);
    }
}

/// The stage reports the request as it reached it, measured the way the layout measures
/// what is sent (the proxy charts it as the client's tokens, not reading the body again):
/// every unit, every message's envelope and the frame, so it agrees with a pass over the
/// whole body to within a token per message, and grows by what a turn appends.
#[tokio::test]
async fn the_stage_reports_the_request_as_received_from_its_estimates() {
    foldwire_stages::link();
    let registry = Registry::from_inventory().unwrap();
    let stage = registry
        .stage("ranges.build", &serde_json::Value::Null)
        .unwrap();
    let measured = |conv: &Conv| {
        let mut state = SessionState::default();
        let c = minted(conv, &mut state);
        let whole = foldwire_stages::kernel::measure(&c, &CharEstimator).total();
        let scanned = foldwire_wire::tokens::raw_tokens(Wire::Anthropic, &c.source, &CharEstimator);
        let messages = c.entries.len() as u64;
        let mut turn = turn_for(c, state);
        let stage = &stage;
        async move {
            stage.run(&mut turn, &cx()).await.unwrap();
            let reported = turn.report.counter(CLIENT_TOKENS_COUNTER);
            (reported, whole, scanned, messages)
        }
    };
    let mut conv = chat(30);
    let (reported, whole, scanned, messages) = measured(&conv).await;
    assert_eq!(reported, whole);
    assert!(
        reported.abs_diff(scanned) <= messages,
        "{reported} vs {scanned}"
    );
    conv.user(&sized("appended", 4_000));
    let (grown, ..) = measured(&conv).await;
    assert!(
        (reported + 4_000..=reported + 4_020).contains(&grown),
        "{reported} -> {grown}"
    );
}

#[tokio::test]
async fn the_stage_takes_params_and_stores_ranges_on_the_turn() {
    foldwire_stages::link();
    let registry = Registry::from_inventory().unwrap();
    let params = serde_json::json!({"protection": {"recent_messages": 2, "recent_tokens": 0, "last_user": false}, "min_tokens": 1});
    let stage = registry.stage("ranges.build", &params).unwrap();
    let mut state = SessionState::default();
    let c = minted(&chat(6), &mut state);
    let mut turn = turn_for(c, state);
    // No head window: on a first turn the opening messages would be the head.
    turn.options.head_tokens = Some(0);
    stage.run(&mut turn, &cx()).await.unwrap();
    assert_eq!(spans(&turn.ranges), vec![(1, 4)]);
    assert_eq!(turn.report.counter("ranges.compressible"), 1);
    // The range cap comes from the budget unless set: a tenth of the available tokens.
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("go");
    for i in 0..20 {
        let id = format!("c{i}");
        conv.turn(None, None, &[(&id, "bash", "{}")])
            .results(&[(&id, &sized("out", 400))]);
    }
    let params = serde_json::json!({"protection": {"recent_messages": 0, "recent_tokens": 0, "last_user": false}, "min_tokens": 1});
    let stage = registry.stage("ranges.build", &params).unwrap();
    let run = |window: u64| {
        let mut state = SessionState::default();
        let c = minted(&conv, &mut state);
        let mut turn = turn_for(c, state);
        turn.options.head_tokens = Some(0);
        turn.budget = turn.budget.with_window(window);
        let available = turn.budget.available();
        let stage = &stage;
        async move {
            stage.run(&mut turn, &cx()).await.unwrap();
            (turn.ranges, available)
        }
    };
    let (wide, _) = run(1_000_000).await;
    assert_eq!(wide.len(), 1);
    let (narrow, available) = run(8_000).await;
    assert!(narrow.len() > 3, "{:?}", spans(&narrow));
    // No range passes the cap by more than one call and its result.
    let biggest_pair = wide[0].tokens / 20 + 1;
    assert!(
        narrow
            .iter()
            .all(|r| r.tokens <= available / 10 + biggest_pair),
        "{:?}",
        narrow.iter().map(|r| r.tokens).collect::<Vec<_>>()
    );
    let bad = registry.stage("ranges.build", &serde_json::json!({"recent": 1}));
    let Err(err) = bad else {
        panic!("unknown param accepted")
    };
    assert!(err.to_string().contains("recent"));
    for name in ["refs.mint", "ranges.build", "pairing.repair"] {
        assert!(
            registry.stage(name, &serde_json::Value::Null).is_ok(),
            "{name}"
        );
    }
    // `fold` resolves its policy when it is built; this crate links none.
    let fold = registry
        .stage("fold", &serde_json::Value::Null)
        .err()
        .unwrap();
    assert!(fold.to_string().contains("fold: param policy: "), "{fold}");
}

#[test]
fn a_tool_loop_without_user_text_is_cut_into_ranges_of_at_most_the_token_cap() {
    // An agent's loop: one user text, then call / result pairs, two of them parallel calls
    // whose results come back together.
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("do the task");
    for i in 0..12 {
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        if i % 5 == 2 {
            conv.turn(None, None, &[(&a, "bash", "{}"), (&b, "bash", "{}")])
                .results(&[(&a, &sized("out", 400)), (&b, &sized("out", 400))]);
        } else {
            conv.turn(None, None, &[(&a, "bash", "{}")])
                .results(&[(&a, &sized("out", 400))]);
        }
    }
    let whole = ranges_of(&conv, &open());
    assert_eq!(whole.len(), 1, "no user text: one range without a cap");
    let mut cfg = open();
    cfg.max_tokens = Some(250);
    let cut = ranges_of(&conv, &cfg);
    assert!(cut.len() >= 4, "{:?}", spans(&cut));
    // Contiguous, covering exactly what the uncapped range covered.
    assert_eq!(cut.first().unwrap().start, whole[0].start);
    assert_eq!(cut.last().unwrap().end, whole[0].end);
    for pair in cut.windows(2) {
        assert_eq!(pair[0].end.0 + 1, pair[1].start.0, "{:?}", spans(&cut));
    }
    assert_eq!(cut.iter().map(|r| r.tokens).sum::<u64>(), whole[0].tokens);
    // Each range stops at the first clean boundary past the cap: never a call without its
    // result (every range holds as many calls as results).
    let state_conv = {
        let mut state = SessionState::default();
        minted(&conv, &mut state)
    };
    for r in &cut {
        let units: Vec<_> = state_conv
            .messages
            .iter()
            .filter(|u| u.r#ref.is_some_and(|x| r.start.0 <= x.0 && x.0 <= r.end.0))
            .collect();
        let calls = units
            .iter()
            .filter(|u| u.kind == foldwire_core::MessageKind::ToolCall)
            .count();
        let results = units
            .iter()
            .filter(|u| u.kind == foldwire_core::MessageKind::ToolResult)
            .count();
        assert_eq!(
            calls, results,
            "range {}..{} splits a call from its result",
            r.start, r.end
        );
    }
}

/// An agent reading files between shell calls: m1 user, then call/result pairs
/// Read (m2–m3), bash (m4–m5), read_file (m6–m7), bash (m8–m9), inspect_tree (m10–m11),
/// bash (m12–m13).
fn reading_agent() -> Conv {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("go");
    for (id, tool) in [
        ("c1", "Read"),
        ("c2", "bash"),
        ("c3", "read_file"),
        ("c4", "bash"),
        ("c5", "inspect_tree"),
        ("c6", "bash"),
    ] {
        conv.turn(None, None, &[(id, tool, "{}")])
            .results(&[(id, &format!("{tool} output"))]);
    }
    conv
}

#[test]
fn the_latest_read_results_stay_out_of_ranges_and_older_ones_fold() {
    // acp §26 #76 (protectedLatestTools): the newest read/inspect results stay verbatim.
    let defaults = Protection::default();
    let mut cfg = open();
    cfg.protection.latest_tools = defaults.latest_tools.clone();
    cfg.protection.latest_count = defaults.latest_count;
    // The default two: inspect_tree (m10–m11) and read_file (m6–m7); the older Read folds.
    assert_eq!(
        spans(&ranges_of(&reading_agent(), &cfg)),
        vec![(1, 5), (8, 9), (12, 13)]
    );
    // The count is configurable: three keeps the Read (m2–m3) as well.
    cfg.protection.latest_count = 3;
    assert_eq!(
        spans(&ranges_of(&reading_agent(), &cfg)),
        vec![(1, 1), (4, 5), (8, 9), (12, 13)]
    );
    // So are the names (globs): the newest bash call is kept, every read folds.
    cfg.protection.latest_tools = vec!["BA?H".into()];
    cfg.protection.latest_count = 1;
    assert_eq!(spans(&ranges_of(&reading_agent(), &cfg)), vec![(1, 11)]);
    // 0 turns it off.
    cfg.protection.latest_count = 0;
    assert_eq!(spans(&ranges_of(&reading_agent(), &cfg)), vec![(1, 13)]);
}

#[test]
fn a_restore_result_at_the_tail_stays_and_so_does_the_last_user() {
    // acp §26 #76: acp lets a restore (decompress) result at the tail fold alone; foldwire
    // keeps the model's latest `restore` verbatim (see `Protection::latest_tools`). The last
    // user message stays protected in both.
    let mut conv = Conv::new(Wire::OpenAiChat);
    conv.user("start")
        .turn(None, None, &[("c1", "bash", "{}")])
        .results(&[("c1", "ok")])
        .user("show me m00002 again")
        .turn(None, None, &[("c2", "restore", r#"{"id":"m00002"}"#)])
        .results(&[("c2", "restored text")]);
    let cfg = RangesConfig {
        protection: Protection {
            recent_messages: 0,
            recent_tokens: 0,
            ..Protection::default()
        },
        ..open()
    };
    // m1 start, m2–m3 bash, m4 last user (protected), m5–m6 restore (protected).
    assert_eq!(spans(&ranges_of(&conv, &cfg)), vec![(1, 3)]);
}

#[tokio::test]
async fn the_stage_takes_latest_tool_params_with_defaults() {
    // acp §26 #76: `protection.latest_tools` / `latest_count` through `ranges.build` params.
    foldwire_stages::link();
    let registry = Registry::from_inventory().unwrap();
    let run = |params: serde_json::Value| {
        let stage = registry.stage("ranges.build", &params).unwrap();
        let mut state = SessionState::default();
        let c = minted(&reading_agent(), &mut state);
        let mut turn = turn_for(c, state);
        turn.options.head_tokens = Some(0);
        async move {
            stage.run(&mut turn, &cx()).await.unwrap();
            turn
        }
    };
    let open = serde_json::json!({"recent_messages": 0, "recent_tokens": 0, "last_user": false});
    // Defaulted: the two newest read/inspect calls stay out.
    let turn = run(serde_json::json!({"protection": open, "min_tokens": 1})).await;
    assert_eq!(spans(&turn.ranges), vec![(1, 5), (8, 9), (12, 13)]);
    let used: Protection = foldwire_stages::ranges_build::UsedProtection::of(&turn);
    assert_eq!(used.latest_count, 2);
    assert!(used.latest_tools.iter().any(|t| t == "restore"));
    // Set: only the newest `read*` call.
    let mut set = open.clone();
    set["latest_tools"] = serde_json::json!(["read*"]);
    set["latest_count"] = 1.into();
    let turn = run(serde_json::json!({"protection": set, "min_tokens": 1})).await;
    assert_eq!(spans(&turn.ranges), vec![(1, 5), (8, 13)]);
    // Typed and closed: a wrong type or an unknown field is refused.
    for (bad, says) in [
        (
            serde_json::json!({"protection": {"latest_count": "two"}}),
            "usize",
        ),
        (
            serde_json::json!({"protection": {"latest_tool": ["read"]}}),
            "latest_tool",
        ),
    ] {
        let Err(err) = registry.stage("ranges.build", &bad) else {
            panic!("bad params accepted: {bad}")
        };
        assert!(err.to_string().contains(says), "{err}");
    }
}

// acp §26 #89: a range reports how much of it is tool traffic; merged ranges weigh each part
// by its units (2 tool units of 2, then 0 of 3: 40% tool, 60% text).
#[test]
fn merged_ranges_report_their_tool_and_text_share() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("look")
        .turn(None, Some("reading"), &[("c1", "read_file", "{}")])
        .results(&[("c1", "contents")]);
    let r = ranges_of(&conv, &open());
    assert_eq!((r[0].messages, r[0].tool_units), (4, 2));
    assert_eq!((r[0].tool_percent(), r[0].text_percent()), (50, 50));

    let mut a = r[0].clone();
    a.messages = 2;
    a.tool_units = 2;
    let mut b = ranges_of(&chat(3), &open())[0].clone();
    b.start = Ref(10);
    b.end = Ref(12);
    assert_eq!((b.messages, b.tool_units), (3, 0));
    let tokens = a.tokens + b.tokens;
    a.absorb(&b);
    assert_eq!(
        (a.start, a.end, a.messages, a.tokens),
        (Ref(1), Ref(12), 5, tokens)
    );
    assert_eq!((a.tool_percent(), a.text_percent()), (40, 60));
    assert_eq!(a.tool_calls.get("read_file"), Some(&1));
}

// acp §26 #90: exchanges too small for a summary each merge, side by side, into ranges that
// reach the minimum, where they used to be dropped one by one; a run that never reaches it
// is still left out, and a range big enough alone stays as it is.
#[test]
fn tiny_exchanges_merge_into_ranges_that_reach_the_minimum() {
    let mut cfg = open();
    cfg.split_at_user_after = 2;
    let conv = chat(12);
    let pieces = ranges_of(&conv, &cfg);
    assert_eq!(
        spans(&pieces),
        vec![(1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12)]
    );
    let piece = pieces.iter().map(|r| r.tokens).max().unwrap();
    cfg.min_tokens = piece * 2;
    let merged = ranges_of(&conv, &cfg);
    assert!(
        !merged.is_empty() && merged.len() < pieces.len(),
        "{merged:?}"
    );
    for r in &merged {
        assert!(r.tokens >= cfg.min_tokens, "{r:?}");
    }
    for pair in merged.windows(2) {
        assert!(
            pair[0].end < pair[1].start,
            "disjoint and in order: {merged:?}"
        );
    }
    assert_eq!(merged[0].start, Ref(1));
    // No run reaches a minimum above the whole conversation.
    cfg.min_tokens = pieces.iter().map(|r| r.tokens).sum::<u64>() + 1;
    assert!(ranges_of(&conv, &cfg).is_empty());
    // A pinned unit between two small runs keeps them apart.
    let mut split = chat(4);
    split.user("pinned").pin_last("host");
    split
        .user("user 0 again")
        .assistant("assistant 1 again")
        .user("user 2 again")
        .assistant("assistant 3 again");
    cfg.min_tokens = pieces[0].tokens + pieces[1].tokens;
    let r = ranges_of(&split, &cfg);
    assert_eq!((r[0].start, r[0].messages), (Ref(1), 4), "{r:?}");
    assert!(
        r.iter().all(|x| x.messages == 4),
        "nothing merges across the pin: {r:?}"
    );
}

#[test]
fn a_server_or_built_in_tools_call_and_result_are_never_split() {
    // Anthropic's server tools answer inside the assistant's own message; a Responses
    // built-in tool's output is an item of a type of its own. Either way the call and its
    // result are kept as other units, and must fold together, or the provider refuses the
    // one left behind. The protected tail here reaches back to the result but not to its
    // call.
    let anthropic = r#"{"model":"m","messages":[
 {"role":"user","content":"find it"},
 {"role":"assistant","content":[{"type":"text","text":"Searching."}]},
 {"role":"user","content":"go on"},
 {"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},{"type":"text","text":"Found."}]}
]}"#;
    let responses = r#"{"model":"m","input":[
 {"role":"user","content":"find it"},
 {"role":"assistant","content":"Looking."},
 {"role":"user","content":"go on"},
 {"type":"shell_call","id":"sh_1","call_id":"call_sh","action":{"commands":["ls"]},"status":"completed"},
 {"type":"shell_call_output","call_id":"call_sh","output":[{"stdout":"a.rs","stderr":"","outcome":{"type":"exit","exit_code":0}}]},
 {"role":"assistant","content":"Found."}
]}"#;
    for (wire, body) in [
        (Wire::Anthropic, anthropic),
        (Wire::OpenAiResponses, responses),
    ] {
        let mut conv = foldwire_wire::request::decode(wire, body.into()).unwrap();
        let mut state = SessionState::default();
        foldwire_stages::refs_mint::mint_refs(&mut state, &mut conv);
        let mut cfg = open();
        cfg.protection.recent_messages = 2;
        let ranges = compressible_ranges(&conv, &state, &cfg, &CharEstimator);
        let call = conv.messages[3].r#ref.unwrap();
        let result = conv.messages[4].r#ref.unwrap();
        for r in &ranges {
            let holds = |x: Ref| r.start <= x && x <= r.end;
            assert_eq!(
                holds(call),
                holds(result),
                "{wire}: {:?} splits the pair",
                spans(&ranges)
            );
        }
        assert_eq!(spans(&ranges), vec![(1, 3)], "{wire}");
    }
}
