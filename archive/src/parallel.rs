//! Work over a large batch split into contiguous shares of about equal bytes, one thread
//! each: a session's first fold hashes and packs megabytes of originals at once.

/// Below this many bytes one thread is quicker than starting others.
const PARALLEL_FROM: usize = 1 << 20;

/// Most threads one batch takes.
const MAX_THREADS: usize = 4;

/// `work` applied to contiguous shares of `items` (of about equal `len`), in order: one
/// share per thread, as many as the machine has up to four, and a single share for a batch
/// under 1 MiB. A share whose thread dies is worked on the calling thread instead.
pub(crate) fn by_shares<T, R>(
    items: &[T],
    len: impl Fn(&T) -> usize,
    work: impl Fn(&[T]) -> R + Sync,
) -> Vec<R>
where
    T: Sync,
    R: Send,
{
    let total: usize = items.iter().map(&len).sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_THREADS);
    if total < PARALLEL_FROM || threads < 2 || items.len() < 2 {
        return vec![work(items)];
    }
    let share = total.div_ceil(threads);
    let mut cuts = vec![0];
    let mut acc = 0;
    for (i, item) in items.iter().enumerate() {
        acc += len(item);
        if acc >= share * cuts.len() && i + 1 < items.len() {
            cuts.push(i + 1);
        }
    }
    cuts.push(items.len());
    cuts.dedup();
    let chunks: Vec<&[T]> = cuts
        .windows(2)
        .filter_map(|w| items.get(w.first().copied()?..w.get(1).copied()?))
        .collect();
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .skip(1)
            .map(|chunk| scope.spawn(move || work(chunk)))
            .collect();
        let mut out = Vec::with_capacity(chunks.len());
        out.extend(chunks.first().map(|chunk| work(chunk)));
        for (handle, chunk) in handles.into_iter().zip(chunks.iter().skip(1)) {
            out.push(handle.join().unwrap_or_else(|_| work(chunk)));
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_every_item_once_in_order() {
        let items: Vec<Vec<u8>> = (0..300usize).map(|i| vec![0u8; 4_000 + i * 37]).collect();
        let shares = by_shares(&items, Vec::len, |chunk| {
            chunk.iter().map(Vec::len).collect::<Vec<_>>()
        });
        let joined: Vec<usize> = shares.concat();
        assert_eq!(joined, items.iter().map(Vec::len).collect::<Vec<_>>());
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_THREADS);
        assert_eq!(
            shares.len(),
            threads,
            "a batch over 1 MiB takes every thread it may"
        );
        // A small batch is one share.
        assert_eq!(by_shares(&items[..2], Vec::len, <[Vec<u8>]>::len), vec![2]);
        assert_eq!(
            by_shares(&[] as &[Vec<u8>], Vec::len, <[Vec<u8>]>::len),
            vec![0]
        );
    }
}
