//! The last decodes of requests that name no session, kept so the next request of the same
//! conversation decodes only what it added.
//!
//! A request without a session header is decoded before the engine sees it: its session is
//! found by its history ([`super::identity::resolve_by_history`]), and the engine's own
//! turn-to-turn carry of the decode starts only once the session is known. Such a client
//! resends its whole history each turn, so the proxy keeps a few recent decodes per client
//! (wire, upstream and credentials) and resumes from the one whose body shares the longest
//! start with the new one ([`foldwire_wire::request::decode_after`], which gives exactly
//! what a fresh decode gives). Each kept decode holds its request's body: the proxy keeps
//! at most [`CAPACITY`] of them, and none idle for longer than [`IDLE_AFTER`].

use std::time::{Duration, Instant};

use bytes::Bytes;
use foldwire_core::{Conversation, Wire};
use foldwire_wire::request;
use foldwire_wire::shared_bytes::common_prefix_len;

/// Decodes kept at most, over all clients.
pub const CAPACITY: usize = 16;

/// A decode not resumed from for this long is dropped (the engine drops its own carry of
/// an idle session after the same time).
pub const IDLE_AFTER: Duration = Duration::from_secs(120);

/// A resume is tried only when the bodies share at least this many bytes: less than that
/// is a different conversation of the same client.
const MIN_SHARED: usize = 4096;

/// Recent decodes of requests without a session header.
#[derive(Debug, Default)]
pub struct RecentDecodes {
    slots: std::sync::Mutex<Vec<Slot>>,
}

#[derive(Debug)]
struct Slot {
    client: [u8; 32],
    wire: Wire,
    decode: Conversation,
    used: Instant,
}

impl RecentDecodes {
    /// Decodes `body` of `client` (a digest of its wire, upstream and credentials), from
    /// the kept decode that shares the most bytes with it when there is one, and keeps this
    /// decode for the client's next request. Returns the decode (`None` when the body does
    /// not decode) and how many wire messages were reused.
    pub fn decode(
        &self,
        client: [u8; 32],
        wire: Wire,
        body: &Bytes,
    ) -> (Option<Conversation>, usize) {
        let now = Instant::now();
        let prior = self.take_best(client, wire, body, now);
        let decoded = match prior {
            Some(prior) => request::decode_after(wire, body.clone(), prior),
            None => request::decode(wire, body.clone()).map(|c| (c, 0)),
        };
        let Ok((conversation, reused)) = decoded else {
            return (None, 0);
        };
        self.keep(Slot {
            client,
            wire,
            decode: conversation.clone(),
            used: now,
        });
        (Some(conversation), reused)
    }

