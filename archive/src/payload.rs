//! Write payloads cut into pieces of at most [`WRITE_PIECE`] bytes.
//!
//! object_store's local backend issues one `write` per piece of a payload, and the files
//! foldwire writes and syncs itself are cut finer still ([`write_synced`]). On Linux 6.18
//! (ext4) a single `write` of 4 MiB or more costs an order of magnitude more than the same
//! bytes in 1 MiB writes: 16 MiB took about 200 ms in one call and 4 ms in sixteen. A
//! session's first turn writes tens of MiB at once (the archive pack of its originals, the
//! first journal entry, the last request), so one call each made that turn several times
//! slower than it needs to be. The pieces share the original buffer, so cutting copies
//! nothing; the other backends send the pieces as one body. On a local directory the packs
//! and journal entries are foldwire's own writes, each piece handed to the disk as soon as
//! it is written.

use std::fs::File;
use std::io::Write;

use bytes::Bytes;
use object_store::PutPayload;

/// The largest piece of a write (1 MiB).
pub const WRITE_PIECE: usize = 1 << 20;

/// `parts`, in order, as one payload of pieces no larger than [`WRITE_PIECE`].
pub fn in_pieces(parts: impl IntoIterator<Item = Bytes>) -> PutPayload {
    parts
        .into_iter()
        .flat_map(|part| {
            let len = part.len();
            (0..len)
                .step_by(WRITE_PIECE)
                .map(move |start| part.slice(start..len.min(start + WRITE_PIECE)))
        })
        .collect()
}

/// `bytes` as one payload of pieces no larger than [`WRITE_PIECE`].
pub fn bytes_in_pieces(bytes: impl Into<Bytes>) -> PutPayload {
    in_pieces([bytes.into()])
}

/// The largest write into a file foldwire syncs itself (512 KiB): after each, the written
/// range is handed to the disk ([`write_synced`]).
pub const WRITEBACK_PIECE: usize = 512 << 10;

/// Writes `pieces` to `file` in order, [`WRITEBACK_PIECE`] at a time, and syncs it; returns
/// how many of the writes were handed to the disk as soon as they were made.
///
/// Each written range is advised away (`POSIX_FADV_DONTNEED`), which on Linux starts writing
/// it back at once: the disk works while the next pieces are copied, and the closing `fsync`
/// waits for the last ones only instead of for the whole file. 11 MiB (a session's first pack
/// at 10,000 messages) took 10–11 ms from first write to synced in 512 KiB writes without it
/// and 5.6–6.6 ms with it (medians of 25, ext4 on the 2-core development machine). The advice
/// is a hint: where it fails or does not exist the file is still written and synced the same.
///
/// # Errors
/// The first write that fails, or the sync.
pub fn write_synced(
    file: &mut File,
    pieces: impl IntoIterator<Item = impl AsRef<[u8]>>,
) -> std::io::Result<usize> {
    let mut handed = 0;
    let mut at = 0u64;
    for piece in pieces {
        for write in piece.as_ref().chunks(WRITEBACK_PIECE) {
            file.write_all(write)?;
            handed += usize::from(start_writeback(file, at, write.len()));
            at += write.len() as u64;
        }
    }
    file.sync_all()?;
    Ok(handed)
}

/// Asks the kernel to start writing `len` bytes of `file` from `at` to disk now; true when
/// it took the advice.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn start_writeback(file: &File, at: u64, len: usize) -> bool {
    let len = std::num::NonZeroU64::new(len as u64);
    len.is_some() && rustix::fs::fadvise(file, at, len, rustix::fs::Advice::DontNeed).is_ok()
}

/// Elsewhere the sync writes the whole file.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn start_writeback(_file: &File, _at: u64, _len: usize) -> bool {
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn joined(payload: &PutPayload) -> Vec<u8> {
        payload.iter().flat_map(|b| b.iter().copied()).collect()
    }

    #[test]
    fn pieces_keep_every_byte_in_order_and_none_is_over_the_limit() {
        let big: Vec<u8> = (0..(WRITE_PIECE * 2 + 17))
            .map(|i| (i % 251) as u8)
            .collect();
        let small = Bytes::from_static(b"head\n");
        let payload = in_pieces([small.clone(), Bytes::from(big.clone()), Bytes::new()]);
        let mut expected = small.to_vec();
        expected.extend_from_slice(&big);
        assert_eq!(joined(&payload), expected);
        assert_eq!(payload.content_length(), expected.len());
        let sizes: Vec<usize> = payload.iter().map(Bytes::len).collect();
        assert_eq!(sizes, vec![5, WRITE_PIECE, WRITE_PIECE, 17]);
    }

    #[test]
    fn exact_multiples_and_empty_payloads_have_no_empty_pieces() {
        let payload = bytes_in_pieces(vec![7u8; WRITE_PIECE * 3]);
        assert_eq!(
            payload.iter().map(Bytes::len).collect::<Vec<_>>(),
            vec![WRITE_PIECE; 3]
        );
        assert_eq!(bytes_in_pieces(Vec::<u8>::new()).content_length(), 0);
    }

    /// A synced file holds every piece in order, and on Linux each write of it (pieces cut
    /// at [`WRITEBACK_PIECE`]) was handed to the disk as it was made.
    #[test]
    fn a_synced_file_holds_every_piece_and_each_write_went_to_disk_early() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pack");
        let big: Vec<u8> = (0..(WRITEBACK_PIECE * 2 + 3))
            .map(|i| (i % 7) as u8)
            .collect();
        let pieces: [&[u8]; 3] = [b"head\n", &big, b""];
        let mut file = File::create(&path).unwrap();
        let handed = write_synced(&mut file, pieces).unwrap();
        drop(file);
        let mut expected = b"head\n".to_vec();
        expected.extend_from_slice(&big);
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        // `head\n`, then the big piece in three writes; the empty piece writes nothing.
        let writes = 4;
        if cfg!(any(target_os = "linux", target_os = "android")) {
            assert_eq!(handed, writes);
        } else {
            assert_eq!(handed, 0);
        }
    }
}
