//! Prompt-cache economy: what a request costs once the provider's prompt cache is counted,
//! priced by a per-provider table, and the same session under the baselines a user would
//! otherwise choose (no management, client compaction, a sliding window).
//!
//! A request is billed in three parts: tokens read from the cache (the prefix identical to
//! the previous request), tokens written to the cache (Anthropic charges a premium for
//! them), and uncached input. Summaries a fold or a compaction makes are output tokens.
//! Everything is measured in tokens; [`Prices`] turns tokens into base-input-token
//! equivalents (what the issue tables report) or dollars.
//!
//! The model is the provider's prefix cache at message granularity with a warm cache (turns
//! closer than the cache's time to live): a request reads what it shares with the previous
//! one and writes (or pays full price for) the rest. Minimum cacheable lengths and cache
//! expiry are not modelled.

use serde::{Deserialize, Serialize};

use crate::wire::Wire;

/// Tokens of one request by how the provider bills them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheUse {
    /// Read from the prompt cache.
    pub read: u64,
    /// Written to the prompt cache (billed at the write price).
    pub write: u64,
    /// Billed as ordinary input.
    pub uncached: u64,
    /// Output tokens billed on foldwire's or the baseline's account (summaries).
    pub output: u64,
}

impl CacheUse {
    /// Input tokens of the request, however billed.
    pub fn input(&self) -> u64 {
        self.read + self.write + self.uncached
    }

    /// The sum of two uses.
    pub fn plus(self, o: CacheUse) -> CacheUse {
        CacheUse {
            read: self.read + o.read,
            write: self.write + o.write,
            uncached: self.uncached + o.uncached,
            output: self.output + o.output,
        }
    }

    /// Share of the input read from the cache (0 for an empty use).
    pub fn read_share(&self) -> f64 {
        match self.input() {
            0 => 0.0,
            n => self.read as f64 / n as f64,
        }
    }
}

/// How long an Anthropic cache entry lives; the longer one costs more to write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheTtl {
    /// Five minutes (the default `cache_control`).
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// One hour (`"ttl": "1h"`).
    #[serde(rename = "1h")]
    OneHour,
}

/// One provider's prices, as multipliers of its base input price.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Prices {
    /// Base input price in dollars per million tokens.
    pub input_per_mtok: f64,
    /// Cache read, times the base input price.
    pub cache_read: f64,
    /// Cache write with a five-minute lifetime (1.0 where writes cost no premium).
    pub cache_write_5m: f64,
    /// Cache write with a one-hour lifetime.
    pub cache_write_1h: f64,
    /// Output, times the base input price.
    pub output: f64,
    /// True when the provider bills cache writes apart (Anthropic); otherwise whatever is
    /// not read from the cache is uncached input.
    pub bills_writes: bool,
    /// The cache lifetime requests ask for (Anthropic).
    pub ttl: CacheTtl,
}

impl Default for Prices {
    fn default() -> Self {
        Prices::ANTHROPIC
    }
}

impl Prices {
    /// Anthropic (Claude Sonnet list prices): reads 0.1×, writes 1.25× (5 min) or 2× (1 h),
    /// output 5×.
    pub const ANTHROPIC: Prices = Prices {
        input_per_mtok: 3.0,
        cache_read: 0.1,
        cache_write_5m: 1.25,
        cache_write_1h: 2.0,
        output: 5.0,
        bills_writes: true,
        ttl: CacheTtl::FiveMinutes,
    };
    /// OpenAI (GPT-5 family): cached input 0.1×, no write premium, output 8×.
    pub const OPENAI: Prices = Prices {
        input_per_mtok: 1.25,
        cache_read: 0.1,
        cache_write_5m: 1.0,
        cache_write_1h: 1.0,
        output: 8.0,
        bills_writes: false,
        ttl: CacheTtl::FiveMinutes,
    };
    /// Gemini (2.5 Pro, implicit caching): cached input 0.25×, no write premium, output 8×.
    pub const GEMINI: Prices = Prices {
        input_per_mtok: 1.25,
        cache_read: 0.25,
        cache_write_5m: 1.0,
        cache_write_1h: 1.0,
        output: 8.0,
        bills_writes: false,
        ttl: CacheTtl::FiveMinutes,
    };

    /// The write multiplier for the configured lifetime.
    pub fn cache_write(&self) -> f64 {
        match self.ttl {
            CacheTtl::FiveMinutes => self.cache_write_5m,
            CacheTtl::OneHour => self.cache_write_1h,
        }
    }