    /// How many decodes are kept.
    pub fn len(&self) -> usize {
        self.slots.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// True when none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes and returns the client's kept decode whose body starts like `body` for the
    /// longest, dropping the decodes that idled too long on the way. The bodies are compared
    /// outside the lock every header-less request takes (a comparison reads megabytes).
    fn take_best(
        &self,
        client: [u8; 32],
        wire: Wire,
        body: &[u8],
        now: Instant,
    ) -> Option<Conversation> {
        let mine: Vec<Slot> = {
            let Ok(mut slots) = self.slots.lock() else {
                return None;
            };
            slots.retain(|s| now.saturating_duration_since(s.used) < IDLE_AFTER);
            let (mine, others) = std::mem::take(&mut *slots)
                .into_iter()
                .partition(|s| s.client == client && s.wire == wire);
            *slots = others;
            mine
        };
        let best = mine
            .iter()
            .enumerate()
            .map(|(i, s)| (i, common_prefix_len(&s.decode.source, body)))
            .filter(|(_, shared)| *shared >= MIN_SHARED)
            .max_by_key(|(_, shared)| *shared)
            .map(|(i, _)| i);
        let mut taken = None;
        for (i, slot) in mine.into_iter().enumerate() {
            if Some(i) == best {
                taken = Some(slot.decode);
            } else {
                self.keep(slot);
            }
        }
        taken
    }

    /// Keeps a decode, dropping the least recently used one beyond [`CAPACITY`].
    fn keep(&self, slot: Slot) {
        let Ok(mut slots) = self.slots.lock() else {
            return;
        };
        slots.push(slot);
        while slots.len() > CAPACITY {
            let oldest = slots
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.used)
                .map(|(i, _)| i);
            match oldest {
                Some(i) => {
                    slots.swap_remove(i);
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// An Anthropic body of `turns` user/assistant pairs, each long enough that a few of
    /// them pass [`MIN_SHARED`].
    fn body(topic: &str, turns: usize) -> Bytes {
        let messages: Vec<String> = (0..turns)
            .flat_map(|i| {
                let text = format!("{topic} {i} {}", "x".repeat(900));
                [
                    format!(r#"{{"role":"user","content":"{text}"}}"#),
                    format!(r#"{{"role":"assistant","content":"ok {i}"}}"#),
                ]
            })
            .collect();
        Bytes::from(format!(
            r#"{{"model":"m","max_tokens":10,"messages":[{}]}}"#,
            messages.join(",")
        ))
    }

    #[test]
    fn a_growing_conversation_decodes_only_what_it_added_and_equals_a_fresh_decode() {
        let recent = RecentDecodes::default();
        let client = [1; 32];
        let (first, reused) = recent.decode(client, Wire::Anthropic, &body("a", 8));
        assert_eq!((first.is_some(), reused), (true, 0));
        let next = body("a", 9);
        let (second, reused) = recent.decode(client, Wire::Anthropic, &next);
        // All sixteen messages of the first body but the last are reused (the last one's
        // closing bytes moved when the array grew).
        assert!(reused >= 15, "reused {reused}");
        assert_eq!(second, request::decode(Wire::Anthropic, next).ok());
        assert_eq!(recent.len(), 1);
    }

    #[test]
    fn clients_and_conversations_keep_their_own_decodes() {
        let recent = RecentDecodes::default();
        let (one, two) = ([1; 32], [2; 32]);
        recent.decode(one, Wire::Anthropic, &body("a", 8));
        recent.decode(one, Wire::Anthropic, &body("b", 8));
        recent.decode(two, Wire::Anthropic, &body("a", 8));
        assert_eq!(recent.len(), 3);
        // Client one's conversation `a` resumes from its own decode, not from `b`'s or from
        // client two's.
        let (_, reused) = recent.decode(one, Wire::Anthropic, &body("a", 9));
        assert!(reused >= 15, "reused {reused}");
        // Another wire, or a body that shares too little, decodes afresh.
        let (_, reused) = recent.decode(two, Wire::OpenAiChat, &body("a", 9));
        assert_eq!(reused, 0);
        let (_, reused) = recent.decode(two, Wire::Anthropic, &body("c", 9));
        assert_eq!(reused, 0);
        // A body that does not decode keeps nothing and is reported as such.
        let before = recent.len();
        let (none, _) = recent.decode(
            two,
            Wire::Anthropic,
            &Bytes::from_static(b"{\"messages\":["),
        );
        assert!(none.is_none());
        assert_eq!(recent.len(), before);
    }

    #[test]
    fn at_most_capacity_decodes_are_kept_and_idle_ones_go() {
        let recent = RecentDecodes::default();
        for i in 0..CAPACITY + 5 {
            let client = [u8::try_from(i).unwrap(); 32];
            recent.decode(client, Wire::Anthropic, &body("a", 5));
        }
        assert_eq!(recent.len(), CAPACITY);
        // The oldest were dropped: client 0 decodes afresh, the newest resumes.
        let (_, reused) = recent.decode([0; 32], Wire::Anthropic, &body("a", 6));
        assert_eq!(reused, 0);
        let newest = [u8::try_from(CAPACITY + 4).unwrap(); 32];
        let (_, reused) = recent.decode(newest, Wire::Anthropic, &body("a", 6));
        assert!(reused > 0);
        // A decode idle past IDLE_AFTER is gone at the next lookup.
        let later = Instant::now() + IDLE_AFTER + Duration::from_secs(1);
        assert!(
            recent
                .take_best(newest, Wire::Anthropic, &body("a", 7), later)
                .is_none()
        );
        assert!(recent.is_empty());
    }
}
