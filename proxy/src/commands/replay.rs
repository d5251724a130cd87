//! `foldwire replay`: a recorded session through the pipeline, turn by turn.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow};
use bytes::Bytes;
use foldwire_core::cost::PriceTable;
use foldwire_core::{
    CharEstimator, Engine, MemoryStateStore, SessionId, TurnReport, TurnRequest, Wire,
};
use foldwire_stages::layout_head_window;
use serde::Serialize;

use super::parse_wire;
use super::write_stdout;
use crate::serve::admin::load_cli_plugins;
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
    /// Where the sandboxed plugins a pipeline may name are read from (`<state>/plugins/`);
    /// the replay itself keeps its sessions in memory.
    #[command(flatten)]
    pub state: super::StateArgs,
    /// A TOML price table (`[anthropic]`, `[openai]`, `[gemini]`; every key optional) to
    /// price the turns and the baselines with instead of the list prices.
    #[arg(long)]
    pub prices: Option<PathBuf>,
}

/// One replayed turn: what foldwire did, what it cost, and the baselines on the same turn.
#[derive(Debug, Serialize)]
struct Row {
    turn: usize,
    wire: String,
    request_tokens: u64,
    rewritten_tokens: u64,
    blocks_created: u64,
    units_folded: u64,
    trimmed: u64,
    refused: Option<String>,
    failed: Option<String>,
    /// Tokens read from the prompt cache, written to it, and uncached input.
    cache_read: u64,
    cache_write: u64,
    uncached: u64,
    /// Output tokens of the summaries this turn's folds wrote.
    summary_output: u64,
    /// Base-input-token equivalents.
    cost: f64,
    /// Verbatim client tokens sent.
    verbatim_tokens: u64,
    /// The baselines' cost on this turn (equivalents).
    baseline_none: f64,
    baseline_compaction: f64,
    baseline_sliding: f64,
    /// Running totals up to this turn (the last row holds the session's totals).
    total_cost: f64,
    total_compaction: f64,
    total_none: f64,
    total_sliding: f64,
    total_cache_read_share: f64,
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
    // Plugins in `<state>/plugins/` first, so the pipeline can name them.
    let _plugins = load_cli_plugins(args.state.state.as_deref(), &registry);
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
    let prices = match &args.prices {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<PriceTable>(&text)
                .with_context(|| format!("price table {} is invalid", path.display()))?
        }
        None => PriceTable::default(),
    };
    let reports = runtime.block_on(async {
        let mut rows: Vec<TurnReport> = Vec::new();
        for event in events {
            match event {
                Event::Reset(text) => {
                    engine
                        .update(&session, move |s: &mut foldwire_core::SessionState| {
                            layout_head_window::reset(s, &text).is_ok()
                        })
                        .await?;
                }
                Event::Request(body) => {
                    let wire = match args.wire {
                        Some(w) => w,
                        None => foldwire_wire::request::detect(None, &body)
                            .map_err(|e| anyhow!("turn {}: {e} (give --wire)", rows.len() + 1))?,
                    };
                    let body_copy = body.clone();
                    let mut request = TurnRequest::new(wire, body);
                    if let Some(window) = args.window {
                        request.budget = request.budget.with_window(window);
                    }
                    let raw = foldwire_wire::tokens::raw_tokens(wire, &body_copy, &CharEstimator);
                    let out = engine.run_turn(&session, request).await?;
                    let mut report = out.report;
                    report.wire = wire.to_string();
                    report.count("raw_tokens", raw);
                    rows.push(report);
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
    let window = args
        .window
        .unwrap_or_else(|| foldwire_core::Budget::default().window);
    let economy = crate::economy::of_reports(&reports, window, &prices);
    let rows = rows_of(&reports, &economy);
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&rows)?;
        s.push('\n');
        s
    } else {
        table(&rows, &economy)
    };
    write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn rows_of(reports: &[TurnReport], economy: &crate::economy::Economy) -> Vec<Row> {
    let mut running = foldwire_core::CacheUse::default();
    let (mut cost, mut compaction, mut none, mut sliding) = (0.0, 0.0, 0.0, 0.0);
    reports
        .iter()
        .zip(&economy.turns)
        .enumerate()
        .map(|(i, (r, e))| {
            running = running.plus(e.foldwire);
            cost += e.cost;
            compaction += e.compaction.cost;
            none += e.none.cost;
            sliding += e.sliding.cost;
            Row {
                turn: i + 1,
                wire: r.wire.clone(),
                request_tokens: r.counter("request_tokens"),
                rewritten_tokens: r.counter("rewritten_tokens"),
                blocks_created: r.counter("fold.blocks_created"),
                units_folded: r.counter("fold.units_removed"),
                trimmed: r.counter("tool_trim.trimmed"),
                refused: r.refusal.as_ref().map(ToString::to_string),
                failed: r.fail_open.clone(),
                cache_read: e.foldwire.read,
                cache_write: e.foldwire.write,
                uncached: e.foldwire.uncached,
                summary_output: e.foldwire.output,
                cost: e.cost,
                verbatim_tokens: e.verbatim,
                baseline_none: e.none.cost,
                baseline_compaction: e.compaction.cost,
                baseline_sliding: e.sliding.cost,
                total_cost: cost,
                total_compaction: compaction,
                total_none: none,
                total_sliding: sliding,
                total_cache_read_share: running.read_share(),
            }
        })
        .collect()
}

fn table(rows: &[Row], economy: &crate::economy::Economy) -> String {
    let mut s = format!(
        "{:>5}  {:<16} {:>10} {:>10} {:>6} {:>7} {:>9} {:>9} {:>8} {:>9} {:>10}  {}\n",
        "turn",
        "wire",
        "tokens",
        "rewritten",
        "blocks",
        "folded",
        "read",
        "written",
        "uncached",
        "cost",
        "compaction",
        "note"
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
            "{:>5}  {:<16} {:>10} {:>10} {:>6} {:>7} {:>9} {:>9} {:>8} {:>9.0} {:>10.0}  {}",
            r.turn,
            r.wire,
            r.request_tokens,
            r.rewritten_tokens,
            r.blocks_created,
            r.units_folded,
            r.cache_read,
            r.cache_write,
            r.uncached,
            r.cost,
            r.baseline_compaction,
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
    let t = &economy.totals;
    let overflow = t
        .none_overflowed_at
        .map(|n| format!(" (overflows the {} window at turn {n})", economy.window))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "cost: {:.0} base-input-token equivalents (${:.4}): {} read, {} written, {} uncached, {} summary output; cache-read share {:.1}%",
        t.cost,
        t.dollars,
        t.foldwire.read,
        t.foldwire.write,
        t.foldwire.uncached,
        t.foldwire.output,
        t.cache_read_share * 100.0
    );
    let _ = writeln!(
        s,
        "baselines at window {}: client compaction at 95% {:.0} ({} compactions; foldwire {:.2}x), sliding window {:.0}, no management {:.0}{overflow}",
        economy.window, t.compaction, t.compactions, t.vs_compaction, t.sliding, t.none
    );
    s
}