    /// A request of `total` input tokens whose first `cached` tokens are read from the cache:
    /// the rest is written (providers that bill writes) or uncached input.
    pub fn split(&self, cached: u64, total: u64) -> CacheUse {
        let cached = cached.min(total);
        let rest = total - cached;
        if self.bills_writes {
            CacheUse {
                read: cached,
                write: rest,
                ..CacheUse::default()
            }
        } else {
            CacheUse {
                read: cached,
                uncached: rest,
                ..CacheUse::default()
            }
        }
    }

    /// The cost in base-input-token equivalents.
    pub fn equivalents(&self, u: &CacheUse) -> f64 {
        u.read as f64 * self.cache_read
            + u.write as f64 * self.cache_write()
            + u.uncached as f64
            + u.output as f64 * self.output
    }

    /// The cost in dollars.
    pub fn dollars(&self, u: &CacheUse) -> f64 {
        self.equivalents(u) * self.input_per_mtok / 1_000_000.0
    }
}

/// Prices per provider, editable in configuration (the defaults are list prices).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PriceTable {
    /// The Anthropic Messages wire.
    pub anthropic: Prices,
    /// The OpenAI Chat and Responses wires.
    pub openai: Prices,
    /// The Gemini wire.
    pub gemini: Prices,
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable {
            anthropic: Prices::ANTHROPIC,
            openai: Prices::OPENAI,
            gemini: Prices::GEMINI,
        }
    }
}

impl PriceTable {
    /// The prices that apply to requests on `wire`.
    pub fn for_wire(&self, wire: Wire) -> &Prices {
        match wire {
            Wire::Anthropic => &self.anthropic,
            Wire::OpenAiChat | Wire::OpenAiResponses => &self.openai,
            Wire::Gemini => &self.gemini,
        }
    }
}

/// A turn's cache use from the layout's rewrite metric: a request of `request` tokens that
/// rewrote `rewritten` tokens from its first changed unit (0 when it only appended
/// `appended` tokens). The first request of a session is all new.
pub fn turn_use(prices: &Prices, request: u64, rewritten: u64, appended: u64) -> CacheUse {
    let new = if rewritten > 0 { rewritten } else { appended };
    prices.split(request.saturating_sub(new), request)
}

/// What the client sent on one turn, the input of the baselines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawTurn {
    /// Tokens of the whole request as the client sent it.
    pub tokens: u64,
    /// Of which system, tools and parameters (what every request repeats).
    pub frame: u64,
    /// True when the request extends the previous one (the client appended to it); false
    /// for the first request and when the client rewrote or rewound its history.
    pub extends: bool,
}

/// One baseline's turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineTurn {
    /// Tokens billed (zero once the session overflowed, for the no-management baseline).
    pub usage: CacheUse,
    /// Tokens of the request sent.
    pub sent: u64,
    /// Of which the client's messages verbatim (neither frame nor a summary).
    pub verbatim: u64,
    /// The request did not fit the window (no management only): the session ended here.
    pub overflowed: bool,
    /// The client compacted before this turn.
    pub compacted: bool,
}

/// The baselines a session is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Baselines {
    /// The model's context window.
    pub window: u64,
    /// Compaction fires when the request would pass this share of the window.
    pub compact_at: f64,
    /// Tokens of the summary compaction leaves.
    pub summary_tokens: u64,
    /// The sliding window keeps the newest history within this share of the window.
    pub slide_at: f64,
}

impl Default for Baselines {
    fn default() -> Self {
        Baselines {
            window: 200_000,
            compact_at: 0.95,
            summary_tokens: 2_000,
            slide_at: 0.95,
        }
    }
}

/// The three baselines of one turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineRow {
    /// The whole history every turn, until it overflows the window.
    pub none: BaselineTurn,
    /// The client compacts its whole history into one summary near the window.
    pub compaction: BaselineTurn,
    /// The newest history that fits, the oldest dropped.
    pub sliding: BaselineTurn,
}

/// Runs the baselines over a session's raw turns, in order.
#[derive(Debug, Clone)]
pub struct BaselineSim {
    config: Baselines,
    prices: Prices,
    overflowed: bool,
    previous_raw: Option<u64>,
    /// History tokens the compaction summary stands for (0 before the first compaction).
    compacted: u64,
    previous_compaction: Option<u64>,
    previous_sliding: Option<(u64, u64)>,
}

impl BaselineSim {
    /// A simulation with these settings and prices.
    pub fn new(config: Baselines, prices: Prices) -> Self {
        BaselineSim {
            config,
            prices,
            overflowed: false,
            previous_raw: None,
            compacted: 0,
            previous_compaction: None,
            previous_sliding: None,
        }
    }

