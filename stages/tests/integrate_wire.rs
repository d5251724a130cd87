#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The kernel, media and archive through the real codecs, per wire (issues 4 and 5):
//!
//! - a request with an old inline image and a remote-URL image, folded over both between
//!   turns: the inline image leaves the wire behind a placeholder naming its ref, is
//!   archived and restored byte-identical; the remote one stays and the fold names it; with
//!   a failing archive the inline image stays on the wire and the reports say why;
//! - every request fixture: decode, mint, fold the largest foldable range, encode; the
//!   output re-decodes with valid pairing and restore returns every folded unit exactly.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use foldwire_archive::faults::FailingStore;
use foldwire_archive::object_store::memory::InMemory;
use foldwire_archive::{Backends, restore_media};
use foldwire_core::{
    AnyRef, CharEstimator, Conversation, MediaArchive, Ref, Registry, SessionId, SessionState,
    Stage, StageCx, Turn, Wire,
};
use foldwire_stages::archive_spill::ArchiveSpill;
use foldwire_stages::fold::{Fold, FoldConfig};
use foldwire_stages::kernel::pairing_rules::violations;
use foldwire_stages::kernel::{
    CompressConfig, CompressRequest, CompressionResult, Protection, RangesConfig,
    apply_compression, compressible_ranges, restore_with_archive,
};
use foldwire_stages::media_classify::MediaClassify;
use foldwire_stages::pairing_repair::PairingRepair;
use foldwire_stages::ranges_build::RangesBuild;
use foldwire_stages::refs_mint::RefsMint;
use foldwire_stages::wire_codec::{WireDecode, WireEncode};
use foldwire_wire::request;

const REMOTE: &str = "https://example.com/remote-cat.png";

fn session() -> SessionId {
    SessionId::new("wire-s1").unwrap()
}

fn open_config() -> CompressConfig {
    CompressConfig {
        protection: Protection {
            recent_messages: 0,
            recent_tokens: 0,
            last_user: false,
            protected_tools: vec![],
            latest_tools: vec![],
            latest_count: 0,
        },
        min_tokens: 0,
        max_summary_chars: 0,
        min_summary: foldwire_stages::kernel::MinSummary::OFF,
    }
}

/// Bytes with every value 0..=255 behind a PNG signature, so any re-encoding slip shows.
fn image_bytes() -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend(0..=255u8);
    v
}

fn long(tag: &str) -> String {
    format!(
        "{tag} {}",
        "details of the picture and the plan ".repeat(20)
    )
}

/// A request: a greeting exchange, then a user message with an inline image, a text and a
/// remote image, three more exchanges and a last question.
fn body(wire: Wire, inline: &[u8]) -> Bytes {
    let data = base64::engine::general_purpose::STANDARD.encode(inline);
    let (greeting, reply) = ("hello, I have pictures for you", "send them");
    let (answer, thanks, more) = (long("answer"), long("thanks"), long("more"));
    let last = "latest question";
    let v = match wire {
        Wire::Anthropic => serde_json::json!({"model": "m", "max_tokens": 64, "messages": [
            {"role": "user", "content": greeting},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
                {"type": "text", "text": "what is in these?"},
                {"type": "image", "source": {"type": "url", "url": REMOTE}}]},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": thanks},
            {"role": "assistant", "content": more},
            {"role": "user", "content": last}]}),
        Wire::OpenAiChat => serde_json::json!({"model": "m", "messages": [
            {"role": "user", "content": greeting},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}},
                {"type": "text", "text": "what is in these?"},
                {"type": "image_url", "image_url": {"url": REMOTE}}]},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": thanks},
            {"role": "assistant", "content": more},
            {"role": "user", "content": last}]}),
        Wire::OpenAiResponses => {
            let out = |t: &str| serde_json::json!([{"type": "output_text", "text": t}]);
            serde_json::json!({"model": "m", "input": [
                {"type": "message", "role": "user", "content": greeting},
                {"type": "message", "role": "assistant", "content": out(reply)},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_image", "image_url": format!("data:image/png;base64,{data}")},
                    {"type": "input_text", "text": "what is in these?"},
                    {"type": "input_image", "image_url": REMOTE}]},
                {"type": "message", "role": "assistant", "content": out(&answer)},
                {"type": "message", "role": "user", "content": thanks},
                {"type": "message", "role": "assistant", "content": out(&more)},
                {"type": "message", "role": "user", "content": last}]})
        }
        Wire::Gemini => {
            let t = |role: &str, text: &str| serde_json::json!({"role": role, "parts": [{"text": text}]});
            serde_json::json!({"contents": [
                t("user", greeting),
                t("model", reply),
                {"role": "user", "parts": [
                    {"inlineData": {"mimeType": "image/png", "data": data}},
                    {"text": "what is in these?"},
                    {"fileData": {"mimeType": "image/png", "fileUri": REMOTE}}]},
                t("model", &answer),
                t("user", &thanks),
                t("model", &more),
                t("user", last)]})
        }
    };
    Bytes::from(serde_json::to_vec(&v).unwrap())
}

