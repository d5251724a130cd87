//! The prompt-cache economy of fold schedules (issue 16): generated coding-agent sessions
//! (tool outputs of 400–12,000 characters, long tool loops, screenshots, a topic reset)
//! replayed through the default pipeline with each schedule at windows 30k, 60k, 100k and
//! 200k, priced with Anthropic's multipliers, next to client compaction at 95 % on the same
//! turns. Per schedule, one row per seed and their mean: the cost relative to client
//! compaction, the cache-read share, the verbatim tokens kept per turn (mean and minimum)
//! with the recent window that must stay verbatim, and where the cost goes per turn (cache
//! reads, writes of what each turn appended, rewrites after a fold, summary output).
//!
//! `cargo bench -p foldwire-benches --bench economy` (three seeds, every schedule);
//! `FOLDWIRE_ECONOMY_SEEDS=n` for n seeds; `FOLDWIRE_ECONOMY_ONLY=label` for the schedules
//! whose label contains it; `FOLDWIRE_ECONOMY_WINDOWS=30000,60000` for some windows;
//! `FOLDWIRE_ECONOMY_TRACE=30000` for every turn of the first seed at that window;
//! `FOLDWIRE_ECONOMY_TRY='[{"label": …, "fold": {…}, "stages": {"ranges.build": {…}}}]'`
//! for more schedules. These are cost figures, not timings: the run is deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;

use bytes::Bytes;
use foldwire_benches::session::{Event, SessionShape, coding_agent};
use foldwire_core::cost::PriceTable;
use foldwire_core::pipeline::DEFAULT_ORDER;
use foldwire_core::{
    Budget, CharEstimator, Engine, MemoryStateStore, PipelineSpec, SessionId, StageCx, StageSpec,
    TurnReport, TurnRequest, Wire,
};
use foldwire_proxy::setup;
use foldwire_stages::{layout_head_window, ranges_build};
use serde_json::{Value, json};

/// One schedule: the fold stage's params and whether bulky tool outputs are trimmed.
struct Schedule {
    label: String,
    fold: Value,
    trim: bool,
    trim_params: Value,
    /// Params of other stages of the default pipeline, by stage name (`ranges.build`,
    /// `layout.head_window`).
    stages: Value,
}

fn schedule(label: &str, fold: Value, trim: bool) -> Schedule {
    Schedule {
        label: label.to_owned(),
        fold,
        trim,
        trim_params: Value::Null,
        stages: Value::Null,
    }
}

fn schedules() -> Vec<Schedule> {
    let mut out = vec![
        schedule(
            "oldest_first 0.8->0.6",
            json!({"policy": "fold.oldest_first"}),
            false,
        ),
        schedule(
            "largest_first 0.8->0.6",
            json!({"policy": "fold.largest_first"}),
            false,
        ),
        // The schedule as it was first made the default: growth 0.25 (no floor in tokens),
        // target 0.1, no tiering with a fold, a head of 0.15 of the budget.
        Schedule {
            stages: json!({"layout.head_window": {"head_fraction": 0.15}}),
            ..schedule(
                "scheduled (first default)",
                json!({"policy": "fold.scheduled", "tier_after_fold": 0.0,
                    "policy_params": {"trigger": 0.45, "growth": 0.25, "min_growth_tokens": 0, "ceiling": 0.9, "target": 0.1}}),
                false,
            )
        },
        schedule(
            "scheduled (default)",
            json!({"policy": "fold.scheduled"}),
            false,
        ),
        schedule(
            "scheduled + tool.trim",
            json!({"policy": "fold.scheduled"}),
            true,
        ),
        // What the default costs with weaker protections at every window (the default
        // weakens them at small budgets only): one latest read output instead of two,
        // 4,000 recent tokens.
        Schedule {
            stages: json!({"ranges.build": {"protection": {"latest_count": 1, "recent_tokens": 4000}}}),
            ..schedule(
                "scheduled, latest 1, recent 4k",
                json!({"policy": "fold.scheduled"}),
                false,
            )
        },
        // The cost-aware rule: fold once the growth since the last fold pays for the
        // rewrite, given the request's measured growth per turn.
        schedule(
            "scheduled, cost-aware",
            json!({"policy": "fold.scheduled", "policy_params": {"cost_aware": true}}),
            false,
        ),
        schedule(
            "scheduled, cost-aware, reads 95%",
            json!({"policy": "fold.scheduled", "policy_params": {"cost_aware": true, "min_read_share": 0.95}}),
            false,
        ),
        schedule(
            "scheduled, cost-aware, reads 94%",
            json!({"policy": "fold.scheduled", "policy_params": {"cost_aware": true, "min_read_share": 0.94}}),
            false,
        ),
    ];
    // More to try, as JSON: [{"label", "fold", "trim", "trim_params", "stages"}].
    if let Ok(extra) = std::env::var("FOLDWIRE_ECONOMY_TRY") {
        let list: Vec<Value> =
            serde_json::from_str(&extra).expect("FOLDWIRE_ECONOMY_TRY is a JSON list");
        for v in list {
            out.push(Schedule {
                label: v["label"].as_str().unwrap_or("try").to_owned(),
                fold: v["fold"].clone(),
                trim: v["trim"].as_bool().unwrap_or(false),
                trim_params: v["trim_params"].clone(),
                stages: v["stages"].clone(),
            });
        }
    }
    out
}

