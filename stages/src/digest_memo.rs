//! Facts about units that depend on their bytes alone (the media `media.classify` finds, the
//! tokens `ranges.build` estimates), kept from one turn of a session to the next by the
//! digest of the bytes ([`foldwire_wire::request::content_digest`]): an agent resends its
//! whole history each turn, so almost every unit was looked at already.
//!
//! A memo travels in [`foldwire_core::Turn::carry`]. Entries are stamped with the turn that
//! last used them; once the memo holds twice as many as the turn used, the stale ones go, so
//! it never holds much more than one request's units.

use std::collections::hash_map::Entry;

use foldhash::{HashMap, HashMapExt as _};

/// Facts by content digest, with the turn that last used each.
#[derive(Debug)]
pub(crate) struct DigestMemo<V> {
    facts: HashMap<u64, (V, u64)>,
    /// The current turn's stamp.
    turn: u64,
    /// Entries used this turn.
    used: usize,
}

impl<V> Default for DigestMemo<V> {
    fn default() -> Self {
        DigestMemo {
            facts: HashMap::new(),
            turn: 0,
            used: 0,
        }
    }
}

impl<V> DigestMemo<V> {
    /// Starts a turn's lookups.
    pub(crate) fn begin_turn(&mut self) {
        self.turn += 1;
        self.used = 0;
    }

    /// The fact for `digest`, or the one `compute` makes (remembered unless it is `None`).
    pub(crate) fn get_or(
        &mut self,
        digest: u64,
        compute: impl FnOnce() -> Option<V>,
    ) -> Option<&V> {
        let turn = self.turn;
        let (value, stamp) = match self.facts.entry(digest) {
            Entry::Occupied(known) => known.into_mut(),
            // Stamped as unused so far: the use below counts it.
            Entry::Vacant(slot) => slot.insert((compute()?, turn.wrapping_sub(1))),
        };
        if *stamp != turn {
            *stamp = turn;
            self.used += 1;
        }
        Some(value)
    }

    /// Drops the facts this turn did not use once they outnumber the ones it did.
    pub(crate) fn end_turn(&mut self) {
        if self.facts.len() > 2 * self.used + 64 {
            let turn = self.turn;
            self.facts.retain(|_, (_, stamp)| *stamp == turn);
        }
    }

    /// How many facts it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.facts.len()
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
}
