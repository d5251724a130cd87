//! Where each payload of a pack lies, and the pack's bytes as pieces to write.
//!
//! A turn's originals are slices of its request body, one after another with a few bytes
//! of wire framing (`},{"role":…`) between them. Copying thousands of them into one new
//! buffer cost a first turn of 10,000 messages 8–12 ms on the thread the fold waits for,
//! most of it first-touch page faults on the fresh buffer. So a run of payloads that lie
//! in the body in order, at most [`MAX_GAP`] apart, goes into the pack as the stretch of the
//! body that holds them: a slice, nothing copied. The framing between them is written too
//! and nothing points at it. Payloads from elsewhere (media decoded from base64, a unit a
//! stage rewrote) are copied as before, and so is a stretch too short to be worth a write
//! of its own ([`MIN_STRETCH`]).

use bytes::Bytes;

/// The most bytes between two payloads of one stretch: enough for any wire's framing
/// between two content blocks, little enough that what is written beyond the payloads
/// stays small.
pub const MAX_GAP: usize = 256;

/// A stretch shorter than this is copied with its neighbours rather than written as a
/// piece of its own (each piece is a write call on a local directory).
pub const MIN_STRETCH: usize = 64 << 10;

/// A pack: each payload's place (its index in the batch, offset, size) and the pieces that,
/// written in order, make its bytes.
#[derive(Debug, Default)]
pub struct Layout {
    /// `(batch index, offset in the pack, size)` per payload, in pack order.
    pub places: Vec<(usize, u64, u64)>,
    /// The pack's bytes, in order.
    pub pieces: Vec<Bytes>,
}

/// Where `part` starts in `source`, when its bytes are a slice of it.
fn offset_in(source: &Bytes, part: &Bytes) -> Option<usize> {
    // Addresses compared as numbers: two live buffers never overlap, so a part whose bytes
    // lie inside the source's are the source's bytes.
    let (start, at) = (source.as_ptr() as usize, part.as_ptr() as usize);
    let inside = !part.is_empty() && at >= start && at + part.len() <= start + source.len();
    inside.then(|| at - start)
}

/// Builds a pack of `group` (batch index and bytes, in pack order), writing runs of
/// payloads that are slices of `source` as the stretch of `source` they lie in.
pub fn lay_out(group: &[(usize, Bytes)], source: Option<&Bytes>) -> Layout {
    let mut out = Layout::default();
    // Bytes already in `out.pieces`, then copied bytes not yet a piece, then the open
    // stretch of `source` (start and end in `source`).
    let mut written: u64 = 0;
    let mut copied: Vec<u8> = Vec::new();
    let mut stretch: Option<(usize, usize)> = None;
    for (index, bytes) in group {
        let size = bytes.len() as u64;
        if bytes.is_empty() {
            // Nothing to write: placed where the pack has got to, breaking no stretch.
            let open = stretch.map_or(0, |(first, end)| end - first);
            let offset = written + (copied.len() + open) as u64;
            out.places.push((*index, offset, 0));
            continue;
        }
        let at = source.and_then(|s| offset_in(s, bytes));
        if let (Some(at), Some((first, end))) = (at, stretch.as_mut())
            && at >= *end
            && at - *end <= MAX_GAP
        {
            let offset = written + copied.len() as u64 + (at - *first) as u64;
            out.places.push((*index, offset, size));
            *end = at + bytes.len();
            continue;
        }
        if let (Some(s), Some(open)) = (source, stretch.take()) {
            close(&mut out.pieces, &mut written, &mut copied, s, open);
        }
        out.places
            .push((*index, written + copied.len() as u64, size));
        match at {
            Some(at) => stretch = Some((at, at + bytes.len())),
            None => copied.extend_from_slice(bytes),
        }
    }
    if let (Some(s), Some(open)) = (source, stretch) {
        close(&mut out.pieces, &mut written, &mut copied, s, open);
    }
    if !copied.is_empty() {
        out.pieces.push(Bytes::from(copied));
    }
    out
}

