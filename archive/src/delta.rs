//! What one turn changed in a [`SessionState`]: computed by comparing the state before the
//! turn with the state after it, stored as a journal entry ([`crate::journal`]) and applied
//! on load to replay the session.
//!
//! The tables a turn appends to (refs, the archive index, blocks, usage samples) are patched
//! by index, so a steady turn's delta holds the rows it added and the rows it changed, not
//! the table; maps (originals, counters, unknown fields) by key; everything else whole, and
//! only when it changed. `apply(before, diff(before, after)) == after` for every pair.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use foldwire_core::state::{ArchivedItem, RefEntry, Shared, UsageSample};
use foldwire_core::{Block, Generation, OriginalText, Ref, SessionId, SessionState};

/// Changes to one table (a `Vec`): drop `skip` rows from the front (a bounded table that
/// shifted), then set the rows listed by index, then cut or extend to `len`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VecPatch<T> {
    /// Rows removed from the front before the rest applies.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skip: usize,
    /// The table's length afterwards.
    pub len: usize,
    /// Rows that changed or were added, by index (after `skip`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<(usize, T)>,
}

/// Blocks that only aged in a turn (`survived` one more, and perhaps turned old), as runs of
/// indexes: a turn ages every block in play, and listing each whole block would make a
/// steady turn's delta grow with the session.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgePatch {
    /// Runs `[first, last]` of block indexes whose `survived` went up by one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aged: Vec<(usize, usize)>,
    /// Runs of block indexes that turned old.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turned_old: Vec<(usize, usize)>,
}

impl AgePatch {
    /// The aging from `before` to `after`, and `before` with it applied (what the rest of the
    /// block patch is computed against); `None` when no block only aged.
    fn between(before: &[Block], after: &[Block]) -> Option<(AgePatch, Vec<Block>)> {
        let mut patch = AgePatch::default();
        let mut aged = before.to_vec();
        for (i, (b, a)) in before.iter().zip(after).enumerate() {
            if a.survived != b.survived.saturating_add(1) {
                continue;
            }
            let mut grown = b.clone();
            grown.survived = a.survived;
            let old = b.generation == Generation::Young && a.generation == Generation::Old;
            if old {
                grown.generation = Generation::Old;
            }
            push_run(&mut patch.aged, i);
            if old {
                push_run(&mut patch.turned_old, i);
            }
            aged[i] = grown;
        }
        (!patch.aged.is_empty()).then_some((patch, aged))
    }

    fn apply(self, blocks: &mut [Block]) -> Result<(), DeltaError> {
        let have = blocks.len();
        let misfit = |why: String| DeltaError::Misfit {
            table: "blocks",
            have,
            why,
        };
        for &(first, last) in &self.aged {
            let run = blocks
                .get_mut(first..=last)
                .ok_or_else(|| misfit(format!("ages rows {first}..={last}")))?;
            for b in run {
                b.survived = b.survived.saturating_add(1);
            }
        }
        for &(first, last) in &self.turned_old {
            let run = blocks
                .get_mut(first..=last)
                .ok_or_else(|| misfit(format!("turns rows {first}..={last} old")))?;
            for b in run {
                b.generation = Generation::Old;
            }
        }
        Ok(())
    }
}

