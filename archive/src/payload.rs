//! Write payloads cut into pieces of at most [`WRITE_PIECE`] bytes.
//!
//! object_store's local backend issues one `write` per piece of a payload, and the state
//! store's own files are written the same way ([`write_in_pieces`]). On Linux 6.18 (ext4) a
//! single `write` of 4 MiB or more costs an order of magnitude more than the same bytes in
//! 1 MiB writes: 16 MiB took about 200 ms in one call and 4 ms in sixteen. A session's first
//! turn writes tens of MiB at once (the archive pack of its originals, the first journal
//! entry, the last request), so one call each made that turn several times slower than it
//! needs to be. The pieces share the original buffer, so cutting copies nothing; the other
//! backends send the pieces as one body.

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

/// Writes `bytes` to `out` one [`WRITE_PIECE`] at a time.
///
/// # Errors
/// The first write that fails.
pub fn write_in_pieces(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    bytes
        .chunks(WRITE_PIECE)
        .try_for_each(|piece| out.write_all(piece))
}

#[cfg(test)]
mod tests {
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

    /// A writer that records the size of every write it is asked for.
    struct Sizes(Vec<usize>, Vec<u8>);

    impl Write for Sizes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.len());
            self.1.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_file_write_is_made_one_piece_at_a_time() {
        let bytes: Vec<u8> = (0..(WRITE_PIECE + 3)).map(|i| (i % 7) as u8).collect();
        let mut out = Sizes(Vec::new(), Vec::new());
        assert!(write_in_pieces(&mut out, &bytes).is_ok());
        assert_eq!(out.0, vec![WRITE_PIECE, 3]);
        assert_eq!(out.1, bytes);
    }
}
