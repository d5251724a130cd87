#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `media.classify` on hand-made units of every wire: inline payloads are archivable,
//! remote URLs and provider file references are unrecoverable and pin their unit, nested
//! payloads are found, tool data is not mistaken for media.

use std::sync::Arc;

use bytes::Bytes;
use foldwire_core::{
    Conversation, Entry, Extensions, MediaClass, Message, MessageId, MessageKind, Origin, Pin,
    Registry, Role, SessionId, SessionState, Stage, StageCx, Turn, UnitSlot, Wire,
};
use foldwire_stages::media_classify::MediaClassify;

const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn unit(entry: usize, raw: &str) -> Message {
    Message {
        id: MessageId(format!("{entry:016x}")),
        r#ref: None,
        entry,
        slot: UnitSlot::Content(0),
        role: Role::User,
        kind: MessageKind::Other,
        text: Default::default(),
        tool: None,
        media: Vec::new(),
        origin: Origin::Client,
        pin: None,
        raw: Bytes::copy_from_slice(raw.as_bytes()),
        modified: false,
        client_raw: None,
    }
}

async fn classify(wire: Wire, raws: &[&str]) -> Turn {
    classify_after(wire, raws, Extensions::new()).await
}

/// Classifies with what an earlier turn carried.
async fn classify_after(wire: Wire, raws: &[&str], carry: Extensions) -> Turn {
    let conversation = Conversation {
        wire,
        source: Bytes::new(),
        messages_span: 0..0,
        entries: raws
            .iter()
            .map(|_| Entry {
                role: Role::User,
                raw: None,
                unit_count: 1,
            })
            .collect(),
        messages: raws.iter().enumerate().map(|(i, r)| unit(i, r)).collect(),
        overrides: Vec::new(),
        model: None,
        stream: false,
    };
    let session = SessionId::new("classify").unwrap();
    let mut turn = Turn::new(
        session.clone(),
        wire,
        Bytes::new(),
        SessionState::new(session),
    );
    turn.conversation = Some(conversation);
    turn.carry = carry;
    let cx = StageCx::new(Arc::new(Registry::empty()));
    MediaClassify.run(&mut turn, &cx).await.unwrap();
    turn
}

fn messages(turn: &Turn) -> &[Message] {
    &turn.conversation.as_ref().unwrap().messages
}

/// (class, pointer, media type) of each payload of unit `i`.
fn summary(turn: &Turn, i: usize) -> Vec<(String, String, Option<String>)> {
    messages(turn)[i]
        .media
        .iter()
        .map(|m| {
            let class = match &m.class {
                MediaClass::Archivable => "archivable".to_owned(),
                MediaClass::Unrecoverable { reason } => format!("unrecoverable: {reason}"),
            };
            (class, m.pointer.clone(), m.media_type.clone())
        })
        .collect()
}

fn pin_reason(turn: &Turn, i: usize) -> Option<String> {
    match &messages(turn)[i].pin {
        Some(Pin::UnrecoverableMedia(r)) => Some(r.clone()),
        None => None,
        other => panic!("unexpected pin {other:?}"),
    }
}