/// Extends the last run when `i` follows it, else starts a new one.
fn push_run(runs: &mut Vec<(usize, usize)>, i: usize) {
    match runs.last_mut() {
        Some((_, last)) if *last + 1 == i => *last = i,
        _ => runs.push((i, i)),
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Changes to one map: keys set (added or changed) and keys removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapPatch<K: Ord, V> {
    /// Keys added or changed, with their new values.
    #[serde(default = "BTreeMap::new", skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<K, V>,
    /// Keys removed.
    #[serde(default = "Vec::new", skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<K>,
}

/// Changes to a JSON value (the layout's `head` state): objects patched by key, arrays by
/// index like the tables, anything else replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ValuePatch {
    /// The new value, whole.
    Set(serde_json::Value),
    /// Keys set (each with its own patch) and removed.
    Object(MapPatch<String, ValuePatch>),
    /// Rows of an array.
    Array(VecPatch<serde_json::Value>),
}

fn diff_value(before: &serde_json::Value, after: &serde_json::Value) -> Option<ValuePatch> {
    use serde_json::Value;
    if before == after {
        return None;
    }
    Some(match (before, after) {
        (Value::Object(a), Value::Object(b)) => ValuePatch::Object(MapPatch {
            set: b
                .iter()
                .filter_map(|(k, v)| {
                    let patch = match a.get(k) {
                        Some(old) => diff_value(old, v)?,
                        None => ValuePatch::Set(v.clone()),
                    };
                    Some((k.clone(), patch))
                })
                .collect(),
            remove: a.keys().filter(|k| !b.contains_key(*k)).cloned().collect(),
        }),
        (Value::Array(a), Value::Array(b)) => match diff_vec(a, b) {
            Some(p) => ValuePatch::Array(p),
            None => return None,
        },
        _ => ValuePatch::Set(after.clone()),
    })
}

fn apply_value(value: &mut serde_json::Value, patch: ValuePatch) -> Result<(), DeltaError> {
    use serde_json::Value;
    match (value, patch) {
        (value, ValuePatch::Set(v)) => *value = v,
        (Value::Object(map), ValuePatch::Object(p)) => {
            for k in p.remove {
                map.shift_remove(&k);
            }
            for (k, child) in p.set {
                apply_value(map.entry(k).or_insert(Value::Null), child)?;
            }
        }
        (Value::Array(rows), ValuePatch::Array(p)) => apply_vec("head", rows, p)?,
        (other, _) => {
            return Err(DeltaError::Misfit {
                table: "head",
                have: 0,
                why: format!("patches a {} as an object or array", kind_of(other)),
            });
        }
    }
    Ok(())
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Everything one turn changed in a session's state. Fields left out did not change.
///
/// Unknown fields are refused: a delta written by a newer build that this build cannot
/// apply must not load as if it had applied (the entry names its format too).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateDelta {
    /// New state-format version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// New session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Option<SessionId>>,
    /// New turn count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
    /// New next ref.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_ref: Option<u32>,
    /// Refs table rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<VecPatch<RefEntry>>,
    /// New next block number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_block: Option<u32>,
    /// Blocks that only aged this turn, applied before `blocks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_ages: Option<AgePatch>,
    /// Blocks made or changed (other than by aging).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<VecPatch<Block>>,
    /// Originals kept in the state, added or removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub originals: Option<MapPatch<Ref, OriginalText>>,
    /// Archive index rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<VecPatch<ArchivedItem>>,
    /// Head-window state, patched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<ValuePatch>,
    /// Usage samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<VecPatch<UsageSample>>,
    /// New calibration factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<f64>,
    /// Counters set or removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<MapPatch<String, u64>>,
    /// Fields of newer versions, set or removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<MapPatch<String, serde_json::Value>>,
}

/// Why a delta could not be applied to the state it was read against.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    /// A table patch names rows the base state does not have.
    #[error(
        "journal delta does not fit its base: the {table} table has {have} rows, the delta {why}"
    )]
    Misfit {
        /// Which table.
        table: &'static str,
        /// Rows in the base.
        have: usize,
        /// What the delta asked for.
        why: String,
    },
}

fn diff_vec<T: Clone + PartialEq>(before: &[T], after: &[T]) -> Option<VecPatch<T>> {
    if before == after {
        return None;
    }
    // A bounded table that dropped its oldest rows: find where `after` starts in `before`.
    let skip = match (before.first(), after.first()) {
        (Some(b0), Some(a0)) if b0 != a0 => before
            .iter()
            .position(|b| b == a0)
            .filter(|&k| {
                let kept = &before[k..];
                let n = kept.len().min(after.len());
                kept[..n] == after[..n]
            })
            .unwrap_or(0),
        _ => 0,
    };
    let base = &before[skip..];
    let set = after
        .iter()
        .enumerate()
        .filter(|(i, row)| base.get(*i) != Some(*row))
        .map(|(i, row)| (i, row.clone()))
        .collect();
    Some(VecPatch {
        skip,
        len: after.len(),
        set,
    })
}

fn apply_vec<T: Clone + DeserializeOwned>(
    table: &'static str,
    rows: &mut Vec<T>,
    patch: VecPatch<T>,
) -> Result<(), DeltaError> {
    let misfit = |have: usize, why: String| DeltaError::Misfit { table, have, why };
    if patch.skip > rows.len() {
        return Err(misfit(
            rows.len(),
            format!("drops {} from the front", patch.skip),
        ));
    }
    rows.drain(..patch.skip);
    for (i, row) in patch.set {
        if i < rows.len() {
            rows[i] = row;
        } else if i == rows.len() {
            rows.push(row);
        } else {
            return Err(misfit(rows.len(), format!("sets row {i}")));
        }
    }
    if patch.len > rows.len() {
        return Err(misfit(rows.len(), format!("says {} rows", patch.len)));
    }
    rows.truncate(patch.len);
    Ok(())
}