fn stage_cx(archive: Arc<dyn MediaArchive>) -> StageCx {
    StageCx::new(Arc::new(Registry::empty()))
        .with_archive(archive)
        .with_estimator(Arc::new(CharEstimator))
}

/// The default order without the layout: decode → media.classify → archive.spill →
/// refs.mint → ranges.build → fold → pairing.repair → encode (fold makes no blocks itself).
async fn run_turn(wire: Wire, body: Bytes, state: SessionState, cx: &StageCx) -> Turn {
    let fold = Fold::new(FoldConfig {
        auto: false,
        ..FoldConfig::default()
    });
    let stages: [&dyn Stage; 8] = [
        &WireDecode,
        &MediaClassify,
        &ArchiveSpill::default(),
        &RefsMint,
        &RangesBuild::default(),
        &fold,
        &PairingRepair,
        &WireEncode,
    ];
    let mut turn = Turn::new(session(), wire, body, state);
    for stage in stages {
        stage.run(&mut turn, cx).await.unwrap();
    }
    turn
}

fn refs_by_text(conv: &Conversation, needle: &str) -> Ref {
    conv.messages
        .iter()
        .find(|u| u.text.contains(needle))
        .and_then(|u| u.r#ref)
        .unwrap_or_else(|| panic!("no unit with {needle:?}"))
}

/// The ref of the unit whose raw bytes hold `needle` (`None` while it is held back: pinned
/// units get no ref).
fn ref_of_raw(conv: &Conversation, needle: &str) -> Option<Ref> {
    conv.messages
        .iter()
        .find(|u| std::str::from_utf8(&u.raw).unwrap().contains(needle))
        .unwrap_or_else(|| panic!("no unit whose bytes hold {needle:?}"))
        .r#ref
}

/// Folds from the reply before the images through the answer, between turns: the range
/// covers both images (a held-back unit has no ref, so the range starts before it).
fn fold_images(state: &mut SessionState, view: &Conversation) -> CompressionResult {
    let start = refs_by_text(view, "send them");
    let end = refs_by_text(view, "answer ");
    apply_compression(
        state,
        view,
        &[CompressRequest::new(
            AnyRef::Message(start),
            AnyRef::Message(end),
            "the user sent two pictures; I described them",
        )
        .with_topic("pictures")
        .with_author("test")],
        &open_config(),
        &CharEstimator,
    )
}

#[tokio::test]
async fn an_old_inline_image_folds_behind_a_placeholder_and_the_remote_one_stays() {
    let inline = image_bytes();
    let data = base64::engine::general_purpose::STANDARD.encode(&inline);
    for wire in Wire::ALL {
        let archive = Backends::memory().media;
        let cx = stage_cx(archive.clone());
        let body = body(wire, &inline);
        let first = run_turn(wire, body.clone(), SessionState::new(session()), &cx).await;
        assert_eq!(first.report.counter("archive.stored"), 1, "{wire}");
        let view = first.conversation.clone().unwrap();
        let image_ref = ref_of_raw(&view, &data[..40]).expect("an archived image gets a ref");
        assert_eq!(
            ref_of_raw(&view, REMOTE),
            None,
            "{wire}: unrecoverable media is held back without a ref"
        );
        let originals: Vec<(Ref, Vec<u8>)> = view
            .messages
            .iter()
            .filter_map(|u| u.r#ref.map(|r| (r, u.raw.to_vec())))
            .collect();

        // Between turns: fold a range covering both images.
        let mut state = first.state;
        let result = fold_images(&mut state, &view);
        assert_eq!(result.blocks_created.len(), 1, "{wire}: {result:?}");
        let warnings = result.ranges[0].warnings.join(" | ");
        assert!(
            warnings.contains("cannot fold") && warnings.contains(REMOTE),
            "{wire}: the fold must name the remote image: {warnings}"
        );
        let block = state.blocks[0].clone();
        assert!(block.direct.contains(&image_ref), "{wire}");

        // Next turn, same history: the inline image is off the wire, its placeholder on it.
        let second = run_turn(wire, body.clone(), state, &cx).await;
        let out = second.output.clone().unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            !text.contains(&data[..40]),
            "{wire}: inline bytes still sent"
        );
        assert!(
            text.contains(REMOTE),
            "{wire}: the remote image left the wire"
        );
        let redecoded = request::decode(wire, out.clone()).unwrap();
        assert!(violations(wire, &redecoded.messages).is_empty(), "{wire}");
        // seed 001: the placeholder and the turn's fold warning say how to get the image
        // back: the model's restore tool with its ref, and the CLI.
        let tool = format!(r#"the restore tool {{"id":"{image_ref}"}}"#);
        let cli = format!("foldwire restore --session wire-s1 --image-ref {image_ref}");
        let placeholder = format!(
            "[image {image_ref} archived: image/png, {} bytes — restore with ref {image_ref}: {tool}, or {cli}]",
            inline.len()
        );
        let warning = second
            .report
            .warnings
            .iter()
            .find(|w| w.code == "media_folded")
            .unwrap_or_else(|| panic!("{wire}: no media_folded warning: {:?}", second.report));
        assert!(
            warning.message.contains(&format!("{image_ref} (image/png"))
                && warning.message.contains(&tool)
                && warning.message.contains(&cli),
            "{wire}: {}",
            warning.message
        );
        let summary = redecoded
            .messages
            .iter()
            .find(|u| u.text.starts_with(&format!("[foldwire {}", block.id)))
            .unwrap_or_else(|| panic!("{wire}: no rendered summary in {text}"));
        assert!(
            summary.text.lines().any(|l| l == placeholder),
            "{wire}: {:?}",
            summary.text
        );

        // Stored: the fold stage moved the originals to the archive.
        assert!(second.state.originals.is_empty(), "{wire}");
        assert_eq!(
            second.report.counter("fold.originals_archived"),
            block.direct.len() as u64
        );
        // Restored byte-identical: the image by its ref, the units by the block.
        let media = restore_media(archive.as_ref(), &second.state, &session(), image_ref)
            .await
            .unwrap();
        assert_eq!(media.bytes.as_ref(), inline.as_slice(), "{wire}");
        assert_eq!(media.media_type, "image/png");
        let back =
            restore_with_archive(&second.state, archive.as_ref(), &session(), block.id, true)
                .await
                .unwrap();
        for unit in back.units {
            let (_, raw) = originals.iter().find(|(r, _)| *r == unit.r#ref).unwrap();
            assert_eq!(unit.raw.as_bytes(), raw.as_slice(), "{wire} {}", unit.r#ref);
        }
    }
}

#[tokio::test]
async fn with_a_failing_archive_the_inline_image_stays_on_the_wire_and_the_reports_say_why() {
    let inline = image_bytes();
    let data = base64::engine::general_purpose::STANDARD.encode(&inline);
    for wire in Wire::ALL {
        let failing = Arc::new(FailingStore::new(Arc::new(InMemory::new())));
        let archive = Backends::from_object_store(failing, "memory").media;
        let cx = stage_cx(archive.clone());
        let body = body(wire, &inline);
        let first = run_turn(wire, body.clone(), SessionState::new(session()), &cx).await;
        let spill = first
            .report
            .warnings
            .iter()
            .find(|w| w.code == "archive_failed")
            .unwrap_or_else(|| panic!("{wire}: spill did not report the failure"));
        assert!(
            spill.message.contains("injected failure"),
            "{}",
            spill.message
        );

        let view = first.conversation.clone().unwrap();
        let mut state = first.state;
        let result = fold_images(&mut state, &view);
        let warnings = result.ranges[0].warnings.join(" | ");
        assert!(
            warnings.contains("archive write failed"),
            "{wire}: the fold must say why the image stays: {warnings}"
        );
        assert_eq!(
            ref_of_raw(&view, &data[..40]),
            None,
            "{wire}: an unarchived image is held back without a ref"
        );
        assert_eq!(result.blocks_created.len(), 1, "{wire}: {result:?}");

        let second = run_turn(wire, body.clone(), state, &cx).await;
        let out = second.output.clone().unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.contains(&data),
            "{wire}: the inline image left the wire"
        );
        assert!(text.contains(REMOTE), "{wire}");
        // The folded text units were not archived either: they stay in the state, warned.
        assert!(!second.state.originals.is_empty(), "{wire}");
        assert!(
            second
                .report
                .warnings
                .iter()
                .any(|w| w.code == "originals_kept_in_state"),
            "{wire}"
        );
        let redecoded = request::decode(wire, out).unwrap();
        assert!(violations(wire, &redecoded.messages).is_empty(), "{wire}");
    }
}

/// Which wire a fixture folder holds.
fn wire_of(dir: &str) -> Wire {
    dir.parse().unwrap()
}

#[tokio::test]
async fn fold_then_restore_is_byte_identical_on_every_request_fixture() {
    let mut folded_fixtures = 0;
    let mut too_small = Vec::new();
    for wire in Wire::ALL {
        for path in foldwire_core::fixtures::files(wire.as_str(), "request-") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert_eq!(wire_of(wire.as_str()), wire);
            let body = Bytes::from(std::fs::read(&path).unwrap());
            let archive = Backends::memory().media;
            let cx = stage_cx(archive.clone());
            let fold = Fold::new(FoldConfig {
                auto: false,
                ..FoldConfig::default()
            });
            let mut turn = Turn::new(session(), wire, body.clone(), SessionState::new(session()));
            for stage in [
                &WireDecode as &dyn Stage,
                &MediaClassify,
                &ArchiveSpill::default(),
                &RefsMint,
            ] {
                stage.run(&mut turn, &cx).await.unwrap();
            }
            let view = turn.conversation.clone().unwrap();
            let ranges = compressible_ranges(
                &view,
                &turn.state,
                &RangesConfig {
                    protection: open_config().protection,
                    min_tokens: 0,
                    split_at_user_after: 0,
                    max_tokens: None,
                },
                &CharEstimator,
            );
            let Some(largest) = ranges.iter().max_by_key(|r| (r.tokens, r.messages)) else {
                // Say so, and prove it: nothing in it can fold.
                assert!(
                    view.messages
                        .iter()
                        .all(|u| !foldwire_stages::kernel::units::foldable(u)),
                    "{name}: foldable units but no range"
                );
                too_small.push(name);
                continue;
            };
            let result = apply_compression(
                &mut turn.state,
                &view,
                &[CompressRequest::new(
                    AnyRef::Message(largest.start),
                    AnyRef::Message(largest.end),
                    format!("fixture {name}"),
                )],
                &open_config(),
                &CharEstimator,
            );
            assert_eq!(result.blocks_created.len(), 1, "{name}: {result:?}");
            let block = turn.state.blocks[0].clone();
            for stage in [&fold as &dyn Stage, &PairingRepair, &WireEncode] {
                stage.run(&mut turn, &cx).await.unwrap();
            }
            let out = turn.output.clone().unwrap();
            let redecoded = request::decode(wire, out.clone())
                .unwrap_or_else(|e| panic!("{name}: output does not decode: {e}"));
            let v = violations(wire, &redecoded.messages);
            assert!(v.is_empty(), "{name}: {v:?}");
            // The summary is on the wire, unless the first-user pin kept every folded unit
            // (a one-message request), which the report says.
            let pinned = turn
                .report
                .warnings
                .iter()
                .any(|w| w.code.starts_with("first_user_pin"));
            assert!(
                pinned
                    || redecoded
                        .messages
                        .iter()
                        .any(|u| u.text.starts_with(&format!("[foldwire {}", block.id))),
                "{name}: the summary is not on the wire"
            );
            assert!(turn.state.originals.is_empty(), "{name}: not archived");
            let back =
                restore_with_archive(&turn.state, archive.as_ref(), &session(), block.id, true)
                    .await
                    .unwrap();
            assert_eq!(back.units.len(), block.effective.len(), "{name}");
            for unit in &back.units {
                let orig = view
                    .messages
                    .iter()
                    .find(|u| u.r#ref == Some(unit.r#ref))
                    .unwrap();
                assert_eq!(
                    unit.raw.as_bytes(),
                    orig.raw.as_ref(),
                    "{name} {}",
                    unit.r#ref
                );
            }
            folded_fixtures += 1;
        }
    }
    if foldwire_core::fixtures::dir().is_some() {
        eprintln!(
            "folded {folded_fixtures} fixtures; too little to fold in: {}",
            too_small.join(", ")
        );
        assert!(folded_fixtures > 0);
    }
}

// acp §26 #118: Responses computer-use and remote MCP calls are tracked, not opaque: a
// `computer_call` and its `computer_call_output` are a call and its result (they fold
// together, or not at all), an `mcp_call` (its output inside it) is one unit named by its
// tool; each gets a ref, and once folded none of them is sent.
#[test]
fn responses_computer_and_mcp_calls_are_tracked_and_leave_the_wire_once_folded() {
    use foldwire_core::MessageKind;
    let body = serde_json::json!({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "open the settings page"},
        {"type": "computer_call", "id": "cu_1", "call_id": "call_c1",
         "action": {"type": "click", "x": 10, "y": 20}, "pending_safety_checks": [], "status": "completed"},
        {"type": "computer_call_output", "call_id": "call_c1",
         "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "search_docs",
         "arguments": "{\"q\":\"settings\"}", "output": "found 3 pages"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "settings opened"}]},
        {"type": "message", "role": "user", "content": "now close it"}]});
    let mut conv = request::decode(
        Wire::OpenAiResponses,
        Bytes::from(serde_json::to_vec(&body).unwrap()),
    )
    .unwrap();
    let mut state = SessionState::default();
    foldwire_stages::refs_mint::mint_refs(&mut state, &mut conv);
    let unit = |n: usize| &conv.messages[n];
    assert_eq!(unit(1).kind, MessageKind::ToolCall);
    assert_eq!(unit(2).kind, MessageKind::ToolResult);
    assert_eq!(
        unit(1)
            .tool
            .as_ref()
            .map(|t| (t.call_id.as_str(), t.name.as_deref())),
        Some(("call_c1", Some("computer")))
    );
    assert_eq!(unit(2).tool.as_ref().unwrap().call_id, "call_c1");
    assert_eq!(
        unit(3).tool.as_ref().unwrap().name.as_deref(),
        Some("search_docs")
    );
    assert!((1..=3).all(|n| unit(n).r#ref.is_some()));

    // A range naming only the call widens to its output: the two never part.
    let r = apply_compression(
        &mut state,
        &conv,
        &[CompressRequest::new(
            AnyRef::Message(unit(1).r#ref.unwrap()),
            AnyRef::Message(unit(1).r#ref.unwrap()),
            "clicked the settings button",
        )],
        &open_config(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created.len(), 1, "{r:?}");
    assert_eq!(
        state.blocks[0].direct,
        vec![unit(1).r#ref.unwrap(), unit(2).r#ref.unwrap()]
    );
    let r = apply_compression(
        &mut state,
        &conv,
        &[CompressRequest::new(
            AnyRef::Message(unit(3).r#ref.unwrap()),
            AnyRef::Message(unit(3).r#ref.unwrap()),
            "searched the docs for settings",
        )],
        &open_config(),
        &CharEstimator,
    );
    assert_eq!(r.blocks_created.len(), 1, "{r:?}");

    let mut folded = conv.clone();
    foldwire_stages::kernel::fold_view(&mut folded, &state);
    let sent: serde_json::Value =
        serde_json::from_slice(&request::encode(&folded).unwrap()).unwrap();
    let types: Vec<&str> = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["type"].as_str())
        .collect();
    for gone in ["computer_call", "computer_call_output", "mcp_call"] {
        assert!(!types.contains(&gone), "{gone} still sent: {sent}");
    }
    let text = sent.to_string();
    assert!(text.contains("clicked the settings button") && text.contains("searched the docs"));
    assert!(text.contains("now close it"));
}
