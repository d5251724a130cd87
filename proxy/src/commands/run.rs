//! `foldwire run`: one request through the pipeline, offline.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use foldwire_core::{Engine, SessionId, StageCx, TurnRequest, Wire};

use super::write_stdout;
use super::{EXIT_PASSED_THROUGH, EXIT_REFUSED, StateArgs, parse_wire};
use crate::serve::admin::load_cli_plugins;
use crate::{offline, setup};

/// `foldwire run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The request's wire.
    #[arg(long, value_parser = parse_wire)]
    pub wire: Wire,
    /// The session id (letters, digits, '.', '_', '-').
    #[arg(long)]
    pub session: String,
    /// State location.
    #[command(flatten)]
    pub state: StateArgs,
    /// A built-in pipeline name (`default`, `passthrough`) or a spec file.
    #[arg(long, default_value = "default")]
    pub pipeline: String,
    /// Write the turn report (JSON: stage timings, counters, warnings) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Read the request body from this file instead of stdin.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// The budget: the model's context window in tokens (overrides the pipeline's default).
    #[arg(long)]
    pub window: Option<u64>,
    /// The layout strategy for this run (e.g. `layout.store_order_fill`, `layout.head_first`).
    #[arg(long)]
    pub layout: Option<String>,
    /// Head-window size in tokens for this run.
    #[arg(long)]
    pub head_tokens: Option<u64>,
    /// Recent-window size in tokens for this run.
    #[arg(long)]
    pub recent_tokens: Option<u64>,
}

impl RunArgs {
    /// The per-turn overrides these flags set, as stages read them from `Turn::options`.
    pub fn turn_options(&self) -> foldwire_core::TurnOptions {
        let mut o = foldwire_core::TurnOptions::default();
        o.window = self.window;
        o.layout = self.layout.clone();
        o.head_tokens = self.head_tokens;
        o.recent_tokens = self.recent_tokens;
        o
    }
}

/// Runs one turn and writes the body to forward on stdout.
///
/// # Errors
/// Bad arguments, an unreadable input, an unusable state store or pipeline.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let session = SessionId::new(args.session.clone()).context("--session")?;
    let body = read_body(args.input.as_deref())?;
    let registry = setup::registry()?;
    // Plugins in `<state>/plugins/` first, so the pipeline and --layout can name them.
    let _plugins = load_cli_plugins(args.state.state.as_deref(), &registry);
    let pipeline = setup::pipeline(&args.pipeline, &registry)?;
    // A misspelled --layout is a bad argument, not a turn that fails open.
    if let Some(layout) = &args.layout {
        registry
            .layout(layout, &serde_json::Value::Null)
            .context("--layout")?;
    }
    let backends = setup::backends(args.state.state.as_deref())?;
    let cx = StageCx::new(registry.clone()).with_archive(backends.media.clone());
    // One worker: a single request needs no parallelism, and one thread starts fastest.
    let engine = Engine::builder(pipeline, backends.state.clone(), registry)
        .context(cx)
        .workers(1)
        .start()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut request = TurnRequest::new(args.wire, body);
    request.options = args.turn_options();
    if let Some(window) = args.window {
        request.budget = request.budget.with_window(window);
    }
    let outcome = runtime.block_on(async {
        // The body is kept first so `fold`, `inspect` and `restore` can see what the model
        // saw on this turn.
        offline::store_last_request(backends.store.as_ref(), &session, args.wire, &request.body)
            .await?;
        let outcome = engine.run_turn(&session, request).await?;
        anyhow::Ok(outcome)
    })?;
    if let Some(path) = &args.report {
        let json = serde_json::to_vec_pretty(&outcome.report)?;
        std::fs::write(path, json)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    write_stdout(&outcome.output)?;
    if let Some(refusal) = &outcome.report.refusal {
        eprintln!("foldwire: request refused: {refusal}");
        return Ok(ExitCode::from(EXIT_REFUSED));
    }
    if let Some(why) = &outcome.report.fail_open {
        eprintln!(
            "foldwire: the request could not be processed and was passed through unchanged: {why}"
        );
        return Ok(ExitCode::from(EXIT_PASSED_THROUGH));
    }
    for w in &outcome.report.warnings {
        eprintln!("foldwire: warning [{}] {}: {}", w.stage, w.code, w.message);
    }
    Ok(ExitCode::SUCCESS)
}

fn read_body(input: Option<&std::path::Path>) -> Result<Bytes> {
    let mut buf = Vec::new();
    match input {
        Some(path) => {
            buf = std::fs::read(path)
                .with_context(|| format!("reading the request body from {}", path.display()))?;
        }
        None => {
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .context("reading the request body from stdin")?;
        }
    }
    Ok(Bytes::from(buf))
}
