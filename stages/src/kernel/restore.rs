//! Restoring the originals of a block, byte for byte.

use foldwire_core::{BlockId, Ref, SessionState};
use serde::{Deserialize, Serialize};

/// One original unit as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredUnit {
    /// Its ref.
    pub r#ref: Ref,
    /// The exact bytes (JSON text) of the unit as received.
    pub raw: String,
}

/// The originals of a block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    /// The block.
    pub block: BlockId,
    /// Its tier.
    pub tier: u8,
    /// The units in ref order: the ones the block folded itself, or with `full` also every
    /// unit of the blocks it consumed.
    pub units: Vec<RestoredUnit>,
    /// Blocks it consumed (their units are included only with `full`).
    pub consumed: Vec<BlockId>,
}

/// Why a restore failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// No such block in the session.
    #[error("block {0} does not exist in this session")]
    UnknownBlock(BlockId),
    /// An original is missing from the state (and no archive holds it).
    #[error("the original of {ref} (folded by {block}) is not kept in the session state")]
    MissingOriginal {
        /// The block.
        block: BlockId,
        /// The ref.
        r#ref: Ref,
    },
}

/// Returns the original units of a block exactly as they were received: its own (direct)
/// units, or with `full` every unit it covers through consumed blocks too.
///
/// The originals live in `state.originals` until the archive holds them (the archive
/// helper's work); a missing original is an error, never a silent gap.
pub fn restore(state: &SessionState, block: BlockId, full: bool) -> Result<Restored, RestoreError> {
    let b = state
        .blocks
        .iter()
        .find(|b| b.id == block)
        .ok_or(RestoreError::UnknownBlock(block))?;
    let refs = if full { &b.effective } else { &b.direct };
    let mut units = Vec::with_capacity(refs.len());
    for r in refs {
        let raw = state
            .originals
            .get(r)
            .ok_or(RestoreError::MissingOriginal { block, r#ref: *r })?;
        units.push(RestoredUnit {
            r#ref: *r,
            raw: raw.clone(),
        });
    }
    units.sort_by_key(|u| u.r#ref);
    Ok(Restored {
        block,
        tier: b.tier,
        units,
        consumed: b.consumed.clone(),
    })
}
