//! Never silent loss (proptest): after `layout.head_window`, every unit the client stored is
//! on the wire, inside an active block, or the request was refused with every token
//! accounted for by zone; wire messages stay whole, each call is followed by its result, and
//! every Anthropic request keeps the cache-marker rules.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foldwire_test_kit::layout as common;

use common::*;
use foldwire_core::{
    Block, CharEstimator, Layout, MessageId, Role, SessionState, StageError, Wire,
};
use foldwire_plugins::layout::{
    HeadFill, HeadFirst, HeadFirstConfig, MoveHead, StoreOrderFill, StoreOrderFillConfig,
};
use foldwire_stages::layout_head_window::{HeadWindowConfig, cache_markers, lay_out, reset};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Shape {
    Text(usize),
    ToolRound(usize),
}

fn build(shapes: &[Shape]) -> Vec<(Role, Vec<B>)> {
    let mut out = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        match shape {
            Shape::Text(chars) => {
                let role = if out.len() % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                out.push((role, vec![text(&format!("t{i}"), *chars)]));
            }
            Shape::ToolRound(chars) => {
                out.push((
                    Role::Assistant,
                    vec![text(&format!("a{i}"), 60), B::Call(format!("c{i}"))],
                ));
                out.push((Role::User, vec![B::Result(format!("c{i}"), *chars)]));
            }
        }
    }
    out
}

fn layout(k: u8) -> Box<dyn Layout> {
    match k % 4 {
        0 => Box::new(StoreOrderFill::default()),
        1 => Box::new(StoreOrderFill::new(StoreOrderFillConfig {
            move_head: MoveHead::OnFill,
        })),
        2 => Box::new(HeadFirst::default()),
        _ => Box::new(HeadFirst::new(HeadFirstConfig {
            fill: HeadFill::Fill,
        })),
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (10usize..3_000).prop_map(Shape::Text),
        (10usize..6_000).prop_map(Shape::ToolRound),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(foldwire_test_kit::proptest_cases(200)))]
    #[test]
    fn every_unit_is_sent_folded_or_accounted_for(
        shapes in proptest::collection::vec(shape(), 1..24),
        split in 0usize..24,
        with_reset in any::<bool>(),
        folded in proptest::collection::vec(any::<bool>(), 24),
        budget in 300u64..12_000,
        head_tokens in 0u64..3_000,
        recent in 0u64..4_000,
        strategy in any::<u8>(),
    ) {
        let layout = layout(strategy);
        let config = HeadWindowConfig { head_tokens: Some(head_tokens), recent_tokens: Some(recent), ..HeadWindowConfig::default() };
        let all = build(&shapes);
        let split = split.min(all.len());

        // Turn 1: the first part, under a generous budget.
        let mut state = SessionState::default();
        let mut t = turn(conversation(Wire::Anthropic, &all[..split]), state, 10_000_000);
        lay_out(&mut t, layout.as_ref(), &CharEstimator, &config).unwrap();
        state = t.state;
        if with_reset {
            reset(&mut state, "Next topic.").unwrap();
        }

        // Turn 2: some whole text messages folded into active blocks (as the fold stage would).
        let mut request = Vec::new();
        let mut block_ids = Vec::new();
        for (i, msg) in all.iter().enumerate() {
            let is_text = msg.1.len() == 1 && matches!(msg.1[0], B::Text(..));
            if is_text && folded.get(i).copied().unwrap_or(false) {
                if let B::Text(label, _) = &msg.1[0] {
                    block_ids.push(MessageId(label.clone()));
                }
            } else {
                request.push(msg.clone());
            }
        }
        if !block_ids.is_empty() {
            let id = state.next_block_id();
            state.blocks.push(Block { id, message_ids: block_ids.clone().into(), ..Block::default() });
        }
        let conv = conversation(Wire::Anthropic, &request);
        let stored: Vec<MessageId> = conversation(Wire::Anthropic, &all).messages.iter().map(|m| m.id.clone()).collect();
        let sent_before: Vec<MessageId> = conv.messages.iter().map(|m| m.id.clone()).collect();
        let mut t = turn(conv, state, budget);
        match lay_out(&mut t, layout.as_ref(), &CharEstimator, &config) {
            Ok(_) => {
                let conv = t.conversation.as_ref().unwrap();
                let sent: Vec<MessageId> = conv.messages.iter().map(|m| m.id.clone()).collect();
                for id in &stored {
                    let on_wire = sent.contains(id);
                    let in_block = t.state.blocks.iter().any(|b| b.active && b.message_ids.contains(id));
                    prop_assert!(on_wire || in_block, "{id} lost");
                }
                let extra = sent.len() - sent_before.len();
                prop_assert_eq!(extra, usize::from(with_reset), "only the transition is added");
                // Wire messages whole; each call's message followed by its result's.
                let entries: Vec<usize> = conv.messages.iter().map(|m| m.entry).collect();
                for (i, e) in entries.iter().enumerate() {
                    if let Some(later) = entries.iter().skip(i + 1).position(|x| x == e) {
                        prop_assert!(later == 0 || entries[i + 1..i + 1 + later].iter().all(|x| x == e), "entry {e} split");
                    }
                }
                for (p, m) in conv.messages.iter().enumerate() {
                    if let (foldwire_core::MessageKind::ToolCall, Some(link)) = (m.kind, &m.tool) {
                        let next = conv.messages.iter().skip(p + 1).find(|x| x.entry != m.entry).unwrap();
                        prop_assert_eq!(next.id.0.clone(), format!("result-{}", link.call_id));
                    }
                }
                prop_assert!(cache_markers::check_rules(conv).is_ok());
            }
            Err(StageError::Refused(r)) => {
                let conv = t.conversation.as_ref().unwrap();
                for id in &sent_before {
                    prop_assert!(conv.messages.iter().any(|m| &m.id == id), "{id} dropped by a refusal");
                }
                let n = &r.numbers;
                prop_assert_eq!(n["frame"] + n["head"] + n["history"] + n["recent"], n["request"]);
                prop_assert!(n["request"] > n["budget"]);
                prop_assert!(!r.levers.is_empty());
            }
            Err(e) => prop_assert!(false, "unexpected error: {e}"),
        }
    }
}
