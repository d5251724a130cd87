//! The prompt-cache economy of fold schedules (issue 16): generated coding-agent sessions
//! (tool outputs of 400–12,000 characters, long tool loops, screenshots, a topic reset)
//! replayed through the default pipeline with each schedule at windows 30k, 60k, 100k and
//! 200k, priced with Anthropic's multipliers, next to client compaction at 95 % on the same
//! turns. Per schedule it prints the cost relative to client compaction, the cache-read
//! share, and the verbatim tokens kept per turn (mean and minimum), with the recent window
//! that must stay verbatim.
//!
//! `cargo bench -p foldwire-benches --bench economy` (all seeds and schedules);
//! `FOLDWIRE_ECONOMY_SEEDS=1` for one seed; `FOLDWIRE_ECONOMY_ONLY=label` for one schedule.
//! These are cost figures, not timings: the run is deterministic for its seeds.
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
use foldwire_stages::layout_head_window;
use serde_json::{Value, json};

/// One schedule: the fold stage's params and whether bulky tool outputs are trimmed.
struct Schedule {
    label: String,
    fold: Value,
    trim: bool,
    trim_params: Value,
}

fn schedule(label: &str, fold: Value, trim: bool) -> Schedule {
    Schedule {
        label: label.to_owned(),
        fold,
        trim,
        trim_params: Value::Null,
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
        schedule(
            "scheduled 0.6->0.3",
            json!({"policy": "fold.scheduled", "policy_params": {"trigger": 0.6, "target": 0.3, "growth": 0.2}}),
            false,
        ),
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
    ];
    // More to try, as JSON: [{"label", "fold", "trim", "trim_params"}].
    if let Ok(extra) = std::env::var("FOLDWIRE_ECONOMY_TRY") {
        let list: Vec<Value> =
            serde_json::from_str(&extra).expect("FOLDWIRE_ECONOMY_TRY is a JSON list");
        for v in list {
            out.push(Schedule {
                label: v["label"].as_str().unwrap_or("try").to_owned(),
                fold: v["fold"].clone(),
                trim: v["trim"].as_bool().unwrap_or(false),
                trim_params: v["trim_params"].clone(),
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

#[derive(Default, Clone, Copy)]
struct Figures {
    cost: f64,
    compaction: f64,
    read_share: f64,
    verbatim_sum: f64,
    verbatim_min: u64,
    turns: u64,
    blocks: u64,
    trimmed: u64,
    refused: u64,
    recent_min: u64,
    fold_turns: u64,
    sent_sum: f64,
}

fn figures(reports: &[TurnReport], window: u64) -> (Figures, Figures) {
    let e = foldwire_proxy::economy::of_reports(reports, window, &PriceTable::default());
    let mut f = Figures {
        cost: e.totals.cost,
        compaction: e.totals.compaction,
        read_share: e.totals.cache_read_share,
        verbatim_min: u64::MAX,
        recent_min: u64::MAX,
        ..Figures::default()
    };
    let mut c = Figures {
        cost: e.totals.compaction,
        compaction: e.totals.compaction,
        verbatim_min: u64::MAX,
        ..Figures::default()
    };
    let mut c_use = foldwire_core::CacheUse::default();
    // The recent window that must stay verbatim: the newest tokens `ranges.build` protects
    // (5,000, at most 0.3 of the budget). Verbatim minimums count from the turn the
    // client's history first holds that much.
    let recent =
        5_000u64.min((Budget::default().with_window(window).available() as f64 * 0.3) as u64);
    for (r, t) in reports.iter().zip(&e.turns) {
        let history = r
            .counter("raw_tokens")
            .saturating_sub(r.counter("layout.frame_tokens"));
        let filled = history >= recent;
        f.turns += 1;
        f.blocks += r.counter("fold.blocks_created");
        f.fold_turns += u64::from(r.counter("fold.blocks_created") > 0);
        f.trimmed += r.counter("tool.trim.trimmed");
        f.refused += u64::from(r.refusal.is_some());
        f.verbatim_sum += t.verbatim as f64;
        f.sent_sum += r.counter("request_tokens") as f64;
        f.recent_min = recent;
        c.turns += 1;
        c.blocks += u64::from(t.compaction.compacted);
        c.fold_turns += u64::from(t.compaction.compacted);
        c.verbatim_sum += t.compaction.verbatim as f64;
        c.sent_sum += t.compaction.sent as f64;
        c.recent_min = recent;
        if filled {
            f.verbatim_min = f.verbatim_min.min(t.verbatim);
            c.verbatim_min = c.verbatim_min.min(t.compaction.verbatim);
        }
        c_use = c_use.plus(t.compaction.usage);
    }
    c.read_share = c_use.read_share();
    (f, c)
}

fn main() {
    let seeds: u64 = std::env::var("FOLDWIRE_ECONOMY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let only = std::env::var("FOLDWIRE_ECONOMY_ONLY").ok();
    let windows = [30_000u64, 60_000, 100_000, 200_000];
    let sessions: Vec<Vec<Event>> = (1..=seeds)
        .map(|seed| coding_agent(seed, SessionShape::default()))
        .collect();
    println!(
        "economy: {} generated sessions of {} turns (seeds 1..={seeds}), Anthropic prices (read 0.1x, write 1.25x, output 5x); cost in million base-input-token equivalents, summed over the sessions",
        sessions.len(),
        SessionShape::default().turns
    );
    println!(
        "{:>7}  {:<28} {:>8} {:>9} {:>8} {:>10} {:>10} {:>7} {:>9} {:>6} {:>7} {:>8}",
        "window",
        "schedule",
        "cost",
        "x compact",
        "read %",
        "verb mean",
        "verb min",
        "recent",
        "sent mean",
        "folds",
        "trimmed",
        "refused"
    );
    for window in windows {
        let mut compaction_row: Option<Figures> = None;
        for s in schedules() {
            if only.as_deref().is_some_and(|o| !s.label.contains(o)) {
                continue;
            }
            let mut sum = Figures {
                verbatim_min: u64::MAX,
                recent_min: u64::MAX,
                ..Figures::default()
            };
            let mut csum = Figures {
                verbatim_min: u64::MAX,
                ..Figures::default()
            };
            let mut read = 0.0;
            let mut cread = 0.0;
            for events in &sessions {
                let reports = replay(events, &s, window);
                let (f, c) = figures(&reports, window);
                read += f.read_share * f.turns as f64;
                cread += c.read_share * c.turns as f64;
                for (acc, x) in [(&mut sum, f), (&mut csum, c)] {
                    acc.cost += x.cost;
                    acc.compaction += x.compaction;
                    acc.verbatim_sum += x.verbatim_sum;
                    acc.verbatim_min = acc.verbatim_min.min(x.verbatim_min);
                    acc.turns += x.turns;
                    acc.blocks += x.blocks;
                    acc.trimmed += x.trimmed;
                    acc.refused += x.refused;
                    acc.recent_min = acc.recent_min.min(x.recent_min);
                    acc.fold_turns += x.fold_turns;
                    acc.sent_sum += x.sent_sum;
                }
            }
            sum.read_share = read / sum.turns.max(1) as f64;
            csum.read_share = cread / csum.turns.max(1) as f64;
            if compaction_row.is_none() {
                compaction_row = Some(csum);
            }
            print_row(window, &s.label, &sum);
        }
        if let Some(c) = compaction_row {
            print_row(window, "client compaction at 95%", &c);
        }
    }
}

fn print_row(window: u64, label: &str, f: &Figures) {
    let recent = if f.recent_min == u64::MAX {
        "-".to_owned()
    } else {
        f.recent_min.to_string()
    };
    println!(
        "{:>6}k  {:<28} {:>8.3} {:>8.2}x {:>7.1}% {:>10.0} {:>10} {:>7} {:>9.0} {:>6} {:>7} {:>8}",
        window / 1000,
        label,
        f.cost / 1e6,
        if f.compaction > 0.0 {
            f.cost / f.compaction
        } else {
            0.0
        },
        f.read_share * 100.0,
        f.verbatim_sum / f.turns.max(1) as f64,
        f.verbatim_min,
        recent,
        f.sent_sum / f.turns.max(1) as f64,
        f.fold_turns,
        f.trimmed,
        f.refused
    );
}
