//! Blocks over turns: whether the client still sends what a block covers, and how long it
//! has stood.
//!
//! Once per turn, on the client's conversation before anything folds, [`sync_blocks`]
//! marks each active block in or out of view and ages the blocks in play. A compress batch
//! is no turn: [`apply_compression`](super::compress::apply_compression) never ages a block.
//! Nothing here removes a block: an old or out-of-view block stays in the state, and
//! restore and search still find it.

use foldhash::HashSet;

use foldwire_core::{BlockId, Conversation, Generation, Origin, Ref, SessionState};
use serde::{Deserialize, Serialize};

/// Turns a block survives before it counts as old, unless the fold stage says otherwise.
pub const DEFAULT_OLD_AFTER_TURNS: u64 = 5;

/// What one turn's sync changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSync {
    /// Active blocks none of whose messages nor summary the client sent this turn, that it
    /// still sent last turn.
    pub left_view: Vec<BlockId>,
    /// Blocks out of view last turn whose messages (or summary) are back.
    pub returned: Vec<BlockId>,
    /// Blocks that turned old this turn.
    pub turned_old: Vec<BlockId>,
}

/// Marks each active block in or out of `conversation` and ages the blocks in play.
///
/// A block is in view when some unit of the conversation carries a ref it covers (directly
/// or through a consumed block) or is its rendered summary. Consumed blocks are left as
/// they are: a higher tier stands for them. Every active block in view then survives one
/// more turn and turns [`Generation::Old`] once it has survived `old_after_turns` (0 never
/// ages a block).
pub fn sync_blocks(
    conversation: &Conversation,
    state: &mut SessionState,
    old_after_turns: u64,
) -> BlockSync {
    let refs: HashSet<Ref> = conversation
        .messages
        .iter()
        .filter_map(|u| u.r#ref)
        .collect();
    let summaries: HashSet<BlockId> = conversation
        .messages
        .iter()
        .filter_map(|u| match u.origin {
            Origin::Summary(b) => Some(b),
            _ => None,
        })
        .collect();
    let mut sync = BlockSync::default();
    for block in state.blocks.iter_mut().filter(|b| b.active) {
        let present =
            summaries.contains(&block.id) || block.effective.iter().any(|r| refs.contains(r));
        match (block.in_view, present) {
            (true, false) => sync.left_view.push(block.id),
            (false, true) => sync.returned.push(block.id),
            _ => {}
        }
        block.in_view = present;
        if !present {
            continue;
        }
        block.survived = block.survived.saturating_add(1);
        if old_after_turns > 0
            && block.survived >= old_after_turns
            && block.generation == Generation::Young
        {
            block.generation = Generation::Old;
            sync.turned_old.push(block.id);
        }
    }
    sync
}
