#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `tools.inject`: the tool loop's tools and notes are written by the codec in the turn's
//! own encode, in each wire's shape, and every byte the client sent before the additions
//! stays where it was.

use std::sync::Arc;

use bytes::Bytes;
use foldwire_core::{Registry, SessionId, SessionState, Stage, StageCx, StageError, Turn, Wire};
use foldwire_stages::kernel::Protection;
use foldwire_stages::layout_head_window::HeadState;
use foldwire_stages::ranges_build::UsedProtection;
use foldwire_stages::refs_mint::RefsMint;
use foldwire_stages::tool_loop::{
    ADDED_TOKENS_COUNTER, INJECTED_COUNTER, NAMES, SIDE_REQUEST_COUNTER, SYSTEM_NOTE, ToolsInject,
    model_view,
};
use foldwire_stages::tool_loop::{model_compress_config, offered_ranges};
use foldwire_stages::wire_codec::{WireDecode, WireEncode};
use serde_json::Value;

fn cx() -> StageCx {
    StageCx::new(Arc::new(Registry::empty()))
}

const NOTE_MARK: &str = "[foldwire] Compressible ranges now:";

/// A turn of `body`, decoded, its refs minted, with one compressible range over its first
/// message (the first one not a system message).
async fn decoded(wire: Wire, body: &str) -> Turn {
    let mut turn = Turn::new(
        SessionId::new("inject").unwrap(),
        wire,
        Bytes::from(body.to_owned()),
        SessionState::default(),
    );
    WireDecode.run(&mut turn, &cx()).await.unwrap();
    RefsMint.run(&mut turn, &cx()).await.unwrap();
    let conv = turn.conversation.as_ref().unwrap();
    if let Some(first) = conv
        .messages
        .iter()
        .find(|m| m.role != foldwire_core::Role::System)
        .and_then(|m| m.r#ref)
    {
        turn.ranges
            .push(foldwire_core::RangeInfo::new(first, first, 900, 1));
    }
    // The note offers only what `compress` would take: with nothing recent protected, the
    // first message may fold even in these three-message requests.
    turn.extensions.insert(UsedProtection(open_protection()));
    turn
}

/// A first message long enough to be worth a summary (about 300 tokens), opening with
/// `opening`.
fn long(opening: &str) -> String {
    format!("{opening} {}", "words ".repeat(200))
}

/// A protection that keeps nothing recent.
fn open_protection() -> Protection {
    Protection {
        recent_messages: 0,
        recent_tokens: 0,
        last_user: false,
        ..Protection::default()
    }
}

async fn injected(wire: Wire, body: &str) -> (Turn, Value) {
    let mut turn = decoded(wire, body).await;
    ToolsInject.run(&mut turn, &cx()).await.unwrap();
    WireEncode.run(&mut turn, &cx()).await.unwrap();
    let out: Value = serde_json::from_slice(turn.output.as_ref().unwrap()).unwrap();
    (turn, out)
}

/// The ref of the turn's first message that is not a system message.
fn view_first_ref(turn: &Turn) -> foldwire_core::Ref {
    turn.conversation
        .as_ref()
        .unwrap()
        .messages
        .iter()
        .find(|m| m.role != foldwire_core::Role::System)
        .and_then(|m| m.r#ref)
        .unwrap()
}

fn tool_names(wire: Wire, body: &Value) -> Vec<String> {
    let tools = body["tools"].as_array().unwrap();
    let mut names = Vec::new();
    for t in tools {
        match wire {
            Wire::Gemini => names.extend(
                t["functionDeclarations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|d| d["name"].as_str().unwrap().to_owned()),
            ),
            Wire::OpenAiChat => names.push(t["function"]["name"].as_str().unwrap().to_owned()),
            _ => names.push(t["name"].as_str().unwrap().to_owned()),
        }
    }
    names
}

#[tokio::test]
async fn each_wire_gets_the_tools_the_system_note_and_the_trailing_note() {
    let cases = [
        (
            Wire::Anthropic,
            r#"{"model":"m","system":"be brief","tools":[{"name":"bash","input_schema":{}}],"messages":[{"role":"user","content":"hi \u00e9"},{"role":"assistant","content":"yo"},{"role":"user","content":"go on"}]}"#,
        ),
        (
            Wire::OpenAiChat,
            r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi \u00e9"},{"role":"assistant","content":"yo"},{"role":"user","content":"go on"}]}"#,
        ),
        (
            Wire::OpenAiResponses,
            r#"{"model":"m","instructions":"be brief","input":[{"role":"user","content":"hi \u00e9"},{"role":"assistant","content":"yo"},{"role":"user","content":"go on"}]}"#,
        ),
        (
            Wire::Gemini,
            r#"{"contents":[{"role":"user","parts":[{"text":"hi \u00e9"}]},{"role":"model","parts":[{"text":"yo"}]},{"role":"user","parts":[{"text":"go on"}]}],"tools":[{"functionDeclarations":[{"name":"bash"}]}]}"#,
        ),
    ];
    for (wire, body) in cases {
        let body = &body.replace(r"hi \u00e9", &long(r"hi \u00e9"));
        let (turn, out) = injected(wire, body).await;
        let text = String::from_utf8(turn.output.clone().unwrap().to_vec()).unwrap();
        // Every tool the client declared stays, ours follow.
        let names = tool_names(wire, &out);
        for n in NAMES {
            assert!(names.contains(&n.to_owned()), "{wire}: {names:?}");
        }
        if wire != Wire::OpenAiChat && wire != Wire::OpenAiResponses {
            assert_eq!(names[0], "bash", "{wire}");
        }
        // The client's escapes are not rewritten: its bytes are copied, not re-serialized.
        assert!(text.contains(r"hi \u00e9"), "{wire}: {text}");
        // The system note sits after the client's system text.
        match wire {
            Wire::Anthropic => {
                assert_eq!(out["system"][0]["text"], "be brief");
                assert_eq!(out["system"][1]["text"], SYSTEM_NOTE);
            }
            Wire::OpenAiChat => {
                assert_eq!(out["messages"][0]["content"], "s");
                assert_eq!(out["messages"][1]["role"], "system");
                assert_eq!(out["messages"][1]["content"], SYSTEM_NOTE);
            }
            Wire::OpenAiResponses => {
                assert_eq!(out["instructions"], format!("be brief\n\n{SYSTEM_NOTE}"));
            }
            Wire::Gemini => {
                assert_eq!(out["systemInstruction"]["parts"][0]["text"], SYSTEM_NOTE);
            }
        }
        // The per-turn note is the last user content, after everything cached.
        let last = match wire {
            Wire::Anthropic => out["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()["text"]
                .clone(),
            Wire::OpenAiChat => {
                out["messages"].as_array().unwrap().last().unwrap()["content"].clone()
            }
            Wire::OpenAiResponses => {
                out["input"].as_array().unwrap().last().unwrap()["content"].clone()
            }
            Wire::Gemini => out["contents"].as_array().unwrap().last().unwrap()["parts"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()["text"]
                .clone(),
        };
        let last = last.as_str().unwrap();
        assert!(last.starts_with(NOTE_MARK), "{wire}: {last}");
        // The range over the first message, with the tokens a fold of it would take.
        let first = view_first_ref(&turn);
        let listed = format!("{first}..{first}: 1 messages, ~");
        let at = last.find(&listed).map(|i| i + listed.len());
        let tokens: u64 = at
            .and_then(|i| last[i..].split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!((250..400).contains(&tokens), "{wire}: {last}");
        assert!(last.contains("starts: \"hi é words"), "{wire}: {last}");
        // The last user message joins the note on the wires that take parts; the others get
        // a message of their own.
        let count = |key: &str| out[key].as_array().unwrap().len();
        match wire {
            Wire::Anthropic => assert_eq!(count("messages"), 3),
            Wire::Gemini => assert_eq!(count("contents"), 3),
            Wire::OpenAiChat => assert_eq!(count("messages"), 6),
            Wire::OpenAiResponses => assert_eq!(count("input"), 4),
        }
        assert_eq!(turn.report.counter(INJECTED_COUNTER), 1, "{wire}");
        assert!(turn.report.counter(ADDED_TOKENS_COUNTER) > 500, "{wire}");
        // The model's view leaves the additions out: the client's units, as they were.
        let view = model_view(turn.conversation.as_ref().unwrap());
        let client = foldwire_wire::request::decode(wire, Bytes::from(body.to_owned())).unwrap();
        assert_eq!(view.messages.len(), client.messages.len(), "{wire}");
    }
}

#[tokio::test]
async fn the_client_prefix_is_byte_identical() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"max_tokens":5}"#;
    let (turn, _) = injected(Wire::Anthropic, body).await;
    let out = turn.output.unwrap();
    let prefix = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":"b"},"#;
    assert!(
        out.starts_with(prefix.as_bytes()),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

#[tokio::test]
async fn a_string_input_and_no_system_still_take_the_additions() {
    let hello = long("hello");
    let body = serde_json::json!({"model": "m", "input": hello}).to_string();
    let (_, out) = injected(Wire::OpenAiResponses, &body).await;
    assert_eq!(out["input"][0]["content"], hello.as_str());
    assert!(
        out["input"][1]["content"]
            .as_str()
            .unwrap()
            .starts_with(NOTE_MARK)
    );
    assert_eq!(out["instructions"], SYSTEM_NOTE);
    let body = serde_json::json!({"model": "m", "messages": [
        {"role": "user", "content": long("q")},
        {"role": "assistant", "content": "a"},
    ]})
    .to_string();
    let (_, out) = injected(Wire::Anthropic, &body).await;
    assert_eq!(out["system"], SYSTEM_NOTE);
    // The last message is the model's: the note is a user message of its own.
    assert_eq!(out["messages"][2]["role"], "user");
    assert_eq!(out["tools"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_client_tool_of_the_same_name_or_the_option_leaves_the_request_alone() {
    let taken = r#"{"contents":[{"role":"user","parts":[{"text":"q"}]}],"tools":[{"functionDeclarations":[{"name":"compress"}]}]}"#;
    let (turn, _) = injected(Wire::Gemini, taken).await;
    assert_eq!(turn.output.as_deref(), Some(taken.as_bytes()));
    assert_eq!(turn.report.counter(INJECTED_COUNTER), 0);

    let body = r#"{"model":"m","messages":[{"role":"user","content":"q"}]}"#;
    let mut turn = decoded(Wire::OpenAiChat, body).await;
    turn.options.skip_tool_loop = true;
    ToolsInject.run(&mut turn, &cx()).await.unwrap();
    WireEncode.run(&mut turn, &cx()).await.unwrap();
    assert_eq!(turn.output.as_deref(), Some(body.as_bytes()));
}

#[tokio::test]
async fn side_requests_are_told_by_their_frame_and_left_alone_on_every_wire() {
    // The constraint sits before the messages on some and after them on others: the frame
    // is read around the messages array wherever the decode found it.
    let side = [
        (
            Wire::Anthropic,
            r#"{"model":"m","tool_choice":{"type":"tool","name":"route"},"tools":[{"name":"route","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"}]}"#,
        ),
        (
            Wire::Anthropic,
            r#"{"model":"m","messages":[{"role":"user","content":"q"}],"output_format":{"type":"json_schema","schema":{}}}"#,
        ),
        (
            Wire::OpenAiChat,
            r#"{"model":"m","messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_object"}}"#,
        ),
        (
            Wire::OpenAiResponses,
            r#"{"model":"m","input":[{"role":"user","content":"q"}],"tool_choice":"none"}"#,
        ),
        // Codex's "Responses lite": its tools are declared in an input item.
        (
            Wire::OpenAiResponses,
            r#"{"model":"m","input":[{"type":"additional_tools","id":"at_1","role":"developer","tools":[{"type":"namespace","name":"functions","tools":[]}]},{"role":"user","content":"q"}]}"#,
        ),
        // A background run is polled for by the client: the loop never sees its answer.
        (
            Wire::OpenAiResponses,
            r#"{"model":"m","background":true,"input":[{"role":"user","content":"q"}]}"#,
        ),
        (
            Wire::Gemini,
            r#"{"contents":[{"role":"user","parts":[{"text":"q"}]}],"generationConfig":{"responseMimeType":"application/json"}}"#,
        ),
    ];
    for (wire, body) in side {
        let (turn, _) = injected(wire, body).await;
        assert_eq!(turn.output.as_deref(), Some(body.as_bytes()), "{wire}");
        assert_eq!(turn.report.counter(INJECTED_COUNTER), 0, "{wire}");
        assert_eq!(turn.report.counter(SIDE_REQUEST_COUNTER), 1, "{wire}");
    }
    // A request that leaves the model free to call tools gets them.
    let main =
        r#"{"model":"m","messages":[{"role":"user","content":"q"}],"tool_choice":{"type":"auto"}}"#;
    let (turn, out) = injected(Wire::Anthropic, main).await;
    assert_eq!(turn.report.counter(INJECTED_COUNTER), 1);
    assert_eq!(turn.report.counter(SIDE_REQUEST_COUNTER), 0);
    assert!(tool_names(Wire::Anthropic, &out).contains(&"compress".to_owned()));
    let foreground = r#"{"model":"m","background":false,"input":[{"role":"user","content":"q"}]}"#;
    let (turn, out) = injected(Wire::OpenAiResponses, foreground).await;
    assert_eq!(turn.report.counter(INJECTED_COUNTER), 1);
    assert!(tool_names(Wire::OpenAiResponses, &out).contains(&"compress".to_owned()));
}

#[tokio::test]
async fn after_the_encoder_the_stage_says_where_it_belongs() {
    let mut turn = decoded(
        Wire::Anthropic,
        r#"{"messages":[{"role":"user","content":"q"}]}"#,
    )
    .await;
    WireEncode.run(&mut turn, &cx()).await.unwrap();
    let err = ToolsInject.run(&mut turn, &cx()).await.unwrap_err();
    assert!(
        matches!(&err, StageError::Failed { message, .. } if message.contains("before wire.encode")),
        "{err}"
    );
}

#[test]
fn the_stage_and_the_three_handlers_are_registered() {
    let registry = Registry::from_inventory().unwrap();
    let stages = registry.names(foldwire_core::ComponentKind::Stage);
    assert!(stages.contains(&"tools.inject".to_owned()), "{stages:?}");
    let handlers: Vec<&str> = foldwire_stages::tool_loop::handlers()
        .iter()
        .map(|h| h.name())
        .collect();
    assert_eq!(handlers, NAMES);
    assert_eq!(foldwire_stages::tool_loop::names(), NAMES);
}

/// The note lists a range only while `compress` would take it from what the model is sent:
/// its ends are sent (a result `pairing.repair` dropped is not), in order, some unit between
/// them is outside the recent zone and the head the layout recorded, and what is left to
/// fold is not below the minimum `compress` asks of a batch.
#[tokio::test]
async fn the_note_offers_only_ranges_compress_would_take() {
    // About 250 tokens a message, but the fifth says one word.
    let long = |word: &str| format!("{word} {}", "words ".repeat(165));
    let texts = [
        long("one"),
        long("two"),
        long("three"),
        long("four"),
        "five".to_owned(),
        long("six"),
    ];
    let messages: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": text})
        })
        .collect();
    let body = serde_json::json!({"model": "m", "messages": messages}).to_string();
    let turn = decoded(Wire::Anthropic, &body).await;
    let range = |a: &str, b: &str| {
        foldwire_core::RangeInfo::new(a.parse().unwrap(), b.parse().unwrap(), 300, 2)
    };
    let ranges = [
        range("m00001", "m00002"),
        range("m00003", "m00004"),
        range("m00004", "m00003"),
        range("m00005", "m00006"),
        range("m00002", "m00009"),
    ];
    let offered = |turn: &Turn, protection: &Protection| -> Vec<String> {
        offered_ranges(
            &ranges,
            turn.conversation.as_ref().unwrap(),
            &turn.state,
            &model_compress_config(protection.clone()),
            &foldwire_core::CharEstimator,
            None,
        )
        .iter()
        .map(|r| format!("{}..{} ~{}", r.start, r.end, r.tokens))
        .collect()
    };
    // Nothing protected: every range whose ends are sent in order (m00009 never was), with
    // the tokens a fold of it would take.
    assert_eq!(
        offered(&turn, &open_protection()),
        [
            "m00001..m00002 ~498",
            "m00003..m00004 ~500",
            "m00005..m00006 ~251"
        ]
    );
    // The last message is recent: what is left of the last range, one word, is too small
    // to fold, so it is not offered.
    let recent = Protection {
        recent_messages: 1,
        ..open_protection()
    };
    assert_eq!(
        offered(&turn, &recent),
        ["m00001..m00002 ~498", "m00003..m00004 ~500"]
    );
    // The last three are recent: of the middle range, only its first message is left.
    let recent = Protection {
        recent_messages: 3,
        ..open_protection()
    };
    assert_eq!(
        offered(&turn, &recent),
        ["m00001..m00002 ~498", "m00003..m00004 ~250"]
    );
    // The layout recorded the first two as its head: only the middle range is left.
    let conv = turn.conversation.as_ref().unwrap();
    let head = HeadState {
        head_ids: conv.messages[..2].iter().map(|m| m.id.clone()).collect(),
        ..HeadState::default()
    };
    let mut turn = turn;
    head.store(&mut turn.state).unwrap();
    assert_eq!(offered(&turn, &recent), ["m00003..m00004 ~250"]);
}
