//! A host that runs the same pipeline with its archive and state on local disk, then on an
//! S3-compatible endpoint given by URL, and restores an archived image from each.
//!
//! `cargo run -p foldwire-examples --example s3_archive -- 's3://bucket/prefix?endpoint=http://127.0.0.1:5055&allow_http=true'`
//!
//! Without an argument the S3 URL comes from `FOLDWIRE_S3_URL`, or from the test server
//! variables `FOLDWIRE_TEST_S3_ENDPOINT` / `FOLDWIRE_TEST_S3_BUCKET` that `scripts/s3-server`
//! exports; with none of them only the disk half runs.

use std::sync::Arc;

use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use foldwire_core::{
    Engine, Pipeline, PipelineSpec, Registry, SessionId, StageCx, TurnRequest, Wire,
};

/// A 1x1 PNG, base64.
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

fn request() -> Bytes {
    Bytes::from(format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{{"role":"user","content":[{{"type":"text","text":"What is in this picture?"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"{PIXEL}"}}}}]}}]}}"#
    ))
}

async fn run_at(location: &str, registry: &Arc<Registry>) -> Result<()> {
    let backends =
        foldwire_archive::open(location).with_context(|| format!("opening {location}"))?;
    let spec = PipelineSpec::of(
        "s3-example",
        &[
            "wire.decode",
            "media.classify",
            "archive.spill",
            "refs.mint",
            "wire.encode",
        ],
    );
    let pipeline = Pipeline::from_spec(&spec, registry)?;
    let cx = StageCx::new(registry.clone()).with_archive(backends.media.clone());
    let engine = Engine::builder(pipeline, backends.state.clone(), registry.clone())
        .context(cx)
        .workers(1)
        .start()?;
    let session = SessionId::new("s3-example")?;
    let body = request();
    let outcome = engine
        .run_turn(&session, TurnRequest::new(Wire::Anthropic, body.clone()))
        .await?;
    ensure!(
        outcome.output == body,
        "the image is archived, not removed, by these stages"
    );
    ensure!(
        outcome.report.fail_open.is_none(),
        "pipeline failed: {:?}",
        outcome.report.fail_open
    );
    // The archive index lives in the session state; each entry restores byte-identical.
    let state = engine.snapshot(&session).await?;
    let listed = foldwire_archive::list_media(&state);
    println!("{location}: {} archived payload(s)", listed.len());
    let first = listed.first().context("the inline image was archived")?;
    println!("  {} {} {} bytes", first.key, first.media_type, first.size);
    let r = first
        .r#ref
        .context("the image unit has a ref once refs are minted")?;
    let restored =
        foldwire_archive::restore_media(backends.media.as_ref(), &state, &session, r).await?;
    use base64::Engine as _;
    let sent = base64::engine::general_purpose::STANDARD.decode(PIXEL)?;
    ensure!(
        restored.bytes == sent,
        "restored bytes differ from what was sent"
    );
    println!(
        "  restored {r}: {} bytes, identical to what the client sent",
        restored.bytes.len()
    );
    Ok(())
}

fn s3_url() -> Option<String> {
    if let Some(arg) = std::env::args().nth(1) {
        return Some(arg);
    }
    if let Ok(url) = std::env::var("FOLDWIRE_S3_URL") {
        return Some(url);
    }
    let endpoint = std::env::var("FOLDWIRE_TEST_S3_ENDPOINT").ok()?;
    let bucket =
        std::env::var("FOLDWIRE_TEST_S3_BUCKET").unwrap_or_else(|_| "foldwire-test".into());
    Some(format!(
        "s3://{bucket}/s3-example?endpoint={endpoint}&allow_http=true"
    ))
}

#[tokio::main]
async fn main() -> Result<()> {
    foldwire_plugins::link();
    let registry = Arc::new(Registry::from_inventory()?);
    let dir = std::env::temp_dir().join(format!("foldwire-s3-example-{}", std::process::id()));
    run_at(&format!("file://{}", dir.display()), &registry).await?;
    match s3_url() {
        Some(url) => run_at(&url, &registry).await?,
        None => println!("no S3 URL given: the S3 half was not run"),
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
