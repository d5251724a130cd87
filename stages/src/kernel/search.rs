//! Search over block summaries and topics.

use foldwire_core::{BlockId, Ref, SessionState};
use serde::{Deserialize, Serialize};

use super::units::preview;

/// One search hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    /// The block.
    pub block: BlockId,
    /// Its tier.
    pub tier: u8,
    /// Whether it is active (inactive blocks were consumed by a higher tier).
    pub active: bool,
    /// The first and last ref it covers.
    pub span: (Ref, Ref),
    /// Its topic.
    pub topic: Option<String>,
    /// The score (higher is better).
    pub score: f64,
    /// The summary around the first match.
    pub snippet: String,
}

/// Non-overlapping occurrences of `needle` in `hay` (both lowercase).
fn occurrences(hay: &str, needle: &str) -> usize {
    if needle.is_empty() {
        0
    } else {
        hay.matches(needle).count()
    }
}

/// The best `limit` hits of [`search`], best first (acp §26 #132: results are sorted and
/// limited, so a broad query does not flood the caller with every block of a long session).
pub fn search_top(state: &SessionState, query: &str, limit: usize) -> Vec<SearchHit> {
    let mut hits = search(state, query);
    hits.truncate(limit);
    hits
}

/// Ranks every block (active first on ties) by how well its topic and summary match the
/// whitespace-separated terms of `query`, case-insensitively. A topic match weighs three
/// times a summary match; repeated matches count with diminishing weight. Blocks matching
/// no term are left out.
pub fn search(state: &SessionState, query: &str) -> Vec<SearchHit> {
    let terms: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    if terms.is_empty() {
        return Vec::new();
    }
    let mut hits: Vec<SearchHit> = state
        .blocks
        .iter()
        .filter_map(|b| {
            let topic = b.topic.as_deref().unwrap_or_default().to_lowercase();
            let summary = b.summary.to_lowercase();
            let mut score = 0.0;
            for t in &terms {
                let in_topic = occurrences(&topic, t) as f64;
                let in_summary = occurrences(&summary, t) as f64;
                score += 3.0 * (1.0 + in_topic).ln() + (1.0 + in_summary).ln();
            }
            if score <= 0.0 {
                return None;
            }
            let at = terms
                .iter()
                .filter_map(|t| summary.find(t.as_str()))
                .min()
                .unwrap_or(0);
            let start = b
                .summary
                .char_indices()
                .map(|(i, _)| i)
                .take_while(|i| *i + 40 <= at)
                .last()
                .unwrap_or(0);
            Some(SearchHit {
                block: b.id,
                tier: b.tier,
                active: b.active,
                span: b.span,
                topic: b.topic.clone(),
                score,
                snippet: preview(b.summary.get(start..).unwrap_or(&b.summary), 160),
            })
        })
        .collect();
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.active.cmp(&a.active))
            .then(a.block.cmp(&b.block))
    });
    hits
}
