//! The responses a stitched answer stands for. When the compress loop answers in several
//! rounds, a streamed answer keeps the first round's response id (clients check it stays
//! one), but on Responses the provider stored every round as a response of its own, and the
//! first ends in the proxy's call. A client that chains on the id it was given
//! (`previous_response_id`) means the whole answer: the last round, whose stored input holds
//! every round. The ids are kept here, the newest [`KEPT`], and a chaining request is sent on
//! to the last round.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// How many stitched answers are remembered.
pub const KEPT: usize = 4096;

/// The shown id → last round's id of recent stitched answers.
#[derive(Debug, Default)]
pub struct ChainedIds {
    inner: Mutex<Ids>,
}

#[derive(Debug, Default)]
struct Ids {
    by_shown: HashMap<String, String>,
    order: VecDeque<String>,
}

impl ChainedIds {
    /// Remembers that the answer shown as `shown` is stored, whole, as `last`.
    pub fn record(&self, shown: &str, last: &str) {
        let Ok(mut ids) = self.inner.lock() else {
            return;
        };
        if ids
            .by_shown
            .insert(shown.to_owned(), last.to_owned())
            .is_none()
        {
            ids.order.push_back(shown.to_owned());
        }
        while ids.order.len() > KEPT {
            if let Some(old) = ids.order.pop_front() {
                ids.by_shown.remove(&old);
            }
        }
    }

    /// The response that holds the whole answer shown as `shown`, when it was stitched.
    pub fn last_round_of(&self, shown: &str) -> Option<String> {
        self.inner.lock().ok()?.by_shown.get(shown).cloned()
    }

    /// True when no stitched answer is remembered.
    pub fn is_empty(&self) -> bool {
        self.inner
            .lock()
            .map_or(true, |ids| ids.by_shown.is_empty())
    }
}

/// `body` with the value of `"key": "from"` replaced by `"to"` (the other bytes as sent),
/// or `None` when no such pair occurs.
pub fn with_chained_id(body: &[u8], key: &str, from: &str, to: &str) -> Option<Vec<u8>> {
    let key = format!("\"{key}\"");
    let quoted = serde_json::to_string(from).ok()?;
    let skip_ws = |mut at: usize| {
        while body.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        at
    };
    // The key's occurrence whose value is the id: a `"key"` inside some text is followed by
    // something else.
    let at = memchr::memmem::find_iter(body, key.as_bytes()).find_map(|key_at| {
        let colon = skip_ws(key_at + key.len());
        let value = skip_ws(colon + 1);
        (body.get(colon) == Some(&b':') && body.get(value..)?.starts_with(quoted.as_bytes()))
            .then_some(value)
    })?;
    let mut out = Vec::with_capacity(body.len() + to.len());
    out.extend_from_slice(body.get(..at)?);
    out.extend_from_slice(serde_json::to_string(to).ok()?.as_bytes());
    out.extend_from_slice(body.get(at + quoted.len()..)?);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_are_forgotten_first_and_ids_are_replaced_where_the_key_names_them() {
        let ids = ChainedIds::default();
        assert!(ids.is_empty());
        for i in 0..=KEPT {
            ids.record(&format!("resp_{i}"), &format!("resp_{i}_last"));
        }
        assert_eq!(ids.last_round_of("resp_0"), None);
        assert_eq!(ids.last_round_of("resp_1").as_deref(), Some("resp_1_last"));
        let body = br#"{"input":[{"role":"user","content":"previous_response_id"},{"role":"user","content":"resp_1"}],"previous_response_id" : "resp_1"}"#;
        let out = with_chained_id(body, "previous_response_id", "resp_1", "resp_1_last").unwrap();
        assert_eq!(
            out,
            br#"{"input":[{"role":"user","content":"previous_response_id"},{"role":"user","content":"resp_1"}],"previous_response_id" : "resp_1_last"}"#
        );
        assert_eq!(with_chained_id(body, "conversation", "resp_1", "x"), None);
    }
}
