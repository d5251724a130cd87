//! Restoring the originals of a block, byte for byte: [`restore`] from the session state
//! alone, [`restore_with_archive`] also from the archive that
//! [`archive_originals`](super::originals::archive_originals) moved them to.

use foldwire_core::{Block, BlockId, MediaArchive, Ref, SessionId, SessionState};

use super::originals::original_key;
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
    /// The original was moved to the archive; the state-only restore cannot read it.
    #[error(
        "the original of {ref} (folded by {block}) is in the session's archive under {key}; restore with the archive (restore_with_archive)"
    )]
    InArchive {
        /// The block.
        block: BlockId,
        /// The ref.
        r#ref: Ref,
        /// Its archive key.
        key: String,
    },
    /// The state given belongs to another session than the archive session asked for.
    #[error("the state given belongs to session {owner}, not {asked}")]
    WrongSession {
        /// The state's session.
        owner: String,
        /// The session asked for.
        asked: String,
    },
    /// The archive could not give the original back (unreachable, missing or corrupted).
    #[error("the original of {ref} (folded by {block}) could not be read from the archive: {why}")]
    Archive {
        /// The block.
        block: BlockId,
        /// The ref.
        r#ref: Ref,
        /// What went wrong.
        why: String,
    },
}

/// Returns the original units of a block exactly as they were received: its own (direct)
/// units, or with `full` every unit it covers through consumed blocks too.
///
/// Reads only `state.originals`: an original already moved to the archive is
/// [`RestoreError::InArchive`] (use [`restore_with_archive`]); a missing one is an error,
/// never a silent gap.
pub fn restore(state: &SessionState, block: BlockId, full: bool) -> Result<Restored, RestoreError> {
    let b = find(state, block)?;
    let refs = if full { &b.effective } else { &b.direct };
    let mut units = Vec::with_capacity(refs.len());
    for r in refs {
        let raw = match state.originals.get(r) {
            Some(raw) => raw.as_str().to_owned(),
            None => return Err(missing(state, block, *r)),
        };
        units.push(RestoredUnit { r#ref: *r, raw });
    }
    Ok(finish(b, units))
}

/// Like [`restore`], but an original that is no longer in the state is read from the
/// session's archive (by the key recorded when it was archived) and checked against that
/// content key, so the bytes returned are exactly the ones folded.
pub async fn restore_with_archive(
    state: &SessionState,
    archive: &dyn MediaArchive,
    session: &SessionId,
    block: BlockId,
    full: bool,
) -> Result<Restored, RestoreError> {
    if let Some(owner) = &state.session
        && owner != session
    {
        return Err(RestoreError::WrongSession {
            owner: owner.to_string(),
            asked: session.to_string(),
        });
    }
    let b = find(state, block)?;
    let refs = if full { &b.effective } else { &b.direct };
    let mut units = Vec::with_capacity(refs.len());
    for r in refs {
        if let Some(raw) = state.originals.get(r) {
            units.push(RestoredUnit {
                r#ref: *r,
                raw: raw.as_str().to_owned(),
            });
            continue;
        }
        let Some(key) = original_key(state, *r) else {
            return Err(RestoreError::MissingOriginal { block, r#ref: *r });
        };
        let fail = |why: String| RestoreError::Archive {
            block,
            r#ref: *r,
            why,
        };
        let bytes = foldwire_archive::index::read_content(archive, state, session, key)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let actual = foldwire_archive::keys::sha256_hex(&bytes);
        if actual != key {
            return Err(fail(format!(
                "stored bytes hash to {actual}, not to their key {key}"
            )));
        }
        let raw = String::from_utf8(bytes.to_vec())
            .map_err(|_| fail(format!("stored original {key} is not UTF-8")))?;
        units.push(RestoredUnit { r#ref: *r, raw });
    }
    Ok(finish(b, units))
}

fn find(state: &SessionState, block: BlockId) -> Result<&Block, RestoreError> {
    state
        .blocks
        .iter()
        .find(|b| b.id == block)
        .ok_or(RestoreError::UnknownBlock(block))
}

fn missing(state: &SessionState, block: BlockId, r: Ref) -> RestoreError {
    match original_key(state, r) {
        Some(key) => RestoreError::InArchive {
            block,
            r#ref: r,
            key: key.to_owned(),
        },
        None => RestoreError::MissingOriginal { block, r#ref: r },
    }
}

fn finish(b: &Block, mut units: Vec<RestoredUnit>) -> Restored {
    units.sort_by_key(|u| u.r#ref);
    Restored {
        block: b.id,
        tier: b.tier,
        units,
        consumed: b.consumed.clone(),
    }
}
