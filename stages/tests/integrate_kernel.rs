#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Where the kernel meets the archive and the layout: folded originals move to the archive
//! (and stay in the state when it fails), restore reads them back byte-identical; the head
//! window never folds; `fold` validates automatic folds with the protection `ranges.build`
//! used.

mod support;

use std::sync::Arc;
use std::time::Duration;

use foldwire_archive::Backends;
use foldwire_archive::faults::FailingStore;
use foldwire_archive::object_store::memory::InMemory;
use foldwire_core::{
    AnyRef, CharEstimator, Conversation, MediaArchive, PendingWrites, Ref, SessionId, SessionState,
    Stage, Wire,
};
use foldwire_stages::fold::{Fold, FoldConfig};
use foldwire_stages::kernel::{
    BatchTarget, CompressConfig, CompressError, CompressRequest, Protection, RangesConfig,
    RestoreError, apply_compression, archive_originals, compressible_ranges, finish_archiving,
    original_key, restore, restore_with_archive, start_archiving, start_archiving_units,
};
use foldwire_stages::layout_head_window::HeadState;
use foldwire_stages::ranges_build::{RangesBuild, UsedProtection};
use foldwire_test_kit::archive::BatchThreads;
use support::{Conv, cx, minted, sized, turn_for};

fn open_protection() -> Protection {
    Protection {
        recent_messages: 0,
        recent_tokens: 0,
        last_user: false,
        protected_tools: vec![],
        latest_tools: vec![],
        latest_count: 0,
    }
}

fn open_config() -> CompressConfig {
    CompressConfig {
        protection: open_protection(),
        min_tokens: 0,
        max_summary_chars: 0,
        min_summary: foldwire_stages::kernel::MinSummary::OFF,
    }
}

fn session() -> SessionId {
    SessionId::new("s1").unwrap()
}

