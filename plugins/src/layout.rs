//! Layout strategies for the `layout.head_window` stage.
//!
//! - `layout.store_order_fill` (default): after a topic reset, while the new head is still
//!   filling, units go out in store order (the history before the reset, then the new head),
//!   so the newest message is the last one sent and every turn only appends. Once a unit no
//!   longer fits, the head goes first, then the history, then the rest. With
//!   `move_head = "with_rewrite"` (the default) that move waits for a turn whose request is
//!   rewritten from near its start anyway (a fold of the old head or of early history): it
//!   moves when the unchanged prefix it would throw away is no larger than the head itself,
//!   which is what keeping the head behind the history would cost on every later fold. With
//!   `move_head = "on_fill"` it moves at the turn the head fills.
//! - `layout.head_first`: the head always goes first. With `fill = "seal_at_reset"` (the
//!   default) a reset head holds the transition and what the request carrying it already
//!   had after it, fixed at that request: moving the head to the front rewrites the request
//!   once, at the reset, and later messages append after the history. With `fill = "fill"`
//!   the head keeps filling up to its window at the front, which rewrites everything behind
//!   it on every message until it is full.
//!
//! Without a reset both send store order: the head is the opening of the conversation.

use std::sync::Arc;

use foldwire_core::strategy::head_first_order;
use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Layout, LayoutPlan,
    LayoutRequest, Refusal,
};
use serde::{Deserialize, Serialize};

/// Registered name of [`HeadFirst`].
pub const HEAD_FIRST: &str = HeadFirstConfig::NAME;
/// Registered name of [`StoreOrderFill`].
pub const STORE_ORDER_FILL: &str = StoreOrderFillConfig::NAME;

/// The head always first.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadFirst {
    config: HeadFirstConfig,
}

impl HeadFirst {
    /// A strategy with this config.
    pub fn new(config: HeadFirstConfig) -> Self {
        HeadFirst { config }
    }
}

/// How a reset head grows under `layout.head_first`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadFill {
    /// Fixed at the request that first carries the transition.
    #[default]
    SealAtReset,
    /// Grows at the front until a unit no longer fits.
    Fill,
}

/// Params of `layout.head_first`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeadFirstConfig {
    /// How a reset head grows.
    pub fill: HeadFill,
}

impl Layout for HeadFirst {
    fn name(&self) -> &'static str {
        HEAD_FIRST
    }

    fn arrange(&self, request: &LayoutRequest<'_>) -> Result<LayoutPlan, Refusal> {
        let n = request.messages.len();
        let order = if request.head.after_reset && request.head.start < request.head.end {
            head_first_order(n, request.head.start..request.head.end)
        } else {
            (0..n).collect()
        };
        Ok(LayoutPlan::new(order, request.state.clone())
            .with_seal_head(request.head.after_reset && self.config.fill == HeadFill::SealAtReset))
    }
}

/// When a full reset head moves to the front.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveHead {
    /// At the first turn whose request is rewritten from before the head's size anyway.
    #[default]
    WithRewrite,
    /// At the turn the head fills.
    OnFill,
}

/// Params of `layout.store_order_fill`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreOrderFillConfig {
    /// When a full head moves to the front.
    pub move_head: MoveHead,
}

/// Store order while a reset head fills, head first once it is full.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreOrderFill {
    config: StoreOrderFillConfig,
}

impl StoreOrderFill {
    /// A strategy with this config.
    pub fn new(config: StoreOrderFillConfig) -> Self {
        StoreOrderFill { config }
    }
}

/// What `layout.store_order_fill` remembers: the reset generation whose head already moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
struct FillState {
    moved: Option<u64>,
}

impl Layout for StoreOrderFill {
    fn name(&self) -> &'static str {
        STORE_ORDER_FILL
    }

    fn arrange(&self, request: &LayoutRequest<'_>) -> Result<LayoutPlan, Refusal> {
        let n = request.messages.len();
        let head = request.head;
        let mut state: FillState =
            serde_json::from_value(request.state.clone()).unwrap_or_default();
        let store_order = |state: FillState| {
            LayoutPlan::new(
                (0..n).collect(),
                serde_json::to_value(state).unwrap_or_default(),
            )
        };
        if !head.after_reset || head.start >= head.end || head.start == 0 {
            return Ok(store_order(state));
        }
        let moved = state.moved == Some(head.generation);
        if !moved {
            if head.filling {
                return Ok(store_order(state));
            }
            let head_tokens: u64 = request
                .tokens
                .get(head.start..head.end)
                .map_or(0, |t| t.iter().sum());
            let move_now = match self.config.move_head {
                MoveHead::OnFill => true,
                MoveHead::WithRewrite => request.unchanged_prefix_tokens <= head_tokens,
            };
            if !move_now {
                return Ok(store_order(state));
            }
            state.moved = Some(head.generation);
        }
        Ok(LayoutPlan::new(
            head_first_order(n, head.start..head.end),
            serde_json::to_value(state).unwrap_or_default(),
        ))
    }
}

impl ComponentConfig for HeadFirstConfig {
    const KIND: ComponentKind = ComponentKind::Layout;
    const NAME: &'static str = "layout.head_first";
    const DESCRIPTION: &'static str = "Sends a reset's head window first, as soon as it starts.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Layout(Arc::new(HeadFirst::new(self))))
    }
}

impl ComponentConfig for StoreOrderFillConfig {
    const KIND: ComponentKind = ComponentKind::Layout;
    const NAME: &'static str = "layout.store_order_fill";
    const DESCRIPTION: &'static str =
        "Keeps store order while a reset head fills, then sends the head first.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Layout(Arc::new(StoreOrderFill::new(self))))
    }
}

foldwire_core::register_config!(HeadFirstConfig);
foldwire_core::register_config!(StoreOrderFillConfig);
