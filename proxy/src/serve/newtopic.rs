//! Topic resets on a running server: `POST /admin/sessions/{id}/reset` and, when
//! `newtopic_command` is on, a user message `/newtopic TEXT` typed in any client.
//!
//! A reset starts a new head at a transition message on the session's next turn
//! ([`layout_head_window::reset`]); the old head becomes ordinary history that can fold and
//! be restored. The command's message itself is forwarded unchanged (nothing the user typed
//! is dropped); the transition goes in just before it.

use bytes::Bytes;
use foldwire_core::{Engine, Role, SessionId, Wire};
use foldwire_stages::layout_head_window;
use serde_json::Value;

use super::AppState;

/// The command a user types.
pub const COMMAND: &str = "/newtopic";

/// The transition text when the command gives none.
pub const DEFAULT_TRANSITION: &str = "The user started a new topic.";

/// Key in `SessionState::extra` of the fingerprint of the last `/newtopic` message acted on,
/// so a retried request does not reset twice.
const APPLIED: &str = "newtopic_applied";

/// Why a reset was not made.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// The transition text is empty.
    #[error("{0}")]
    Empty(#[from] layout_head_window::LayoutStateError),
    /// The session's state refused it (a head state that is not the layout's) or the
    /// engine could not apply it.
    #[error("{0}")]
    Failed(String),
}

/// Resets a session's topic: a new head starts at `transition` on its next turn. `marker`
/// is the fingerprint of the `/newtopic` message that asked for it; a reset already made for
/// that message is not made again. Returns the reset generation in force.
///
/// # Errors
/// An empty transition, a head state that is not the layout's, or an engine failure.
pub async fn reset(
    engine: &Engine,
    session: &SessionId,
    transition: &str,
    marker: Option<String>,
) -> Result<u64, ResetError> {
    if transition.trim().is_empty() {
        return Err(layout_head_window::LayoutStateError::EmptyTransition.into());
    }
    let transition = transition.to_owned();
    let outcome = engine
        .update(session, move |state: &mut foldwire_core::SessionState| {
            if let Some(m) = &marker
                && state.extra.get(APPLIED).and_then(Value::as_str) == Some(m.as_str())
            {
                // Applied already (the client resent the command): the same generation.
                return Ok(layout_head_window::HeadState::load(state).map_or(0, |h| h.generation));
            }
            let generation =
                layout_head_window::reset(state, &transition).map_err(|e| e.to_string())?;
            if let Some(m) = &marker {
                state
                    .extra
                    .insert(APPLIED.to_owned(), Value::String(m.clone()));
            }
            Ok(generation)
        })
        .await
        .map_err(|e| ResetError::Failed(e.to_string()))?;
    outcome.map_err(ResetError::Failed)
}

/// The `/newtopic` command in a request's newest message, if the user typed one: the
/// fingerprint of the unit that holds it and the transition text.
pub fn command(wire: Wire, body: &Bytes) -> Option<(String, String)> {
    // Most requests carry no command: skip the decode for them.
    if !body.windows(COMMAND.len()).any(|w| w == COMMAND.as_bytes()) {
        return None;
    }
    let conversation = foldwire_wire::request::decode(wire, body.clone()).ok()?;
    let newest = conversation.messages.last()?.entry;
    if conversation.entries.get(newest)?.role != Role::User {
        return None;
    }
    conversation
        .messages
        .iter()
        .filter(|u| u.entry == newest && u.role == Role::User)
        .find_map(|u| {
            let rest = u.text.as_str().trim_start().strip_prefix(COMMAND)?;
            // `/newtopics` is not the command.
            if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
                return None;
            }
            let text = match rest.trim() {
                "" => DEFAULT_TRANSITION,
                t => t,
            };
            Some((u.id.0.clone(), text.to_owned()))
        })
}

/// Applies a `/newtopic` command typed in this request, when the server allows it
/// (`newtopic_command`). A failure is logged and the request goes on as it is.
pub async fn apply_command(app: &AppState, session: &SessionId, wire: Wire, body: &Bytes) {
    if !app.config.newtopic_command {
        return;
    }
    let Some((marker, text)) = command(wire, body) else {
        return;
    };
    if let Err(e) = reset(&app.engine, session, &text, Some(marker)).await {
        tracing::warn!(session = %session, error = %e, "The /newtopic command could not reset the session.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(last: &str) -> Bytes {
        Bytes::from(
            json!({"model": "m", "max_tokens": 8, "messages": [
                {"role": "user", "content": "/newtopic old"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": last},
            ]})
            .to_string(),
        )
    }

    #[test]
    fn only_the_newest_user_message_is_read_as_the_command() {
        let (_, text) = command(Wire::Anthropic, &body("/newtopic  Billing bug ")).unwrap();
        assert_eq!(text, "Billing bug");
        let (_, text) = command(Wire::Anthropic, &body("/newtopic")).unwrap();
        assert_eq!(text, DEFAULT_TRANSITION);
        assert!(command(Wire::Anthropic, &body("/newtopics x")).is_none());
        assert!(command(Wire::Anthropic, &body("please /newtopic x")).is_none());
        // The command in an older message is history, not a new command.
        assert!(command(Wire::Anthropic, &body("go on")).is_none());
    }
}
