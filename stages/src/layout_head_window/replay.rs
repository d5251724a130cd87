//! Replaying a session through the layout alone, turn by turn (the CLI's and benches'
//! harness for the rewrite metric).

use foldwire_core::{
    Conversation, Layout, Refusal, SessionId, SessionState, StageError, TokenEstimator, Turn,
};

use super::{HeadWindowConfig, NAME, Rewrite, lay_out, reset};

/// One event of a replayed session.
#[derive(Debug, Clone)]
pub enum ReplayEvent {
    /// A request, decoded.
    Request(Box<Conversation>),
    /// A topic reset with its transition text.
    Reset(String),
}

/// One replayed request: its size and rewrite, or the refusal.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayTurn {
    /// 1-based request number.
    pub turn: usize,
    /// Size and rewrite (zero when refused).
    pub rewrite: Rewrite,
    /// True when the request went out in an order other than store order.
    pub reordered: bool,
    /// The refusal, when the request could not fit.
    pub refusal: Option<Refusal>,
}

/// Replays a session turn by turn through the layout (no other stage runs: feed requests
/// that are already folded, or the client's raw requests), returning per-turn tokens and
/// rewrite. `state` carries over between calls, so a caller can interleave its own stages.
///
/// # Errors
/// A turn failed for a reason other than a refusal.
pub fn replay(
    events: impl IntoIterator<Item = ReplayEvent>,
    state: &mut SessionState,
    layout: &dyn Layout,
    estimator: &dyn TokenEstimator,
    config: &HeadWindowConfig,
    budget: foldwire_core::Budget,
) -> Result<Vec<ReplayTurn>, StageError> {
    let session = state
        .session
        .clone()
        .or_else(|| SessionId::new("replay").ok())
        .ok_or_else(|| StageError::Failed {
            stage: NAME,
            message: "replay needs a session id".to_owned(),
        })?;
    let mut out = Vec::new();
    for event in events {
        let conv = match event {
            ReplayEvent::Reset(text) => {
                reset(state, &text).map_err(|e| StageError::Failed {
                    stage: NAME,
                    message: e.to_string(),
                })?;
                continue;
            }
            ReplayEvent::Request(conv) => *conv,
        };
        let mut turn = Turn::new(
            session.clone(),
            conv.wire,
            conv.source.clone(),
            std::mem::take(state),
        );
        turn.budget = budget;
        turn.conversation = Some(conv);
        let result = lay_out(&mut turn, layout, estimator, config);
        *state = std::mem::take(&mut turn.state);
        let number = out.len() + 1;
        match result {
            Ok(o) => out.push(ReplayTurn {
                turn: number,
                rewrite: o.rewrite,
                reordered: o.reordered,
                refusal: None,
            }),
            Err(StageError::Refused(r)) => out.push(ReplayTurn {
                turn: number,
                rewrite: Rewrite::default(),
                reordered: false,
                refusal: Some(r),
            }),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
