//! What one turn did: per-stage timings, counters, warnings and a refusal.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Wall time one stage took on this turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageTiming {
    /// Stage name.
    pub stage: String,
    /// Wall time in microseconds.
    pub micros: u64,
}

/// Something a stage wants the user to know that did not stop the turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    /// The stage that raised it.
    pub stage: String,
    /// A stable machine-readable code (`archive_failed`, `first_user_pin_residual`, …).
    pub code: String,
    /// The human message, naming what it is about.
    pub message: String,
}

/// Why a request could not be fit, with the numbers and the levers that would fix it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Refusal {
    /// The stage that refused.
    pub stage: String,
    /// What went wrong, in words.
    pub reason: String,
    /// The numbers involved (budget, head, history, recent, pinned …), in tokens.
    pub numbers: BTreeMap<String, u64>,
    /// What would make it fit.
    pub levers: Vec<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.stage, self.reason)?;
        for (k, v) in &self.numbers {
            write!(f, "; {k}={v}")?;
        }
        if !self.levers.is_empty() {
            write!(f, "; levers: {}", self.levers.join(", "))?;
        }
        Ok(())
    }
}

/// The report of one turn, written as JSON by `foldwire run --report` and kept by the proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TurnReport {
    /// The session.
    pub session: String,
    /// The wire.
    pub wire: String,
    /// The pipeline that ran.
    pub pipeline: String,
    /// Turn number within the session (1-based).
    pub turn: u64,
    /// Per-stage wall time, in pipeline order.
    pub stages: Vec<StageTiming>,
    /// Counters stages increment (`folds`, `pairing.stub_results`, …).
    pub counters: BTreeMap<String, u64>,
    /// Warnings raised.
    pub warnings: Vec<Warning>,
    /// Set when the request could not be fit.
    pub refusal: Option<Refusal>,
    /// Set when the pipeline failed and the original body was forwarded unchanged.
    pub fail_open: Option<String>,
}

impl TurnReport {
    /// Adds `by` to a counter.
    pub fn count(&mut self, counter: &str, by: u64) {
        *self.counters.entry(counter.to_owned()).or_default() += by;
    }

    /// Records a warning.
    pub fn warn(&mut self, stage: &str, code: &str, message: impl Into<String>) {
        self.warnings.push(Warning {
            stage: stage.to_owned(),
            code: code.to_owned(),
            message: message.into(),
        });
    }

    /// A counter's value (0 when never incremented).
    pub fn counter(&self, counter: &str) -> u64 {
        self.counters.get(counter).copied().unwrap_or(0)
    }
}
