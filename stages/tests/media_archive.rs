#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `media.classify` + `archive.spill` + the restore calls, per wire, against the memory and
//! local backends (and moto S3 when `scripts/s3-server` runs): inline payloads are stored
//! before anything can fold them, listed and restored byte-identical; remote media is
//! pinned with a reason naming it; failing, slow or missing archives pin the unit and say
//! why; traversal and cross-session attempts are refused.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use foldwire_archive::faults::FailingStore;
use foldwire_archive::object_store::memory::InMemory;
use foldwire_archive::object_store::throttle::{ThrottleConfig, ThrottledStore};
use foldwire_archive::{
    Backends, RestoreError, keys, list_media, restore_media, restore_media_part,
};
use foldwire_core::{
    ComponentKind, Conversation, Entry, MediaArchive, Message, MessageId, MessageKind, Origin, Pin,
    Ref, Registry, Role, SessionId, SessionState, Stage, StageCx, StoreError, Turn, UnitSlot, Wire,
};
use foldwire_stages::archive_spill::ArchiveSpill;
use foldwire_stages::media_classify::MediaClassify;

/// A scratch directory removed on drop (stages has no tempfile dev-dependency).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("foldwire-media-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Bytes with every value 0..=255, so any re-encoding slip shows.
fn image_bytes(seed: u8) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend((0..=255u8).map(|b| b.wrapping_add(seed)));
    v
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A request with an old inline image and a remote-URL image, as one wire writes them.
fn units_for(wire: Wire, inline: &[u8]) -> (Vec<String>, &'static str) {
    let data = b64(inline);
    let remote = "https://example.com/remote-cat.png";
    let units = match wire {
        Wire::Anthropic => vec![
            format!(
                r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{data}"}}}}"#
            ),
            r#"{"type":"text","text":"what is in these?"}"#.to_owned(),
            format!(r#"{{"type":"image","source":{{"type":"url","url":"{remote}"}}}}"#),
        ],
        Wire::OpenAiChat => vec![
            format!(
                r#"{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{data}"}}}}"#
            ),
            r#"{"type":"text","text":"what is in these?"}"#.to_owned(),
            format!(r#"{{"type":"image_url","image_url":{{"url":"{remote}"}}}}"#),
        ],
        Wire::OpenAiResponses => vec![
            format!(r#"{{"type":"input_image","image_url":"data:image/png;base64,{data}"}}"#),
            r#"{"type":"input_text","text":"what is in these?"}"#.to_owned(),
            format!(r#"{{"type":"input_image","image_url":"{remote}"}}"#),
        ],
        Wire::Gemini => vec![
            format!(r#"{{"inlineData":{{"mimeType":"image/png","data":"{data}"}}}}"#),
            r#"{"text":"what is in these?"}"#.to_owned(),
            format!(r#"{{"fileData":{{"mimeType":"image/png","fileUri":"{remote}"}}}}"#),
        ],
    };
    (units, remote)
}

fn conversation(wire: Wire, raws: &[String]) -> Conversation {
    Conversation {
        wire,
        source: Bytes::new(),
        messages_span: 0..0,
        entries: vec![Entry {
            role: Role::User,
            raw: None,
            unit_count: raws.len(),
        }],
        messages: raws
            .iter()
            .enumerate()
            .map(|(i, raw)| Message {
                id: MessageId(format!("fp-{}", &keys::sha256_hex(raw.as_bytes())[..16])),
                r#ref: None,
                entry: 0,
                slot: UnitSlot::Content(i as u32),
                role: Role::User,
                kind: MessageKind::Media,
                text: Default::default(),
                tool: None,
                media: Vec::new(),
                origin: Origin::Client,
                pin: None,
                raw: Bytes::copy_from_slice(raw.as_bytes()),
                modified: false,
                client_raw: None,
            })
            .collect(),
        overrides: Vec::new(),
        model: None,
        stream: false,
    }
}

fn cx_with(archive: Option<Arc<dyn MediaArchive>>) -> StageCx {
    let mut cx = StageCx::new(Arc::new(Registry::empty()));
    cx.archive = archive;
    cx
}

/// Runs classify + spill on the units; returns the finished turn.
async fn run_turn(
    cx: &StageCx,
    session: &SessionId,
    wire: Wire,
    raws: &[String],
    state: SessionState,
) -> Turn {
    let mut turn = Turn::new(session.clone(), wire, Bytes::new(), state);
    turn.conversation = Some(conversation(wire, raws));
    MediaClassify.run(&mut turn, cx).await.unwrap();
    ArchiveSpill::default().run(&mut turn, cx).await.unwrap();
    turn
}

fn messages(turn: &Turn) -> &[Message] {
    &turn.conversation.as_ref().unwrap().messages
}

/// What `refs.mint` does for the units it may number (written by another stage; simulated).
fn mint_refs(turn: &mut Turn) {
    let ids: Vec<MessageId> = messages(turn).iter().map(|m| m.id.clone()).collect();
    for id in ids {
        if !turn.state.refs.iter().any(|e| e.message == id) {
            turn.state.mint_ref(id);
        }
    }
}

fn ref_of(turn: &Turn, unit: usize) -> Ref {
    let id = &messages(turn)[unit].id;
    turn.state
        .refs
        .iter()
        .find(|e| &e.message == id)
        .unwrap()
        .r#ref
}

/// The whole per-wire scenario on one backend.
async fn inline_stored_and_remote_pinned(b: &Backends, tag: &str) {
    for wire in Wire::ALL {
        let session = SessionId::new(format!("{tag}-{wire}")).unwrap();
        let cx = cx_with(Some(Arc::clone(&b.media)));
        let sent = image_bytes(wire as u8);
        let (raws, remote) = units_for(wire, &sent);
        let mut turn = run_turn(
            &cx,
            &session,
            wire,
            &raws,
            SessionState::new(session.clone()),
        )
        .await;

        // Inline: stored, not pinned, size agrees with the classification.
        assert_eq!(messages(&turn)[0].pin, None, "{wire}");
        assert_eq!(turn.report.counter("archive.stored"), 1, "{wire}");
        assert_eq!(
            turn.report.counter("archive.stored_bytes"),
            sent.len() as u64
        );
        assert_eq!(
            messages(&turn)[0].media[0].size,
            Some(sent.len() as u64),
            "{wire}"
        );
        // Remote: pinned, the reason names the URL, nothing stored for it.
        match &messages(&turn)[2].pin {
            Some(Pin::UnrecoverableMedia(reason)) => {
                assert!(reason.contains(remote), "{wire}: {reason}")
            }
            other => panic!("{wire}: remote image not pinned: {other:?}"),
        }
        assert!(
            turn.report.warnings.is_empty(),
            "{wire}: {:?}",
            turn.report.warnings
        );
        // Nothing on the wire changed.
        assert!(messages(&turn).iter().all(|m| !m.modified));

        mint_refs(&mut turn);
        let r = ref_of(&turn, 0);
        let restored = restore_media(b.media.as_ref(), &turn.state, &session, r)
            .await
            .unwrap();
        assert_eq!(
            restored.bytes.as_ref(),
            sent.as_slice(),
            "{wire}: restore is not byte-identical"
        );
        assert_eq!(restored.media_type, "image/png");
        let listed = list_media(&turn.state);
        assert_eq!(listed.len(), 1, "{wire}");
        assert_eq!(listed[0].r#ref, Some(r));
        assert_eq!(listed[0].size, sent.len() as u64);
        assert_eq!(listed[0].key, keys::sha256_hex(&sent));
        // The remote image's ref has nothing archived, and says so.
        let err = restore_media(b.media.as_ref(), &turn.state, &session, ref_of(&turn, 2))
            .await
            .unwrap_err();
        assert!(
            matches!(err, RestoreError::NotArchived { .. }),
            "{wire}: {err}"
        );

        // Next turn the client resends the same history: nothing is written again, and the
        // record learns its ref.
        let state = turn.state.clone();
        let again = run_turn(&cx, &session, wire, &raws, state).await;
        assert_eq!(again.report.counter("archive.stored"), 0, "{wire}");
        assert_eq!(again.report.counter("archive.already_stored"), 1, "{wire}");
        assert_eq!(again.report.counter("archive.refs_attached"), 1, "{wire}");
        assert_eq!(
            foldwire_archive::index::records(&again.state)[0].r#ref,
            Some(r)
        );
    }
}

#[tokio::test]
async fn memory_archive_stores_lists_and_restores_every_wire() {
    inline_stored_and_remote_pinned(&Backends::memory(), "mem").await;
}

#[tokio::test]
async fn local_archive_stores_lists_and_restores_every_wire() {
    let dir = TempDir::new();
    let b = Backends::local(dir.path()).unwrap();
    inline_stored_and_remote_pinned(&b, "local").await;
    // The bytes are on disk under the session's prefix and survive reopening the directory.
    let session = SessionId::new("local-anthropic").unwrap();
    let key = keys::sha256_hex(&image_bytes(Wire::Anthropic as u8));
    assert!(
        dir.path()
            .join("sessions/local-anthropic/media")
            .join(&key)
            .is_file()
    );
    let reopened = Backends::local(dir.path()).unwrap();
    assert_eq!(
        reopened
            .media
            .get_content(&session, &key)
            .await
            .unwrap()
            .as_ref(),
        image_bytes(Wire::Anthropic as u8).as_slice()
    );
}

#[tokio::test]
async fn s3_archive_stores_lists_and_restores_every_wire() {
    let Ok(endpoint) = std::env::var("FOLDWIRE_TEST_S3_ENDPOINT") else {
        eprintln!("FOLDWIRE_TEST_S3_ENDPOINT is unset: the S3 spill test was NOT run");
        return;
    };
    let bucket =
        std::env::var("FOLDWIRE_TEST_S3_BUCKET").unwrap_or_else(|_| "foldwire-test".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let b = foldwire_archive::open(&format!(
        "s3://{bucket}/spill-{nanos}?endpoint={endpoint}&allow_http=true&region=us-east-1\
         &access_key_id=foldwire-test&secret_access_key=foldwire-test"
    ))
    .unwrap();
    inline_stored_and_remote_pinned(&b, "s3").await;
}

#[tokio::test]
async fn a_unit_with_several_images_restores_each_part() {
    let b = Backends::memory();
    let cx = cx_with(Some(Arc::clone(&b.media)));
    let session = SessionId::new("parts").unwrap();
    let (one, two) = (image_bytes(1), image_bytes(2));
    let raw = format!(
        r#"{{"type":"tool_result","tool_use_id":"t1","content":[{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}},{{"type":"text","text":"and"}},{{"type":"image","source":{{"type":"base64","media_type":"image/webp","data":"{}"}}}}]}}"#,
        b64(&one),
        b64(&two)
    );
    let mut turn = run_turn(
        &cx,
        &session,
        Wire::Anthropic,
        &[raw],
        SessionState::new(session.clone()),
    )
    .await;
    assert_eq!(turn.report.counter("archive.stored"), 2);
    mint_refs(&mut turn);
    let r = ref_of(&turn, 0);
    let a = restore_media_part(b.media.as_ref(), &turn.state, &session, r, 0)
        .await
        .unwrap();
    let c = restore_media_part(b.media.as_ref(), &turn.state, &session, r, 1)
        .await
        .unwrap();
    assert_eq!(
        (a.bytes.as_ref(), a.media_type.as_str()),
        (one.as_slice(), "image/png")
    );
    assert_eq!(
        (c.bytes.as_ref(), c.media_type.as_str()),
        (two.as_slice(), "image/webp")
    );
    assert_eq!(c.pointer, "/content/2/source/data");
    let err = restore_media_part(b.media.as_ref(), &turn.state, &session, r, 2)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RestoreError::NoSuchPart { count: 2, .. }),
        "{err}"
    );
}

/// A turn carrying many inline images writes them as one archive object (a pack), not one
/// per image; each restores byte-identical; an image stored as an object of its own (the
/// layout of earlier builds, and of a batch of one) restores the same way.
#[tokio::test]
async fn a_turns_media_go_out_as_one_object() {
    use foldwire_archive::counting::CountingStore;
    let counting = Arc::new(CountingStore::new(Arc::new(InMemory::new())));
    let b = Backends::from_object_store(counting.clone(), "memory");
    let cx = cx_with(Some(Arc::clone(&b.media)));
    let session = SessionId::new("batch").unwrap();
    let images: Vec<Vec<u8>> = (0..40u8).map(image_bytes).collect();
    let raws: Vec<String> = images
        .iter()
        .map(|img| {
            format!(
                r#"{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{}"}}}}"#,
                b64(img)
            )
        })
        .collect();
    let mut turn = run_turn(
        &cx,
        &session,
        Wire::Anthropic,
        &raws,
        SessionState::new(session.clone()),
    )
    .await;
    assert_eq!(turn.report.counter("archive.stored"), 40);
    assert_eq!(counting.counts().puts, 1, "40 images, one object");
    mint_refs(&mut turn);
    for (unit, img) in images.iter().enumerate() {
        let r = ref_of(&turn, unit);
        let back = restore_media(b.media.as_ref(), &turn.state, &session, r)
            .await
            .unwrap();
        assert_eq!(back.bytes.as_ref(), img.as_slice(), "unit {unit}");
    }
    // The next turn resends them all and writes nothing.
    let before = counting.counts();
    let again = run_turn(&cx, &session, Wire::Anthropic, &raws, turn.state.clone()).await;
    assert_eq!(again.report.counter("archive.already_stored"), 40);
    assert_eq!(counting.counts().since(&before).puts, 0);
}

#[tokio::test]
async fn a_failing_archive_pins_the_unit_and_loses_nothing() {
    let failing = Arc::new(FailingStore::new(Arc::new(InMemory::new())));
    let b = Backends::from_object_store(failing.clone(), "memory");
    let cx = cx_with(Some(Arc::clone(&b.media)));
    let session = SessionId::new("failing").unwrap();
    let sent = image_bytes(9);
    let (raws, _) = units_for(Wire::Anthropic, &sent);
    let turn = run_turn(
        &cx,
        &session,
        Wire::Anthropic,
        &raws,
        SessionState::new(session.clone()),
    )
    .await;

    let unit = &messages(&turn)[0];
    match &unit.pin {
        Some(Pin::ArchiveFailed(reason)) => {
            assert!(reason.contains("injected failure"), "{reason}")
        }
        other => panic!("failed spill did not pin: {other:?}"),
    }
    // The image is still on the wire, byte for byte.
    assert_eq!(unit.raw.as_ref(), raws[0].as_bytes());
    assert!(!unit.modified);
    assert!(
        turn.state.archive.is_empty(),
        "a failed write must not be recorded as stored"
    );
    assert!(failing.refused() >= 1);
    let warning = &turn.report.warnings[0];
    assert_eq!(warning.code, "archive_failed");
    assert!(
        warning.message.contains("unit #0") && warning.message.contains(&unit.id.0),
        "{}",
        warning.message
    );
    assert!(
        warning.message.contains("injected failure"),
        "{}",
        warning.message
    );
    assert_eq!(turn.report.counter("archive.pinned"), 1);

    // The store recovers: the next turn stores it and the pin is gone.
    failing.set_failing(false);
    let state = turn.state.clone();
    let turn = run_turn(&cx, &session, Wire::Anthropic, &raws, state).await;
    assert_eq!(messages(&turn)[0].pin, None);
    assert_eq!(turn.report.counter("archive.stored"), 1);
}

#[tokio::test]
async fn a_slow_archive_times_out_and_pins_the_unit() {
    let slow = ThrottledStore::new(
        InMemory::new(),
        ThrottleConfig {
            wait_put_per_call: Duration::from_secs(30),
            ..ThrottleConfig::default()
        },
    );
    let b = Backends::from_object_store(Arc::new(slow), "memory");
    let mut cx = cx_with(Some(Arc::clone(&b.media)));
    cx.archive_timeout = Duration::from_millis(50);
    let session = SessionId::new("slow").unwrap();
    let (raws, _) = units_for(Wire::Gemini, &image_bytes(3));
    let started = std::time::Instant::now();
    let turn = run_turn(
        &cx,
        &session,
        Wire::Gemini,
        &raws,
        SessionState::new(session.clone()),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the timeout did not cut the write short"
    );
    match &messages(&turn)[0].pin {
        Some(Pin::ArchiveFailed(reason)) => {
            assert!(reason.contains("timed out after 50 ms"), "{reason}")
        }
        other => panic!("slow spill did not pin: {other:?}"),
    }
    assert_eq!(turn.report.warnings[0].code, "archive_failed");
    assert!(turn.state.archive.is_empty());
}

#[tokio::test]
async fn without_an_archive_every_inline_unit_is_pinned_with_a_warning() {
    let cx = cx_with(None);
    let session = SessionId::new("none").unwrap();
    let (raws, _) = units_for(Wire::OpenAiChat, &image_bytes(4));
    let turn = run_turn(
        &cx,
        &session,
        Wire::OpenAiChat,
        &raws,
        SessionState::new(session.clone()),
    )
    .await;
    assert!(
        matches!(&messages(&turn)[0].pin, Some(Pin::ArchiveFailed(r)) if r.contains("no media archive"))
    );
    assert!(matches!(
        &messages(&turn)[2].pin,
        Some(Pin::UnrecoverableMedia(_))
    ));
    assert_eq!(messages(&turn)[1].pin, None, "text units are untouched");
    assert_eq!(turn.report.warnings.len(), 1);
    assert_eq!(turn.report.warnings[0].code, "archive_missing");
    assert!(turn.report.warnings[0].message.contains("unit #0"));
}

#[tokio::test]
async fn an_undecodable_payload_stays_on_the_wire() {
    let b = Backends::memory();
    let cx = cx_with(Some(Arc::clone(&b.media)));
    let session = SessionId::new("garbled").unwrap();
    let raw = r#"{"type":"image","source":{"type":"base64","media_type":"image/png","data":"@@not base64@@"}}"#.to_owned();
    let turn = run_turn(
        &cx,
        &session,
        Wire::Anthropic,
        &[raw],
        SessionState::new(session.clone()),
    )
    .await;
    assert!(matches!(&messages(&turn)[0].pin, Some(Pin::ArchiveFailed(r)) if r.contains("base64")));
    assert!(b.media.list(&session).await.unwrap().is_empty());
}

#[tokio::test]
async fn traversal_and_cross_session_attempts_are_refused() {
    let dir = TempDir::new();
    let b = Backends::local(dir.path().join("archive")).unwrap();
    let cx = cx_with(Some(Arc::clone(&b.media)));
    let alice = SessionId::new("alice").unwrap();
    let mallory = SessionId::new("mallory").unwrap();
    let sent = image_bytes(5);
    let (raws, _) = units_for(Wire::Anthropic, &sent);
    let mut turn = run_turn(
        &cx,
        &alice,
        Wire::Anthropic,
        &raws,
        SessionState::new(alice.clone()),
    )
    .await;
    mint_refs(&mut turn);
    let r = ref_of(&turn, 0);
    let key = keys::sha256_hex(&sent);

    // Alice's state asked through Mallory's session: refused, naming the owner.
    let err = restore_media(b.media.as_ref(), &turn.state, &mallory, r)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("belongs to session alice"),
        "{err}"
    );
    // Mallory's own state does not know Alice's ref.
    let err = restore_media(
        b.media.as_ref(),
        &SessionState::new(mallory.clone()),
        &mallory,
        r,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RestoreError::UnknownRef { .. }), "{err}");
    // Alice's content key asked through Mallory's session: not found.
    assert!(matches!(
        b.media.get_content(&mallory, &key).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        b.media.get(&mallory, r).await,
        Err(StoreError::NotFound { .. })
    ));
    // Traversal through keys, refs and session ids is refused before any I/O.
    for bad in ["../alice/media/x", "/etc/passwd", "..%2F..", "a\0b"] {
        let got = b.media.get_content(&mallory, bad).await;
        assert!(
            matches!(got, Err(StoreError::InvalidKey { .. })),
            "{bad:?}: {got:?}"
        );
    }
    let long = format!("../{}", "a".repeat(300));
    for bad in [
        "../alice",
        "/abs/path",
        "a\0b",
        long.as_str(),
        "alice/../mallory",
    ] {
        assert!(SessionId::new(bad).is_err(), "{bad:?}");
        assert!(keys::session_segment(bad).is_err(), "{bad:?}");
        assert!(keys::parse_ref(bad).is_err(), "{bad:?}");
    }
    // Nothing was written outside the archive directory.
    let outside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("archive")]);
}

#[test]
fn both_stages_are_registered() {
    foldwire_stages::link();
    let registry = Registry::from_inventory().unwrap();
    let names = registry.names(ComponentKind::Stage);
    for name in ["media.classify", "archive.spill"] {
        assert!(
            names.contains(&name.to_owned()),
            "{name} missing from {names:?}"
        );
    }
}

/// Stands in for `wire.decode` (written elsewhere): puts a ready conversation on the turn.
struct FakeDecode(Conversation);

#[foldwire_core::async_trait]
impl Stage for FakeDecode {
    fn name(&self) -> &'static str {
        "test.decode"
    }
    fn provides(&self) -> &'static [foldwire_core::Fact] {
        &[foldwire_core::Fact::Decoded]
    }
    async fn run(&self, turn: &mut Turn, _: &StageCx) -> Result<(), foldwire_core::StageError> {
        turn.conversation = Some(self.0.clone());
        Ok(())
    }
}

