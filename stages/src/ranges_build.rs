//! Stage `ranges.build`: finds the compressible ranges of the turn
//! ([`crate::kernel::compressible_ranges`]) and stores them in `turn.ranges` for `fold`, its
//! policy and the CLI.
//!
//! Params (all optional): `protection` (`recent_messages` 5, `recent_tokens` 5000,
//! `last_user` true, `protected_tools` ["compress"], `latest_tools` [read, read_file, view,
//! cat, inspect*, restore] with `latest_count` 2: the newest calls to those stay verbatim),
//! `min_tokens` 200, `split_at_user_after` 3, `max_tokens` (default a tenth of the
//! available budget). A small budget (under [`SMALL_BUDGET`] available tokens, a window under
//! 80,000) protects at most one latest read and at most [`SMALL_RECENT_TOKENS`] recent tokens
//! (and [`SMALL_RECENT_SHARE`] of itself); a larger one at most 0.3 of itself.
//!
//! The protection it used is left on the turn as a typed [`UsedProtection`] so the `fold`
//! stage validates its automatic folds with the same settings (one source of truth), and
//! kept in the session state ([`offered_protection`]) for the model's `compress` calls,
//! which come after the turn and must not refuse a range its note offered.
//!
//! On a session's first turn (no head recorded yet) it leaves the head window out of every
//! range as the layout will record it ([`with_first_head_measured`]), sized by the turn option
//! `head_tokens` or the layout's default for the budget ([`default_head_tokens`]), so the
//! opening messages never fold before the layout has seen them. A `head_tokens` set as a
//! param of `layout.head_window` in a pipeline spec takes effect from the layout's first run.

use std::sync::Arc;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Conversation, Extensions, Fact,
    MediaClass, Origin, SessionState, Stage, StageCx, StageError, TokenEstimator, Turn, Wire,
    async_trait,
};
use foldwire_wire::request::content_digest;
use serde::Deserialize as _;

use crate::digest_memo::DigestMemo;
use crate::kernel::measure::measure_knowing;
use crate::kernel::units::{KnownUnitTokens, estimator_id, unit_tokens};
use crate::kernel::{Protection, RangesConfig, compressible_ranges_with};
use crate::layout_head_window::{default_head_tokens, with_first_head_measured};

/// Stage name.
pub const NAME: &str = RangesConfig::NAME;

/// The report counter holding the request as it reached this stage, measured as the layout
/// measures what is sent (frame, envelopes, each unit's estimate, images by pixel size).
/// Nothing before this stage changes the conversation (`fold` is the first that may, and
/// it needs the ranges), so this is what the client sent: the proxy reports it as the
/// turn's `raw_tokens` without reading the body a second time.
pub const CLIENT_TOKENS_COUNTER: &str = "ranges.client_tokens";

/// The session state field holding the protection the last turn built its ranges under.
pub const PROTECTION_STATE_KEY: &str = "ranges_protection";

/// The protection the session's last turn built its compressible ranges under (what the
/// tool loop's note offered the model), or `None` before a turn built any. The `compress`
/// handler checks the model's ranges with it: a small budget ([`SMALL_BUDGET`]) protects
/// fewer recent tokens and one latest read, so with the default protection a range the
/// note offered there would be refused as recent.
pub fn offered_protection(state: &SessionState) -> Option<Protection> {
    let stored = state.extra.get(PROTECTION_STATE_KEY)?;
    Protection::deserialize(stored).ok()
}

/// Keeps `protection` as the session's [`offered_protection`] (the state is left as it was
/// when it already holds it, so a steady turn writes nothing for it).
fn keep_offered_protection(state: &mut SessionState, protection: &Protection) {
    if offered_protection(state).as_ref() == Some(protection) {
        return;
    }
    if let Ok(value) = serde_json::to_value(protection) {
        state.extra.insert(PROTECTION_STATE_KEY.to_owned(), value);
    }
}

/// The [`Protection`] this stage used this turn, left in `turn.extensions` so `fold`,
/// `tool.trim`, the tool loop and the layout's refusal apply the same protection.
#[derive(Debug, Clone, PartialEq)]
pub struct UsedProtection(pub Protection);

impl UsedProtection {
    /// The protection `ranges.build` used on `turn`, or the default when it did not run.
    pub fn of(turn: &Turn) -> Protection {
        Self::in_extensions(&turn.extensions)
    }

    /// As [`UsedProtection::of`], from a turn's extensions alone (while its conversation is
    /// borrowed).
    pub fn in_extensions(extensions: &Extensions) -> Protection {
        extensions
            .get::<UsedProtection>()
            .map(|p| p.0.clone())
            .unwrap_or_default()
    }
}

/// The `ranges.build` stage.
#[derive(Debug, Clone, Default)]
pub struct RangesBuild {
    /// Its settings.
    pub config: RangesConfig,
}

