//! A JSON-serializable picture of a session: refs, blocks and compressible ranges.

use foldwire_core::{
    BlockId, Conversation, MessageKind, RangeInfo, Ref, Role, SessionState, TokenEstimator,
};
use serde::{Deserialize, Serialize};

use super::ranges::{RangesConfig, compressible_ranges};
use super::units::{coverage, preview};

/// One ref of the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefView {
    /// The ref.
    pub r#ref: Ref,
    /// The message fingerprint it names.
    pub message: String,
    /// Index of its wire message in the conversation, when the client still sends it.
    pub wire_index: Option<usize>,
    /// The active block covering it, if any.
    pub block: Option<BlockId>,
    /// Its role, when present.
    pub role: Option<Role>,
    /// Its kind, when present.
    pub kind: Option<MessageKind>,
    /// A short preview of its text.
    pub preview: Option<String>,
}

/// One block of the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockView {
    /// The block.
    pub id: BlockId,
    /// Its tier.
    pub tier: u8,
    /// Active, or consumed by a higher tier.
    pub active: bool,
    /// First and last ref it covers.
    pub span: (Ref, Ref),
    /// Its topic.
    pub topic: Option<String>,
    /// Units it folded itself.
    pub direct: usize,
    /// Units it covers in all.
    pub effective: usize,
    /// Blocks it consumed.
    pub consumed: Vec<BlockId>,
    /// Who wrote the summary.
    pub author: Option<String>,
    /// Whether the client still sends a message it covers (or its summary).
    pub in_view: bool,
    /// Turns it has survived active and in view.
    pub survived: u64,
    /// Young, or old once it survived the fold stage's threshold.
    pub generation: foldwire_core::Generation,
}

/// What `foldwire inspect` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inspection {
    /// Every ref ever minted, in order.
    pub refs: Vec<RefView>,
    /// Every block, in creation order.
    pub blocks: Vec<BlockView>,
    /// The current compressible ranges.
    pub ranges: Vec<RangeInfo>,
}

/// Describes a session against a conversation whose refs are minted.
pub fn inspect(
    state: &SessionState,
    conversation: &Conversation,
    config: &RangesConfig,
    estimator: &dyn TokenEstimator,
) -> Inspection {
    let covered = coverage(state);
    // Wire message index = order of first appearance of each entry among the units.
    let mut wire_index_of_entry = std::collections::HashMap::new();
    let mut by_ref = std::collections::HashMap::new();
    for u in &conversation.messages {
        let next = wire_index_of_entry.len();
        let w = *wire_index_of_entry.entry(u.entry).or_insert(next);
        if let Some(r) = u.r#ref {
            by_ref.insert(r, (w, u));
        }
    }
    let refs = state
        .refs
        .iter()
        .map(|e| {
            let seen = by_ref.get(&e.r#ref);
            RefView {
                r#ref: e.r#ref,
                message: e.message.0.clone(),
                wire_index: seen.map(|(w, _)| *w),
                block: covered.get(&e.r#ref).copied(),
                role: seen.map(|(_, u)| u.role),
                kind: seen.map(|(_, u)| u.kind),
                preview: seen.map(|(_, u)| preview(&u.text, 80)),
            }
        })
        .collect();
    let blocks = state
        .blocks
        .iter()
        .map(|b| BlockView {
            id: b.id,
            tier: b.tier,
            active: b.active,
            span: b.span,
            topic: b.topic.clone(),
            direct: b.direct.len(),
            effective: b.effective.len(),
            consumed: b.consumed.clone(),
            author: b.author.clone(),
            in_view: b.in_view,
            survived: b.survived,
            generation: b.generation,
        })
        .collect();
    Inspection {
        refs,
        blocks,
        ranges: compressible_ranges(conversation, state, config, estimator),
    }
}
