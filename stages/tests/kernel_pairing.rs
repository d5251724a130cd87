#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! pairing.repair: results moved next to their calls however far, stubs only when no result
//! exists, orphans dropped, split results joined; a proptest over every wire.

mod support;

use std::collections::HashSet;

use foldwire_core::{Conversation, MessageKind, Origin, SessionState, Stage, Wire};
use foldwire_stages::kernel::pairing_rules::violations;
use foldwire_stages::kernel::repair;
use foldwire_stages::pairing_repair::PairingRepair;
use proptest::prelude::*;
use support::{Conv, cx, texts, turn_for};

/// Moves unit `from` into a fresh wire message placed before unit `to` (at an entry
/// boundary, so no wire message is split).
fn move_to_fresh_entry(c: &mut Conversation, from: usize, to_boundary: usize) {
    let mut unit = c.messages.remove(from);
    unit.entry = c.push_entry(unit.role);
    let boundaries: Vec<usize> = (0..=c.messages.len())
        .filter(|&p| {
            p == 0 || p == c.messages.len() || c.messages[p - 1].entry != c.messages[p].entry
        })
        .collect();
    let at = boundaries[to_boundary % boundaries.len()];
    c.messages.insert(at, unit);
}

#[test]
fn a_valid_conversation_is_left_exactly_as_it_was() {
    for wire in Wire::ALL {
        let mut conv = Conv::new(wire);
        conv.user("q")
            .turn(
                Some("r"),
                Some("t"),
                &[("c1", "a", "{}"), ("c2", "b", "{}")],
            )
            .results(&[("c1", "x"), ("c2", "y")])
            .user("z");
        let before = conv.build();
        let mut after = before.clone();
        let report = repair(&mut after);
        assert!(report.is_clean(), "{wire}: {report:?}");
        assert_eq!(after, before);
    }
}

#[test]
fn a_result_far_away_is_brought_back_without_a_window() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("q").turn(None, None, &[("c1", "bash", "{}")]);
    for i in 0..12 {
        conv.user(&format!("filler {i}"));
    }
    conv.results(&[("c1", "late output")]);
    let mut c = conv.build();
    let report = repair(&mut c);
    assert_eq!((report.moved, report.stubs), (1, 0));
    assert_eq!(texts(&c)[2], "late output");
    assert!(violations(Wire::Anthropic, &c.messages).is_empty());
    assert_eq!(c.messages.len(), 15, "nothing lost");
}

#[test]
fn a_stub_only_when_no_result_exists_and_it_says_so() {
    let mut conv = Conv::new(Wire::OpenAiChat);
    conv.user("q")
        .turn(None, None, &[("c1", "bash", "{}")])
        .user("next");
    let mut c = conv.build();
    let report = repair(&mut c);
    assert_eq!(report.stubs, 1);
    let stub = &c.messages[2];
    assert_eq!(
        (stub.origin, stub.kind, stub.role),
        (
            Origin::Stub,
            MessageKind::ToolResult,
            foldwire_core::Role::Tool
        )
    );
    assert!(
        stub.text
            .contains("no result for tool call c1 (bash) exists"),
        "{}",
        stub.text
    );
    assert!(violations(Wire::OpenAiChat, &c.messages).is_empty());
}

#[test]
fn orphan_results_are_dropped() {
    let mut conv = Conv::new(Wire::Gemini);
    conv.user("q").results(&[("gone", "x")]).user("z");
    let mut c = conv.build();
    let report = repair(&mut c);
    assert_eq!(report.orphans_dropped, 1);
    assert_eq!(texts(&c), vec!["q", "z"]);
}

#[test]
fn parallel_results_split_over_messages_are_joined() {
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("q")
        .turn(None, None, &[("c1", "a", "{}"), ("c2", "b", "{}")])
        .results(&[("c1", "x")])
        .results(&[("c2", "y")])
        .user("z");
    let mut c = conv.build();
    let report = repair(&mut c);
    assert_eq!(report.joined, 1);
    assert_eq!(texts(&c), vec!["q", "{}", "{}", "x", "y", "z"]);
    assert_eq!(
        c.messages[3].entry, c.messages[4].entry,
        "both results in one user message"
    );
    assert!(violations(Wire::Anthropic, &c.messages).is_empty());
}

