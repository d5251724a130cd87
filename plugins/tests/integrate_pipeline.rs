#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The whole default pipeline with an archive, folding on its own when the request is over
//! its window: an old inline image folds off the wire behind a placeholder naming its ref,
//! the remote image stays, the folded originals end up in the archive (not the state), and
//! everything comes back byte-identical. The originals' write starts on a thread of its own
//! before the summarizer is asked for their summary.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine as _;
use bytes::Bytes;
use foldwire_archive::{Backends, restore_media};
use foldwire_core::{
    Budget, CharEstimator, Component, ComponentKind, Params, Pipeline, Ref, Registry, SessionId,
    SessionState, StageCx, StrategyError, Summarizer, Summary, SummaryRequest, Turn, Wire,
    async_trait,
};
use foldwire_plugins::summarizer::Extractive;
use foldwire_stages::kernel::pairing_rules::violations;
use foldwire_test_kit::archive::BatchThreads;
use foldwire_wire::request;
use support::{assert_blocks_restore_exactly, sent_units};

const REMOTE: &str = "https://example.com/remote-diagram.png";

fn image() -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend((0..=255u8).rev());
    v
}

fn body(inline: &[u8]) -> Bytes {
    let data = base64::engine::general_purpose::STANDARD.encode(inline);
    let mut messages = vec![
        serde_json::json!({"role": "user", "content": "start: fix the login page in src/login.rs"}),
        serde_json::json!({"role": "assistant", "content": "Show me what it looks like."}),
        serde_json::json!({"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": REMOTE}},
            {"type": "text", "text": "this is the diagram, and the page"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}),
    ];
    for i in 0..16 {
        let id = format!("toolu_{i:02}");
        messages.push(serde_json::json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}: reading src/login/part{i}.rs")},
            {"type": "tool_use", "id": id, "name": "bash",
             "input": {"command": format!("cat src/login/part{i}.rs")}}]}));
        messages.push(serde_json::json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id,
             "content": format!("fn part_{i}() {{}}\n{}", "// body line of the login code\n".repeat(50))}]}));
    }
    messages.push(serde_json::json!({"role": "user", "content": "continue"}));
    let v = serde_json::json!({"model": "m", "max_tokens": 64, "messages": messages});
    Bytes::from(serde_json::to_vec(&v).unwrap())
}

fn pipeline(registry: &Registry) -> Pipeline {
    pipeline_with(registry, true, serde_json::json!({"summarizer": WAITING}))
}

/// The name [`WaitsForTheOriginals`] is registered under.
const WAITING: &str = "test.waits_for_the_originals";

/// The extractive summarizer, after waiting (two seconds at most) until the archive has begun
/// a batch besides the spilled image's, and noting whether it had: the fold's originals start
/// for the archive before their summary is written, not after.
#[derive(Debug)]
struct WaitsForTheOriginals {
    batches: Arc<BatchThreads>,
    saw_them: Arc<AtomicBool>,
}

