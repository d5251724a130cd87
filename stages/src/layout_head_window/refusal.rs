//! Refusals: when the request cannot fit the budget, say by how much, where the tokens are,
//! and which levers would make it fit. Nothing is dropped.
//!
//! A lever is named only with the tokens it would free (each fold puts a summary back on the
//! wire, so a fold frees its tokens minus a quarter of them, at most minus
//! [`SUMMARY_COST`]), and only when it frees some. When
//! no lever frees what the request is over on its own, the refusal says so, and the last
//! lever is the window that fits the request as it is.

use std::collections::BTreeMap;

use foldwire_core::{
    Budget, Conversation, Message, RangeInfo, Refusal, SessionState, TokenEstimator,
};

use crate::kernel::{Protection, summary_runs};

/// Tokens one summary is assumed to cost on the wire: an automatic summary at its default
/// cap (800 characters, three a token) with its header line.
pub const SUMMARY_COST: u64 = 300;

/// Where a request's tokens sit, by zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZoneTokens {
    /// The budget available to the request.
    pub budget: u64,
    /// System, tools and parameters.
    pub frame: u64,
    /// The head window.
    pub head: u64,
    /// Between the head and the recent window (what folds).
    pub history: u64,
    /// The recent window.
    pub recent: u64,
    /// Units pinned against folding, wherever they sit.
    pub pinned: u64,
    /// The recent window's configured size.
    pub recent_window: u64,
    /// True when the head starts at a reset.
    pub after_reset: bool,
}

impl ZoneTokens {
    /// The whole request.
    pub fn request(&self) -> u64 {
        self.frame + self.head + self.history + self.recent
    }
}

/// What could still be folded when a request is refused: the inputs of the levers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Relief {
    /// Tokens of each compressible range still queued (not folded this turn).
    pub ranges: Vec<u64>,
    /// Each run of summaries that could fold a tier up: its first and last block and tokens.
    pub summary_runs: Vec<(String, String, u64)>,
    /// Each pinned unit: its name (ref or id) and tokens.
    pub pinned: Vec<(String, u64)>,
    /// The budget the request was measured against (for the window that would fit it).
    pub budget: Budget,
}

impl Relief {
    /// Gathers what could still fold in a laid-out conversation: the `ranges` left queued,
    /// the runs of summaries on the wire (with the `protection` `ranges.build` used), and the
    /// pinned units.
    pub fn of(
        ranges: &[RangeInfo],
        conversation: &Conversation,
        state: &SessionState,
        protection: &Protection,
        estimator: &dyn TokenEstimator,
        budget: Budget,
    ) -> Self {
        let summary_runs = summary_runs(conversation, state, protection, estimator)
            .into_iter()
            .filter_map(|run| {
                Some((
                    run.first()?.to_string(),
                    run.last()?.to_string(),
                    run.tokens,
                ))
            })
            .collect();
        let pinned = conversation
            .messages
            .iter()
            .filter(|m| m.pin.is_some())
            .map(|m| (unit_name(m), estimator.raw_tokens(&m.raw)))
            .collect();
        Relief {
            ranges: ranges.iter().map(|r| r.tokens).collect(),
            summary_runs,
            pinned,
            budget,
        }
    }
}

fn unit_name(m: &Message) -> String {
    m.r#ref
        .map(|r| r.to_string())
        .unwrap_or_else(|| m.id.to_string())
}

/// What folding `tokens` into one summary frees: the summary costs a quarter of what it
/// folds, at most [`SUMMARY_COST`].
fn folded(tokens: u64) -> u64 {
    tokens.saturating_sub((tokens / 4).min(SUMMARY_COST))
}

/// The refusal for a request over its budget: the numbers, and each lever with the tokens it
/// frees.
pub fn refusal(stage: &str, zones: &ZoneTokens, relief: &Relief) -> Refusal {
    let over = zones.request().saturating_sub(zones.budget);
    let mut numbers = BTreeMap::new();
    numbers.insert("budget".to_owned(), zones.budget);
    numbers.insert("request".to_owned(), zones.request());
    numbers.insert("over".to_owned(), over);
    numbers.insert("frame".to_owned(), zones.frame);
    numbers.insert("head".to_owned(), zones.head);
    numbers.insert("history".to_owned(), zones.history);
    numbers.insert("recent".to_owned(), zones.recent);
    numbers.insert("pinned".to_owned(), zones.pinned);

    // (what to do, tokens it frees)
    let mut levers: Vec<(String, u64)> = Vec::new();
    let queued: u64 = relief.ranges.iter().map(|&t| folded(t)).sum();
    if queued > 0 {
        let tokens: u64 = relief.ranges.iter().sum();
        levers.push((
            format!(
                "fold the {} compressible range(s) still queued ({tokens} tokens)",
                relief.ranges.len()
            ),
            queued,
        ));
    }
    let tiers: u64 = relief.summary_runs.iter().map(|r| folded(r.2)).sum();
    if tiers > 0 {
        let spans: Vec<String> = relief
            .summary_runs
            .iter()
            .map(|(a, b, _)| format!("{a}..{b}"))
            .collect();
        levers.push((
            format!(
                "fold the summaries {} into higher tiers (compress by block ids)",
                spans.join(", ")
            ),
            tiers,
        ));
    }
    let reset = folded(zones.head);
    if reset > 0 {
        levers.push((
            format!(
                "a new reset: the head's {} tokens{} become history that can fold",
                zones.head,
                if zones.after_reset {
                    " since the last reset"
                } else {
                    ""
                }
            ),
            reset,
        ));
    }
    for (name, tokens) in &relief.pinned {
        let frees = folded(*tokens);
        if frees > 0 {
            levers.push((
                format!("unpin {name} ({tokens} tokens) so it can fold"),
                frees,
            ));
        }
    }
    let most = levers.iter().map(|l| l.1).max().unwrap_or(0);
    let together: u64 = levers.iter().map(|l| l.1).sum();
    numbers.insert("frees_at_most".to_owned(), most);

    let mut words: Vec<String> = levers
        .into_iter()
        .map(|(what, frees)| {
            let enough = if frees >= over {
                "enough"
            } else {
                "not enough alone"
            };
            format!("{what}: frees about {frees} tokens ({enough})")
        })
        .collect();
    let suffices = most >= over;
    if !suffices {
        // The window that holds the request as measured, with the response reserve.
        let b = relief.budget;
        let calibration = b
            .calibration
            .clamp(Budget::CALIBRATION_BOUNDS.0, Budget::CALIBRATION_BOUNDS.1);
        let window = (zones.request() as f64 * calibration).ceil() as u64 + b.reserve;
        words.push(format!(
            "a larger context window: {window} tokens or more fit the request as it is"
        ));
    }
    let reason = if suffices {
        format!(
            "the request needs {} tokens and the budget is {}; nothing was dropped",
            zones.request(),
            zones.budget
        )
    } else if together >= over {
        format!(
            "the request needs {} tokens and the budget is {}; nothing was dropped; no single lever frees the {over} tokens over (together they free about {together})",
            zones.request(),
            zones.budget
        )
    } else {
        format!(
            "the request needs {} tokens and the budget is {}; nothing was dropped; nothing that can fold frees the {over} tokens over (all of it frees about {together})",
            zones.request(),
            zones.budget
        )
    };
    Refusal {
        stage: stage.to_owned(),
        reason,
        numbers,
        levers: words,
    }
}