#[tokio::test]
async fn anthropic_media_is_classified_and_nested_images_found() {
    let inline = format!(
        r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{PNG_B64}"}}}}"#
    );
    let data_url = format!(
        r#"{{"type":"image","source":{{"type":"url","url":"data:image/png;base64,{PNG_B64}"}}}}"#
    );
    let remote = r#"{"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}}"#;
    let nested = format!(
        r#"{{"type":"tool_result","tool_use_id":"t1","content":[{{"type":"text","text":"shot"}},{{"type":"image","source":{{"type":"base64","media_type":"image/jpeg","data":"{PNG_B64}"}}}}]}}"#
    );
    let file =
        r#"{"type":"document","source":{"type":"file","file_id":"file_011CNha8iCJcU1wXNR6q4V8w"}}"#;
    let text_doc = r#"{"type":"document","source":{"type":"text","media_type":"text/plain","data":"plain words"}}"#;
    let tool_input = r#"{"type":"tool_use","id":"t2","name":"draw","input":{"type":"image","source":{"type":"url","url":"https://example.com/in-args.png"}}}"#;
    let turn = classify(
        Wire::Anthropic,
        &[
            &inline,
            &data_url,
            remote,
            &nested,
            file,
            text_doc,
            tool_input,
            r#"{"type":"text","text":"no media here"}"#,
        ],
    )
    .await;
    assert_eq!(
        summary(&turn, 0),
        vec![(
            "archivable".into(),
            "/source/data".into(),
            Some("image/png".into())
        )]
    );
    assert_eq!(messages(&turn)[0].media[0].size, Some(70));
    assert_eq!(messages(&turn)[0].media[0].kind, "image");
    assert_eq!(summary(&turn, 1)[0].1, "/source/url");
    assert_eq!(summary(&turn, 1)[0].0, "archivable");
    assert_eq!(
        pin_reason(&turn, 2).unwrap(),
        "remote URL https://example.com/cat.png"
    );
    assert_eq!(
        summary(&turn, 3),
        vec![(
            "archivable".into(),
            "/content/1/source/data".into(),
            Some("image/jpeg".into())
        )]
    );
    assert_eq!(pin_reason(&turn, 3), None);
    assert!(
        pin_reason(&turn, 4)
            .unwrap()
            .contains("Anthropic file reference file_011CNha8iCJcU1wXNR6q4V8w")
    );
    assert!(
        messages(&turn)[5].media.is_empty(),
        "a text document carries no bytes"
    );
    assert!(
        messages(&turn)[6].media.is_empty(),
        "tool arguments are not media"
    );
    assert!(messages(&turn)[7].media.is_empty());
    assert_eq!(turn.report.counter("media.archivable"), 3);
    assert_eq!(turn.report.counter("media.unrecoverable"), 2);
    assert_eq!(turn.report.counter("media.units_pinned"), 2);
}

#[tokio::test]
async fn openai_chat_media_is_classified() {
    let inline = format!(
        r#"{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{PNG_B64}","detail":"low"}}}}"#
    );
    let remote =
        r#"{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"high"}}"#;
    let audio = r#"{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}"#;
    let file_data = format!(
        r#"{{"type":"file","file":{{"filename":"r.pdf","file_data":"data:application/pdf;base64,{PNG_B64}"}}}}"#
    );
    let file_id = r#"{"type":"file","file":{"file_id":"file-abc123"}}"#;
    let call = r#"{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"image_url\":{\"url\":\"https://x\"}}"}}"#;
    let turn = classify(
        Wire::OpenAiChat,
        &[&inline, remote, audio, &file_data, file_id, call],
    )
    .await;
    assert_eq!(
        summary(&turn, 0),
        vec![(
            "archivable".into(),
            "/image_url/url".into(),
            Some("image/png".into())
        )]
    );
    assert_eq!(
        pin_reason(&turn, 1).unwrap(),
        "remote URL https://example.com/a.png"
    );
    assert_eq!(
        summary(&turn, 2),
        vec![(
            "archivable".into(),
            "/input_audio/data".into(),
            Some("audio/wav".into())
        )]
    );
    assert_eq!(messages(&turn)[2].media[0].kind, "audio");
    assert_eq!(
        summary(&turn, 3),
        vec![(
            "archivable".into(),
            "/file/file_data".into(),
            Some("application/pdf".into())
        )]
    );
    assert_eq!(
        pin_reason(&turn, 4).unwrap(),
        "OpenAI file reference file-abc123"
    );
    assert!(messages(&turn)[5].media.is_empty());
}