fn diff_map<K: Ord + Clone, V: Clone + PartialEq>(
    before: &BTreeMap<K, V>,
    after: &BTreeMap<K, V>,
) -> Option<MapPatch<K, V>> {
    if before == after {
        return None;
    }
    let set = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let remove = before
        .keys()
        .filter(|k| !after.contains_key(*k))
        .cloned()
        .collect();
    Some(MapPatch { set, remove })
}

fn apply_map<K: Ord, V>(map: &mut BTreeMap<K, V>, patch: MapPatch<K, V>) {
    for k in patch.remove {
        map.remove(&k);
    }
    map.extend(patch.set);
}

/// The blocks' patch: the aging, then the rows that changed otherwise. Rows are compared in
/// place (a block aged is compared to its successor field by field), so no block is copied
/// unless the table's first row changed (then [`AgePatch::between`] and [`diff_vec`] work it
/// out, as for a table that dropped rows from the front).
fn diff_blocks(before: &[Block], after: &[Block]) -> (Option<AgePatch>, Option<VecPatch<Block>>) {
    let aged = |b: &Block, a: &Block| a.survived == b.survived.saturating_add(1);
    let same = |b: &Block, a: &Block| {
        if aged(b, a) { aged_into(b, a) } else { b == a }
    };
    let first_kept = match (before.first(), after.first()) {
        (Some(b), Some(a)) => same(b, a),
        _ => true,
    };
    if !first_kept {
        let ages = AgePatch::between(before, after);
        let blocks = diff_vec(ages.as_ref().map_or(before, |(_, aged)| aged), after);
        return (ages.map(|(patch, _)| patch), blocks);
    }
    let mut patch = AgePatch::default();
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if aged(b, a) {
            push_run(&mut patch.aged, i);
            if b.generation == Generation::Young && a.generation == Generation::Old {
                push_run(&mut patch.turned_old, i);
            }
        }
    }
    let set: Vec<(usize, Block)> = after
        .iter()
        .enumerate()
        .filter(|(i, a)| before.get(*i).is_none_or(|b| !same(b, a)))
        .map(|(i, a)| (i, a.clone()))
        .collect();
    let blocks = (!set.is_empty() || before.len() != after.len()).then(|| VecPatch {
        skip: 0,
        len: after.len(),
        set,
    });
    ((!patch.aged.is_empty()).then_some(patch), blocks)
}

/// Whether `b`, aged to `a`'s count of turns survived (and turned old if `a` did), equals
/// `a`. Destructured so a field added to [`Block`] must be considered here.
fn aged_into(b: &Block, a: &Block) -> bool {
    let Block {
        id,
        tier,
        summary,
        topic,
        span,
        direct,
        effective,
        message_ids,
        consumed,
        active,
        archive_keys,
        author,
        in_view,
        survived: _,
        generation,
        extra,
    } = b;
    let generation_fits = a.generation == *generation
        || (*generation == Generation::Young && a.generation == Generation::Old);
    generation_fits
        && *id == a.id
        && *tier == a.tier
        && *summary == a.summary
        && *topic == a.topic
        && *span == a.span
        && *direct == a.direct
        && *effective == a.effective
        && *message_ids == a.message_ids
        && *consumed == a.consumed
        && *active == a.active
        && *archive_keys == a.archive_keys
        && *author == a.author
        && *in_view == a.in_view
        && *extra == a.extra
}

fn changed<T: Clone + PartialEq>(before: &T, after: &T) -> Option<T> {
    (before != after).then(|| after.clone())
}

