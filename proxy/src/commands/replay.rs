//! `foldwire replay`: a recorded session through the pipeline, turn by turn.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow};
use bytes::Bytes;
use foldwire_core::{Engine, MemoryStateStore, SessionId, TurnRequest, Wire};
use foldwire_stages::layout_head_window;
use serde::Serialize;

use super::parse_wire;
use super::write_stdout;
use crate::setup;

/// `foldwire replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The recorded session (JSONL).
    pub file: PathBuf,
    /// The wire of the requests (detected from each body when absent).
    #[arg(long, value_parser = parse_wire)]
    pub wire: Option<Wire>,
    /// A built-in pipeline name or a spec file.
    #[arg(long, default_value = "default")]
    pub pipeline: String,
    /// The budget (context window) in tokens.
    #[arg(long)]
    pub window: Option<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One replayed turn.
#[derive(Debug, Serialize)]
struct Row {
    turn: usize,
    wire: String,
    request_tokens: u64,
    rewritten_tokens: u64,
    blocks_created: u64,
    units_folded: u64,
    refused: Option<String>,
    failed: Option<String>,
}

enum Event {
    Request(Bytes),
    Reset(String),
}

fn parse(line: &str, number: usize) -> Result<Event> {
    let value: serde_json::Value =
        serde_json::from_str(line).with_context(|| format!("line {number} is not JSON"))?;
    if let Some(text) = value.get("foldwire_reset") {
        let text = text
            .as_str()
            .ok_or_else(|| anyhow!("line {number}: foldwire_reset must be a string"))?;
        return Ok(Event::Reset(text.to_owned()));
    }
    Ok(Event::Request(Bytes::copy_from_slice(line.as_bytes())))
}

/// Replays the file and prints a table (or JSON) and a summary.
///
/// # Errors
/// An unreadable file, a line that is not JSON, or an unusable pipeline.
pub fn run(args: ReplayArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let events: Vec<Event> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse(l, i + 1))
        .collect::<Result<_>>()?;
    let registry = setup::registry()?;
    let pipeline = setup::pipeline(&args.pipeline, &registry)?;
    let engine = Engine::builder(pipeline, Arc::new(MemoryStateStore::new()), registry)
        .workers(1)
        .start()?;
    let session = SessionId::new("replay")?;
    let progress = std::io::stderr().is_terminal() && !args.json;
    let total = events
        .iter()
        .filter(|e| matches!(e, Event::Request(_)))
        .count();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let rows = runtime.block_on(async {
        let mut rows = Vec::new();
        for event in events {
            match event {
                Event::Reset(text) => {
                    engine
                        .update(
                            &session,
                            Box::new(move |s| match layout_head_window::reset(s, &text) {
                                Ok(g) => serde_json::json!(g),
                                Err(e) => serde_json::json!(e.to_string()),
                            }),
                        )
                        .await?;
                }
                Event::Request(body) => {
                    let wire = match args.wire {
                        Some(w) => w,
                        None => foldwire_wire::request::detect(None, &body)
                            .map_err(|e| anyhow!("turn {}: {e} (give --wire)", rows.len() + 1))?,
                    };
                    let mut request = TurnRequest::new(wire, body);
                    if let Some(window) = args.window {
                        request.budget = request.budget.with_window(window);
                    }
                    let out = engine.run_turn(&session, request).await?;
                    let r = &out.report;
                    rows.push(Row {
                        turn: rows.len() + 1,
                        wire: wire.to_string(),
                        request_tokens: r.counter("request_tokens"),
                        rewritten_tokens: r.counter("rewritten_tokens"),
                        blocks_created: r.counter("fold.blocks_created"),
                        units_folded: r.counter("fold.units_removed"),
                        refused: r.refusal.as_ref().map(ToString::to_string),
                        failed: r.fail_open.clone(),
                    });
                    if progress {
                        eprint!("\rreplaying: turn {}/{total}", rows.len());
                    }
                }
            }
        }
        if progress {
            eprintln!();
        }
        anyhow::Ok(rows)
    })?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&rows)?;
        s.push('\n');
        s
    } else {
        table(&rows)
    };
    write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:>5}  {:<16} {:>10} {:>10} {:>6} {:>7}  {}\n",
        "turn", "wire", "tokens", "rewritten", "blocks", "folded", "note"
    );
    for r in rows {
        let note = r
            .refused
            .as_deref()
            .map(|x| format!("refused: {x}"))
            .or_else(|| r.failed.as_deref().map(|x| format!("passed through: {x}")))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "{:>5}  {:<16} {:>10} {:>10} {:>6} {:>7}  {}",
            r.turn,
            r.wire,
            r.request_tokens,
            r.rewritten_tokens,
            r.blocks_created,
            r.units_folded,
            note
        );
    }
    let tokens: u64 = rows.iter().map(|r| r.request_tokens).sum();
    let rewritten: u64 = rows.iter().map(|r| r.rewritten_tokens).sum();
    let blocks: u64 = rows.iter().map(|r| r.blocks_created).sum();
    let _ = writeln!(
        s,
        "summary: {} turns, {tokens} request tokens, {rewritten} rewritten ({:.1}%), {blocks} blocks, {} refused, {} passed through",
        rows.len(),
        if tokens == 0 {
            0.0
        } else {
            rewritten as f64 * 100.0 / tokens as f64
        },
        rows.iter().filter(|r| r.refused.is_some()).count(),
        rows.iter().filter(|r| r.failed.is_some()).count(),
    );
    s
}
