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

/// One indexed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Node {
    /// First byte of the value.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
    /// Index of the first node after this value's subtree: its next sibling, if any.
    pub next: usize,
}

/// The index: nodes in pre-order (a container, then its keys and values), so a container's
/// first child is the node right after it and each child links to the one after it.
/// Read through a [`Cursor`]; a body decoded in shares on several threads shares one tape,
/// each share with a cursor of its own.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Tape {
    nodes: Vec<Node>,
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
        }
    }

    /// A reader starting at the front.
    pub(crate) fn cursor(&self) -> Cursor<'_> {
        Cursor {
            tape: self,
            hint: Cell::new(0),
        }
    }

    /// Records a value whose end is not known yet; returns its slot.
    pub(crate) fn open(&mut self, start: usize) -> usize {
        self.nodes.push(Node {
            start,
            end: start,
            next: 0,
        });
        self.nodes.len() - 1
    }

    /// Completes the value in `slot`, which ends at `end`; everything recorded since it
    /// opened is its subtree.
    pub(crate) fn close(&mut self, slot: usize, end: usize) {
        let next = self.nodes.len();
        if let Some(node) = self.nodes.get_mut(slot) {
            node.end = end;
            node.next = next;
        }
    }

    /// Appends `rest`, the index of the values after this tape's last (the rest of an array,
    /// scanned on another thread), its links moved past this tape's nodes.
    pub(crate) fn append(&mut self, rest: Tape) {
        let base = self.nodes.len();
        self.nodes.extend(rest.nodes.into_iter().map(|n| Node {
            next: n.next + base,
            ..n
        }));
    }

    /// Records a value with no indexed children.
    pub(crate) fn leaf(&mut self, span: Range<usize>) {
        let next = self.nodes.len() + 1;
        self.nodes.push(Node {
            start: span.start,
            end: span.end,
            next,
        });
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
        (node.next > i + 1).then_some(Children {
            nodes: &self.tape.nodes,
            at: i + 1,
            until: node.next,
        })
    }

    /// Index of the node starting at `start`: galloping forward from the hint, or a binary
    /// search below it.
    fn find(&self, start: usize) -> Option<usize> {
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
        Some(children.map(|n| n.start..n.end))
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
        self.at = node.next.max(self.at + 1);
        Some(node)
    }
}
