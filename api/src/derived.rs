//! The per-unit lists of a block that follow from the session's tables, and how the stored
//! state leaves them out.
//!
//! A block's `effective` refs are its `direct` ones unless it consumed other blocks, its
//! `message_ids` are the refs table's fingerprints of its `effective` refs, and its
//! `archive_keys` the archive index's keys of its `direct` refs' originals. A first turn
//! folds thousands of units, so these lists (the keys above all, 64 digits each) are a
//! fifth of its state entry while saying nothing the refs table and the index do not. The
//! stored state writes such a list empty and names it under [`DERIVED`] in the block; a
//! load makes it again from the same tables with the same functions the stages use. A list
//! is left out only when it is exactly what the functions make, so a load gives back the
//! state that was saved. [`SessionState`]'s `Serialize` and `Deserialize` are here for that
//! reason: they are the derived ones with this step around them.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::block::Block;
use crate::by_ref::ByRef;
use crate::ids::Ref;
use crate::message::MessageId;
use crate::shared::Shared;
use crate::state::{ArchivedItem, RefEntry, SessionState};

/// The block field naming the lists the stored state left out.
pub const DERIVED: &str = "derived";

const EFFECTIVE: &str = "effective";
const MESSAGE_IDS: &str = "message_ids";
const ARCHIVE_KEYS: &str = "archive_keys";

/// The fingerprint each ref of the refs table was minted for.
pub fn fingerprints(refs: &[RefEntry]) -> ByRef<&MessageId> {
    refs.iter().map(|e| (e.r#ref, &e.message)).collect()
}

/// A block's `message_ids`: the fingerprints of its `effective` refs, in their order
/// (refs the table does not hold are passed over).
pub fn message_ids_of<'a>(
    effective: impl IntoIterator<Item = &'a Ref>,
    fingerprints: &ByRef<&MessageId>,
) -> Vec<MessageId> {
    collect_sized(message_ids_in(effective, fingerprints).cloned())
}

/// Collects into a vector sized for the iterator's upper bound: the lists are filtered
/// lookups of thousands of refs on a first turn, and a filtered iterator's lower bound is 0.
fn collect_sized<T>(items: impl Iterator<Item = T>) -> Vec<T> {
    let (lower, upper) = items.size_hint();
    let mut list = Vec::with_capacity(upper.unwrap_or(lower));
    list.extend(items);
    list
}

/// [`message_ids_of`], borrowed.
fn message_ids_in<'a, 'm>(
    effective: impl IntoIterator<Item = &'a Ref>,
    fingerprints: &ByRef<&'m MessageId>,
) -> impl Iterator<Item = &'m MessageId> {
    effective
        .into_iter()
        .filter_map(|r| fingerprints.get(r).copied())
}

/// The key of each ref's archived original; of several records of one ref the newest (the
/// last in the index) wins.
pub fn original_keys(archive: &[ArchivedItem]) -> ByRef<&str> {
    archive
        .iter()
        .filter(|item| item.original)
        .filter_map(|item| item.r#ref.map(|r| (r, item.key.as_str())))
        .collect()
}

/// A block's `archive_keys`: the keys of its `direct` refs' archived originals, in the
/// order of `direct` (refs whose original is not archived are passed over).
pub fn archive_keys_of<'a>(
    direct: impl IntoIterator<Item = &'a Ref>,
    keys: &ByRef<&str>,
) -> Vec<String> {
    collect_sized(archive_keys_in(direct, keys).map(str::to_owned))
}

/// True when `current` is the list [`archive_keys_of`] makes, found without making it (a
/// block's keys are checked after every batch of originals is recorded, most of them
/// unchanged).
pub fn archive_keys_are<'a>(
    direct: impl IntoIterator<Item = &'a Ref>,
    keys: &ByRef<&str>,
    current: &[String],
) -> bool {
    archive_keys_in(direct, keys).eq(current.iter().map(String::as_str))
}

/// [`archive_keys_of`], borrowed.
fn archive_keys_in<'a, 'k>(
    direct: impl IntoIterator<Item = &'a Ref>,
    keys: &ByRef<&'k str>,
) -> impl Iterator<Item = &'k str> {
    direct.into_iter().filter_map(|r| keys.get(r).copied())
}

