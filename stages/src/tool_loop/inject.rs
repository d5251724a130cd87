//! Stage `tools.inject`: adds the tool loop's tools, the static system note and the per-turn
//! note to the turn's own conversation, right before `wire.encode` writes it.
//!
//! It reads what this turn already knows, so nothing runs twice: the compressible ranges
//! `ranges.build` found (less those `fold` took this turn), the conversation as folded and
//! laid out (the previews and the summary runs come from it), the request's tokens as the
//! layout measured them, and the turn's window. The additions are top-level overrides and
//! synthesized units ([`foldwire_wire::request::extend`]), so the encoder splices them in
//! the same pass as everything else: every byte the client sent stays as it was, and no
//! body is parsed into a `Value`.
//!
//! A side request is left as the client made it: one whose output the client constrains
//! (structured output, a tool forced or tools forbidden, each in its wire's own fields,
//! [`foldwire_wire::dialect::Dialect::side_request`]), one that declares its tools in an
//! input item ([`foldwire_wire::request::declares_tools_in_items`]), or one whose turn sets
//! the option `skip_tool_loop`. So is a request with a client tool that already uses one of the
//! names. Counters: [`INJECTED_COUNTER`], [`ADDED_TOKENS_COUNTER`], [`SIDE_REQUEST_COUNTER`].

use std::sync::Arc;

use foldwire_core::{
    BuildCx, BuildError, CharEstimator, Component, ComponentConfig, ComponentKind, Conversation,
    Fact, Stage, StageCx, StageError, Turn, async_trait,
};
use foldwire_wire::dialect::dialect;
use foldwire_wire::request::extend::{
    ExtendError, add_tools_and_note, append_user_text, frame_value_of, without_added_units,
};
use serde::{Deserialize, Serialize};

use crate::kernel::units::KnownUnitTokens;
use crate::ranges_build::{CLIENT_TOKENS_COUNTER, UsedProtection};

use super::{
    ADDED_TOKENS_COUNTER, INJECTED_COUNTER, SYSTEM_NOTE, model_compress_config, names,
    offered_ranges, schedule_floor, summary_runs_of, tool_entries, turn_note,
};

/// Stage name.
pub const NAME: &str = ToolsInjectConfig::NAME;

/// Counted on a turn left without the tools because it is a side request.
pub const SIDE_REQUEST_COUNTER: &str = "tools.side_request";

/// The `tools.inject` stage (no params).
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolsInject;

#[async_trait]
impl Stage for ToolsInject {
    fn name(&self) -> &'static str {
        NAME
    }
    fn requires(&self) -> &'static [Fact] {
        &[Fact::RangesBuilt]
    }
    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        if turn.output.is_some() {
            return Err(StageError::Failed {
                stage: NAME,
                message: "the request is already encoded; put tools.inject before wire.encode"
                    .to_owned(),
            });
        }
        if turn.options.skip_tool_loop {
            return Ok(());
        }
        let Some(conversation) = turn.conversation.as_ref() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        // Read from the frame alone: the decode already knows where the messages are.
        let frame = frame_value_of(conversation);
        let why = frame
            .as_ref()
            .and_then(|f| dialect(turn.wire).side_request(f))
            .or_else(|| {
                foldwire_wire::request::declares_tools_in_items(conversation)
                    .then_some("tools declared in an input item")
            });
        if let Some(why) = why {
            tracing::debug!(session = %turn.session, why, "Side request: proxy tools not injected.");
            turn.report.count(SIDE_REQUEST_COUNTER, 1);
            return Ok(());
        }
        let runs = summary_runs_of(turn, cx.estimator.as_ref());
        // The layout measured the request; without a layout, the body as the client sent it
        // (as `ranges.build` measured it, else read from the bytes).
        let request_tokens = match (
            turn.report.counter("request_tokens"),
            turn.report.counter(CLIENT_TOKENS_COUNTER),
        ) {
            (0, 0) => {
                foldwire_wire::tokens::raw_tokens(turn.wire, &conversation.source, &CharEstimator)
            }
            (0, n) | (n, _) => n,
        };
        let offered = offered_ranges(
            &turn.ranges,
            conversation,
            &turn.state,
            &model_compress_config(UsedProtection::of(turn)),
            cx.estimator.as_ref(),
            turn.extensions.get::<KnownUnitTokens>(),
        );
        let note = turn_note(
            &offered,
            &runs,
            Some(conversation),
            request_tokens,
            schedule_floor(&turn.state),
            turn.budget.window,
        );
        let entries = tool_entries(turn.wire);
        let reserved = names();
        let Some(conversation) = turn.conversation.as_mut() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        match add_tools_and_note(conversation, &entries, &reserved, SYSTEM_NOTE) {
            Ok(()) => {}
            Err(e @ ExtendError::NameTaken(_)) => {
                tracing::debug!(session = %turn.session, reason = %e, "Proxy tools not injected.");
                return Ok(());
            }
            Err(ExtendError::Unreadable(why)) => {
                return Err(StageError::Failed {
                    stage: NAME,
                    message: why,
                });
            }
        }
        if let Some(note) = note.as_deref() {
            append_user_text(conversation, note);
        }
        // What the additions weigh, in the estimator's units of JSON text (bytes / 4).
        let added_bytes = entries.iter().map(|e| e.to_string().len()).sum::<usize>()
            + SYSTEM_NOTE.len()
            + note.as_ref().map_or(0, String::len)
            + 64;
        turn.report.count(INJECTED_COUNTER, 1);
        turn.report
            .count(ADDED_TOKENS_COUNTER, (added_bytes as u64).div_ceil(4));
        Ok(())
    }
}

/// The conversation as the model saw it, without what `tools.inject` added: the client's
/// messages with refs, folds and layout applied. The `compress` handler checks ranges
/// against it.
pub fn model_view(conversation: &Conversation) -> Conversation {
    without_added_units(conversation)
}

/// Parameters of `tools.inject` (none; unknown keys are refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsInjectConfig {}

impl ComponentConfig for ToolsInjectConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "tools.inject";
    const DESCRIPTION: &'static str =
        "Adds the tool loop's tools and notes to the request, right before wire.encode.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(ToolsInject)))
    }
}

foldwire_core::register_config!(ToolsInjectConfig);