/// Six exchanges of text, a tool call and its result in the middle.
fn history(wire: Wire) -> Conv {
    let mut c = Conv::new(wire);
    c.user(&sized("start: fix src/auth.rs", 60))
        .assistant(&sized("looking", 60))
        .turn(None, Some("running"), &[("c1", "bash", r#"{"cmd":"ls"}"#)])
        .results(&[("c1", &sized("listing", 80))])
        .user(&sized("next", 60))
        .assistant(&sized("done", 60))
        .user("latest question");
    c
}

/// Folds m00002..m00007 (the middle of [`history`]) with the open protection.
fn fold_middle(state: &mut SessionState, view: &Conversation) {
    let result = apply_compression(
        state,
        view,
        &[CompressRequest::new(
            AnyRef::Message(Ref(2)),
            AnyRef::Message(Ref(7)),
            "the middle",
        )],
        &open_config(),
        &CharEstimator,
    );
    assert_eq!(result.blocks_created.len(), 1, "{result:?}");
}

fn raw_of(view: &Conversation, r: Ref) -> Vec<u8> {
    view.messages
        .iter()
        .find(|u| u.r#ref == Some(r))
        .unwrap()
        .raw
        .to_vec()
}

fn failing_backends() -> (Arc<FailingStore>, Backends) {
    let failing = Arc::new(FailingStore::new(Arc::new(InMemory::new())));
    let backends = Backends::from_object_store(failing.clone(), "memory");
    (failing, backends)
}

#[tokio::test]
async fn folded_originals_move_to_the_archive_and_restore_byte_identical() {
    for wire in Wire::ALL {
        let mut state = SessionState::new(session());
        let view = minted(&history(wire), &mut state);
        fold_middle(&mut state, &view);
        let block = state.blocks[0].clone();
        assert_eq!(state.originals.len(), block.direct.len());

        let archive = Backends::memory().media;
        let done = archive_originals(
            &mut state,
            archive.as_ref(),
            &session(),
            Duration::from_secs(5),
        )
        .await;
        assert!(done.failed.is_empty(), "{wire}: {:?}", done.failed);
        assert_eq!(done.stored, *block.direct, "{wire}");
        assert!(
            state.originals.is_empty(),
            "{wire}: the state still holds them"
        );

        // The block records its originals' keys, in direct order, content-addressed.
        let keys = &state.blocks[0].archive_keys;
        assert_eq!(keys.len(), block.direct.len());
        for (r, key) in block.direct.iter().zip(keys) {
            assert_eq!(
                key,
                &foldwire_archive::keys::sha256_hex(&raw_of(&view, *r)),
                "{wire} {r}"
            );
            assert_eq!(original_key(&state, *r), Some(key.as_str()));
        }
        // Originals are not media: the media listing does not show them.
        assert!(foldwire_archive::list_media(&state).is_empty());

        // The state-only restore says where they went; the archive restore returns them.
        match restore(&state, block.id, false) {
            Err(RestoreError::InArchive { r#ref, .. }) => assert_eq!(r#ref, block.direct[0]),
            other => panic!("{wire}: expected InArchive, got {other:?}"),
        }
        let back = restore_with_archive(&state, archive.as_ref(), &session(), block.id, true)
            .await
            .unwrap();
        assert_eq!(back.units.len(), block.effective.len());
        for unit in &back.units {
            assert_eq!(unit.raw.as_bytes(), raw_of(&view, unit.r#ref), "{wire}");
        }

        // Running it again writes nothing and records nothing twice.
        let archive_len = state.archive.len();
        let again = archive_originals(
            &mut state,
            archive.as_ref(),
            &session(),
            Duration::from_secs(5),
        )
        .await;
        assert!(again.stored.is_empty() && again.failed.is_empty());
        assert_eq!(state.archive.len(), archive_len);
    }
}

#[tokio::test]
async fn a_failing_archive_keeps_the_originals_in_the_state() {
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::Anthropic), &mut state);
    fold_middle(&mut state, &view);
    let before = state.originals.clone();

    // Without an archive the fold stage keeps them, in bytes of their own.
    let mut turn = turn_for(view.clone(), state.clone());
    Fold::new(FoldConfig {
        auto: false,
        ..FoldConfig::default()
    })
    .run(&mut turn, &cx())
    .await
    .unwrap();
    assert_eq!(turn.state.originals, before);
    for (r, original) in &turn.state.originals {
        let unit = view.messages.iter().find(|u| u.r#ref == Some(*r)).unwrap();
        assert_ne!(original.bytes().as_ptr(), unit.raw.as_ptr(), "{r}");
    }

    let (failing, backends) = failing_backends();
    let done = archive_originals(
        &mut state,
        backends.media.as_ref(),
        &session(),
        Duration::from_secs(5),
    )
    .await;
    assert!(done.stored.is_empty());
    assert_eq!(done.failed.len(), before.len());
    assert!(done.failed[0].1.contains("injected failure"), "{done:?}");
    assert_eq!(state.originals, before, "nothing may be lost");
    assert!(state.blocks[0].archive_keys.is_empty());
    assert!(failing.refused() > 0);
    // Staying beyond the turn, they no longer hold on to the request body.
    for (r, original) in &state.originals {
        let unit = view.messages.iter().find(|u| u.r#ref == Some(*r)).unwrap();
        assert_ne!(original.bytes().as_ptr(), unit.raw.as_ptr(), "{r}");
    }
    // Both restores still work from the state.
    let id = state.blocks[0].id;
    let sync = restore(&state, id, false).unwrap();
    let with = restore_with_archive(&state, backends.media.as_ref(), &session(), id, false)
        .await
        .unwrap();
    assert_eq!(sync, with);
}

#[tokio::test]
async fn the_fold_stage_archives_originals_and_warns_when_it_cannot() {
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::OpenAiChat), &mut state);
    fold_middle(&mut state, &view);
    let originals = state.originals.clone();
    let stage = Fold::new(FoldConfig {
        auto: false,
        ..FoldConfig::default()
    });

    // Failing archive: warned, kept, the fold itself still happens.
    let (failing, backends) = failing_backends();
    let archive: Arc<dyn MediaArchive> = backends.media.clone();
    let cx_failing = cx().with_archive(archive.clone());
    let mut turn = turn_for(view.clone(), state);
    stage.run(&mut turn, &cx_failing).await.unwrap();
    let warning = turn
        .report
        .warnings
        .iter()
        .find(|w| w.code == "originals_kept_in_state")
        .expect("a warning naming the kept originals");
    assert!(warning.message.contains("m00002"), "{}", warning.message);
    assert!(warning.message.contains("injected failure"));
    assert_eq!(turn.state.originals, originals);
    assert!(turn.report.counter("fold.units_removed") > 0);

    // The next turn, with the archive back, moves them.
    failing.set_failing(false);
    let mut next = turn_for(view.clone(), turn.state);
    stage.run(&mut next, &cx_failing).await.unwrap();
    assert!(
        next.report
            .warnings
            .iter()
            .all(|w| w.code != "originals_kept_in_state")
    );
    assert_eq!(
        next.report.counter("fold.originals_archived"),
        originals.len() as u64
    );
    assert!(next.state.originals.is_empty());
    let id = next.state.blocks[0].id;
    let back = restore_with_archive(&next.state, archive.as_ref(), &session(), id, false)
        .await
        .unwrap();
    for unit in back.units {
        assert_eq!(unit.raw, originals[&unit.r#ref].as_str());
    }
}

/// A first turn that folds most of a long session writes its originals as one archive
/// object, not one per unit, and every one restores byte-identical; originals stored one
/// object each (earlier builds, no pack in their index entries) still restore.
#[tokio::test]
async fn a_turns_originals_go_out_as_one_object_and_old_layouts_still_restore() {
    use foldwire_archive::counting::CountingStore;
    let mut c = Conv::new(Wire::Anthropic);
    for i in 0..100 {
        c.user(&sized(&format!("question {i}"), 120))
            .assistant(&sized(&format!("answer {i}"), 200));
    }
    c.user("latest");
    let view = minted(&c, &mut SessionState::new(session()));
    let fold_all = |state: &mut SessionState| {
        let result = apply_compression(
            state,
            &view,
            &[CompressRequest::new(
                AnyRef::Message(Ref(1)),
                AnyRef::Message(Ref(190)),
                "most of it",
            )],
            &open_config(),
            &CharEstimator,
        );
        assert_eq!(result.blocks_created.len(), 1, "{result:?}");
    };

    let dir = tempfile::tempdir().unwrap();
    let local = Backends::local(dir.path()).unwrap();
    let counting = Arc::new(CountingStore::new(Arc::clone(&local.store)));
    let backends = Backends::from_object_store(counting.clone(), "file");
    let mut state = SessionState::new(session());
    let _ = minted(&c, &mut state);
    fold_all(&mut state);
    let units = state.originals.len();
    assert!(units >= 190, "{units}");
    let done = archive_originals(
        &mut state,
        backends.media.as_ref(),
        &session(),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(done.stored.len(), units, "{:?}", done.failed);
    assert_eq!(counting.counts().puts, 1, "{units} originals, one object");
    // Read back from the directory by a fresh handle: byte-identical.
    let reopened = Backends::local(dir.path()).unwrap();
    let id = state.blocks[0].id;
    let back = restore_with_archive(&state, reopened.media.as_ref(), &session(), id, false)
        .await
        .unwrap();
    assert_eq!(back.units.len(), units);
    for unit in &back.units {
        assert_eq!(unit.raw.as_bytes(), raw_of(&view, unit.r#ref));
    }

    // The layout of earlier builds: each original an object of its own, index entries
    // without a pack.
    let old_dir = tempfile::tempdir().unwrap();
    let old = Backends::local(old_dir.path()).unwrap();
    let mut old_state = SessionState::new(session());
    let _ = minted(&c, &mut old_state);
    fold_all(&mut old_state);
    let originals = std::mem::take(&mut old_state.originals);
    for (r, raw) in &originals {
        let stored = old
            .media
            .put_content(
                &session(),
                foldwire_stages::kernel::originals::ORIGINAL_MEDIA_TYPE,
                raw.bytes(),
            )
            .await
            .unwrap();
        let item = foldwire_core::state::ArchivedItem {
            r#ref: Some(*r),
            key: stored.key,
            media_type: stored.media_type,
            size: stored.size,
            original: true,
            ..Default::default()
        };
        old_state.archive.push(item);
    }
    let media_dir = old_dir.path().join("sessions/s1/media");
    assert_eq!(
        std::fs::read_dir(&media_dir).unwrap().count(),
        originals.len()
    );
    let reopened = Backends::local(old_dir.path()).unwrap();
    let back = restore_with_archive(&old_state, reopened.media.as_ref(), &session(), id, false)
        .await
        .unwrap();
    assert_eq!(back.units.len(), originals.len());
    for unit in &back.units {
        assert_eq!(unit.raw.as_bytes(), raw_of(&view, unit.r#ref));
    }
}

#[tokio::test]
async fn restore_with_archive_refuses_missing_or_tampered_originals() {
    use foldwire_archive::object_store::{ObjectStoreExt, PutPayload};
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::Gemini), &mut state);
    fold_middle(&mut state, &view);
    let backends = Backends::memory();
    archive_originals(
        &mut state,
        backends.media.as_ref(),
        &session(),
        Duration::from_secs(5),
    )
    .await;
    let id = state.blocks[0].id;
    let first = state.blocks[0].direct[0];
    let key = original_key(&state, first).unwrap().to_owned();

    // The turn's originals went out as one pack; bytes that changed in it are refused,
    // never handed back.
    let at = foldwire_archive::index::location_of_key(&state, &key).expect("packed");
    let path = foldwire_archive::keys::pack_path(&session(), &at.pack).unwrap();
    let mut pack = backends
        .store
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    pack[at.offset as usize] ^= 0x20;
    backends
        .store
        .put(&path, PutPayload::from(pack))
        .await
        .unwrap();
    let err = restore_with_archive(&state, backends.media.as_ref(), &session(), id, false)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RestoreError::Archive { r#ref, why, .. } if *r#ref == first && why.contains("hash")),
        "{err:?}"
    );

    // A missing object is named too.
    backends.store.delete(&path).await.unwrap();
    let err = restore_with_archive(&state, backends.media.as_ref(), &session(), id, false)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RestoreError::Archive { r#ref, .. } if *r#ref == first),
        "{err:?}"
    );
    assert!(err.to_string().contains("could not be read"), "{err}");

    // Another session's name with this state is refused outright.
    let other = SessionId::new("s2").unwrap();
    let err = restore_with_archive(&state, backends.media.as_ref(), &other, id, false)
        .await
        .unwrap_err();
    assert!(matches!(err, RestoreError::WrongSession { .. }), "{err:?}");
}

fn head_on(state: &mut SessionState, view: &Conversation, first_units: usize) {
    let head = HeadState {
        head_ids: view
            .messages
            .iter()
            .take(first_units)
            .map(|u| u.id.clone())
            .collect(),
        ..HeadState::default()
    };
    head.store(state).unwrap();
}

#[test]
fn the_head_window_never_folds() {
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::Anthropic), &mut state);
    let config = RangesConfig {
        protection: open_protection(),
        min_tokens: 0,
        split_at_user_after: 0,
        max_tokens: None,
    };
    // Without a head, the first unit starts a range.
    let ranges = compressible_ranges(&view, &state, &config, &CharEstimator);
    assert_eq!(ranges[0].start, Ref(1));

    head_on(&mut state, &view, 2);
    let ranges = compressible_ranges(&view, &state, &config, &CharEstimator);
    assert!(!ranges.is_empty());
    for r in &ranges {
        assert!(
            r.start > Ref(2),
            "range {}..{} reaches the head",
            r.start,
            r.end
        );
    }

    // apply_compression refuses a range made only of head units…
    let mut s = state.clone();
    let only_head = apply_compression(
        &mut s,
        &view,
        &[CompressRequest::new(
            AnyRef::Message(Ref(1)),
            AnyRef::Message(Ref(2)),
            "head",
        )],
        &open_config(),
        &CharEstimator,
    );
    match &only_head.ranges[0].error {
        Some(CompressError::Protected { why }) => assert!(why.contains("head window"), "{why}"),
        other => panic!("expected Protected, got {other:?}"),
    }
    // …and folds a range that starts in the head only from behind it.
    let across = apply_compression(
        &mut s,
        &view,
        &[CompressRequest::new(
            AnyRef::Message(Ref(1)),
            AnyRef::Message(Ref(7)),
            "across",
        )],
        &open_config(),
        &CharEstimator,
    );
    let block = across.blocks_created[0];
    let b = s.blocks.iter().find(|b| b.id == block).unwrap();
    assert!(!b.direct.contains(&Ref(1)) && !b.direct.contains(&Ref(2)));
    assert!(
        across.ranges[0]
            .warnings
            .iter()
            .any(|w| w.contains("head window")),
        "{:?}",
        across.ranges[0].warnings
    );
}

#[tokio::test]
async fn fold_uses_the_protection_ranges_build_recorded() {
    // ranges.build runs with an open protection and offers the early units; fold's own
    // default protection would refuse nothing here only if it reads the recorded one: with
    // the defaults (last 5 units, 5,000 tokens) the whole history is protected.
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::Anthropic), &mut state);
    let ranges_stage = RangesBuild {
        config: RangesConfig {
            protection: open_protection(),
            min_tokens: 0,
            split_at_user_after: 0,
            max_tokens: None,
        },
    };
    let mut turn = turn_for(view, state);
    // No head window: on a first turn ranges.build would protect the opening messages.
    turn.options.head_tokens = Some(0);
    ranges_stage.run(&mut turn, &cx()).await.unwrap();
    assert!(!turn.ranges.is_empty());
    let recorded: Protection = UsedProtection::of(&turn);
    assert_eq!(recorded, open_protection());

    let fold = Fold::default();
    assert_eq!(
        fold.compress_config(&mut turn).protection,
        open_protection()
    );
    // acp §26 #61: the minimum summary length is the model's rule; an automatic fold's
    // summary (its length set by the summarizer's own settings) is never refused by it.
    assert_eq!(
        fold.compress_config(&mut turn).min_summary,
        foldwire_stages::kernel::MinSummary::OFF
    );

    // An explicit override wins.
    let mut strict = FoldConfig::default();
    strict.compress.protection = Some(Protection::default());
    let fold = Fold::new(strict);
    assert_eq!(
        fold.compress_config(&mut turn).protection,
        Protection::default()
    );

    // With the recorded protection, a range ranges.build offered is accepted; with the
    // default one it is refused as protected — the disagreement this integration removes.
    let range = turn.ranges[0].clone();
    let request = [CompressRequest::new(
        AnyRef::Message(range.start),
        AnyRef::Message(range.end),
        "s",
    )];
    let view = turn.conversation.clone().unwrap();
    let mut s = turn.state.clone();
    let default_cfg = CompressConfig {
        min_tokens: 0,
        min_summary: foldwire_stages::kernel::MinSummary::OFF,
        ..CompressConfig::default()
    };
    let refused = apply_compression(&mut s, &view, &request, &default_cfg, &CharEstimator);
    assert!(refused.blocks_created.is_empty(), "{refused:?}");
    let recorded_cfg = CompressConfig {
        min_tokens: 0,
        ..Fold::default().compress_config(&mut turn)
    };
    let accepted = apply_compression(&mut s, &view, &request, &recorded_cfg, &CharEstimator);
    assert_eq!(accepted.blocks_created.len(), 1, "{accepted:?}");
}

/// Batches for [`session`] in `archive`, written before they answer.
fn target<'a>(
    archive: &'a Arc<dyn MediaArchive>,
    source: Option<&'a bytes::Bytes>,
) -> BatchTarget<'a> {
    static SESSION: std::sync::OnceLock<SessionId> = std::sync::OnceLock::new();
    BatchTarget {
        archive,
        session: SESSION.get_or_init(session),
        source,
        defer: false,
    }
}

/// A deferred batch is recorded as soon as its pack is planned and leaves the pack's write
/// pending: everything restores once that write succeeded; on a failing store the pending
/// write reports the failure (its caller then stores nothing).
#[tokio::test]
async fn a_deferred_batch_is_recorded_when_planned_and_leaves_its_write_pending() {
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::Anthropic), &mut state);
    fold_middle(&mut state, &view);
    let archive = Backends::memory().media;
    let to = BatchTarget {
        defer: true,
        ..target(&archive, Some(&view.source))
    };
    let in_flight = start_archiving(&state, to);
    let mut pending = PendingWrites::default();
    let done = finish_leaving(&mut state, in_flight, archive.as_ref(), &mut pending).await;
    assert!(done.failed.is_empty(), "{done:?}");
    assert!(state.originals.is_empty());
    assert!(
        !pending.is_empty(),
        "the pack's write is left to the caller"
    );
    pending.finish().await.unwrap();
    let back = restore_with_archive(
        &state,
        archive.as_ref(),
        &session(),
        state.blocks[0].id,
        false,
    )
    .await
    .unwrap();
    assert!(!back.units.is_empty());
    for unit in back.units {
        assert_eq!(unit.raw.as_bytes(), raw_of(&view, unit.r#ref).as_slice());
    }

    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::OpenAiChat), &mut state);
    fold_middle(&mut state, &view);
    let (failing, backends) = failing_backends();
    let to = BatchTarget {
        defer: true,
        ..target(&backends.media, None)
    };
    let in_flight = start_archiving(&state, to);
    let mut pending = PendingWrites::default();
    finish_leaving(&mut state, in_flight, backends.media.as_ref(), &mut pending).await;
    assert!(pending.finish().await.is_err());
    assert_eq!(failing.refused(), 1);
}

/// A deferred pack's write gets under way while the thread that started it is still busy
/// (a stage computing on the engine's current-thread runtime, which polls no task until the
/// turn's stages are done): it runs on a thread of its own, so it overlaps the rest of the
/// turn rather than starting when the turn stores its state.
#[tokio::test(flavor = "current_thread")]
async fn a_deferred_pack_is_written_while_the_turn_goes_on() {
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::Anthropic), &mut state);
    fold_middle(&mut state, &view);
    let threads = BatchThreads::over(Backends::memory().media);
    let archive: Arc<dyn MediaArchive> = threads.clone();
    let to = BatchTarget {
        defer: true,
        ..target(&archive, Some(&view.source))
    };
    let in_flight = start_archiving(&state, to);
    assert!(in_flight.is_some());
    // Busy without yielding, as the stages after the fold are.
    assert!(
        threads.wait_for_writes(1, Duration::from_secs(20)),
        "the pack's write waited for the runtime the turn computes on"
    );
    let mut pending = PendingWrites::default();
    let done = finish_leaving(&mut state, in_flight, archive.as_ref(), &mut pending).await;
    assert!(done.failed.is_empty(), "{done:?}");
    pending.finish().await.unwrap();
    assert!(state.originals.is_empty());
}

/// [`finish_archiving`] with five seconds to spare.
async fn finish(
    state: &mut SessionState,
    in_flight: Option<foldwire_stages::kernel::OriginalsInFlight>,
    archive: &dyn MediaArchive,
) -> foldwire_stages::kernel::OriginalsArchived {
    finish_leaving(state, in_flight, archive, &mut PendingWrites::default()).await
}

/// [`finish`], leaving a deferred batch's write in `pending`.
async fn finish_leaving(
    state: &mut SessionState,
    in_flight: Option<foldwire_stages::kernel::OriginalsInFlight>,
    archive: &dyn MediaArchive,
    pending: &mut PendingWrites,
) -> foldwire_stages::kernel::OriginalsArchived {
    finish_archiving(
        state,
        in_flight,
        archive,
        &session(),
        Duration::from_secs(5),
        pending,
    )
    .await
}

/// A batch started early is written on a thread of its own and recorded when it is
/// finished; originals folded after it began go in a second batch then; a batch written
/// ahead of the fold records only what the fold kept; a batch that fails keeps its
/// originals in the state and is not tried again in the same turn.
#[tokio::test]
async fn a_batch_started_early_is_finished_with_what_was_folded_since() {
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::OpenAiChat), &mut state);
    fold_middle(&mut state, &view);
    // Each original is the unit's own bytes (a slice of the body), not a copy of them.
    for (r, original) in &state.originals {
        let unit = view.messages.iter().find(|u| u.r#ref == Some(*r)).unwrap();
        assert_eq!(original.bytes().as_ptr(), unit.raw.as_ptr(), "{r}: copied");
    }
    let first_batch = state.originals.len();
    let archive = BatchThreads::over(Backends::memory().media);
    let as_archive: Arc<dyn MediaArchive> = archive.clone();
    let in_flight = start_archiving(&state, target(&as_archive, None));
    assert!(in_flight.is_some());
    // Folded after the batch began: not in it.
    state.originals.insert(Ref(99), r#"{"late":true}"#.into());
    let done = finish(&mut state, in_flight, as_archive.as_ref()).await;
    assert!(done.failed.is_empty(), "{done:?}");
    assert_eq!(done.stored.len(), first_batch + 1);
    assert!(state.originals.is_empty());
    // Both batches, the early one on a thread of its own.
    let batches = archive.batches();
    assert_eq!(batches.len(), 2);
    assert_ne!(batches[0], std::thread::current().id());
    assert!(original_key(&state, Ref(99)).is_some());

    // Ahead of the fold: the units about to fold, plus one it will not take. Only what the
    // fold kept as originals is recorded; the other unit's bytes are passed over.
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::Anthropic), &mut state);
    let ahead: Vec<&foldwire_core::Message> = view
        .messages
        .iter()
        .filter(|u| u.r#ref.is_some_and(|r| (2..=7).contains(&r.0) || r.0 == 9))
        .collect();
    let archive = BatchThreads::over(Backends::memory().media);
    let as_archive: Arc<dyn MediaArchive> = archive.clone();
    let in_flight = start_archiving_units(ahead, target(&as_archive, Some(&view.source)), None);
    fold_middle(&mut state, &view);
    let direct = state.blocks[0].direct.to_vec();
    assert!(!direct.contains(&Ref(9)));
    let done = finish(&mut state, in_flight, as_archive.as_ref()).await;
    assert!(done.failed.is_empty(), "{done:?}");
    let mut stored = done.stored.clone();
    stored.sort();
    assert_eq!(stored, direct);
    assert!(state.originals.is_empty());
    assert_eq!(
        original_key(&state, Ref(9)),
        None,
        "a unit the fold did not take"
    );
    assert_eq!(state.blocks[0].archive_keys.len(), direct.len());
    let back = restore_with_archive(
        &state,
        as_archive.as_ref(),
        &session(),
        state.blocks[0].id,
        false,
    )
    .await
    .unwrap();
    for unit in back.units {
        assert_eq!(unit.raw.as_bytes(), raw_of(&view, unit.r#ref).as_slice());
    }

    // Failing: both batches fail once, nothing leaves the state.
    let mut state = SessionState::new(session());
    let view = minted(&history(Wire::Gemini), &mut state);
    fold_middle(&mut state, &view);
    let before = state.originals.clone();
    let (failing, backends) = failing_backends();
    let in_flight = start_archiving(&state, target(&backends.media, None));
    let done = finish(&mut state, in_flight, backends.media.as_ref()).await;
    assert!(done.stored.is_empty());
    assert_eq!(done.failed.len(), before.len());
    assert_eq!(state.originals, before, "nothing may be lost");
    assert_eq!(
        failing.refused(),
        1,
        "the failed batch was tried again this turn"
    );
}
