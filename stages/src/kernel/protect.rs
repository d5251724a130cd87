//! What may not fold this turn: the protected zone at the tail of the conversation, the
//! protected tools, and the head window at its start.

use foldhash::{HashSet, HashSetExt as _};

use foldwire_core::{
    Conversation, Message, MessageId, MessageKind, Origin, Pin, Role, SessionState, TokenEstimator,
    Wire,
};
use serde::{Deserialize, Serialize};

use super::units::{Coverage, Links, name_matcher, unit_tokens};

/// The tools whose latest calls stay verbatim by default: the usual read/inspect tools of
/// agent harnesses and editors (patterns are case-insensitive, so `read` also covers
/// Claude Code's `Read`), and the proxy's own `restore`.
pub const DEFAULT_LATEST_TOOLS: [&str; 6] =
    ["read", "read_file", "view", "cat", "inspect*", "restore"];

/// How many of the newest calls to the latest-protected tools stay verbatim by default.
pub const DEFAULT_LATEST_COUNT: usize = 2;

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
    /// Tool names (globs as in `protected_tools`) whose newest calls stay verbatim: the
    /// model is working from what it just read, so the latest `latest_count` calls to any
    /// of these tools keep their call and result out of every fold; older calls to the
    /// same tools fold normally (acp `protectedLatestTools`, acp §26 #76).
    ///
    /// A `restore` result at the tail is protected here, where acp-kernel lets the model
    /// fold a `decompress` result at the tail on its own (§26 #76). foldwire differs on
    /// purpose: a restore result is what the model just asked to see again, so folding it
    /// before the model has worked from it would undo the restore and invite a
    /// restore/fold loop. It folds like any other once `latest_count` newer calls to these
    /// tools follow; a host wanting acp's rule drops `restore` from this list.
    pub latest_tools: Vec<String>,
    /// How many of the newest calls to `latest_tools`, counted together, are protected
    /// (0 disables).
    pub latest_count: usize,
}

impl Default for Protection {
    fn default() -> Self {
        Protection {
            recent_messages: 5,
            recent_tokens: 5000,
            last_user: true,
            protected_tools: vec!["compress".to_owned()],
            latest_tools: DEFAULT_LATEST_TOOLS
                .iter()
                .map(|t| (*t).to_owned())
                .collect(),
            latest_count: DEFAULT_LATEST_COUNT,
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
        covered: &Coverage,
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
    /// (matched by fingerprint; see [`crate::head_record::head_fingerprints`]). The
    /// head is kept verbatim by `layout.head_window`, so these units never fold, whatever
    /// the other settings say. Empty when no head is recorded (on a session's first turn
    /// `ranges.build` passes the head the layout will record, see
    /// `layout_head_window::with_first_head`).
    pub fn head(&self, units: &[Message], state: &SessionState) -> HashSet<usize> {
        let ids: HashSet<MessageId> = crate::head_record::head_fingerprints(state)
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
    /// `protected_tools` pattern and the newest `latest_count` calls whose name matches a
    /// `latest_tools` pattern, with everything linked to them (results, the reasoning and
    /// text of the act). Range building, folding and the compress operation all exclude
    /// these, so an explicit `compress` over them leaves them out with a warning.
    pub fn protected_tools(&self, units: &[Message], links: &Links) -> HashSet<usize> {
        let mut protected = name_matcher(&self.protected_tools);
        let mut roots: HashSet<usize> = units
            .iter()
            .enumerate()
            .filter(|(_, u)| name_of(u).is_some_and(&mut protected))
            .map(|(i, _)| links.root(i))
            .collect();
        let mut latest_tool = name_matcher(&self.latest_tools);
        // The newest calls, in conversation order; a result without a name is reached
        // through its call's link group.
        let latest = units
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, u)| {
                u.kind == MessageKind::ToolCall && name_of(u).is_some_and(&mut latest_tool)
            })
            .take(self.latest_count)
            .map(|(i, _)| links.root(i));
        roots.extend(latest);
        if roots.is_empty() {
            return HashSet::new();
        }
        (0..units.len())
            .filter(|i| roots.contains(&links.root(*i)))
            .collect()
    }

    /// The tool rules in one line, for messages that name why units stayed out of a fold.
    pub fn tool_rules(&self) -> String {
        let mut rules = Vec::new();
        if !self.protected_tools.is_empty() {
            rules.push(self.protected_tools.join(", "));
        }
        if self.latest_count > 0 && !self.latest_tools.is_empty() {
            rules.push(format!(
                "the latest {} call(s) of {}",
                self.latest_count,
                self.latest_tools.join(", ")
            ));
        }
        rules.join("; ")
    }
}

/// Protects the tools a host decides on by code rather than by name patterns (acp §26 #72,
/// the peers' tool predicate): every call whose tool name `protect` accepts is pinned
/// ([`Pin::Protected`] with `why`) with everything linked to it (its results, the reasoning
/// and text of its act), so no range offers it and no fold takes it, as for
/// [`Protection::protected_tools`]. A host stage runs it before `ranges.build`. Returns the
/// number of units pinned; units already pinned keep their reason.
pub fn pin_tools(
    conversation: &mut Conversation,
    protect: impl Fn(&str) -> bool,
    why: &str,
) -> usize {
    let units = &mut conversation.messages;
    let links = Links::new(units);
    let roots: HashSet<usize> = units
        .iter()
        .enumerate()
        .filter(|(_, u)| u.kind == MessageKind::ToolCall && name_of(u).is_some_and(&protect))
        .map(|(i, _)| links.root(i))
        .collect();
    let mut pinned = 0;
    for (i, u) in units.iter_mut().enumerate() {
        if u.pin.is_none() && roots.contains(&links.root(i)) {
            u.pin = Some(Pin::Protected(why.to_owned()));
            pinned += 1;
        }
    }
    pinned
}

/// The tool name a unit carries, if any.
fn name_of(u: &Message) -> Option<&str> {
    u.tool.as_ref().and_then(|t| t.name.as_deref())
}