#[async_trait]
impl Summarizer for WaitsForTheOriginals {
    fn name(&self) -> &'static str {
        WAITING
    }

    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, StrategyError> {
        for _ in 0..200 {
            if self.batches.batches().len() >= 2 {
                self.saw_them.store(true, Ordering::SeqCst);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Extractive::default().summarize(request).await
    }
}

#[tokio::test]
async fn the_default_pipeline_folds_an_old_image_into_the_archive_and_restores_it_exactly() {
    foldwire_plugins::link();
    let registry = Arc::new(Registry::from_inventory().unwrap());
    let backends = Backends::memory();
    // The same archive, noting which thread wrote each batch.
    let batches = BatchThreads::over(backends.media.clone());
    let saw_them = Arc::new(AtomicBool::new(false));
    let (noted, saw) = (batches.clone(), saw_them.clone());
    registry
        .register(ComponentKind::Summarizer, WAITING, "tests", move |_| {
            Ok(Component::Summarizer(Arc::new(WaitsForTheOriginals {
                batches: noted.clone(),
                saw_them: saw.clone(),
            })))
        })
        .unwrap();
    let cx = StageCx::new(registry.clone())
        .with_archive(batches.clone())
        .with_estimator(Arc::new(CharEstimator));
    let session = SessionId::new("pipe-1").unwrap();
    let inline = image();
    let data = base64::engine::general_purpose::STANDARD.encode(&inline);
    let body = body(&inline);
    let input = request::decode(Wire::Anthropic, body.clone()).unwrap();

    let mut turn = new_session_turn(&session, &body, 6_000);
    pipeline(&registry).run(&mut turn, &cx).await.unwrap();
    let r = &turn.report;
    assert!(r.counter("fold.blocks_created") > 0, "{r:?}");
    assert!(r.counter("fold.originals_archived") > 0, "{r:?}");
    assert!(
        turn.state.originals.is_empty(),
        "originals left in the state"
    );
    // The fold's originals (the last batch; the spilled image went first) went out on a
    // thread of their own, beside the stage's next work (measuring the folded request), not
    // after it on the stage's thread.
    let threads = batches.batches();
    assert!(
        threads
            .last()
            .is_some_and(|t| *t != std::thread::current().id()),
        "{threads:?}"
    );
    assert!(
        saw_them.load(Ordering::SeqCst),
        "the originals' write had not begun when their summary was asked for"
    );

    // The image unit got a ref and a block folded it.
    let image_fp = input
        .messages
        .iter()
        .find(|u| std::str::from_utf8(&u.raw).unwrap().contains(&data[..40]))
        .unwrap()
        .id
        .clone();
    let image_ref: Ref = turn
        .state
        .refs
        .iter()
        .find(|e| e.message == image_fp)
        .unwrap()
        .r#ref;
    assert!(
        turn.state
            .active_blocks()
            .any(|b| b.effective.contains(&image_ref)),
        "the old image was not folded: {:?}",
        turn.state.blocks
    );

    // On the wire: no inline bytes, the placeholder, the remote image, valid pairing.
    let out = turn.output.clone().unwrap();
    let text = std::str::from_utf8(&out).unwrap();
    assert!(
        !text.contains(&data[..40]),
        "inline image still on the wire"
    );
    assert!(text.contains(REMOTE), "the remote image left the wire");
    let sent = request::decode(Wire::Anthropic, out.clone()).unwrap();
    assert!(violations(Wire::Anthropic, &sent.messages).is_empty());
    let placeholder = format!(
        "[image {image_ref} archived: image/png, {} bytes — restore with ref {image_ref}: \
         the restore tool {{\"id\":\"{image_ref}\"}}, or foldwire restore --session {session} --image-ref {image_ref}]",
        inline.len()
    );
    assert!(
        sent.messages
            .iter()
            .any(|u| u.text.lines().any(|l| l == placeholder)),
        "no placeholder {placeholder:?} in {text}"
    );

    // Back, byte for byte: the image by ref, every block's units from the archive.
    let media = restore_media(backends.media.as_ref(), &turn.state, &session, image_ref)
        .await
        .unwrap();
    assert_eq!(media.bytes.as_ref(), inline.as_slice());
    assert_blocks_restore_exactly(
        &turn.state,
        backends.media.as_ref(),
        &session,
        &sent_units(&input),
    )
    .await;
}

/// A new session's turn carrying `body`, in a window of `window` tokens.
fn new_session_turn(session: &SessionId, body: &Bytes, window: u64) -> Turn {
    let mut turn = Turn::new(
        session.clone(),
        Wire::Anthropic,
        body.clone(),
        SessionState::new(session.clone()),
    );
    turn.budget = Budget {
        window,
        reserve: 0,
        calibration: 1.0,
    };
    turn
}

/// The default stages with the extractive summarizer; `archive.spill` hashing ahead or not.
fn default_pipeline(registry: &Registry, prehash: bool) -> Pipeline {
    pipeline_with(registry, prehash, Params::Null)
}

/// [`default_pipeline`], `fold` with `fold_params`.
fn pipeline_with(registry: &Registry, prehash: bool, fold_params: Params) -> Pipeline {
    let mut b = Pipeline::builder(registry);
    for name in ["wire.decode", "media.classify"] {
        b = b.stage_named(name, Params::Null).unwrap();
    }
    b = b
        .stage_named("archive.spill", serde_json::json!({ "prehash": prehash }))
        .unwrap();
    for name in ["refs.mint", "ranges.build"] {
        b = b.stage_named(name, Params::Null).unwrap();
    }
    b = b
        .stage_named("fold", fold_params)
        .unwrap()
        .stage_named("pairing.repair", Params::Null)
        .unwrap();
    b.stage_named(
        "layout.head_window",
        serde_json::json!({"head_tokens": 100, "recent_tokens": 2000}),
    )
    .unwrap()
    .stage_named("wire.encode", Params::Null)
    .unwrap()
    .build()
    .unwrap()
}

/// A session's first turn, far over its window, folds nearly all of it: `archive.spill`
/// starts hashing the units on a thread of its own and the fold's pack takes every key from
/// there (none hashed twice). The archive index is the very one a turn that hashes in the
/// fold makes, and every block restores byte-identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_turn_over_its_window_hashes_its_originals_ahead_of_the_fold() {
    foldwire_plugins::link();
    let registry = Arc::new(Registry::from_inventory().unwrap());
    let session = SessionId::new("prehash-1").unwrap();
    let body = body(&image());
    let input = request::decode(Wire::Anthropic, body.clone()).unwrap();
    let mut runs = Vec::new();
    for prehash in [true, false] {
        let backends = Backends::memory();
        let cx = StageCx::new(registry.clone())
            .with_archive(backends.media.clone())
            .with_estimator(Arc::new(CharEstimator));
        let mut turn = new_session_turn(&session, &body, 3_000);
        default_pipeline(&registry, prehash)
            .run(&mut turn, &cx)
            .await
            .unwrap();
        std::mem::take(&mut turn.pending_writes)
            .finish()
            .await
            .unwrap();
        runs.push((turn, backends));
    }
    let (warm, warm_backends) = &runs[0];
    let (cold, _) = &runs[1];
    let archived = warm.report.counter("fold.originals_archived");
    assert!(archived > 20, "{:?}", warm.report);
    assert_eq!(
        warm.report.counter("archive.prehashed_units"),
        input.messages.len() as u64
    );
    assert_eq!(warm.report.counter("fold.originals_prehashed"), archived);
    assert_eq!(cold.report.counter("archive.prehashed_units"), 0);
    assert_eq!(cold.report.counter("fold.originals_prehashed"), 0);
    assert_eq!(cold.report.counter("fold.originals_archived"), archived);
    assert_eq!(warm.state.archive.to_vec(), cold.state.archive.to_vec());
    assert_eq!(warm.output, cold.output);
    assert_blocks_restore_exactly(
        &warm.state,
        warm_backends.media.as_ref(),
        &session,
        &sent_units(&input),
    )
    .await;
}