#[tokio::test]
async fn the_stages_compose_by_name_and_refuse_a_wrong_order() {
    foldwire_stages::link();
    let registry = Registry::from_inventory().unwrap();
    let (raws, _) = units_for(Wire::Anthropic, &image_bytes(6));
    let pipeline = foldwire_core::Pipeline::builder(&registry)
        .stage(FakeDecode(conversation(Wire::Anthropic, &raws)))
        .stage_named("media.classify", serde_json::Value::Null)
        .unwrap()
        .stage_named("archive.spill", serde_json::Value::Null)
        .unwrap()
        .build()
        .unwrap();
    let b = Backends::memory();
    let cx = cx_with(Some(Arc::clone(&b.media)));
    let session = SessionId::new("composed").unwrap();
    let mut turn = Turn::new(
        session.clone(),
        Wire::Anthropic,
        Bytes::new(),
        SessionState::new(session.clone()),
    );
    pipeline.run(&mut turn, &cx).await.unwrap();
    assert_eq!(turn.report.counter("archive.stored"), 1);
    assert_eq!(
        b.media
            .get_content(&session, &keys::sha256_hex(&image_bytes(6)))
            .await
            .unwrap()
            .as_ref(),
        image_bytes(6).as_slice()
    );

    let wrong = foldwire_core::Pipeline::builder(&registry)
        .stage(FakeDecode(conversation(Wire::Anthropic, &raws)))
        .stage_named("archive.spill", serde_json::Value::Null)
        .unwrap()
        .stage_named("media.classify", serde_json::Value::Null)
        .unwrap()
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains("archive.spill") && wrong.contains("media.classify"),
        "{wrong}"
    );
    // Unknown params are refused by name.
    let Err(bad) = foldwire_core::Pipeline::builder(&registry)
        .stage_named("archive.spill", serde_json::json!({"colour": "blue"}))
    else {
        panic!("unknown params accepted");
    };
    let bad = bad.to_string();
    assert!(
        bad.contains("archive.spill") && bad.contains("colour"),
        "{bad}"
    );
}