/// The blocks as the stored state writes them: each non-empty list that follows from the
/// tables emptied and named under [`DERIVED`]; `None` when no block has one (the state is
/// written as it is).
pub(crate) fn stored_blocks(state: &SessionState) -> Option<Shared<Vec<Block>>> {
    if state.blocks.iter().all(|b| b.direct.is_empty()) {
        return None;
    }
    let fingerprints = fingerprints(&state.refs);
    let keys = original_keys(&state.archive);
    let mut any = false;
    let blocks = state
        .blocks
        .iter()
        .map(|block| {
            let mut derived = Vec::new();
            let mut stored = block.clone();
            if !block.effective.is_empty() && *block.effective == *block.direct {
                derived.push(EFFECTIVE);
                stored.effective = Shared::default();
            }
            // Compared as they are made, without making them.
            if !block.message_ids.is_empty()
                && block
                    .message_ids
                    .iter()
                    .eq(message_ids_in(block.effective.iter(), &fingerprints))
            {
                derived.push(MESSAGE_IDS);
                stored.message_ids = Shared::default();
            }
            if !block.archive_keys.is_empty()
                && block
                    .archive_keys
                    .iter()
                    .map(String::as_str)
                    .eq(archive_keys_in(block.direct.iter(), &keys))
            {
                derived.push(ARCHIVE_KEYS);
                stored.archive_keys = Shared::default();
            }
            if !derived.is_empty() {
                any = true;
                stored.extra.insert(DERIVED.into(), derived.into());
            }
            stored
        })
        .collect();
    any.then_some(blocks)
}

/// Makes again the lists a stored state left out (see [`stored_blocks`]). Names this build
/// does not know stay where they are.
pub(crate) fn restore_derived(state: &mut SessionState) {
    if !state.blocks.iter().any(|b| b.extra.contains_key(DERIVED)) {
        return;
    }
    let mut blocks = std::mem::take(&mut state.blocks);
    let fingerprints = fingerprints(&state.refs);
    let keys = original_keys(&state.archive);
    for block in blocks.iter_mut() {
        // Only a list of names is this build's to read; anything else stays as it is.
        if !matches!(block.extra.get(DERIVED), Some(serde_json::Value::Array(_))) {
            continue;
        }
        let Some(serde_json::Value::Array(names)) = block.extra.remove(DERIVED) else {
            continue;
        };
        let mut unknown = Vec::new();
        // `effective` first: `message_ids` follow from it.
        if names.iter().any(|n| n == EFFECTIVE) {
            block.effective = block.direct.clone();
        }
        for name in names {
            match name.as_str() {
                Some(EFFECTIVE) => {}
                Some(MESSAGE_IDS) => {
                    block.message_ids =
                        message_ids_of(block.effective.iter(), &fingerprints).into();
                }
                Some(ARCHIVE_KEYS) => {
                    block.archive_keys = archive_keys_of(block.direct.iter(), &keys).into();
                }
                _ => unknown.push(name),
            }
        }
        if !unknown.is_empty() {
            block.extra.insert(DERIVED.into(), unknown.into());
        }
    }
    state.blocks = blocks;
}

/// `state` as JSON with every list whole, as it is held in memory: the refs table and the
/// archive index one object per row, and each block's lists written out. The stored form
/// packs the tables and leaves out what follows from them; a reader outside foldwire (the
/// admin API) should not have to make them again. It reads back as the same state.
///
/// # Errors
/// What serializing the state says (a map key that is not a string, say).
pub fn whole_json(state: &SessionState) -> serde_json::Result<serde_json::Value> {
    let mut value = serde_json::to_value(state)?;
    if let serde_json::Value::Object(fields) = &mut value {
        fields.insert("refs".to_owned(), serde_json::to_value(&*state.refs)?);
        fields.insert("blocks".to_owned(), serde_json::to_value(&*state.blocks)?);
        fields.insert("archive".to_owned(), serde_json::to_value(&*state.archive)?);
    }
    Ok(value)
}

// The stored form: what the derive writes, with the block lists that follow from the
// tables left out (`crate::derived`); a load makes them again before anything sees them.
impl Serialize for SessionState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match stored_blocks(self) {
            Some(blocks) => SessionState::serialize(
                &SessionState {
                    blocks,
                    ..self.clone()
                },
                serializer,
            ),
            None => SessionState::serialize(self, serializer),
        }
    }
}

impl<'de> Deserialize<'de> for SessionState {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut state = SessionState::deserialize(deserializer)?;
        restore_derived(&mut state);
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BlockId;

    /// A state of `n` refs, one block folding the first `folded` of them with every
    /// original archived, as a first turn leaves it.
    fn folded_state(n: u32, folded: u32) -> SessionState {
        let mut state = SessionState::default();
        for i in 1..=n {
            state.mint_ref(MessageId(format!("fp{i}")));
        }
        let direct: Vec<Ref> = (1..=folded).map(Ref).collect();
        state.archive = direct
            .iter()
            .map(|r| ArchivedItem {
                r#ref: Some(*r),
                key: format!("{:064}", r.0),
                original: true,
                ..ArchivedItem::default()
            })
            .collect();
        let fp = fingerprints(&state.refs);
        let keys = original_keys(&state.archive);
        let block = Block {
            id: BlockId(1),
            summary: "s".into(),
            span: (Ref(1), Ref(folded)),
            message_ids: message_ids_of(&direct, &fp).into(),
            archive_keys: archive_keys_of(&direct, &keys).into(),
            effective: direct.clone().into(),
            direct: direct.into(),
            ..Block::default()
        };
        state.blocks = vec![block].into();
        state
    }

