//! Stage `layout.head_window`: the head window (the opening messages, verbatim, never
//! folded), the recent window, topic resets, Anthropic cache markers, refusals and the
//! rewrite metric.
//!
//! The stage measures the windows over whole wire messages (a layout never splits a wire
//! message, and a head boundary between a tool call and its result is pulled back to before
//! the call); a [`Layout`] strategy from the registry (`layout.store_order_fill` by default,
//! or `layout.head_first`, both in `foldwire-plugins`) decides the order the units go out in.
//!
//! Params (all optional): `layout` (strategy name), `layout_params`, `head_tokens` (else
//! `head_fraction` of the budget, 0.05, at most 4,000), `recent_tokens` (else
//! `recent_fraction` of the budget, 0.3), `cache_markers` (true), `calibration_alpha` (0.3).
//! Per-turn overrides in `turn.options`: `layout`, `window` (replaces `turn.budget.window`),
//! `head_tokens`, `recent_tokens`.
//!
//! Sizes are measured as the request will be encoded ([`crate::kernel::measure`]): each
//! wire message's envelope, rendered summaries and the frame included, and system or
//! developer messages among the messages count as frame, never as head or history.
//!
//! Kernel integration: [`head_fingerprints`] lists the head's units; `ranges.build` and
//! `apply_compression` keep them out of every range ([`crate::kernel::Protection::head`]).

mod arrange;
pub mod cache_markers;
pub mod refusal;
mod replay;
pub mod reset;
pub mod rewrite;
pub mod windows;

use std::sync::Arc;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Fact, Layout, Resolved,
    SessionState, Stage, StageCx, StageError, StrategyUse, Turn,
};
use serde::{Deserialize, Serialize};

pub use reset::{
    DEFAULT_CALIBRATION_ALPHA, HeadState, LayoutStateError, SentUnit, Transition,
    head_fingerprints, reset, update_calibration,
};
pub use rewrite::Rewrite;

pub use arrange::{
    LayoutOutcome, check_order, lay_out, unit_key, with_first_head, with_first_head_measured,
};
pub use replay::{ReplayEvent, ReplayTurn, replay};

/// The stage's registered name.
pub const NAME: &str = HeadWindowConfig::NAME;
/// The default layout strategy.
pub const DEFAULT_LAYOUT: &str = "layout.store_order_fill";
/// The largest default head window, in tokens (the head when the budget is large).
pub const DEFAULT_HEAD_TOKENS: u64 = 4_000;
/// The default head window as a share of the budget, when that is below
/// [`DEFAULT_HEAD_TOKENS`].
///
/// Why 0.05: the head is read on every turn and sits under every fold's floor, so at small
/// windows it is paid for on every turn and shortens the time between folds (each of which
/// rewrites the recent window). In the economy bench (`cargo bench -p foldwire-benches
/// --bench economy`, one seed, growth 0.45) a head of 0.15 cost 1.25x client compaction at
/// a 30k window where 0.05 cost 1.19x; at 0.05 the head holds the opening task (about
/// 1,100 tokens at 30k, 2,250 at 60k), and from about 80,000 available tokens the
/// 4,000-token cap applies as before. A
/// fixed 4,000 tokens was most of a small window (6,000 available at an 8k window) and left
/// nothing foldable.
pub const DEFAULT_HEAD_FRACTION: f64 = 0.05;
/// The default recent window, as a share of the budget.
pub const DEFAULT_RECENT_FRACTION: f64 = 0.3;

/// The stage's params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeadWindowConfig {
    /// The layout strategy's registered name.
    pub layout: String,
    /// Params for the strategy.
    pub layout_params: serde_json::Value,
    /// The head window, in tokens (overrides `head_fraction`).
    pub head_tokens: Option<u64>,
    /// The head window as a share of the budget, capped at [`DEFAULT_HEAD_TOKENS`], when
    /// `head_tokens` is not set.
    pub head_fraction: f64,
    /// The recent window, in tokens (overrides `recent_fraction`).
    pub recent_tokens: Option<u64>,
    /// The recent window as a share of the budget, when `recent_tokens` is not set.
    pub recent_fraction: f64,
    /// Whether to place Anthropic cache markers.
    pub cache_markers: bool,
    /// Weight of a new usage sample in the calibration average.
    pub calibration_alpha: f64,
}

impl Default for HeadWindowConfig {
    fn default() -> Self {
        HeadWindowConfig {
            layout: DEFAULT_LAYOUT.to_owned(),
            layout_params: serde_json::Value::Null,
            head_tokens: None,
            head_fraction: DEFAULT_HEAD_FRACTION,
            recent_tokens: None,
            recent_fraction: DEFAULT_RECENT_FRACTION,
            cache_markers: true,
            calibration_alpha: DEFAULT_CALIBRATION_ALPHA,
        }
    }
}