#[tokio::test]
async fn openai_responses_media_is_classified_inside_items() {
    let item = format!(
        r#"{{"type":"message","role":"user","content":[{{"type":"input_text","text":"look"}},{{"type":"input_image","image_url":"data:image/png;base64,{PNG_B64}","detail":"auto"}}]}}"#
    );
    let remote = r#"{"type":"input_image","image_url":"https://example.com/x.png"}"#;
    let file_id = r#"{"type":"input_image","file_id":"file-img9"}"#;
    let file_data = format!(
        r#"{{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,{PNG_B64}"}}"#
    );
    let file_url = r#"{"type":"input_file","file_url":"https://example.com/report.pdf"}"#;
    let output = format!(
        r#"{{"type":"function_call_output","call_id":"c1","output":[{{"type":"input_image","image_url":"data:image/jpeg;base64,{PNG_B64}"}}]}}"#
    );
    let screenshot = format!(
        r#"{{"type":"computer_call_output","call_id":"c2","output":{{"type":"computer_screenshot","image_url":"data:image/png;base64,{PNG_B64}"}}}}"#
    );
    let remote_screenshot = r#"{"type":"computer_call_output","call_id":"c3","output":{"type":"computer_screenshot","file_id":"file-shot1"}}"#;
    let turn = classify(
        Wire::OpenAiResponses,
        &[
            &item,
            remote,
            file_id,
            &file_data,
            file_url,
            &output,
            &screenshot,
            remote_screenshot,
        ],
    )
    .await;
    assert_eq!(
        summary(&turn, 0),
        vec![(
            "archivable".into(),
            "/content/1/image_url".into(),
            Some("image/png".into())
        )]
    );
    assert_eq!(
        pin_reason(&turn, 1).unwrap(),
        "remote URL https://example.com/x.png"
    );
    assert_eq!(
        pin_reason(&turn, 2).unwrap(),
        "OpenAI file reference file-img9"
    );
    assert_eq!(summary(&turn, 3)[0].1, "/file_data");
    assert_eq!(
        pin_reason(&turn, 4).unwrap(),
        "remote URL https://example.com/report.pdf"
    );
    assert_eq!(
        summary(&turn, 5),
        vec![(
            "archivable".into(),
            "/output/0/image_url".into(),
            Some("image/jpeg".into())
        )]
    );
    // A computer-use screenshot is media like any input image.
    assert_eq!(
        summary(&turn, 6),
        vec![(
            "archivable".into(),
            "/output/image_url".into(),
            Some("image/png".into())
        )]
    );
    assert_eq!(messages(&turn)[6].media[0].kind, "image");
    assert_eq!(
        pin_reason(&turn, 7).unwrap(),
        "OpenAI file reference file-shot1"
    );
}

