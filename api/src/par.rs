//! Work split over the machine's cores, when there is enough of it to pay for the threads.
//!
//! A session's first turn hands the pipeline its whole history at once (11 MB and 10,000
//! messages for a long one): decoding it, hashing its units and estimating their tokens are
//! each a pass over every unit, run while the machine's other cores wait. [`split`] cuts
//! such a pass into contiguous shares of about equal weight (bytes, say), runs them on
//! scoped threads and hands back one result per share, in order; below `from` it is the
//! pass itself, on the caller's thread.

use std::ops::Range;

/// The most threads [`split`] uses (the caller's included).
pub const MAX_THREADS: usize = 4;

/// Work, in bytes, under which one thread is quicker than starting others: a thread costs
/// tens of microseconds to start, a megabyte about a millisecond to scan.
pub const BYTES_WORTH_A_THREAD: usize = 1 << 20;

/// How many threads a pass of `total` weight gets: one per core (at most
/// [`MAX_THREADS`]), and one when `total` is under `from` or the machine has one core.
pub fn threads_for(total: usize, from: usize) -> usize {
    if total < from {
        return 1;
    }
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_THREADS)
}

/// Cuts `weights` (one per item) into at most `shares` contiguous ranges of about equal
/// total weight, covering every item in order; none is empty.
pub fn shares(weights: impl IntoIterator<Item = usize>, shares: usize) -> Vec<Range<usize>> {
    let weights: Vec<usize> = weights.into_iter().collect();
    let total: usize = weights.iter().sum();
    let shares = shares.clamp(1, weights.len().max(1));
    let share = total.div_ceil(shares).max(1);
    let mut cuts = vec![0];
    let mut acc = 0;
    for (i, w) in weights.iter().enumerate() {
        acc += w;
        if cuts.len() < shares && acc >= share * cuts.len() && i + 1 < weights.len() {
            cuts.push(i + 1);
        }
    }
    cuts.push(weights.len());
    cuts.dedup();
    cuts.windows(2)
        .filter_map(|w| Some(*w.first()?..*w.get(1)?))
        .collect()
}

/// `run` on contiguous shares of `items` of about equal `weight`, one share per thread when
/// their total weight reaches `from` ([`threads_for`]), else on all of them at once on this
/// thread. The first share runs on the caller's thread. Returns each share's start index
/// and result, in order.
///
/// Should a thread panic, its share runs again on the caller's thread: `run` must be a pure
/// function of its share.
pub fn split<T, R>(
    items: &[T],
    weight: impl Fn(&T) -> usize,
    from: usize,
    run: impl Fn(usize, &[T]) -> R + Sync,
) -> Vec<(usize, R)>
where
    T: Sync,
    R: Send,
{
    let weights: Vec<usize> = items.iter().map(&weight).collect();
    let threads = threads_for(weights.iter().sum(), from);
    if threads < 2 || items.len() < 2 {
        return vec![(0, run(0, items))];
    }
    let ranges = shares(weights, threads);
    let run = &run;
    std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .iter()
            .skip(1)
            .map(|r| {
                let share = items.get(r.clone()).unwrap_or_default();
                let start = r.start;
                (start, share, scope.spawn(move || run(start, share)))
            })
            .collect();
        let mut out = Vec::with_capacity(ranges.len());
        if let Some(first) = ranges.first() {
            out.push((0, run(0, items.get(first.clone()).unwrap_or_default())));
        }
        for (start, share, handle) in handles {
            let result = handle.join().unwrap_or_else(|_| run(start, share));
            out.push((start, result));
        }
        out
    })
}

/// `f` of every item, in order, computed over shares as [`split`] does.
pub fn map<T, R>(
    items: &[T],
    weight: impl Fn(&T) -> usize,
    from: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R>
where
    T: Sync,
    R: Send,
{
    let mut parts = split(items, weight, from, |_, share| {
        share.iter().map(&f).collect::<Vec<R>>()
    })
    .into_iter();
    let mut out = parts.next().map(|(_, first)| first).unwrap_or_default();
    out.reserve(items.len().saturating_sub(out.len()));
    for (_, part) in parts {
        out.extend(part);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn shares_cover_every_item_in_order_with_about_equal_weight() {
        let weights = [5, 1, 1, 1, 1, 1, 5, 5];
        let cut = shares(weights, 2);
        assert_eq!(cut, [0..6, 6..8]);
        for n in 1..=5 {
            let cut = shares(weights, n);
            assert!(cut.len() <= n && !cut.is_empty());
            assert_eq!(cut.first().unwrap().start, 0);
            assert_eq!(cut.last().unwrap().end, weights.len());
            assert!(cut.windows(2).all(|w| w[0].end == w[1].start));
            assert!(cut.iter().all(|r| !r.is_empty()));
        }
        // One item, no items, no weight: one share (none for no items) and no empty ones.
        assert_eq!(shares([7], 4), vec![std::ops::Range { start: 0, end: 1 }]);
        assert!(shares([], 4).is_empty());
        assert_eq!(shares([0, 0, 0], 2).last().unwrap().end, 3);
    }

    #[test]
    fn a_split_pass_gives_what_the_pass_on_one_thread_gives() {
        let items: Vec<u64> = (0..10_000).collect();
        let one: Vec<u64> = items.iter().map(|x| x * x).collect();
        // Weight enough to split (on a machine with more than one core), and too little.
        for from in [0, usize::MAX] {
            assert_eq!(map(&items, |_| 1, from, |x| x * x), one);
            let parts = split(&items, |_| 1, from, |start, share| (start, share.len()));
            let mut next = 0;
            for (start, (seen, len)) in &parts {
                assert_eq!((*start, *seen), (next, next));
                next += len;
            }
            assert_eq!(next, items.len());
        }
        let split_parts = split(&items, |_| 1, 0, |_, s| s.len()).len();
        assert_eq!(split_parts, threads_for(1, 0).min(items.len()));
        assert_eq!(split(&items, |_| 1, usize::MAX, |_, s| s.len()).len(), 1);
    }
}
