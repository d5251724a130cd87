//! A structural index of a validated body: every value down to a fixed depth, in document
//! order, with where it ends and where its next sibling starts in the index.
//!
//! The validating scan records it as it goes, so the decoders walk objects and arrays by
//! index instead of scanning the same bytes again at every nesting level (a 2,000-character
//! tool output is read once, by the validator, and never again unless its text is asked for).
//!
//! The index knows spans only; turning an object's child spans into decoded fields is the
//! scanner's job (`scan::indexed_object_fields`), so this module depends on nothing else.

use std::cell::Cell;
use std::ops::Range;

/// How deep values are indexed (the root is depth 0). Every wire reaches its units and their
/// tool identities by depth 6 (`contents[i].parts[j].functionCall.args`); deeper values are
/// covered by their ancestors' spans, which keeps large tool arguments out of the index.
pub(crate) const INDEX_DEPTH: usize = 6;

/// One indexed value. Offsets and links are 32-bit: a first turn indexes about one value
/// per 64 bytes of a body of megabytes, and at 12 bytes a node (not 24) the index is half the
/// fresh memory to fault in and copy. A body past 4 GiB is not indexed (see [`Tape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Node {
    /// First byte of the value.
    start: u32,
    /// One past its last byte.
    end: u32,
    /// Index of the first node after this value's subtree: its next sibling, if any.
    next: u32,
}

impl Node {
    /// The value's span in the body.
    fn span(&self) -> Range<usize> {
        widen(self.start)..widen(self.end)
    }
}

/// A 32-bit offset or link as an index.
fn widen(n: u32) -> usize {
    // A u32 always fits a usize on the targets foldwire builds for (64-bit).
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The index: nodes in pre-order (a container, then its keys and values), so a container's
/// first child is the node right after it and each child links to the one after it.
/// Read through a [`Cursor`]; a body decoded in shares on several threads shares one tape,
/// each share with a cursor of its own.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Tape {
    nodes: Vec<Node>,
    /// Set when an offset did not fit 32 bits: the tape then holds nothing and answers no
    /// lookup, and the decoders scan the bytes themselves (slower, same result).
    dropped: bool,
}

/// One reader's way through a [`Tape`].
#[derive(Debug)]
pub(crate) struct Cursor<'t> {
    tape: &'t Tape,
    /// Where the last lookup landed: decoders walk the body front to back, so the next
    /// lookup is almost always a little after it (searched by galloping from here, which
    /// stays in cache where a binary search over the whole index would not).
    hint: Cell<usize>,
}

impl Tape {
    /// An empty index sized for a body of `len` bytes.
    pub(crate) fn for_body(len: usize) -> Self {
        // About one indexed value per 64 bytes in agent traffic; growing past it is fine.
        Tape {
            nodes: Vec::with_capacity(len / 64),
            dropped: false,
        }
    }

    /// A reader starting at the front.
    pub(crate) fn cursor(&self) -> Cursor<'_> {
        Cursor {
            tape: self,
            hint: Cell::new(0),
        }
    }

    /// Pushes a node, or gives up on indexing when its offsets do not fit (see [`Node`]).
    fn push(&mut self, start: usize, end: usize, next: usize) {
        if self.dropped {
            return;
        }
        match (
            u32::try_from(start),
            u32::try_from(end),
            u32::try_from(next),
        ) {
            (Ok(start), Ok(end), Ok(next)) => self.nodes.push(Node { start, end, next }),
            _ => self.give_up(),
        }
    }

    /// Drops the index: a lookup then finds nothing and the decoders scan.
    fn give_up(&mut self) {
        self.dropped = true;
        self.nodes = Vec::new();
    }

    /// Records a value whose end is not known yet; returns its slot.
    pub(crate) fn open(&mut self, start: usize) -> usize {
        self.push(start, start, 0);
        self.nodes.len().saturating_sub(1)
    }

    /// Completes the value in `slot`, which ends at `end`; everything recorded since it
    /// opened is its subtree.
    pub(crate) fn close(&mut self, slot: usize, end: usize) {
        if self.dropped {
            return;
        }
        let (Ok(end), Ok(next)) = (u32::try_from(end), u32::try_from(self.nodes.len())) else {
            self.give_up();
            return;
        };
        if let Some(node) = self.nodes.get_mut(slot) {
            node.end = end;
            node.next = next;
        }
    }

    /// Appends `rest`, the index of the values after this tape's last (the rest of an array,
    /// scanned on another thread), its links moved past this tape's nodes.
    pub(crate) fn append(&mut self, rest: Tape) {
        // A link never points past its own tape's end, so one check of the joined length
        // covers every moved link (not a pass over the nodes: this joins every split decode).
        let joined = self.nodes.len().saturating_add(rest.nodes.len());
        let (false, false, Ok(_), Ok(base)) = (
            self.dropped,
            rest.dropped,
            u32::try_from(joined),
            u32::try_from(self.nodes.len()),
        ) else {
            self.give_up();
            return;
        };
        self.nodes.extend(rest.nodes.into_iter().map(|n| Node {
            next: n.next.saturating_add(base),
            ..n
        }));
    }

    /// Records a value with no indexed children.
    pub(crate) fn leaf(&mut self, span: Range<usize>) {
        let next = self.nodes.len() + 1;
        self.push(span.start, span.end, next);
    }
}