#[tokio::test]
async fn gemini_media_is_classified_wherever_nested() {
    let inline = format!(r#"{{"inlineData":{{"mimeType":"image/png","data":"{PNG_B64}"}}}}"#);
    let file = r#"{"fileData":{"mimeType":"image/png","fileUri":"https://generativelanguage.googleapis.com/v1beta/files/abc"}}"#;
    let video = r#"{"fileData":{"mimeType":"video/mp4","fileUri":"gs://bucket/clip.mp4"},"videoMetadata":{"startOffset":"1s","endOffset":"4s"}}"#;
    let nested_inline = format!(
        r#"{{"functionResponse":{{"name":"shot","response":{{"ok":true}},"parts":[{{"inlineData":{{"mimeType":"image/jpeg","data":"{PNG_B64}"}}}}]}}}}"#
    );
    let nested_file = r#"{"functionResponse":{"name":"fetch","response":{},"parts":[{"fileData":{"mimeType":"application/pdf","fileUri":"gs://b/doc.pdf"}}]}}"#;
    let in_response = format!(
        r#"{{"functionResponse":{{"name":"echo","response":{{"inlineData":{{"mimeType":"image/png","data":"{PNG_B64}"}}}}}}}}"#
    );
    let snake = format!(r#"{{"inline_data":{{"mime_type":"audio/mp3","data":"{PNG_B64}"}}}}"#);
    let turn = classify(
        Wire::Gemini,
        &[
            &inline,
            file,
            video,
            &nested_inline,
            nested_file,
            &in_response,
            &snake,
        ],
    )
    .await;
    assert_eq!(
        summary(&turn, 0),
        vec![(
            "archivable".into(),
            "/inlineData/data".into(),
            Some("image/png".into())
        )]
    );
    assert_eq!(messages(&turn)[0].media[0].kind, "image");
    assert!(
        pin_reason(&turn, 1)
            .unwrap()
            .contains("Gemini fileData https://generativelanguage.googleapis.com/v1beta/files/abc")
    );
    let video_pin = pin_reason(&turn, 2).unwrap();
    assert!(
        video_pin.contains("gs://bucket/clip.mp4") && video_pin.contains("videoMetadata"),
        "{video_pin}"
    );
    assert_eq!(messages(&turn)[2].media.len(), 2);
    assert_eq!(
        summary(&turn, 3)[0].1,
        "/functionResponse/parts/0/inlineData/data"
    );
    assert_eq!(pin_reason(&turn, 3), None);
    assert!(pin_reason(&turn, 4).unwrap().contains("gs://b/doc.pdf"));
    assert!(
        messages(&turn)[5].media.is_empty(),
        "a function's response object is tool data"
    );
    assert_eq!(summary(&turn, 6)[0].1, "/inline_data/data");
}

#[tokio::test]
async fn a_unit_that_is_not_json_is_reported_not_guessed() {
    let turn = classify(
        Wire::Anthropic,
        &["{\"type\":\"image\",\"source\":{\"data\": trunc"],
    )
    .await;
    assert!(messages(&turn)[0].media.is_empty());
    assert_eq!(turn.report.warnings.len(), 1);
    assert_eq!(turn.report.warnings[0].code, "media_unparsed");
    assert!(turn.report.warnings[0].message.contains("unit #0"));
}

/// On Anthropic and OpenAI a unit is parsed only when it holds one of the wire's quoted
/// media part types, so a text that talks about files, data and URLs is passed over. A
/// truncated one shows it: parsed, it would be reported unparsed.
#[tokio::test]
async fn a_text_about_files_and_urls_is_not_parsed() {
    let text = r#"{"type":"text","text":"I read the file, its data and the url \"image\"" trunc"#;
    for wire in [Wire::Anthropic, Wire::OpenAiChat, Wire::OpenAiResponses] {
        let turn = classify(wire, &[text]).await;
        assert!(
            turn.report.warnings.is_empty(),
            "{wire}: {:?}",
            turn.report.warnings
        );
    }
    // Gemini's markers are the broad ones: the same text is parsed, and reported.
    let turn = classify(Wire::Gemini, &[text]).await;
    assert_eq!(turn.report.warnings.len(), 1);
    assert_eq!(turn.report.warnings[0].code, "media_unparsed");
}

#[tokio::test]
async fn units_the_last_turn_classified_are_not_searched_again() {
    let inline = format!(
        r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{PNG_B64}"}}}}"#
    );
    let remote = r#"{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}"#;
    let text = r#"{"type":"text","text":"the data file"}"#;
    let first = classify(Wire::Anthropic, &[&inline, remote, text]).await;
    assert_eq!(first.report.counter("media.units_searched"), 3);
    // The next request resends the three units and adds one.
    let later = r#"{"type":"image","source":{"type":"url","url":"https://example.com/b.png"}}"#;
    let raws = [inline.as_str(), remote, text, later];
    let mut first = first;
    let second = classify_after(Wire::Anthropic, &raws, std::mem::take(&mut first.carry)).await;
    assert_eq!(second.report.counter("media.units_searched"), 1);
    // Exactly what classifying afresh gives: media, pins and counts.
    let fresh = classify(Wire::Anthropic, &raws).await;
    for i in 0..raws.len() {
        assert_eq!(summary(&second, i), summary(&fresh, i), "unit {i}");
        assert_eq!(pin_reason(&second, i), pin_reason(&fresh, i), "unit {i}");
    }
    assert!(pin_reason(&second, 1).is_some() && pin_reason(&second, 3).is_some());
    for counter in [
        "media.archivable",
        "media.unrecoverable",
        "media.units_pinned",
    ] {
        assert_eq!(
            second.report.counter(counter),
            fresh.report.counter(counter)
        );
    }
    // What one wire found is not taken for another's units.
    let mut second = second;
    let other = classify_after(Wire::OpenAiChat, &raws, std::mem::take(&mut second.carry)).await;
    assert_eq!(other.report.counter("media.units_searched"), 4);
}