#[tokio::test]
async fn the_stage_counts_every_action() {
    let mut conv = Conv::new(Wire::OpenAiResponses);
    conv.user("q")
        .turn(None, None, &[("c1", "a", "{}")])
        .results(&[("zz", "orphan")])
        .user("z");
    let mut turn = turn_for(conv.build(), SessionState::default());
    PairingRepair.run(&mut turn, &cx()).await.unwrap();
    assert_eq!(turn.report.counter("pairing.stub_results"), 1);
    assert_eq!(turn.report.counter("pairing.orphan_results_dropped"), 1);
    assert!(
        turn.report
            .warnings
            .iter()
            .any(|w| w.code == "pairing_stub_results")
    );
}

fn wire_strategy() -> impl Strategy<Value = Wire> {
    prop_oneof![
        Just(Wire::Anthropic),
        Just(Wire::OpenAiChat),
        Just(Wire::OpenAiResponses),
        Just(Wire::Gemini)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(foldwire_test_kit::proptest_cases(300)))]
    #[test]
    fn repaired_sequences_obey_each_wire_and_keep_every_real_result(
        wire in wire_strategy(),
        turns in prop::collection::vec((0usize..4, any::<bool>(), any::<bool>()), 1..7),
        edits in prop::collection::vec((0u8..3, any::<usize>(), any::<usize>()), 0..8),
    ) {
        let mut conv = Conv::new(wire);
        conv.user("start");
        let mut n = 0;
        for (t, (calls, text, reasoning)) in turns.iter().enumerate() {
            let ids: Vec<String> = (0..*calls).map(|_| { n += 1; format!("call{n}") }).collect();
            let call_specs: Vec<(&str, &str, &str)> = ids.iter().map(|id| (id.as_str(), "tool", "{}")).collect();
            let text = text.then(|| format!("turn {t}"));
            conv.turn(reasoning.then_some("thinking"), text.as_deref().or(Some("act")), &call_specs);
            let outs: Vec<(String, String)> = ids.iter().map(|id| (id.clone(), format!("out of {id}"))).collect();
            let outs: Vec<(&str, &str)> = outs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            if !outs.is_empty() {
                conv.results(&outs);
            }
            conv.user(&format!("user {t}"));
        }
        let mut c = conv.build();
        for (op, a, b) in edits {
            if c.messages.is_empty() { break; }
            match op {
                0 => { let i = a % c.messages.len(); c.messages.remove(i); }
                _ => {
                    let results: Vec<usize> = c.messages.iter().enumerate()
                        .filter(|(_, u)| u.kind == MessageKind::ToolResult).map(|(i, _)| i).collect();
                    if !results.is_empty() {
                        move_to_fresh_entry(&mut c, results[a % results.len()], b);
                    }
                }
            }
        }
        let calls: HashSet<String> = c.messages.iter()
            .filter(|u| u.kind == MessageKind::ToolCall)
            .filter_map(|u| u.tool.as_ref().map(|t| t.call_id.clone())).collect();
        let real: HashSet<String> = c.messages.iter()
            .filter(|u| u.kind == MessageKind::ToolResult && u.tool.as_ref().is_some_and(|t| calls.contains(&t.call_id)))
            .map(|u| u.id.0.clone()).collect();
        let answered: HashSet<String> = c.messages.iter()
            .filter(|u| u.kind == MessageKind::ToolResult)
            .filter_map(|u| u.tool.as_ref().map(|t| t.call_id.clone())).collect();
        let before = c.messages.len();
        let report = repair(&mut c);
        let v = violations(wire, &c.messages);
        prop_assert!(v.is_empty(), "{wire}: {v:?}");
        let kept: HashSet<String> = c.messages.iter()
            .filter(|u| u.origin == Origin::Client && u.kind == MessageKind::ToolResult)
            .map(|u| u.id.0.clone()).collect();
        prop_assert_eq!(&kept, &real);
        let stubs = c.messages.iter().filter(|u| u.origin == Origin::Stub).count();
        prop_assert_eq!(stubs, calls.difference(&answered).count());
        prop_assert_eq!(stubs, report.stubs);
        prop_assert_eq!(c.messages.len(), before - report.orphans_dropped - report.duplicates_dropped + report.stubs);
    }
}