impl StateDelta {
    /// What changed from `before` to `after`.
    pub fn between(before: &SessionState, after: &SessionState) -> Self {
        let extra_before: BTreeMap<String, serde_json::Value> = before
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let extra_after: BTreeMap<String, serde_json::Value> = after
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // Every block in play ages each turn: written as runs of indexes, not as the blocks.
        // Tables the turn left alone are still shared with the state before it: skipped
        // without looking at a row.
        let (block_ages, blocks) = if Shared::same(&before.blocks, &after.blocks) {
            (None, None)
        } else {
            diff_blocks(&before.blocks, &after.blocks)
        };
        let table = |b: &Shared<Vec<RefEntry>>, a: &Shared<Vec<RefEntry>>| {
            (!Shared::same(b, a)).then(|| diff_vec(b, a)).flatten()
        };
        StateDelta {
            version: changed(&before.version, &after.version),
            session: changed(&before.session, &after.session),
            turns: changed(&before.turns, &after.turns),
            next_ref: changed(&before.next_ref, &after.next_ref),
            refs: table(&before.refs, &after.refs),
            next_block: changed(&before.next_block, &after.next_block),
            block_ages,
            blocks,
            originals: diff_map(&before.originals, &after.originals),
            archive: (!Shared::same(&before.archive, &after.archive))
                .then(|| diff_vec(&before.archive, &after.archive))
                .flatten(),
            head: diff_value(&before.head, &after.head),
            usage: diff_vec(&before.usage, &after.usage),
            // Compared by bits: NaN must compare equal to itself or it is written every turn.
            calibration: (before.calibration.to_bits() != after.calibration.to_bits())
                .then_some(after.calibration),
            counters: diff_map(&before.counters, &after.counters),
            extra: diff_map(&extra_before, &extra_after),
        }
    }

    /// True when the turn changed nothing.
    pub fn is_empty(&self) -> bool {
        *self == StateDelta::default()
    }

