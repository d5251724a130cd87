//! [`ByRef`]: values looked up by [`Ref`], for the passes that join a session's tables by
//! ref (a block's fingerprints and archive keys, a unit's position).
//!
//! A session numbers its refs in order and its tables hold them close together, so the
//! values sit in a vector indexed by `ref - lowest` where that vector stays small next to
//! the number of values; a first turn joins thousands of refs, and filling and probing a
//! hash map for each cost more than the joins themselves. Refs spread far apart (a
//! session that folds a few old refs after a long gap) go to a hash map instead.

use foldhash::HashMap;

use crate::ids::Ref;

/// How many slots per value the dense form may spend before the hash map is used.
const SLOTS_PER_VALUE: usize = 4;

/// Values by ref; of several values given for one ref, the last one is kept.
#[derive(Debug, Clone)]
pub struct ByRef<V> {
    kind: Kind<V>,
}

#[derive(Debug, Clone)]
enum Kind<V> {
    /// `slots[i]` holds the value of `Ref(lowest + i)`.
    Dense { lowest: u32, slots: Vec<Option<V>> },
    /// Refs too far apart for slots.
    Sparse(HashMap<Ref, V>),
}

impl<V> Default for ByRef<V> {
    fn default() -> Self {
        ByRef {
            kind: Kind::Dense {
                lowest: 0,
                slots: Vec::new(),
            },
        }
    }
}

impl<V> FromIterator<(Ref, V)> for ByRef<V> {
    /// One pass: slots while the refs ascend from the first one without leaving too many
    /// slots empty (how tables list them), a hash map from the first ref that does not.
    fn from_iter<I: IntoIterator<Item = (Ref, V)>>(iter: I) -> Self {
        let iter = iter.into_iter();
        let (lower, upper) = iter.size_hint();
        let mut lowest: Option<u32> = None;
        let mut slots: Vec<Option<V>> = Vec::with_capacity(upper.unwrap_or(lower));
        let mut values = 0usize;
        let mut sparse: Option<HashMap<Ref, V>> = None;
        for (r, v) in iter {
            if let Some(map) = sparse.as_mut() {
                map.insert(r, v);
                continue;
            }
            let low = *lowest.get_or_insert(r.0);
            let at = r.0.checked_sub(low).map(|d| d as usize);
            match at {
                Some(at) if at < (values + 64).saturating_mul(SLOTS_PER_VALUE) => {
                    if at >= slots.len() {
                        slots.resize_with(at + 1, || None);
                    }
                    if let Some(slot) = slots.get_mut(at) {
                        values += usize::from(slot.is_none());
                        *slot = Some(v);
                    }
                }
                _ => {
                    // Below the first ref, or far past the last: the slots so far move
                    // into a map.
                    let mut map: HashMap<Ref, V> = std::mem::take(&mut slots)
                        .into_iter()
                        .enumerate()
                        .filter_map(|(i, v)| Some((Ref(low + i as u32), v?)))
                        .collect();
                    map.insert(r, v);
                    sparse = Some(map);
                }
            }
        }
        let kind = match sparse {
            Some(map) => Kind::Sparse(map),
            None => Kind::Dense {
                lowest: lowest.unwrap_or(0),
                slots,
            },
        };
        ByRef { kind }
    }
}

impl<V> ByRef<V> {
    /// The value of `r`.
    pub fn get(&self, r: &Ref) -> Option<&V> {
        match &self.kind {
            Kind::Dense { lowest, slots } => slots
                .get(r.0.checked_sub(*lowest)? as usize)
                .and_then(Option::as_ref),
            Kind::Sparse(map) => map.get(r),
        }
    }

    /// True when `r` has a value.
    pub fn contains_key(&self, r: &Ref) -> bool {
        self.get(r).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every lookup agrees with a hash map of the same pairs (last value wins), for refs
    /// close together (dense) and far apart (sparse).
    #[test]
    fn lookups_agree_with_a_hash_map() {
        let cases: Vec<Vec<(Ref, usize)>> = vec![
            vec![],
            (1..=500).map(|i| (Ref(i), i as usize)).collect(),
            // Out of order, with a repeated ref whose later value wins.
            vec![(Ref(9), 1), (Ref(7), 2), (Ref(9), 3), (Ref(8), 4)],
            // Ascending with a repeated ref and gaps.
            vec![(Ref(5), 1), (Ref(5), 2), (Ref(8), 3), (Ref(60), 4)],
            // Far apart: the sparse form.
            vec![(Ref(3), 1), (Ref(4_000_000_000), 2), (Ref(70), 3)],
        ];
        for pairs in cases {
            let table: ByRef<usize> = pairs.iter().copied().collect();
            let map: std::collections::HashMap<Ref, usize> = pairs.iter().copied().collect();
            let sparse = matches!(table.kind, Kind::Sparse(_));
            for probe in [
                0,
                1,
                2,
                3,
                6,
                7,
                8,
                9,
                10,
                70,
                499,
                500,
                501,
                4_000_000_000,
                u32::MAX,
            ] {
                let r = Ref(probe);
                assert_eq!(table.get(&r), map.get(&r), "{probe} (sparse: {sparse})");
                assert_eq!(table.contains_key(&r), map.contains_key(&r));
            }
        }
        let far: ByRef<u8> = [(Ref(1), 0), (Ref(1_000), 1)].into_iter().collect();
        assert!(matches!(far.kind, Kind::Sparse(_)));
        let below: ByRef<u8> = [(Ref(8), 0), (Ref(2), 1)].into_iter().collect();
        assert!(matches!(below.kind, Kind::Sparse(_)));
        let near: ByRef<u8> = [(Ref(1), 0), (Ref(8), 1)].into_iter().collect();
        assert!(matches!(near.kind, Kind::Dense { .. }));
    }
}