/// A session whose fold does not fold on its own (`auto = false`) hashes ahead once: the
/// next turn finds that prehash unused and hashes nothing; where the fold used it, a later
/// turn that qualifies (here the same body on a state without blocks) hashes ahead again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prehash_the_fold_did_not_use_is_not_started_again() {
    foldwire_plugins::link();
    let registry = Arc::new(Registry::from_inventory().unwrap());
    let session = SessionId::new("prehash-2").unwrap();
    let body = body(&image());
    for auto in [false, true] {
        let pipeline = pipeline_with(&registry, true, serde_json::json!({ "auto": auto }));
        let cx = StageCx::new(registry.clone())
            .with_archive(Backends::memory().media)
            .with_estimator(Arc::new(CharEstimator));
        let mut carry = foldwire_core::Extensions::new();
        let mut hashed = Vec::new();
        for _ in 0..2 {
            let mut turn = new_session_turn(&session, &body, 3_000);
            turn.carry = std::mem::take(&mut carry);
            // Folding nothing, the request stays over the window: the layout refuses it,
            // after the stages this is about have run.
            let ran = pipeline.run(&mut turn, &cx).await;
            assert_eq!(ran.is_ok(), auto, "{ran:?}");
            carry = std::mem::take(&mut turn.carry);
            hashed.push(turn.report.counter("archive.prehashed_units") > 0);
            assert_eq!(
                turn.report.counter("fold.originals_prehashed") > 0,
                auto,
                "auto = {auto}: {:?}",
                turn.report
            );
        }
        assert_eq!(hashed, [true, auto], "auto = {auto}");
    }
}