/// Ends a stretch: a short one joins the copied bytes, a long one becomes a piece (after
/// the copied bytes before it).
fn close(
    pieces: &mut Vec<Bytes>,
    written: &mut u64,
    copied: &mut Vec<u8>,
    source: &Bytes,
    (first, end): (usize, usize),
) {
    let stretch = source.slice(first..end);
    if stretch.len() < MIN_STRETCH {
        copied.extend_from_slice(&stretch);
        return;
    }
    if !copied.is_empty() {
        *written += copied.len() as u64;
        pieces.push(Bytes::from(std::mem::take(copied)));
    }
    *written += stretch.len() as u64;
    pieces.push(stretch);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pack's bytes, joined.
    fn joined(layout: &Layout) -> Vec<u8> {
        layout
            .pieces
            .iter()
            .flat_map(|p| p.iter().copied())
            .collect()
    }

    /// Every payload reads back from its place.
    fn assert_places(layout: &Layout, group: &[(usize, Bytes)]) {
        let pack = joined(layout);
        assert_eq!(layout.places.len(), group.len());
        for ((index, offset, size), (want_index, bytes)) in layout.places.iter().zip(group) {
            assert_eq!(index, want_index);
            let (start, len) = (*offset as usize, *size as usize);
            assert_eq!(&pack[start..start + len], &bytes[..], "payload {index}");
        }
    }

    /// A body of `n` framed payloads of `size` bytes each, and the payloads as slices of it.
    fn framed(n: usize, size: usize) -> (Bytes, Vec<(usize, Bytes)>) {
        let mut body = Vec::new();
        let mut spans = Vec::new();
        for i in 0..n {
            body.extend_from_slice(b"},{\"role\":\"user\",\"content\":[");
            let start = body.len();
            body.extend((0..size).map(|j| b'a' + ((i * 7 + j) % 26) as u8));
            spans.push(start..body.len());
        }
        let body = Bytes::from(body);
        let group = spans
            .into_iter()
            .enumerate()
            .map(|(i, r)| (i, body.slice(r)))
            .collect();
        (body, group)
    }

    #[test]
    fn slices_of_the_source_are_written_as_one_stretch_without_a_copy() {
        let (body, group) = framed(100, 2_000);
        let layout = lay_out(&group, Some(&body));
        assert_places(&layout, &group);
        assert_eq!(layout.pieces.len(), 1);
        // The piece is the body's own memory, from the first payload to the end.
        let first = &group[0].1;
        assert_eq!(layout.pieces[0].as_ptr(), first.as_ptr());
        assert_eq!(layout.pieces[0].len(), body.len() - 28);
    }

    #[test]
    fn without_a_source_every_payload_is_copied_end_to_end() {
        let (_, group) = framed(10, 300);
        let layout = lay_out(&group, None);
        assert_places(&layout, &group);
        assert_eq!(joined(&layout).len(), 3_000);
    }

    #[test]
    fn a_wide_gap_a_foreign_payload_or_a_step_back_starts_another_piece() {
        let (body, mut group) = framed(200, 2_000);
        // Payload 50 is left out (a gap of more than MAX_GAP), payload 120 comes from
        // elsewhere, payload 150 is placed before 149 (out of source order).
        group.remove(50);
        let foreign = Bytes::from(vec![b'z'; 500]);
        group[119].1 = foreign;
        group.swap(148, 149);
        let layout = lay_out(&group, Some(&body));
        assert_places(&layout, &group);
        // Stretches of at least MIN_STRETCH stay slices of the body.
        let inside = |p: &Bytes| offset_in(&body, p).is_some();
        assert!(layout.pieces.iter().filter(|p| inside(p)).count() >= 2);
        assert!(
            layout
                .pieces
                .iter()
                .all(|p| !inside(p) || p.len() >= MIN_STRETCH)
        );
    }

    #[test]
    fn short_stretches_are_copied_into_one_piece() {
        let (body, group) = framed(20, 100);
        let mut mixed: Vec<(usize, Bytes)> = Vec::new();
        for (i, bytes) in group {
            mixed.push((i, bytes));
            if i % 5 == 0 {
                mixed.push((100 + i, Bytes::from(vec![b'#'; 10])));
            }
        }
        let layout = lay_out(&mixed, Some(&body));
        assert_places(&layout, &mixed);
        assert_eq!(layout.pieces.len(), 1);
        assert!(offset_in(&body, &layout.pieces[0]).is_none());
    }

    #[test]
    fn empty_payloads_take_no_bytes() {
        let (body, mut group) = framed(3, 100_000);
        group.insert(1, (9, Bytes::new()));
        group.insert(3, (10, body.slice(0..0)));
        let layout = lay_out(&group, Some(&body));
        assert_places(&layout, &group);
    }
}
