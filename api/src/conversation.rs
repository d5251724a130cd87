//! The decoded form of one request.

use bytes::Bytes;

use crate::message::{Message, Role};
use crate::wire::Wire;

/// One wire message as the client sent it (an Anthropic message, an OpenAI Chat message, a
/// Responses input item, a Gemini content), or one foldwire created.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The author.
    pub role: Role,
    /// The exact bytes of the whole wire message; `None` for entries foldwire created.
    pub raw: Option<Bytes>,
    /// How many units the decoder cut it into. The codec re-emits `raw` unchanged when
    /// exactly these units survive, unmodified and in order.
    pub unit_count: usize,
}

/// A top-level field a stage sets or replaces in the request body (tools the proxy injects,
/// a system block with a cache marker). The codec writes it in place of the original field,
/// or appends it when the body had none.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldOverride {
    /// The top-level key.
    pub key: String,
    /// The new JSON value, serialized.
    pub value: Bytes,
}

/// System, tools and the ordered messages of one request, plus everything else in the body
/// kept verbatim.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// The wire it was decoded from and will be encoded to.
    pub wire: Wire,
    /// The request body exactly as received; every raw span points into it.
    pub source: Bytes,
    /// The byte range of the messages array (`messages`, `input`, `contents`) inside `source`;
    /// everything outside it is re-emitted verbatim unless overridden.
    pub messages_span: std::ops::Range<usize>,
    /// The wire messages, in the order they were received, then any foldwire created.
    pub entries: Vec<Entry>,
    /// The foldable units in store order.
    pub messages: Vec<Message>,
    /// Top-level fields replaced or added by stages.
    pub overrides: Vec<FieldOverride>,
    /// The model named in the body or path, if any.
    pub model: Option<String>,
    /// Whether the client asked for a streamed response.
    pub stream: bool,
}

impl Conversation {
    /// Bytes outside the messages array (system, tools, params) — what every request carries.
    pub fn frame_len(&self) -> usize {
        self.source.len().saturating_sub(self.messages_span.len())
    }

    /// Appends a new entry and returns its index.
    pub fn push_entry(&mut self, role: Role) -> usize {
        self.entries.push(Entry {
            role,
            raw: None,
            unit_count: 0,
        });
        self.entries.len() - 1
    }

    /// Index of the unit with this ref, if it is on the wire.
    pub fn position_of_ref(&self, r: crate::ids::Ref) -> Option<usize> {
        self.messages.iter().position(|m| m.r#ref == Some(r))
    }

    /// [`Self::position_of_ref`] of each of `refs`, in order, from one pass over the units:
    /// a first turn that folds a whole session asks for thousands.
    pub fn positions_of_refs(&self, refs: &[crate::ids::Ref]) -> Vec<Option<usize>> {
        let mut wanted: Vec<(crate::ids::Ref, usize)> = refs.iter().copied().zip(0..).collect();
        wanted.sort_unstable();
        let mut found = vec![None; refs.len()];
        let mut left = refs.len();
        for (i, m) in self.messages.iter().enumerate() {
            if left == 0 {
                break;
            }
            let Some(r) = m.r#ref else { continue };
            let first = wanted.partition_point(|(w, _)| *w < r);
            for (_, slot) in wanted.iter().skip(first).take_while(|(w, _)| *w == r) {
                if let Some(place @ None) = found.get_mut(*slot) {
                    *place = Some(i);
                    left -= 1;
                }
            }
        }
        found
    }
}

/// The conversation `wire.decode` made on a session's last turn, before any stage changed
/// it, carried to the next turn ([`crate::Turn::carry`]) so the decoder reuses the wire
/// messages a client resends instead of decoding its whole history again; `wire.decode`
/// replaces it with the turn's own.
#[derive(Debug, Clone)]
pub struct LastDecode(pub Conversation);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Ref;
    use crate::message::Origin;

    #[test]
    fn positions_of_refs_match_one_lookup_each() {
        let unit = |r: Option<u32>| {
            let mut m = Message::synthesized(0, Role::User, "x", Origin::Client, Bytes::new());
            m.r#ref = r.map(Ref);
            m
        };
        let conversation = Conversation {
            wire: Wire::Anthropic,
            source: Bytes::new(),
            messages_span: 0..0,
            entries: Vec::new(),
            // Out of order, a unit without a ref, and a ref on two units (the first wins).
            messages: [Some(7), None, Some(3), Some(9), Some(3), Some(1)]
                .into_iter()
                .map(unit)
                .collect(),
            overrides: Vec::new(),
            model: None,
            stream: false,
        };
        let asked: Vec<Ref> = [9, 3, 4, 1, 3, 7, 0].into_iter().map(Ref).collect();
        let one_by_one: Vec<Option<usize>> = asked
            .iter()
            .map(|r| conversation.position_of_ref(*r))
            .collect();
        assert_eq!(
            one_by_one,
            vec![Some(3), Some(2), None, Some(5), Some(2), Some(0), None]
        );
        assert_eq!(conversation.positions_of_refs(&asked), one_by_one);
        assert!(conversation.positions_of_refs(&[]).is_empty());
    }
}
