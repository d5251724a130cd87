//! What a session costs, turn by turn, next to the baselines (no management, client
//! compaction, a sliding window) on the same turns: shared by `foldwire replay` and the
//! admin API (and through it the panel's cost chart).
//!
//! Everything is computed from turn reports: foldwire's cache reads and writes from the
//! layout's rewrite metric (`request_tokens`, `rewritten_tokens`, `layout.appended_tokens`),
//! the summaries it wrote (`fold.summary_tokens`, output), and the baselines from what the
//! client sent (`raw_tokens`, `layout.frame_tokens`). These are estimates; the provider's
//! usage is the bill.

use foldwire_core::cost::{BaselineRow, BaselineSim, Baselines, CacheUse, PriceTable, RawTurn};
use foldwire_core::{TurnReport, Wire};
use serde::Serialize;

/// One turn's cost, foldwire's and the baselines'.
#[derive(Debug, Clone, Serialize)]
pub struct EconomyTurn {
    /// Turn number (1-based, in the order given).
    pub turn: usize,
    /// foldwire's tokens by how they are billed.
    pub foldwire: CacheUse,
    /// foldwire's cost in base-input-token equivalents.
    pub cost: f64,
    /// Verbatim client tokens foldwire sent.
    pub verbatim: u64,
    /// Baseline: the whole history, until it overflows.
    pub none: Priced,
    /// Baseline: client compaction.
    pub compaction: Priced,
    /// Baseline: sliding window.
    pub sliding: Priced,
}

/// A baseline turn and its cost.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Priced {
    /// Tokens by how they are billed.
    pub usage: CacheUse,
    /// Base-input-token equivalents.
    pub cost: f64,
    /// Tokens of the request it sent.
    pub sent: u64,
    /// Verbatim client tokens it sent.
    pub verbatim: u64,
    /// The no-management baseline overflowed the window at or before this turn.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub overflowed: bool,
    /// The client compacted on this turn.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compacted: bool,
}

/// Totals over the turns.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct EconomyTotals {
    /// foldwire's tokens.
    pub foldwire: CacheUse,
    /// foldwire's cost (equivalents).
    pub cost: f64,
    /// foldwire's cost in dollars at the table's base price.
    pub dollars: f64,
    /// Share of foldwire's input read from the cache.
    pub cache_read_share: f64,
    /// No management, up to its overflow (equivalents).
    pub none: f64,
    /// The turn the no-management baseline overflowed at, if it did.
    pub none_overflowed_at: Option<usize>,
    /// Client compaction (equivalents).
    pub compaction: f64,
    /// Compactions it made.
    pub compactions: u64,
    /// Sliding window (equivalents).
    pub sliding: f64,
    /// foldwire's cost relative to client compaction's.
    pub vs_compaction: f64,
}

/// A session's economy.
#[derive(Debug, Clone, Serialize)]
pub struct Economy {
    /// The window the baselines were run at.
    pub window: u64,
    /// Per turn.
    pub turns: Vec<EconomyTurn>,
    /// Totals.
    pub totals: EconomyTotals,
}

fn wire_of(report: &TurnReport) -> Wire {
    report.wire.parse().unwrap_or(Wire::Anthropic)
}

/// foldwire's cache use on one turn, from its report. A turn that failed open went out as
/// the client sent it (counted as all new); a refused one sent nothing.
pub fn foldwire_use(report: &TurnReport, prices: &foldwire_core::Prices) -> CacheUse {
    let request = report.counter("request_tokens");
    let mut used = if request == 0 {
        if report.refusal.is_some() {
            CacheUse::default()
        } else {
            prices.split(0, report.counter("raw_tokens"))
        }
    } else {
        foldwire_core::cost::turn_use(
            prices,
            request,
            report.counter("rewritten_tokens"),
            report.counter("layout.appended_tokens"),
        )
    };
    used.output = report.counter("fold.summary_tokens");
    used
}