    /// Applies the changes to `state` (the state the delta was computed against).
    ///
    /// # Errors
    /// [`DeltaError::Misfit`] when a table patch does not fit `state` (a journal replayed
    /// onto the wrong base): the state is then partly changed and must be discarded.
    pub fn apply(self, state: &mut SessionState) -> Result<(), DeltaError> {
        if let Some(v) = self.version {
            state.version = v;
        }
        if let Some(v) = self.session {
            state.session = v;
        }
        if let Some(v) = self.turns {
            state.turns = v;
        }
        if let Some(v) = self.next_ref {
            state.next_ref = v;
        }
        if let Some(p) = self.refs {
            apply_vec("refs", &mut state.refs, p)?;
        }
        if let Some(v) = self.next_block {
            state.next_block = v;
        }
        if let Some(p) = self.block_ages {
            p.apply(&mut state.blocks)?;
        }
        if let Some(p) = self.blocks {
            apply_vec("blocks", &mut state.blocks, p)?;
        }
        if let Some(p) = self.originals {
            apply_map(&mut state.originals, p);
        }
        if let Some(p) = self.archive {
            apply_vec("archive", &mut state.archive, p)?;
        }
        if let Some(p) = self.head {
            apply_value(&mut state.head, p)?;
        }
        if let Some(p) = self.usage {
            apply_vec("usage", &mut state.usage, p)?;
        }
        if let Some(v) = self.calibration {
            state.calibration = v;
        }
        if let Some(p) = self.counters {
            apply_map(&mut state.counters, p);
        }
        if let Some(p) = self.extra {
            for k in p.remove {
                state.extra.remove(&k);
            }
            for (k, v) in p.set {
                state.extra.insert(k, v);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use foldwire_core::MessageId;

    fn grown(mut s: SessionState, n: usize) -> SessionState {
        for i in 0..n {
            s.mint_ref(MessageId(format!("fp{}-{i}", s.next_ref)));
        }
        s.turns += 1;
        s
    }

    #[test]
    fn a_steady_turn_carries_only_its_new_rows() {
        let before = grown(SessionState::new(SessionId::new("s").unwrap()), 5000);
        let after = grown(before.clone(), 2);
        let delta = StateDelta::between(&before, &after);
        let bytes = serde_json::to_vec(&delta).unwrap();
        assert!(bytes.len() < 400, "{}", String::from_utf8_lossy(&bytes));
        let mut replayed = before.clone();
        delta.apply(&mut replayed).unwrap();
        assert_eq!(replayed, after);
    }

    /// Every block in play ages each turn (acp §26 #26): the delta names runs of them, so a
    /// steady turn's delta does not grow with the number of blocks, and replays exactly.
    #[test]
    fn blocks_that_only_aged_are_written_as_runs() {
        let mut before = grown(SessionState::new(SessionId::new("s").unwrap()), 10);
        before.blocks = (1..=400)
            .map(|i| Block {
                id: foldwire_core::BlockId(i),
                summary: format!("summary of block {i} with some words in it"),
                survived: 4,
                ..Block::default()
            })
            .collect();
        let mut after = before.clone();
        for (i, b) in after.blocks.iter_mut().enumerate() {
            // One block left the view (not aged), one had its summary rewritten too.
            if i == 7 {
                b.in_view = false;
                continue;
            }
            b.survived += 1;
            if i < 200 {
                b.generation = Generation::Old;
            }
            if i == 300 {
                b.topic = Some("new".into());
            }
        }
        let delta = StateDelta::between(&before, &after);
        let ages = delta.block_ages.clone().unwrap();
        assert_eq!(ages.aged, [(0, 6), (8, 399)]);
        assert_eq!(ages.turned_old, [(0, 6), (8, 199)]);
        let changed: Vec<usize> = delta
            .blocks
            .as_ref()
            .unwrap()
            .set
            .iter()
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(changed, [7, 300]);
        // The in-place comparison finds what aging a copy and diffing the copy finds.
        let (ages_copy, aged) = AgePatch::between(&before.blocks, &after.blocks).unwrap();
        assert_eq!(ages_copy, ages);
        assert_eq!(diff_vec(&aged, &after.blocks), delta.blocks);
        let mut replayed = before.clone();
        delta.clone().apply(&mut replayed).unwrap();
        assert_eq!(replayed, after);
        let bytes = serde_json::to_vec(&delta).unwrap();
        // The runs, plus the two blocks that changed otherwise (about 300 bytes each).
        assert!(bytes.len() < 900, "{}", String::from_utf8_lossy(&bytes));
        let read: StateDelta = serde_json::from_slice(&bytes).unwrap();
        let mut replayed = before.clone();
        read.apply(&mut replayed).unwrap();
        assert_eq!(replayed, after);
    }

    #[test]
    fn changes_everywhere_replay_exactly() {
        let mut before = grown(SessionState::new(SessionId::new("s").unwrap()), 10);
        before.usage = (0..8)
            .map(|t| UsageSample {
                turn: t,
                estimated: t * 10,
                reported: t * 11,
            })
            .collect();
        before.originals.insert(Ref(1), "one".into());
        before.originals.insert(Ref(2), "two".into());
        before.counters.insert("a".into(), 1);
        before.extra.insert("x".into(), serde_json::json!([1]));
        before.archive.push(ArchivedItem {
            key: "k".into(),
            ..ArchivedItem::default()
        });
        let mut after = grown(before.clone(), 3);
        after.usage.drain(..2);
        after.usage.push(UsageSample {
            turn: 9,
            estimated: 1,
            reported: 2,
        });
        after.originals.remove(&Ref(1));
        after.originals.insert(Ref(3), "three".into());
        after.counters.insert("a".into(), 2);
        after.extra.remove("x");
        after
            .extra
            .insert("y".into(), serde_json::json!({"z": true}));
        after.archive[0].r#ref = Some(Ref(4));
        after.head = serde_json::json!({"reset": 3});
        let mut later = after.clone();
        later.head = serde_json::json!({"reset": 4, "previous": [1, 2, 3], "gone": null});
        let mut latest = later.clone();
        latest.head = serde_json::json!({"reset": 4, "previous": [1, 2, 3, 4]});
        let d = StateDelta::between(&later, &latest);
        assert!(matches!(d.head, Some(ValuePatch::Object(_))), "{d:?}");
        let mut replayed = later.clone();
        d.apply(&mut replayed).unwrap();
        assert_eq!(replayed.head, latest.head);
        after.calibration = 1.25;
        let delta = StateDelta::between(&before, &after);
        assert_eq!(delta.usage.as_ref().unwrap().skip, 2);
        assert_eq!(delta.usage.as_ref().unwrap().set.len(), 1);
        let json = serde_json::to_vec(&delta).unwrap();
        let read: StateDelta = serde_json::from_slice(&json).unwrap();
        let mut replayed = before.clone();
        read.apply(&mut replayed).unwrap();
        assert_eq!(replayed, after);
        // Shrinking tables replay too.
        let delta = StateDelta::between(&after, &before);
        let mut back = after.clone();
        delta.apply(&mut back).unwrap();
        assert_eq!(back, before);
    }

    #[test]
    fn deltas_from_newer_builds_and_misfits_are_refused() {
        assert!(serde_json::from_str::<StateDelta>(r#"{"wormholes":1}"#).is_err());
        let patch: StateDelta = serde_json::from_str(r#"{"refs":{"len":9,"set":[]}}"#).unwrap();
        let err = patch.apply(&mut SessionState::default()).unwrap_err();
        assert!(err.to_string().contains("refs"), "{err}");
    }
}
