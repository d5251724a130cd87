//! What may not fold this turn: the protected zone at the tail of the conversation, the
//! protected tools, and the head window at its start.

use std::collections::{HashMap, HashSet};

use foldwire_core::{
    BlockId, Message, MessageId, MessageKind, Origin, Ref, Role, SessionState, TokenEstimator, Wire,
};
use serde::{Deserialize, Serialize};

use super::units::{Links, glob_match, unit_tokens};

/// Protection settings shared by `ranges.build`, `fold` and the compress operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Protection {
    /// The newest this many foldable units are protected (0 disables).
    pub recent_messages: usize,
    /// The newest units holding this many tokens are protected (0 disables).
    pub recent_tokens: u64,
    /// The last user text message is protected.
    pub last_user: bool,
    /// Tool names (globs with `*` and `?`, case-insensitive) whose calls and results never
    /// fold. `compress` is the tool the model folds with; folding it would hide the fold.
    pub protected_tools: Vec<String>,
}

impl Default for Protection {
    fn default() -> Self {
        Protection {
            recent_messages: 5,
            recent_tokens: 5000,
            last_user: true,
            protected_tools: vec!["compress".to_owned()],
        }
    }
}

impl Protection {
    /// Positions of units in the protected zone: the last `recent_messages` visible units,
    /// the newest units up to `recent_tokens`, and the last user text message. Only units
    /// with a ref that no active block covers count as visible.
    pub fn zone(
        &self,
        wire: Wire,
        units: &[Message],
        covered: &HashMap<Ref, BlockId>,
        estimator: &dyn TokenEstimator,
    ) -> HashSet<usize> {
        let visible = |u: &Message| u.r#ref.is_some_and(|r| !covered.contains_key(&r));
        let mut zone = HashSet::new();
        let mut counted = 0usize;
        let mut tokens = 0u64;
        for (i, u) in units.iter().enumerate().rev() {
            if !visible(u) {
                continue;
            }
            let by_count = counted < self.recent_messages;
            let by_tokens = self.recent_tokens > 0 && tokens < self.recent_tokens;
            if !by_count && !by_tokens {
                break;
            }
            zone.insert(i);
            counted += 1;
            tokens += unit_tokens(wire, u, estimator);
        }
        if self.last_user {
            let last_user = units.iter().rposition(|u| {
                u.role == Role::User && u.kind == MessageKind::Text && u.origin == Origin::Client
            });
            if let Some(i) = last_user {
                zone.insert(i);
            }
        }
        zone
    }

    /// Positions of the units that form the head window the layout recorded in `state`
    /// (matched by fingerprint; see [`crate::layout_head_window::head_fingerprints`]). The
    /// head is kept verbatim by `layout.head_window`, so these units never fold, whatever
    /// the other settings say. Empty when no head is recorded (on a session's first turn
    /// `ranges.build` passes the head the layout will record, see
    /// [`crate::layout_head_window::with_first_head`]).
    pub fn head(&self, units: &[Message], state: &SessionState) -> HashSet<usize> {
        let ids: HashSet<MessageId> = crate::layout_head_window::head_fingerprints(state)
            .into_iter()
            .collect();
        if ids.is_empty() {
            return HashSet::new();
        }
        units
            .iter()
            .enumerate()
            .filter(|(_, u)| ids.contains(&u.id))
            .map(|(i, _)| i)
            .collect()
    }

    /// Positions of units that belong to a protected tool: the calls whose name matches a
    /// pattern, with everything linked to them (results, the reasoning and text of the act).
    pub fn protected_tools(&self, units: &[Message], links: &Links) -> HashSet<usize> {
        if self.protected_tools.is_empty() {
            return HashSet::new();
        }
        let roots: HashSet<usize> = units
            .iter()
            .enumerate()
            .filter(|(_, u)| {
                u.tool
                    .as_ref()
                    .and_then(|t| t.name.as_deref())
                    .is_some_and(|name| self.protected_tools.iter().any(|p| glob_match(p, name)))
            })
            .map(|(i, _)| links.root(i))
            .collect();
        (0..units.len())
            .filter(|i| roots.contains(&links.root(*i)))
            .collect()
    }
}
