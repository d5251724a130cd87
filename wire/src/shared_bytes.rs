//! How much two request bodies share at their ends. A long session's requests are megabytes
//! that differ by a few kilobytes, so the bodies are compared a block at a time (`memcmp`
//! at memory speed), then byte by byte inside the first block that differs.

/// Bytes compared at once (tests place differences around its multiples).
pub const BLOCK: usize = 4096;

/// How many bytes `a` and `b` start with in common.
pub fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    common_len(a.iter(), b.iter(), a.chunks(BLOCK).zip(b.chunks(BLOCK)))
}

/// How many bytes `a` and `b` end with in common.
pub fn common_suffix_len(a: &[u8], b: &[u8]) -> usize {
    common_len(
        a.iter().rev(),
        b.iter().rev(),
        a.rchunks(BLOCK).zip(b.rchunks(BLOCK)),
    )
}

/// How many leading items of two byte sequences agree, given the same sequences as
/// aligned blocks (from the same end): whole equal blocks are skipped, then the rest is
/// compared byte by byte.
fn common_len<'a>(
    a: impl Iterator<Item = &'a u8>,
    b: impl Iterator<Item = &'a u8>,
    blocks: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> usize {
    let mut equal = 0;
    for (x, y) in blocks {
        if x != y || x.len() != BLOCK {
            break;
        }
        equal += BLOCK;
    }
    equal
        + a.skip(equal)
            .zip(b.skip(equal))
            .take_while(|(x, y)| x == y)
            .count()
}
