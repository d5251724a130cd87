//! Facts about units that depend on their bytes alone (the media `media.classify` finds, the
//! tokens `ranges.build` estimates), kept from one turn of a session to the next by the
//! digest of the bytes ([`foldwire_wire::request::content_digest`]): an agent resends its
//! whole history each turn, so almost every unit was looked at already.
//!
//! A memo travels in [`foldwire_core::Turn::carry`] and holds the facts of the last turn
//! that used it, in the order that turn looked them up. A client resends its history in the
//! same order, so each lookup first tries the fact after the last one found, a walk along a
//! vector; a hash map over the last turn's facts is built only when that guess misses (new
//! units, or history the client cut or moved). Facts the current turn does not use are gone
//! after it, so the memo never holds more than one request's units.

use foldhash::{HashMap, HashMapExt as _};

/// Facts by content digest, as the last turn looked them up.
#[derive(Debug)]
pub(crate) struct DigestMemo<V> {
    /// The last turn's facts, in lookup order.
    last: Vec<(u64, V)>,
    /// This turn's, as they are looked up.
    current: Vec<(u64, V)>,
    /// Where in `last` the next lookup is expected.
    next: usize,
    /// `last` by digest (first position of each), built on the first miss of a turn.
    by_digest: Option<HashMap<u64, usize>>,
}

impl<V> Default for DigestMemo<V> {
    fn default() -> Self {
        DigestMemo {
            last: Vec::new(),
            current: Vec::new(),
            next: 0,
            by_digest: None,
        }
    }
}

impl<V: Clone> DigestMemo<V> {
    /// Starts a turn's lookups.
    pub(crate) fn begin_turn(&mut self) {
        self.current.clear();
        self.next = 0;
        self.by_digest = None;
    }

    /// The fact for `digest`, or the one `compute` makes (remembered unless it is `None`).
    pub(crate) fn get_or(
        &mut self,
        digest: u64,
        compute: impl FnOnce() -> Option<V>,
    ) -> Option<&V> {
        let value = match self.last.get(self.next) {
            Some((d, v)) if *d == digest => {
                self.next += 1;
                v.clone()
            }
            _ => match self.find(digest) {
                Some(at) => {
                    self.next = at + 1;
                    self.last.get(at).map(|(_, v)| v.clone())?
                }
                None => compute()?,
            },
        };
        self.current.push((digest, value));
        self.current.last().map(|(_, v)| v)
    }

    /// Where `digest` stands in the last turn's facts.
    fn find(&mut self, digest: u64) -> Option<usize> {
        let last = &self.last;
        let by_digest = self.by_digest.get_or_insert_with(|| {
            let mut map = HashMap::with_capacity(last.len());
            for (i, (d, _)) in last.iter().enumerate() {
                map.entry(*d).or_insert(i);
            }
            map
        });
        by_digest.get(&digest).copied()
    }

    /// Ends the turn: its facts are what the next turn starts from.
    pub(crate) fn end_turn(&mut self) {
        self.last = std::mem::take(&mut self.current);
        self.next = 0;
        self.by_digest = None;
    }

    /// How many facts it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.last.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn facts_are_computed_once_and_stale_ones_are_dropped() {
        let mut memo: DigestMemo<u64> = DigestMemo::default();
        let mut computed = 0;
        memo.begin_turn();
        for d in 0..100u64 {
            let v = memo.get_or(d, || {
                computed += 1;
                Some(d * 2)
            });
            assert_eq!(v, Some(&(d * 2)));
        }
        // A fact that cannot be made is not remembered.
        assert_eq!(memo.get_or(1_000, || None), None);
        memo.end_turn();
        assert_eq!((computed, memo.len()), (100, 100));
        // The next turn resends them: nothing computed again.
        memo.begin_turn();
        for d in 0..100u64 {
            assert_eq!(memo.get_or(d, || panic!("computed again")), Some(&(d * 2)));
        }
        memo.end_turn();
        // A turn that uses 10 of them drops the other 90.
        memo.begin_turn();
        for d in 0..10u64 {
            memo.get_or(d, || panic!("computed again"));
        }
        memo.end_turn();
        assert_eq!(memo.len(), 10);
    }

    #[test]
    fn history_cut_moved_or_repeated_is_found_out_of_order() {
        let mut memo: DigestMemo<u64> = DigestMemo::default();
        memo.begin_turn();
        for d in 0..100u64 {
            memo.get_or(d, || Some(d + 7));
        }
        memo.end_turn();
        // A unit inserted in the middle, the rest reversed, the first ten cut and one
        // fact asked twice: only the new unit is computed, every answer is the fact.
        let order: Vec<u64> = (10..50).chain([500, 20]).chain((50..100).rev()).collect();
        let mut computed = Vec::new();
        memo.begin_turn();
        for &d in &order {
            let v = memo.get_or(d, || {
                computed.push(d);
                Some(d + 7)
            });
            assert_eq!(v, Some(&(d + 7)), "digest {d}");
        }
        memo.end_turn();
        assert_eq!(computed, vec![500]);
        assert_eq!(memo.len(), order.len());
    }
}