#[async_trait]
impl Stage for RangesBuild {
    fn name(&self) -> &'static str {
        NAME
    }
    fn requires(&self) -> &'static [Fact] {
        &[Fact::RefsMinted]
    }
    fn provides(&self) -> &'static [Fact] {
        &[Fact::RangesBuilt]
    }
    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        let conversation = turn
            .conversation
            .as_ref()
            .ok_or(StageError::NotDecoded { stage: NAME })?;
        // A fresh session has no head recorded yet (the layout records it after `fold`):
        // build the ranges as if it had, so the head window holds from the first turn.
        let head_tokens = turn
            .options
            .head_tokens
            .unwrap_or_else(|| default_head_tokens(turn.budget.available()));
        let estimator = cx.estimator.as_ref();
        let last = turn.carry.remove::<LastEstimates>();
        let (tokens, next, estimated) = estimate_units(conversation, estimator, last);
        turn.carry.insert(next);
        // The stages after this one measure the same units again (a first turn: the whole
        // history); they take these estimates rather than read every unit's bytes again.
        let known = KnownUnitTokens::of(conversation, estimator, &tokens);
        // From the estimates just made: the frame and each message's envelope are all it
        // reads besides them, so a long history costs no pass over its bytes.
        let client = measure_knowing(conversation, estimator, Some(&known));
        turn.report.count(CLIENT_TOKENS_COUNTER, client.total());
        // The head a first turn opens with is measured from the same units (a long
        // history's first turn measured it twice).
        let first_head =
            match with_first_head_measured(&turn.state, conversation, head_tokens, || client.units)
            {
                Ok(s) => s,
                Err(e) => {
                    turn.report.warn(
                        NAME,
                        "first_head_unknown",
                        format!(
                            "{e}; the head window is not protected until the layout records it"
                        ),
                    );
                    None
                }
            };
        turn.report
            .count("ranges.first_turn_head", u64::from(first_head.is_some()));
        let state = first_head.as_ref().unwrap_or(&turn.state);
        let config = self.config_for(turn.budget);
        turn.ranges = compressible_ranges_with(conversation, state, &config, estimator, &tokens);
        keep_offered_protection(&mut turn.state, &config.protection);
        turn.extensions
            .insert(UsedProtection(config.protection.clone()));
        turn.extensions.insert(known);
        let n = turn.ranges.len() as u64;
        let tokens = turn.ranges.iter().map(|r| r.tokens).sum();
        turn.report
            .count("ranges.units_estimated", estimated as u64);
        turn.report.count("ranges.compressible", n);
        turn.report.count("ranges.compressible_tokens", tokens);
        Ok(())
    }
}

/// The token estimates of client units without referenced images, by the digest of their
/// bytes, carried from turn to turn ([`Turn::carry`]): a unit a client resends is not
/// estimated again (estimating reads every byte, looking for inline images). Valid for one
/// wire and one estimator.
#[derive(Debug)]
struct LastEstimates {
    wire: Wire,
    estimator: (&'static str, usize),
    tokens: DigestMemo<u64>,
}

/// Each unit's [`unit_tokens`], from `last` for bytes an earlier turn estimated; the memo
/// to carry on and how many units were estimated afresh. Units that reference images are
/// always estimated (their price depends on what `media.classify` found).
fn estimate_units(
    conversation: &Conversation,
    estimator: &dyn TokenEstimator,
    last: Option<LastEstimates>,
) -> (Vec<u64>, LastEstimates, usize) {
    let wire = conversation.wire;
    let which = estimator_id(estimator);
    let mut memo = last
        .filter(|l| l.wire == wire && l.estimator == which)
        .unwrap_or(LastEstimates {
            wire,
            estimator: which,
            tokens: DigestMemo::default(),
        });
    memo.tokens.begin_turn();
    let mut estimated = 0;
    let mut estimate = |u| {
        estimated += 1;
        unit_tokens(wire, u, estimator)
    };
    let tokens = conversation
        .messages
        .iter()
        .map(|u| {
            let plain = u.origin == Origin::Client
                && u.media.iter().all(|m| m.class == MediaClass::Archivable)
                && !u.raw.is_empty();
            match plain.then(|| content_digest(&u.id)).flatten() {
                Some(digest) => memo
                    .tokens
                    .get_or(digest, || Some(estimate(u)))
                    .copied()
                    .unwrap_or_default(),
                None => estimate(u),
            }
        })
        .collect();
    memo.tokens.end_turn();
    (tokens, memo, estimated)
}

/// The share of the available budget the newest tokens may protect at most: the layout's
/// default recent window. A fixed token floor larger than that would leave a small window
/// with nothing foldable between the head and the recent messages.
const RECENT_SHARE_OF_BUDGET: f64 = 0.3;

/// A budget under this many available tokens is small (a window under 80,000): there the
/// frame, the recent window and two protected read outputs take a large part of what a
/// request may reach, and every fold rewrites what it protects, so the protected tail sets
/// the price of each fold. A small budget protects one latest read (`latest_count` at
/// most 1) and at most [`SMALL_RECENT_TOKENS`] (and [`SMALL_RECENT_SHARE`] of itself) as
/// recent tokens. Measured with `cargo bench -p foldwire-benches --bench economy`: at a 60k
/// window this is part of what takes the cache-read share past 95 %.
pub const SMALL_BUDGET: u64 = 60_000;

/// The recent tokens a small budget protects at most.
pub const SMALL_RECENT_TOKENS: u64 = 4_000;

/// The share of a small budget the newest tokens may protect at most (4,050 of a 30,000
/// window's 22,500, so the token cap binds there too).
pub const SMALL_RECENT_SHARE: f64 = 0.18;

/// The share of the available budget one range holds at most, unless `max_tokens` is set:
/// fold policies free about a fifth of the budget at a time (threshold 0.8, target 0.6), so
/// a range of a tenth lets a fold take what it needs within a range or two, and the rest
/// of the history stays verbatim.
const RANGE_SHARE_OF_BUDGET: f64 = 0.1;

impl RangesBuild {
    /// The configuration for this turn: the protected recent tokens never exceed the recent
    /// share of the budget, and ranges are capped at their share of it.
    pub fn config_for(&self, budget: foldwire_core::Budget) -> RangesConfig {
        let mut config = self.config.clone();
        let small = budget.available() < SMALL_BUDGET;
        let available = budget.available() as f64;
        let share = if small {
            SMALL_RECENT_SHARE
        } else {
            RECENT_SHARE_OF_BUDGET
        };
        let mut cap = (available * share) as u64;
        if small {
            config.protection.latest_count = config.protection.latest_count.min(1);
            cap = cap.min(SMALL_RECENT_TOKENS);
        }
        if config.protection.recent_tokens > cap {
            config.protection.recent_tokens = cap.max(1);
        }
        if config.max_tokens.is_none() {
            config.max_tokens = Some(((available * RANGE_SHARE_OF_BUDGET) as u64).max(1));
        }
        config
    }
}

impl ComponentConfig for RangesConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "ranges.build";
    const DESCRIPTION: &'static str =
        "Finds the compressible ranges of the turn, leaving protected units out.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(RangesBuild { config: self })))
    }
}