impl<'t> Cursor<'t> {
    /// The tape it reads.
    pub(crate) fn tape(&self) -> &'t Tape {
        self.tape
    }

    /// The node of the value starting at byte `start`, when its children are indexed.
    /// Values start at distinct offsets, and the nodes are sorted by start.
    fn children_of(&self, start: usize) -> Option<Children<'t>> {
        let i = self.find(start)?;
        self.hint.set(i);
        let node = self.tape.nodes.get(i)?;
        // A container whose subtree is empty either is empty or sits at the depth limit;
        // the caller scans those bytes itself.
        let until = widen(node.next);
        (until > i + 1).then_some(Children {
            nodes: &self.tape.nodes,
            at: i + 1,
            until,
        })
    }

    /// Index of the node starting at `start`: galloping forward from the hint, or a binary
    /// search below it.
    fn find(&self, start: usize) -> Option<usize> {
        let start = u32::try_from(start).ok()?;
        let by_start = |n: &Node| n.start;
        let hint = self.hint.get().min(self.tape.nodes.len());
        let from_hint = self.tape.nodes.get(hint..).unwrap_or_default();
        if from_hint.first().is_none_or(|n| n.start > start) {
            let below = self.tape.nodes.get(..hint).unwrap_or_default();
            return below.binary_search_by_key(&start, by_start).ok();
        }
        let mut step = 1;
        while from_hint.get(step).is_some_and(|n| n.start < start) {
            step *= 2;
        }
        let window = from_hint.get(step / 2..(step + 1).min(from_hint.len()))?;
        let i = window.binary_search_by_key(&start, by_start).ok()?;
        Some(hint + step / 2 + i)
    }

    /// The spans of the direct children of the indexed container at `span` (for an object:
    /// key, value, key, value, …), or `None` when its children are not indexed.
    pub(crate) fn child_spans(
        &self,
        span: &Range<usize>,
    ) -> Option<impl Iterator<Item = Range<usize>> + 't> {
        let children = self.children_of(span.start)?;
        Some(children.map(|n| n.span()))
    }

    /// The item spans of the indexed array at `span`, or `None` when it is not indexed.
    pub(crate) fn array_items(&self, span: &Range<usize>) -> Option<Vec<Range<usize>>> {
        Some(self.child_spans(span)?.collect())
    }
}

/// The direct children of a node.
struct Children<'t> {
    nodes: &'t [Node],
    at: usize,
    until: usize,
}

impl Iterator for Children<'_> {
    type Item = Node;

    fn next(&mut self) -> Option<Node> {
        if self.at >= self.until {
            return None;
        }
        let node = *self.nodes.get(self.at)?;
        // `next` always moves forward; the guard keeps a malformed link from looping.
        self.at = widen(node.next).max(self.at + 1);
        Some(node)
    }
}

#[cfg(test)]
mod tests {
    // The expected answers are lists of spans, some of one span.
    #![allow(clippy::single_range_in_vec_init)]
    use super::*;

    /// `[1,[2]]` indexed by hand: the array, its items, the inner array and its item.
    fn small() -> Tape {
        let mut tape = Tape::for_body(7);
        let outer = tape.open(0);
        tape.leaf(1..2);
        let inner = tape.open(3);
        tape.leaf(4..5);
        tape.close(inner, 6);
        tape.close(outer, 7);
        tape
    }

    #[test]
    fn lookups_find_children_by_start() {
        let tape = small();
        let cursor = tape.cursor();
        assert_eq!(cursor.array_items(&(0..7)), Some(vec![1..2, 3..6]));
        assert_eq!(cursor.array_items(&(3..6)), Some(vec![4..5]));
        assert_eq!(cursor.array_items(&(1..2)), None);
    }

    /// An offset that does not fit 32 bits drops the index rather than wrapping, whether it
    /// comes in a value, an end or an appended tape: nothing answers, so the decoders scan
    /// the bytes (a wrapped offset would have answered with the wrong span).
    #[test]
    fn an_offset_past_32_bits_drops_the_index_instead_of_wrapping() {
        let far = usize::try_from(u64::from(u32::MAX) + 10).unwrap_or(usize::MAX);
        let mut tape = small();
        tape.leaf(far..far + 1);
        assert_eq!(tape.cursor().array_items(&(0..7)), None);
        tape.leaf(8..9);
        assert_eq!(tape.cursor().array_items(&(0..7)), None);

        let mut open = Tape::for_body(7);
        let slot = open.open(0);
        open.leaf(1..2);
        open.close(slot, far);
        assert_eq!(open.cursor().array_items(&(0..far)), None);

        let mut front = small();
        let mut rest = Tape::for_body(0);
        let slot = rest.open(far);
        rest.close(slot, far + 2);
        front.append(rest);
        assert_eq!(front.cursor().array_items(&(0..7)), None);
    }

    #[test]
    fn an_appended_tape_links_past_the_front() {
        let mut front = Tape::for_body(7);
        front.leaf(0..1);
        let mut rest = Tape::for_body(7);
        let slot = rest.open(2);
        rest.leaf(3..4);
        rest.close(slot, 5);
        front.append(rest);
        assert_eq!(front.cursor().array_items(&(2..5)), Some(vec![3..4]));
    }
}