    /// The borrowed comparison answers what comparing with a list made afresh answers: the
    /// same list, one key fewer or more, one key different, and refs with no key.
    #[test]
    fn keys_are_compared_as_the_made_list_would_be() {
        let state = folded_state(30, 20);
        let keys = original_keys(&state.archive);
        let direct: Vec<Ref> = (1..=25).map(Ref).collect();
        let made = archive_keys_of(&direct, &keys);
        assert_eq!(made.len(), 20);
        let mut other = made.clone();
        other[7] = format!("{:064}", 999);
        for current in [
            made.clone(),
            made[..19].to_vec(),
            [made.clone(), vec![made[0].clone()]].concat(),
            other,
            Vec::new(),
        ] {
            assert_eq!(
                archive_keys_are(&direct, &keys, &current),
                current == made,
                "{} keys",
                current.len()
            );
        }
        assert!(archive_keys_are(&[Ref(26), Ref(27)], &keys, &[]));
    }

    #[test]
    fn lists_that_follow_from_the_tables_are_left_out_and_made_again() {
        let state = folded_state(300, 200);
        let json = serde_json::to_vec(&state).unwrap();
        let stored: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let block = &stored["blocks"][0];
        assert_eq!(
            block[DERIVED],
            serde_json::json!(["effective", "message_ids", "archive_keys"])
        );
        for list in ["effective", "message_ids", "archive_keys"] {
            assert_eq!(block[list], serde_json::json!([]), "{list}");
        }
        assert_eq!(block["direct"].as_array().map(Vec::len), Some(200));
        let back: SessionState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, state);
        assert!(back.blocks[0].extra.is_empty());
        // Less than half of what the whole lists take.
        let whole = serde_json::to_vec(&*state.blocks).unwrap();
        let kept = serde_json::to_vec(&stored["blocks"]).unwrap();
        assert!(
            kept.len() * 2 < whole.len(),
            "{} vs {}",
            kept.len(),
            whole.len()
        );
    }

    #[test]
    fn the_whole_json_has_every_row_and_list_and_reads_back() {
        let state = folded_state(300, 200);
        let whole = whole_json(&state).unwrap();
        assert_eq!(whole["refs"].as_array().map(Vec::len), Some(300));
        assert_eq!(whole["refs"][1]["message"], "fp2");
        assert_eq!(whole["archive"][0]["key"], format!("{:064}", 1));
        let block = &whole["blocks"][0];
        assert!(block.get(DERIVED).is_none(), "{block}");
        for list in ["effective", "message_ids", "archive_keys"] {
            assert_eq!(block[list].as_array().map(Vec::len), Some(200), "{list}");
        }
        assert_eq!(whole["turns"], serde_json::json!(state.turns));
        let back: SessionState = serde_json::from_value(whole).unwrap();
        assert_eq!(back, state);
    }

    #[test]
    fn lists_that_differ_from_the_tables_are_written_whole() {
        let mut state = folded_state(50, 20);
        let block = &mut state.blocks[0];
        // A block that consumed another covers more than its own refs; one original was
        // archived again under another key after the block recorded it.
        block.effective = (1..=30).map(Ref).collect();
        block.message_ids = (1..=30).map(|i| MessageId(format!("fp{i}"))).collect();
        state.archive.push(ArchivedItem {
            r#ref: Some(Ref(3)),
            key: "newer".into(),
            original: true,
            ..ArchivedItem::default()
        });
        let stored = serde_json::to_value(&state).unwrap();
        let block = &stored["blocks"][0];
        // `message_ids` still follow from `effective` and the refs table.
        assert_eq!(block[DERIVED], serde_json::json!(["message_ids"]));
        assert_eq!(block["effective"].as_array().map(Vec::len), Some(30));
        assert_eq!(block["archive_keys"].as_array().map(Vec::len), Some(20));
        let back: SessionState = serde_json::from_value(stored).unwrap();
        assert_eq!(back, state);
    }

    #[test]
    fn names_of_newer_builds_are_kept() {
        let state = folded_state(10, 5);
        let mut stored = serde_json::to_value(&state).unwrap();
        stored["blocks"][0][DERIVED] = serde_json::json!(["archive_keys", "later"]);
        stored["blocks"][0]["archive_keys"] = serde_json::json!([]);
        let back: SessionState = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(back.blocks[0].archive_keys, state.blocks[0].archive_keys);
        assert_eq!(back.blocks[0].extra[DERIVED], serde_json::json!(["later"]));
        // A field of that name this build cannot read is kept as it came.
        stored["blocks"][0][DERIVED] = serde_json::json!({"by": "a newer build"});
        let back: SessionState = serde_json::from_value(stored).unwrap();
        assert_eq!(
            back.blocks[0].extra[DERIVED],
            serde_json::json!({"by": "a newer build"})
        );
    }
}