    /// The baselines of the next turn.
    pub fn step(&mut self, raw: RawTurn) -> BaselineRow {
        let history = raw.tokens.saturating_sub(raw.frame);
        let delta = match (raw.extends, self.previous_raw) {
            (true, Some(p)) => raw.tokens.saturating_sub(p),
            _ => history,
        };
        if !raw.extends {
            // A new or rewound conversation: every baseline starts over with it.
            self.compacted = 0;
            self.previous_compaction = None;
            self.previous_sliding = None;
        }
        let row = BaselineRow {
            none: self.none(raw, history),
            compaction: self.compaction(raw, history, delta),
            sliding: self.sliding(raw, history, delta),
        };
        self.previous_raw = Some(raw.tokens);
        row
    }

    fn none(&mut self, raw: RawTurn, history: u64) -> BaselineTurn {
        if self.overflowed || raw.tokens > self.config.window {
            self.overflowed = true;
            return BaselineTurn {
                overflowed: true,
                ..BaselineTurn::default()
            };
        }
        let cached = match (raw.extends, self.previous_raw) {
            (true, Some(p)) => p,
            _ => 0,
        };
        BaselineTurn {
            usage: self.prices.split(cached, raw.tokens),
            sent: raw.tokens,
            verbatim: history,
            ..BaselineTurn::default()
        }
    }

    fn compaction(&mut self, raw: RawTurn, history: u64, delta: u64) -> BaselineTurn {
        let summary = if self.compacted > 0 {
            self.config.summary_tokens
        } else {
            0
        };
        let limit = (self.config.window as f64 * self.config.compact_at) as u64;
        let mut sent = raw.frame + summary + history.saturating_sub(self.compacted);
        let mut usage = CacheUse::default();
        let mut compacted = false;
        let cached = if sent > limit {
            // The client asks the model for a summary of everything before this turn's new
            // tokens (one request over its cached history, the summary as output), then
            // sends the frame, the summary and the new tokens.
            let before = self.previous_compaction.unwrap_or(0);
            usage = usage.plus(self.prices.split(before, before + 200));
            usage.output += self.config.summary_tokens;
            self.compacted = history.saturating_sub(delta);
            compacted = true;
            sent = raw.frame + self.config.summary_tokens + delta.min(history);
            raw.frame
        } else {
            match self.previous_compaction {
                Some(p) if raw.extends => p.min(sent),
                _ => 0,
            }
        };
        usage = usage.plus(self.prices.split(cached, sent));
        self.previous_compaction = Some(sent);
        let summary_now = if self.compacted > 0 {
            self.config.summary_tokens
        } else {
            0
        };
        BaselineTurn {
            usage,
            sent,
            verbatim: sent.saturating_sub(raw.frame + summary_now),
            compacted,
            ..BaselineTurn::default()
        }
    }

    fn sliding(&mut self, raw: RawTurn, history: u64, delta: u64) -> BaselineTurn {
        let limit = (self.config.window as f64 * self.config.slide_at) as u64;
        let room = limit.saturating_sub(raw.frame);
        let kept = history.min(room);
        let sent = raw.frame + kept;
        // While nothing was dropped the request only appends; once the oldest history
        // leaves, everything after the frame changes on every turn that drops more.
        let cached = match self.previous_sliding {
            Some((prev_sent, prev_kept)) if raw.extends => {
                if kept == history && prev_kept + delta == kept {
                    prev_sent
                } else {
                    raw.frame
                }
            }
            _ => 0,
        };
        self.previous_sliding = Some((sent, kept));
        BaselineTurn {
            usage: self.prices.split(cached, sent),
            sent,
            verbatim: kept,
            ..BaselineTurn::default()
        }
    }
}

/// Totals of a run of turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CostTotals {
    /// Summed cache use.
    pub usage: CacheUse,
    /// Base-input-token equivalents.
    pub equivalents: f64,
    /// Dollars.
    pub dollars: f64,
    /// Turns counted.
    pub turns: u64,
}

