//! The head window as the session state records it, read by whoever must keep it whole.
//!
//! `layout.head_window` writes the head's membership into [`SessionState::head`]; the kernel's
//! protection rules (`ranges.build`, `fold`) must never fold those units. Both sides meet
//! here, so the pure kernel does not import a stage.

use foldwire_core::{MessageId, SessionState};
use serde::Deserialize;

/// The one field of the layout's head record the kernel needs. Everything else in the record
/// (strategy state, transitions, the previous request) is the layout's own business.
#[derive(Deserialize, Default)]
#[serde(default)]
struct HeadMembers {
    /// Fingerprints of the head's units, in order.
    head_ids: Vec<MessageId>,
}

/// Fingerprints of the units in the current head window, which must stay out of every fold
/// (the head is kept verbatim and never folded). After a reset they are the transition and
/// the units after it; the old head is no longer listed, so it can fold. Empty when the state
/// holds no head yet (or is unreadable).
pub fn head_fingerprints(state: &SessionState) -> Vec<MessageId> {
    if state.head.is_null() {
        return Vec::new();
    }
    HeadMembers::deserialize(&state.head)
        .map(|h| h.head_ids)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use foldwire_core::SessionId;

    use super::*;
    use crate::layout_head_window::HeadState;

    #[test]
    fn reads_the_membership_the_layout_recorded() {
        let mut state = SessionState::new(SessionId::new("s").unwrap());
        assert!(head_fingerprints(&state).is_empty());
        let head = HeadState {
            head_ids: vec![MessageId("a".into()), MessageId("b".into())],
            sealed: true,
            generation: 3,
            ..HeadState::default()
        };
        head.store(&mut state).unwrap();
        assert_eq!(
            head_fingerprints(&state),
            [MessageId("a".into()), MessageId("b".into())]
        );
        // Something that is not a head record protects nothing rather than failing.
        state.head = serde_json::json!("not a head");
        assert!(head_fingerprints(&state).is_empty());
    }
}
