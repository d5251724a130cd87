#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! refs.mint: first-seen order, monotonic, never reused, surviving restarts, pinned units
//! held back and later minted fresh.

mod support;

use foldwire_core::{Message, Origin, Pin, Ref, SessionState, Stage, Wire};
use foldwire_stages::refs_mint::{RefsMint, mint_refs};
use support::{Conv, cx, turn_for};

fn refs(c: &foldwire_core::Conversation) -> Vec<Option<Ref>> {
    c.messages.iter().map(|u| u.r#ref).collect()
}

#[test]
fn refs_are_minted_in_first_seen_order() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a").assistant("b").user("c");
    let mut c = conv.build();
    let report = mint_refs(&mut state, &mut c);
    assert_eq!(refs(&c), vec![Some(Ref(1)), Some(Ref(2)), Some(Ref(3))]);
    assert_eq!(report.minted, 3);
    assert_eq!(state.refs[1].message, c.messages[1].id);
    assert_eq!(Ref(2).to_string(), "m00002");
}

#[test]
fn known_units_keep_their_refs_and_new_ones_continue_the_sequence() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a").assistant("b");
    let mut first = conv.build();
    mint_refs(&mut state, &mut first);
    conv.user("c");
    let mut second = conv.build();
    let report = mint_refs(&mut state, &mut second);
    assert_eq!(
        refs(&second),
        vec![Some(Ref(1)), Some(Ref(2)), Some(Ref(3))]
    );
    assert_eq!((report.known, report.minted), (2, 1));
}

#[test]
fn history_cut_reordered_or_repeated_keeps_each_units_ref() {
    // refs.mint walks the refs in mint order and falls back to a lookup when the client's
    // order differs: every path must give each unit the ref minted for its bytes.
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    for t in ["a", "b", "c", "d", "e", "f"] {
        conv.user(t);
    }
    let mut first = conv.build();
    mint_refs(&mut state, &mut first);
    let by_text = |c: &foldwire_core::Conversation| -> Vec<(String, Option<Ref>)> {
        c.messages
            .iter()
            .map(|u| (u.text.as_str().to_owned(), u.r#ref))
            .collect()
    };
    let mut conv = Conv::new(Wire::Anthropic);
    for t in ["c", "b", "new", "f", "e", "a", "d"] {
        conv.user(t);
    }
    let mut second = conv.build();
    let report = mint_refs(&mut state, &mut second);
    let expected = [
        ("c", 3),
        ("b", 2),
        ("new", 7),
        ("f", 6),
        ("e", 5),
        ("a", 1),
        ("d", 4),
    ];
    let expected: Vec<(String, Option<Ref>)> = expected
        .iter()
        .map(|(t, r)| ((*t).to_owned(), Some(Ref(*r))))
        .collect();
    assert_eq!(by_text(&second), expected);
    assert_eq!((report.known, report.minted), (6, 1));
}

#[test]
fn refs_survive_a_restart_through_the_state_file() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::OpenAiChat);
    conv.user("a").assistant("b");
    mint_refs(&mut state, &mut conv.build());
    let reloaded = SessionState::from_json(&state.to_json().unwrap()).unwrap();
    let mut state = reloaded;
    conv.user("c");
    let mut c = conv.build();
    mint_refs(&mut state, &mut c);
    assert_eq!(refs(&c), vec![Some(Ref(1)), Some(Ref(2)), Some(Ref(3))]);
}

#[test]
fn a_number_is_never_reused_even_when_its_message_disappears() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("old");
    mint_refs(&mut state, &mut conv.build());
    // The client now sends different history: the new message must not get m00001.
    let mut other = Conv::new(Wire::Anthropic);
    other.user("new");
    let mut c = other.build();
    mint_refs(&mut state, &mut c);
    assert_eq!(refs(&c), vec![Some(Ref(2))]);
}

#[test]
fn pinned_units_get_no_number_and_consume_none() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a")
        .user_remote_image("https://x/y.png")
        .user("b")
        .pin_last("host rule")
        .user("c");
    let mut c = conv.build();
    let report = mint_refs(&mut state, &mut c);
    assert_eq!(refs(&c), vec![Some(Ref(1)), None, None, Some(Ref(2))]);
    assert_eq!(report.held_back, 2);
}

#[test]
fn a_held_back_unit_gets_a_fresh_number_once_foldable() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a")
        .user("held")
        .pin_last("archive failed")
        .user("b");
    let mut c = conv.build();
    mint_refs(&mut state, &mut c);
    assert_eq!(refs(&c), vec![Some(Ref(1)), None, Some(Ref(2))]);
    // Next turn the pin is gone: the unit gets m00003, never an old or skipped number.
    let mut c2 = conv.build();
    c2.messages[1].pin = None;
    mint_refs(&mut state, &mut c2);
    assert_eq!(refs(&c2), vec![Some(Ref(1)), Some(Ref(3)), Some(Ref(2))]);
}

#[test]
fn summaries_stubs_and_pinned_known_units_carry_no_ref() {
    let mut state = SessionState::default();
    let mut conv = Conv::new(Wire::Anthropic);
    conv.user("a").user("b");
    let mut c = conv.build();
    mint_refs(&mut state, &mut c);
    let mut c2 = conv.build();
    c2.messages.push(Message::synthesized(
        0,
        foldwire_core::Role::User,
        "s",
        Origin::Summary(foldwire_core::BlockId(1)),
        bytes::Bytes::new(),
    ));
    c2.messages[0].pin = Some(Pin::ArchiveFailed("timeout".into()));
    mint_refs(&mut state, &mut c2);
    assert_eq!(refs(&c2), vec![None, Some(Ref(2)), None]);
    assert_eq!(
        state.next_ref, 3,
        "nothing minted for the summary or the pinned unit"
    );
    // Unpinned again, it finds its own ref: a ref names one message forever.
    let mut c3 = conv.build();
    mint_refs(&mut state, &mut c3);
    assert_eq!(refs(&c3), vec![Some(Ref(1)), Some(Ref(2))]);
}

#[tokio::test]
async fn the_stage_counts_what_it_did() {
    let mut conv = Conv::new(Wire::Gemini);
    conv.user("a").user_remote_image("https://x/y.png");
    let mut turn = turn_for(conv.build(), SessionState::default());
    RefsMint.run(&mut turn, &cx()).await.unwrap();
    assert_eq!(turn.report.counter("refs.minted"), 1);
    assert_eq!(turn.report.counter("refs.held_back"), 1);
    assert_eq!(RefsMint.requires(), &[foldwire_core::Fact::Decoded]);
}