foldwire_core::register_config!(RangesConfig);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use foldwire_core::CharEstimator;

    /// An Anthropic conversation of `n` user texts and a remote image, classified.
    fn conversation(wire: Wire, n: usize) -> Conversation {
        let mut messages: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"role":"user","content":"message {i} {}"}}"#,
                    "x".repeat(i)
                )
            })
            .collect();
        messages.insert(
            1,
            r#"{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}"#
                .to_owned(),
        );
        let body = format!(r#"{{"messages":[{}]}}"#, messages.join(","));
        let mut conv = foldwire_wire::request::decode(wire, body.into()).unwrap();
        for m in &mut conv.messages {
            crate::media_classify::classify_unit(wire, m).unwrap();
        }
        conv
    }

    #[test]
    fn estimates_of_resent_units_come_from_the_last_turn() {
        // Estimators live in the stage context behind an `Arc`, one allocation each.
        let estimator: Arc<dyn TokenEstimator> = Arc::new(CharEstimator);
        let estimator = estimator.as_ref();
        let fresh = |conv: &Conversation| -> Vec<u64> {
            conv.messages
                .iter()
                .map(|u| unit_tokens(conv.wire, u, estimator))
                .collect()
        };
        let first = conversation(Wire::Anthropic, 5);
        let (tokens, carried, estimated) = estimate_units(&first, estimator, None);
        assert_eq!(tokens, fresh(&first));
        assert_eq!(estimated, 6);
        // The next request resends the six units and adds three: only the new ones and the
        // one with a remote image (priced by what classify found) are estimated.
        let second = conversation(Wire::Anthropic, 8);
        let (tokens, carried, estimated) = estimate_units(&second, estimator, Some(carried));
        assert_eq!(tokens, fresh(&second));
        assert_eq!(estimated, 4);
        // Another estimator (another instance) or another wire starts over.
        let other: Arc<dyn TokenEstimator> = Arc::new(CharEstimator);
        let other = other.as_ref();
        let (_, after_other, estimated) = estimate_units(&second, other, Some(carried));
        assert_eq!(estimated, 9);
        let (_, again, estimated) = estimate_units(&second, other, Some(after_other));
        assert_eq!(estimated, 1);
        let chat = conversation(Wire::OpenAiChat, 8);
        let (_, _, estimated) = estimate_units(&chat, other, Some(again));
        assert_eq!(estimated, 9);
    }

    /// A small window protects one latest read and a smaller recent window (every fold
    /// rewrites what is protected); from an 80,000 window on the settings stand.
    #[test]
    fn small_budgets_protect_one_latest_read_and_fewer_recent_tokens() {
        let stage = RangesBuild::default();
        let at = |window| stage.config_for(foldwire_core::Budget::default().with_window(window));
        for window in [30_000, 60_000] {
            let small = at(window);
            assert_eq!(small.protection.latest_count, 1, "{window}");
            assert_eq!(
                small.protection.recent_tokens, SMALL_RECENT_TOKENS,
                "{window}"
            );
        }
        // A tiny window: the share binds before the token cap.
        assert_eq!(at(16_000).protection.recent_tokens, 2_160);
        let large = at(100_000);
        assert_eq!(large.protection.latest_count, 2);
        assert_eq!(large.protection.recent_tokens, 5_000);
    }
}