/// The economy of a run of turn reports at `window`, priced by `table` (each turn by its
/// wire's prices).
pub fn of_reports(reports: &[TurnReport], window: u64, table: &PriceTable) -> Economy {
    let first_prices = reports
        .first()
        .map(|r| *table.for_wire(wire_of(r)))
        .unwrap_or_default();
    let mut sim = BaselineSim::new(
        Baselines {
            window,
            ..Baselines::default()
        },
        first_prices,
    );
    let mut previous_raw: Option<u64> = None;
    let mut turns = Vec::with_capacity(reports.len());
    let mut totals = EconomyTotals::default();
    for (i, r) in reports.iter().enumerate() {
        let prices = table.for_wire(wire_of(r));
        let raw = r.counter("raw_tokens");
        let raw_turn = RawTurn {
            tokens: raw,
            frame: r.counter("layout.frame_tokens").min(raw),
            extends: previous_raw.is_some_and(|p| raw >= p),
        };
        previous_raw = Some(raw);
        let BaselineRow {
            none,
            compaction,
            sliding,
        } = sim.step(raw_turn);
        let used = foldwire_use(r, prices);
        let cost = prices.equivalents(&used);
        let priced = |b: foldwire_core::cost::BaselineTurn| Priced {
            usage: b.usage,
            cost: prices.equivalents(&b.usage),
            sent: b.sent,
            verbatim: b.verbatim,
            overflowed: b.overflowed,
            compacted: b.compacted,
        };
        let row = EconomyTurn {
            turn: i + 1,
            foldwire: used,
            cost,
            verbatim: r.counter("layout.verbatim_tokens"),
            none: priced(none),
            compaction: priced(compaction),
            sliding: priced(sliding),
        };
        totals.foldwire = totals.foldwire.plus(used);
        totals.cost += cost;
        totals.dollars += prices.dollars(&used);
        totals.none += row.none.cost;
        if row.none.overflowed && totals.none_overflowed_at.is_none() {
            totals.none_overflowed_at = Some(i + 1);
        }
        totals.compaction += row.compaction.cost;
        totals.compactions += u64::from(row.compaction.compacted);
        totals.sliding += row.sliding.cost;
        turns.push(row);
    }
    totals.cache_read_share = totals.foldwire.read_share();
    totals.vs_compaction = if totals.compaction > 0.0 {
        totals.cost / totals.compaction
    } else {
        0.0
    };
    Economy {
        window,
        turns,
        totals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(counters: &[(&str, u64)]) -> TurnReport {
        let mut r = TurnReport {
            wire: "anthropic".into(),
            ..TurnReport::default()
        };
        for (k, v) in counters {
            r.count(k, *v);
        }
        r
    }

    #[test]
    fn reports_are_priced_and_compared_on_the_same_turns() {
        let reports = vec![
            report(&[
                ("request_tokens", 1_000),
                ("rewritten_tokens", 1_000),
                ("raw_tokens", 1_000),
                ("layout.frame_tokens", 200),
            ]),
            report(&[
                ("request_tokens", 1_500),
                ("layout.appended_tokens", 500),
                ("raw_tokens", 1_500),
                ("layout.frame_tokens", 200),
            ]),
            // A fold: 600 tokens rewritten, and a 50-token summary written.
            report(&[
                ("request_tokens", 1_200),
                ("rewritten_tokens", 600),
                ("fold.summary_tokens", 50),
                ("raw_tokens", 2_000),
                ("layout.frame_tokens", 200),
            ]),
        ];
        let e = of_reports(&reports, 1_800, &PriceTable::default());
        assert_eq!(e.turns[1].foldwire.read, 1_000);
        assert_eq!(
            e.turns[2].foldwire,
            CacheUse {
                read: 600,
                write: 600,
                uncached: 0,
                output: 50
            }
        );
        // 600 × 0.1 + 600 × 1.25 + 50 × 5
        assert!((e.turns[2].cost - 1_060.0).abs() < 1e-9);
        // The client's 2,000 tokens overflow a 1,800 window; compaction fires at 1,710.
        assert_eq!(e.totals.none_overflowed_at, Some(3));
        assert!(e.turns[2].compaction.compacted);
        assert_eq!(e.totals.compactions, 1);
        let sum: f64 = e.turns.iter().map(|t| t.cost).sum();
        assert!((e.totals.cost - sum).abs() < 1e-9);
        assert!((e.totals.vs_compaction - e.totals.cost / e.totals.compaction).abs() < 1e-12);
        assert_eq!(e.totals.foldwire.read, 1_600);
    }
}