impl CostTotals {
    /// Adds one turn's use.
    pub fn add(&mut self, prices: &Prices, u: &CacheUse) {
        self.usage = self.usage.plus(*u);
        self.equivalents += prices.equivalents(u);
        self.dollars += prices.dollars(u);
        self.turns += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_turn_tokens_into_equivalents_and_dollars() {
        let u = CacheUse {
            read: 10_000,
            write: 1_000,
            uncached: 100,
            output: 10,
        };
        let a = Prices::ANTHROPIC;
        // 10,000 × 0.1 + 1,000 × 1.25 + 100 + 10 × 5
        assert!((a.equivalents(&u) - 2_400.0).abs() < 1e-9);
        assert!((a.dollars(&u) - 2_400.0 * 3.0 / 1e6).abs() < 1e-12);
        let hour = Prices {
            ttl: CacheTtl::OneHour,
            ..a
        };
        assert!((hour.equivalents(&u) - 3_150.0).abs() < 1e-9);
        // OpenAI bills what is not cached as input, with no write premium.
        assert_eq!(
            Prices::OPENAI.split(700, 1_000),
            CacheUse {
                read: 700,
                uncached: 300,
                ..CacheUse::default()
            }
        );
        assert!(
            (Prices::GEMINI.equivalents(&Prices::GEMINI.split(800, 1_000)) - 400.0).abs() < 1e-9
        );
        assert_eq!(
            PriceTable::default().for_wire(Wire::OpenAiResponses),
            &Prices::OPENAI
        );
        assert!((u.read_share() - 10_000.0 / 11_100.0).abs() < 1e-12);
    }

    #[test]
    fn a_turn_reads_what_it_did_not_rewrite_or_append() {
        let a = Prices::ANTHROPIC;
        assert_eq!(turn_use(&a, 5_000, 0, 300).read, 4_700);
        assert_eq!(turn_use(&a, 5_000, 1_200, 0).write, 1_200);
        assert_eq!(turn_use(&a, 5_000, 5_000, 0).read, 0);
    }

    fn growing(turns: u64, step: u64, frame: u64) -> Vec<RawTurn> {
        (1..=turns)
            .map(|i| RawTurn {
                tokens: frame + i * step,
                frame,
                extends: i > 1,
            })
            .collect()
    }

    #[test]
    fn no_management_pays_until_the_window_overflows() {
        let config = Baselines {
            window: 10_000,
            ..Baselines::default()
        };
        let mut sim = BaselineSim::new(config, Prices::ANTHROPIC);
        let rows: Vec<BaselineRow> = growing(12, 1_000, 500)
            .into_iter()
            .map(|r| sim.step(r))
            .collect();
        assert_eq!(rows[0].none.usage.write, 1_500);
        assert_eq!(
            rows[1].none.usage,
            CacheUse {
                read: 1_500,
                write: 1_000,
                ..CacheUse::default()
            }
        );
        // 10,500 > 10,000 at turn 10: the session ends there.
        assert!(!rows[8].none.overflowed);
        assert!(rows[9].none.overflowed && rows[11].none.overflowed);
        assert_eq!(rows[11].none.usage, CacheUse::default());
    }

    #[test]
    fn compaction_summarizes_at_its_threshold_and_starts_again_from_the_summary() {
        let config = Baselines {
            window: 10_000,
            compact_at: 0.95,
            summary_tokens: 1_000,
            slide_at: 0.95,
        };
        let mut sim = BaselineSim::new(config, Prices::ANTHROPIC);
        let rows: Vec<BaselineRow> = growing(12, 1_000, 500)
            .into_iter()
            .map(|r| sim.step(r))
            .collect();
        // Turn 9 sends 9,500 (at the limit, not over); turn 10 would send 10,500.
        assert!(!rows[8].compaction.compacted);
        assert_eq!(rows[8].compaction.sent, 9_500);
        let c = rows[9].compaction;
        assert!(c.compacted);
        // Frame + summary + the turn's new 1,000 tokens; the frame stays cached.
        assert_eq!(c.sent, 500 + 1_000 + 1_000);
        assert_eq!(c.verbatim, 1_000);
        // The compaction call reads the cached 9,500, writes its 200-token instruction and
        // outputs the summary; then the turn reads the frame and writes the rest.
        assert_eq!(
            c.usage,
            CacheUse {
                read: 9_500 + 500,
                write: 200 + 2_000,
                uncached: 0,
                output: 1_000
            }
        );
        // Afterwards it appends again.
        assert_eq!(rows[10].compaction.sent, 3_500);
        assert_eq!(rows[10].compaction.usage.read, 2_500);
        assert_eq!(rows[10].compaction.usage.write, 1_000);
    }

    #[test]
    fn a_sliding_window_rewrites_everything_after_the_frame_once_it_slides() {
        let config = Baselines {
            window: 10_000,
            slide_at: 0.5,
            ..Baselines::default()
        };
        let mut sim = BaselineSim::new(config, Prices::ANTHROPIC);
        let rows: Vec<BaselineRow> = growing(8, 1_000, 500)
            .into_iter()
            .map(|r| sim.step(r))
            .collect();
        // Limit 5,000: history up to 4,500 fits.
        assert_eq!(rows[3].sliding.sent, 4_500);
        assert_eq!(rows[3].sliding.usage.read, 3_500);
        assert_eq!(rows[4].sliding.sent, 5_000);
        assert_eq!(
            rows[4].sliding.usage,
            CacheUse {
                read: 500,
                write: 4_500,
                ..CacheUse::default()
            }
        );
        assert_eq!(rows[7].sliding.verbatim, 4_500);
        assert_eq!(rows[7].sliding.usage.read, 500);
    }
}