impl HeadWindowConfig {
    /// Checks the values a deserializer cannot.
    ///
    /// # Errors
    /// A fraction outside 0..=1 or an empty layout name.
    pub fn validate(&self) -> Result<(), BuildError> {
        if !(0.0..=1.0).contains(&self.recent_fraction) {
            return Err(BuildError::new(
                NAME,
                format!(
                    "recent_fraction must be between 0 and 1, got {}",
                    self.recent_fraction
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.head_fraction) {
            return Err(BuildError::new(
                NAME,
                format!(
                    "head_fraction must be between 0 and 1, got {}",
                    self.head_fraction
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.calibration_alpha) {
            return Err(BuildError::new(
                NAME,
                format!(
                    "calibration_alpha must be between 0 and 1, got {}",
                    self.calibration_alpha
                ),
            ));
        }
        if self.layout.trim().is_empty() {
            return Err(BuildError::new(
                NAME,
                "layout must name a registered layout strategy",
            ));
        }
        Ok(())
    }

    /// This config with a turn's overrides applied (`layout`, `head_tokens`,
    /// `recent_tokens`; `window` is applied to the budget by the stage).
    pub fn with_options(&self, options: &foldwire_core::TurnOptions) -> Self {
        let mut out = self.clone();
        if let Some(name) = &options.layout
            && *name != out.layout
        {
            out.layout = name.clone();
            out.layout_params = serde_json::Value::Null;
        }
        if let Some(v) = options.head_tokens {
            out.head_tokens = Some(v);
        }
        if let Some(v) = options.recent_tokens {
            out.recent_tokens = Some(v);
        }
        out
    }

    /// The head window in tokens for a request with `available` tokens: `head_tokens` when
    /// set, else [`default_head_tokens`] with this config's fraction.
    pub fn head_tokens_for(&self, available: u64) -> u64 {
        self.head_tokens
            .unwrap_or_else(|| fraction_of(available, self.head_fraction).min(DEFAULT_HEAD_TOKENS))
    }
}

/// The default head window for a request with `available` tokens: [`DEFAULT_HEAD_FRACTION`]
/// of it, at most [`DEFAULT_HEAD_TOKENS`].
pub fn default_head_tokens(available: u64) -> u64 {
    fraction_of(available, DEFAULT_HEAD_FRACTION).min(DEFAULT_HEAD_TOKENS)
}

fn fraction_of(tokens: u64, fraction: f64) -> u64 {
    (tokens as f64 * fraction) as u64
}

/// The stage.
#[derive(Debug, Clone)]
pub struct HeadWindowStage {
    config: HeadWindowConfig,
    layout: Resolved<dyn Layout>,
}

impl Default for HeadWindowStage {
    fn default() -> Self {
        let config = HeadWindowConfig::default();
        HeadWindowStage {
            layout: Resolved::per_turn("layout", &config.layout, &config.layout_params),
            config,
        }
    }
}

impl HeadWindowStage {
    /// A stage with this config, built without a registry: its layout strategy is built
    /// from the turn's registry on each run.
    ///
    /// # Errors
    /// Invalid values.
    pub fn new(config: HeadWindowConfig) -> Result<Self, BuildError> {
        config.validate()?;
        Ok(HeadWindowStage {
            layout: Resolved::per_turn("layout", &config.layout, &config.layout_params),
            config,
        })
    }

    /// A stage with this config whose layout strategy is resolved now, from `cx`'s registry.
    ///
    /// # Errors
    /// Invalid values, or a layout that is not registered or refuses its params.
    pub fn build(config: HeadWindowConfig, cx: &BuildCx<'_>) -> Result<Self, BuildError> {
        config.validate()?;
        Ok(HeadWindowStage {
            layout: Resolved::build(cx, NAME, "layout", &config.layout, &config.layout_params)?,
            config,
        })
    }
}

impl ComponentConfig for HeadWindowConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "layout.head_window";
    const DESCRIPTION: &'static str = "Measures the head and recent windows, orders the units with its layout strategy and places cache markers.";

    fn build(self, cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(HeadWindowStage::build(
            self, cx,
        )?)))
    }
}

foldwire_core::register_config!(HeadWindowConfig);

#[foldwire_core::async_trait]
impl Stage for HeadWindowStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn requires(&self) -> &'static [Fact] {
        &[Fact::Decoded]
    }

    fn provides(&self) -> &'static [Fact] {
        &[Fact::LaidOut]
    }

    fn strategies(&self) -> Vec<StrategyUse> {
        vec![StrategyUse {
            param: "layout",
            kind: ComponentKind::Layout,
            name: self.config.layout.clone(),
            params: self.config.layout_params.clone(),
        }]
    }

    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        let config = self.config.with_options(&turn.options);
        // A turn option naming another layout is built for this turn; the configured one
        // was resolved with the pipeline.
        let layout = if config.layout == self.config.layout {
            self.layout.get(cx.registry.as_ref())
        } else {
            cx.registry.layout(&config.layout, &config.layout_params)
        };
        let layout = layout.map_err(|e| {
            StageError::caused(
                NAME,
                format!(
                    "cannot build layout strategy `{}` (is foldwire_plugins::link() called?)",
                    config.layout
                ),
                e,
            )
        })?;
        if !layout.blocks() {
            return lay_out(turn, layout.as_ref(), cx.estimator.as_ref(), &config).map(|_| ());
        }
        // A layout that waits (an endpoint, a script) would hold the worker other sessions
        // share: the whole layout runs on the blocking pool instead, the turn moved there
        // and back (a stand-in with the same body holds its place meanwhile).
        let stand_in = Turn::new(
            turn.session.clone(),
            turn.wire,
            turn.body.clone(),
            SessionState::new(turn.session.clone()),
        );
        let mut owned = std::mem::replace(turn, stand_in);
        let estimator = Arc::clone(&cx.estimator);
        let laid = crate::strategy_scope::StrategyScope::default()
            .off_worker(move || {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    lay_out(&mut owned, layout.as_ref(), estimator.as_ref(), &config).map(|_| ())
                }));
                (owned, result)
            })
            .await;
        match laid {
            Ok((owned, result)) => {
                *turn = owned;
                result.unwrap_or_else(|_| {
                    Err(StageError::Failed {
                        stage: NAME,
                        message: "the layout strategy panicked".into(),
                    })
                })
            }
            Err(e) => Err(StageError::caused(NAME, "the layout did not finish", e)),
        }
    }
}
