//! Refusals: when the request cannot fit the budget, say by how much, where the tokens are,
//! and which levers would make it fit. Nothing is dropped.

use std::collections::BTreeMap;

use foldwire_core::{Message, Refusal};

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

/// The refusal for a request over its budget, naming every pinned unit.
pub fn refusal(stage: &str, zones: &ZoneTokens, pinned: &[&Message]) -> Refusal {
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
    let mut levers = Vec::new();
    if zones.history > 0 {
        levers.push(format!(
            "fold queued ranges: {} tokens of history lie between the head and the recent window",
            zones.history
        ));
    }
    if zones.recent > 0 {
        let smaller = zones.recent.saturating_sub(over);
        levers.push(format!(
            "a smaller recent window: recent_tokens {} or less (now {}, holding {})",
            smaller, zones.recent_window, zones.recent
        ));
    }
    if zones.head > 0 {
        levers.push(format!(
            "a new reset: the head holds {} tokens{}; a reset makes them history that can fold",
            zones.head,
            if zones.after_reset {
                " since the last reset"
            } else {
                ""
            }
        ));
    }
    for m in pinned {
        let name = m
            .r#ref
            .map(|r| r.to_string())
            .unwrap_or_else(|| m.id.to_string());
        levers.push(format!("unpin {name}"));
    }
    Refusal {
        stage: stage.to_owned(),
        reason: format!(
            "the request needs {} tokens and the budget is {}; nothing was dropped",
            zones.request(),
            zones.budget
        ),
        numbers,
        levers,
    }
}