fn spec(s: &Schedule) -> PipelineSpec {
    let mut stages = Vec::new();
    for name in DEFAULT_ORDER {
        let mut stage = StageSpec::named(name);
        if name == "fold" {
            stage.params = s.fold.clone();
        } else if let Some(params) = s.stages.get(name) {
            stage.params = params.clone();
        }
        stages.push(stage);
        if name == "fold" && s.trim {
            stages.push(StageSpec {
                name: "tool.trim".to_owned(),
                params: s.trim_params.clone(),
            });
        }
    }
    PipelineSpec {
        name: s.label.clone(),
        stages,
    }
}

/// Replays `events` at `window` and returns the turn reports (with `raw_tokens`, as the
/// proxy records them).
fn replay(events: &[Event], s: &Schedule, window: u64) -> Vec<TurnReport> {
    let registry = setup::registry().unwrap();
    let pipeline = foldwire_core::Pipeline::from_spec(&spec(s), &registry).unwrap();
    let backends = setup::backends(Some("memory://")).unwrap();
    let cx = StageCx::new(registry.clone()).with_archive(backends.media);
    let engine = Engine::builder(pipeline, Arc::new(MemoryStateStore::new()), registry)
        .context(cx)
        .workers(1)
        .start()
        .unwrap();
    let session = SessionId::new("economy").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut reports = Vec::new();
        for event in events {
            match event {
                Event::Reset(text) => {
                    let text = text.clone();
                    engine
                        .update(&session, move |st: &mut foldwire_core::SessionState| {
                            layout_head_window::reset(st, &text).is_ok()
                        })
                        .await
                        .unwrap();
                }
                Event::Request(body) => {
                    let body = Bytes::from(body.clone());
                    let raw =
                        foldwire_wire::tokens::raw_tokens(Wire::Anthropic, &body, &CharEstimator);
                    let mut request = TurnRequest::new(Wire::Anthropic, body);
                    request.budget = Budget::default().with_window(window);
                    let out = engine.run_turn(&session, request).await.unwrap();
                    let mut report = out.report;
                    report.wire = Wire::Anthropic.to_string();
                    report.count("raw_tokens", raw);
                    reports.push(report);
                }
            }
        }
        reports
    })
}

/// One schedule's (or compaction's) figures on one session at one window.
#[derive(Default, Clone, Copy)]
struct Figures {
    /// Cost in base-input-token equivalents.
    cost: f64,
    /// Client compaction's cost on the same turns.
    compaction: f64,
    /// Share of the input read from the cache (reads over all input).
    read_share: f64,
    verbatim_mean: f64,
    /// Fewest verbatim tokens on a turn, from the turn the history first holds the recent
    /// window.
    verbatim_min: u64,
    turns: u64,
    /// Turns that folded (or compacted).
    fold_turns: u64,
    trimmed: u64,
    refused: u64,
    /// The recent window verbatim must not fall below.
    recent: u64,
    sent_mean: f64,
    /// Where the cost goes, in equivalents: cache reads, writes of what a turn appended,
    /// rewrites (writes from a changed unit on), output (summaries).
    reads: f64,
    appends: f64,
    rewrites: f64,
    output: f64,
}

/// The recent window that must stay verbatim under `s`: the newest tokens `ranges.build`
/// protects with the schedule's params at that window.
fn recent_window(s: &Schedule, window: u64) -> u64 {
    let params = s.stages.get("ranges.build").cloned().unwrap_or(Value::Null);
    let config: foldwire_stages::kernel::RangesConfig = match params {
        Value::Null => foldwire_stages::kernel::RangesConfig::default(),
        p => serde_json::from_value(p).expect("ranges.build params"),
    };
    let stage = ranges_build::RangesBuild { config };
    stage
        .config_for(Budget::default().with_window(window))
        .protection
        .recent_tokens
}

