//! Blocks: folds of message ranges into summaries.

use serde::{Deserialize, Serialize};

use crate::ids::{BlockId, Ref};
use crate::message::MessageId;
use crate::shared::Shared;

pub use crate::extra::ExtraFields;

/// A fold: a summary standing in for a range of messages (tier 1) or of blocks (tiers 2–3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Block {
    /// `b1`…, never reused.
    pub id: BlockId,
    /// 1 for a range of messages; one above the highest consumed block otherwise (max 3).
    pub tier: u8,
    /// The summary rendered in place of the covered messages.
    pub summary: String,
    /// An optional topic line.
    pub topic: Option<String>,
    /// First and last ref of the span it covers.
    pub span: (Ref, Ref),
    /// Refs of the messages it covers directly.
    pub direct: Shared<Vec<Ref>>,
    /// Every ref it covers, through consumed blocks too.
    pub effective: Shared<Vec<Ref>>,
    /// The fingerprints of the covered messages, so fold finds them in later requests.
    /// (This and the other per-unit lists of a block, `direct`, `effective` and
    /// `archive_keys`, are shared: each turn ages every block in view, and its copy of the
    /// blocks then does not copy thousands of refs, ids and keys that did not change.)
    pub message_ids: Shared<Vec<MessageId>>,
    /// Blocks it consumed (deactivated by it).
    pub consumed: Vec<BlockId>,
    /// False once a higher-tier block consumed it.
    pub active: bool,
    /// Archive keys of the originals of the covered messages.
    pub archive_keys: Shared<Vec<String>>,
    /// Who wrote the summary (`summarizer.extractive`, `summarizer.model_tool`, a host).
    pub author: Option<String>,
    /// False while the client's conversation holds none of the messages it covers nor its
    /// summary (the client dropped that history); true again once they come back.
    pub in_view: bool,
    /// Turns this block has lived through active and in view (a fold batch is no turn).
    pub survived: u64,
    /// Young until `survived` reaches the fold stage's `old_after_turns`, then old: how long
    /// a summary has stood, as `foldwire inspect` shows it. Age never removes a block.
    pub generation: Generation,
    /// Fields written by newer versions.
    #[serde(flatten)]
    pub extra: ExtraFields,
}

/// How long a block has stood: see [`Block::generation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Generation {
    /// Made recently.
    #[default]
    Young,
    /// Survived the threshold's number of turns.
    Old,
}

impl Block {
    /// Active (no higher tier consumed it) and in the client's view: the blocks a turn acts
    /// on and ages.
    pub fn in_play(&self) -> bool {
        self.active && self.in_view
    }
}

impl Default for Block {
    fn default() -> Self {
        Block {
            id: BlockId(1),
            tier: 1,
            summary: String::new(),
            topic: None,
            span: (Ref(1), Ref(1)),
            direct: Shared::default(),
            effective: Shared::default(),
            message_ids: Shared::default(),
            consumed: Vec::new(),
            active: true,
            archive_keys: Shared::default(),
            author: None,
            in_view: true,
            survived: 0,
            generation: Generation::Young,
            extra: ExtraFields::new(),
        }
    }
}
