#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `media.classify` + `archive.spill` on every captured request fixture of every wire. The
//! wire codec is written elsewhere, so this test cuts the body into units itself (content
//! blocks / parts / items). Fixtures named for inline media must spill and restore the exact
//! decoded bytes; fixtures named for remote media must pin; every other fixture has no media.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use foldwire_archive::{Backends, list_media, restore_media_part};
use foldwire_core::{
    Conversation, Entry, MediaClass, Message, MessageId, MessageKind, Origin, Pin, Registry, Role,
    SessionId, SessionState, Stage, StageCx, Turn, UnitSlot, Wire,
};
use foldwire_stages::archive_spill::ArchiveSpill;
use foldwire_stages::media_classify::MediaClassify;
use serde_json::Value;

/// The units of a request body: content blocks, parts or items, as JSON values.
fn units(wire: Wire, body: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let (list, inner) = match wire {
        Wire::Anthropic | Wire::OpenAiChat => ("messages", "content"),
        Wire::OpenAiResponses => ("input", ""),
        Wire::Gemini => ("contents", "parts"),
    };
    for message in body[list].as_array().into_iter().flatten() {
        match message.get(inner).and_then(Value::as_array) {
            Some(blocks) if !inner.is_empty() => out.extend(blocks.iter().cloned()),
            _ => out.push(message.clone()),
        }
    }
    out
}

fn conversation(wire: Wire, units: &[Value]) -> Conversation {
    Conversation {
        wire,
        source: Bytes::new(),
        messages_span: 0..0,
        entries: vec![Entry {
            role: Role::User,
            raw: None,
            unit_count: units.len(),
        }],
        messages: units
            .iter()
            .enumerate()
            .map(|(i, v)| Message {
                id: MessageId(format!("unit{i}")),
                r#ref: None,
                entry: 0,
                slot: UnitSlot::Content(i as u32),
                role: Role::User,
                kind: MessageKind::Other,
                text: Default::default(),
                tool: None,
                media: Vec::new(),
                origin: Origin::Client,
                pin: None,
                raw: Bytes::from(serde_json::to_vec(v).unwrap()),
                modified: false,
                client_raw: None,
            })
            .collect(),
        overrides: Vec::new(),
        model: None,
        stream: false,
    }
}

/// Decodes a payload independently of the stage: data URL body or bare base64.
fn expected_bytes(text: &str) -> Vec<u8> {
    let body = if text.starts_with("data:") {
        text.split_once(',').unwrap().1
    } else {
        text
    };
    // Gemini's own samples use the URL-safe alphabet.
    let std = base64::engine::general_purpose::STANDARD.decode(body);
    std.or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(body))
        .unwrap()
}

#[tokio::test]
async fn every_request_fixture_classifies_spills_and_restores() {
    let mut seen = 0;
    for wire in Wire::ALL {
        for path in foldwire_core::fixtures::files(wire.as_str(), "request-") {
            seen += 1;
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let body: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let units = units(wire, &body);
            let b = Backends::memory();
            let mut cx = StageCx::new(Arc::new(Registry::empty()));
            cx.archive = Some(Arc::clone(&b.media));
            let session = SessionId::new("fixture").unwrap();
            let mut turn = Turn::new(
                session.clone(),
                wire,
                Bytes::new(),
                SessionState::new(session.clone()),
            );
            turn.conversation = Some(conversation(wire, &units));
            MediaClassify.run(&mut turn, &cx).await.unwrap();
            ArchiveSpill::default().run(&mut turn, &cx).await.unwrap();
            assert!(
                turn.report.warnings.is_empty(),
                "{name}: {:?}",
                turn.report.warnings
            );

            let archivable = turn.report.counter("media.archivable");
            let unrecoverable = turn.report.counter("media.unrecoverable");
            eprintln!("{wire}/{name}: {archivable} archivable, {unrecoverable} unrecoverable");
            let inline_named = ["base64", "data-url", "inline-data"]
                .iter()
                .any(|k| name.contains(k));
            let remote_named = ["image-url", "url-https", "file-data"]
                .iter()
                .any(|k| name.contains(k));
            if inline_named {
                assert!(
                    archivable >= 1 && unrecoverable == 0,
                    "{name}: {archivable}/{unrecoverable}"
                );
                assert_eq!(turn.report.counter("archive.stored"), archivable, "{name}");
                // Number the units as refs.mint would, then restore every payload.
                let ids: Vec<_> = turn
                    .conversation
                    .as_ref()
                    .unwrap()
                    .messages
                    .iter()
                    .map(|m| m.id.clone())
                    .collect();
                for id in ids {
                    turn.state.mint_ref(id);
                }
                let listed = list_media(&turn.state);
                assert_eq!(listed.len() as u64, archivable, "{name}");
                for item in listed {
                    let unit_index: usize =
                        item.message.0.trim_start_matches("unit").parse().unwrap();
                    let text = units[unit_index]
                        .pointer(&item.pointer)
                        .unwrap()
                        .as_str()
                        .unwrap();
                    let restored = restore_media_part(
                        b.media.as_ref(),
                        &turn.state,
                        &session,
                        item.r#ref.unwrap(),
                        item.part,
                    )
                    .await
                    .unwrap();
                    assert_eq!(
                        restored.bytes.as_ref(),
                        expected_bytes(text).as_slice(),
                        "{name}"
                    );
                    assert_eq!(restored.bytes.len() as u64, item.size, "{name}");
                }
            } else if remote_named {
                assert!(
                    unrecoverable >= 1 && archivable == 0,
                    "{name}: {archivable}/{unrecoverable}"
                );
                let pins: Vec<_> = turn
                    .conversation
                    .as_ref()
                    .unwrap()
                    .messages
                    .iter()
                    .filter_map(|m| match &m.pin {
                        Some(Pin::UnrecoverableMedia(r)) => Some(r.clone()),
                        _ => None,
                    })
                    .collect();
                assert!(
                    !pins.is_empty() && pins.iter().all(|r| r.contains("https://")),
                    "{name}: {pins:?}"
                );
            } else {
                let media: Vec<_> = turn
                    .conversation
                    .as_ref()
                    .unwrap()
                    .messages
                    .iter()
                    .flat_map(|m| {
                        m.media
                            .iter()
                            .map(|x| matches!(x.class, MediaClass::Archivable))
                    })
                    .collect();
                assert!(media.is_empty(), "{name}: unexpected media {media:?}");
            }
        }
    }
    if seen == 0 {
        eprintln!("no request fixtures found: the fixture media test was NOT run");
    }
}