fn figures(reports: &[TurnReport], window: u64, recent: u64, trace: bool) -> (Figures, Figures) {
    let prices = PriceTable::default().anthropic;
    let e = foldwire_proxy::economy::of_reports(reports, window, &PriceTable::default());
    let mut f = Figures {
        recent,
        cost: e.totals.cost,
        compaction: e.totals.compaction,
        read_share: e.totals.cache_read_share,
        verbatim_min: u64::MAX,
        ..Figures::default()
    };
    let mut c = Figures {
        recent,
        cost: e.totals.compaction,
        compaction: e.totals.compaction,
        verbatim_min: u64::MAX,
        ..Figures::default()
    };
    let mut c_use = foldwire_core::CacheUse::default();
    if trace {
        println!(
            "{:>5} {:>7} {:>7} {:>7} {:>6} {:>6} {:>7} {:>6} {:>8} {:>6} {:>6} {:>8} {:>7} {:>7} {:>8}",
            "turn",
            "request",
            "rewrite",
            "append",
            "frame",
            "head",
            "history",
            "recent",
            "verbatim",
            "summ",
            "folds",
            "cost",
            "c.sent",
            "c.write",
            "c.cost"
        );
    }
    for (r, t) in reports.iter().zip(&e.turns) {
        let history = r
            .counter("raw_tokens")
            .saturating_sub(r.counter("layout.frame_tokens"));
        let filled = history >= recent;
        let folded = r.counter("fold.blocks_created");
        f.turns += 1;
        f.fold_turns += u64::from(folded > 0);
        f.trimmed += r.counter("tool.trim.trimmed");
        f.refused += u64::from(r.refusal.is_some());
        f.verbatim_mean += t.verbatim as f64;
        f.sent_mean += r.counter("request_tokens") as f64;
        f.reads += t.foldwire.read as f64 * prices.cache_read;
        let written = (t.foldwire.write + t.foldwire.uncached) as f64 * prices.cache_write();
        if r.counter("rewritten_tokens") > 0 {
            f.rewrites += written;
        } else {
            f.appends += written;
        }
        f.output += t.foldwire.output as f64 * prices.output;
        c.turns += 1;
        c.fold_turns += u64::from(t.compaction.compacted);
        c.verbatim_mean += t.compaction.verbatim as f64;
        c.sent_mean += t.compaction.sent as f64;
        let u = t.compaction.usage;
        c.reads += u.read as f64 * prices.cache_read;
        let written = (u.write + u.uncached) as f64 * prices.cache_write();
        if t.compaction.compacted {
            c.rewrites += written;
        } else {
            c.appends += written;
        }
        c.output += u.output as f64 * prices.output;
        if filled {
            f.verbatim_min = f.verbatim_min.min(t.verbatim);
            c.verbatim_min = c.verbatim_min.min(t.compaction.verbatim);
        }
        c_use = c_use.plus(u);
        if trace {
            println!(
                "{:>5} {:>7} {:>7} {:>7} {:>6} {:>6} {:>7} {:>6} {:>8} {:>6} {:>6} {:>8.0} {:>7} {:>7} {:>8.0}",
                t.turn,
                r.counter("request_tokens"),
                r.counter("rewritten_tokens"),
                r.counter("layout.appended_tokens"),
                r.counter("layout.frame_tokens"),
                r.counter("layout.head_tokens"),
                r.counter("layout.history_tokens"),
                r.counter("layout.recent_tokens"),
                t.verbatim,
                r.counter("request_tokens")
                    .saturating_sub(r.counter("layout.frame_tokens") + t.verbatim),
                folded,
                t.cost,
                t.compaction.sent,
                u.write,
                t.compaction.cost
            );
        }
    }
    for x in [&mut f, &mut c] {
        let n = x.turns.max(1) as f64;
        x.verbatim_mean /= n;
        x.sent_mean /= n;
    }
    c.read_share = c_use.read_share();
    (f, c)
}

impl Figures {
    /// Cost relative to client compaction's.
    fn ratio(&self) -> f64 {
        if self.compaction > 0.0 {
            self.cost / self.compaction
        } else {
            0.0
        }
    }
}

/// The mean of per-session figures (counts per session; the minimum verbatim over all).
fn mean(rows: &[Figures]) -> Figures {
    let n = rows.len().max(1) as f64;
    let avg = |get: fn(&Figures) -> f64| rows.iter().map(get).sum::<f64>() / n;
    let total =
        |get: fn(&Figures) -> u64| (rows.iter().map(get).sum::<u64>() as f64 / n).round() as u64;
    // The cost row is the mean of the per-session ratios: the target holds per session.
    Figures {
        cost: avg(Figures::ratio),
        compaction: 1.0,
        read_share: avg(|f| f.read_share),
        verbatim_mean: avg(|f| f.verbatim_mean),
        verbatim_min: rows.iter().map(|f| f.verbatim_min).min().unwrap_or(0),
        turns: total(|f| f.turns),
        fold_turns: total(|f| f.fold_turns),
        trimmed: total(|f| f.trimmed),
        refused: total(|f| f.refused),
        recent: rows.iter().map(|f| f.recent).min().unwrap_or(0),
        sent_mean: avg(|f| f.sent_mean),
        reads: avg(|f| f.reads),
        appends: avg(|f| f.appends),
        rewrites: avg(|f| f.rewrites),
        output: avg(|f| f.output),
    }
}

fn main() {
    let seeds: u64 = std::env::var("FOLDWIRE_ECONOMY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let only = std::env::var("FOLDWIRE_ECONOMY_ONLY").ok();
    // `FOLDWIRE_ECONOMY_TRACE=30000`: every turn of the first session at that window.
    let trace: Option<u64> = std::env::var("FOLDWIRE_ECONOMY_TRACE")
        .ok()
        .and_then(|s| s.parse().ok());
    let windows: Vec<u64> = match std::env::var("FOLDWIRE_ECONOMY_WINDOWS") {
        Ok(list) => list
            .split(',')
            .filter_map(|w| w.trim().parse().ok())
            .collect(),
        Err(_) => vec![30_000, 60_000, 100_000, 200_000],
    };
    let sessions: Vec<Vec<Event>> = (1..=seeds)
        .map(|seed| coding_agent(seed, SessionShape::default()))
        .collect();
    println!(
        "economy: {} generated sessions of {} turns (seeds 1..={seeds}), Anthropic prices (read 0.1x, write 1.25x, output 5x)",
        sessions.len(),
        SessionShape::default().turns
    );
    println!(
        "cost: x compaction on the same session; read %: cache reads over all input; verbatim: client tokens sent verbatim per turn (min from the turn the history holds the recent window); \
         reads/appends/rewrites/output: where the cost goes, in thousand equivalents per turn"
    );
    println!(
        "{:>7}  {:<28} {:>5} {:>9} {:>7} {:>9} {:>9} {:>7} {:>9} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "window",
        "schedule",
        "seed",
        "x compact",
        "read %",
        "verb mean",
        "verb min",
        "recent",
        "sent mean",
        "folds",
        "trimmed",
        "refused",
        "reads",
        "appends",
        "rewrite",
        "output"
    );
    for &window in &windows {
        let mut compaction_rows: Option<Vec<Figures>> = None;
        for s in schedules() {
            if only.as_deref().is_some_and(|o| !s.label.contains(o)) {
                continue;
            }
            let mut rows = Vec::new();
            let mut crows = Vec::new();
            for (i, events) in sessions.iter().enumerate() {
                let reports = replay(events, &s, window);
                let traced = trace == Some(window) && i == 0;
                if traced {
                    println!("trace: {} at {}k, seed 1", s.label, window / 1000);
                }
                let (f, c) = figures(&reports, window, recent_window(&s, window), traced);
                print_row(window, &s.label, &(i + 1).to_string(), &f);
                rows.push(f);
                crows.push(c);
            }
            print_row(window, &s.label, "mean", &mean(&rows));
            compaction_rows.get_or_insert(crows);
        }
        if let Some(rows) = compaction_rows {
            let label = "client compaction at 95%";
            for (i, c) in rows.iter().enumerate() {
                print_row(window, label, &(i + 1).to_string(), c);
            }
            print_row(window, label, "mean", &mean(&rows));
        }
    }
}

fn print_row(window: u64, label: &str, seed: &str, f: &Figures) {
    let per_turn = |x: f64| x / f.turns.max(1) as f64 / 1000.0;
    println!(
        "{:>6}k  {:<28} {:>5} {:>8.2}x {:>6.2}% {:>9.0} {:>9} {:>7} {:>9.0} {:>6} {:>7} {:>7} {:>7.2} {:>7.2} {:>7.2} {:>7.2}",
        window / 1000,
        label,
        seed,
        f.ratio(),
        f.read_share * 100.0,
        f.verbatim_mean,
        f.verbatim_min,
        f.recent,
        f.sent_mean,
        f.fold_turns,
        f.trimmed,
        f.refused,
        per_turn(f.reads),
        per_turn(f.appends),
        per_turn(f.rewrites),
        per_turn(f.output)
    );
}
