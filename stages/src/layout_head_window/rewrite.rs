//! The rewrite metric: how many tokens of a request differ from the previous request of the
//! session, counted from the first unit that changed to the end.

use foldwire_core::MessageId;

use super::reset::SentUnit;

/// One request's size and rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Rewrite {
    /// Estimated tokens of the request (frame and units).
    pub request_tokens: u64,
    /// Tokens from the first unit that differs from the previous request to the end; 0 when
    /// the request only appends to the previous one.
    pub rewritten_tokens: u64,
    /// Tokens of units appended after an unchanged previous request (not a rewrite, shown
    /// for comparison with metrics that count appends).
    pub appended_tokens: u64,
}

/// Measures a request against the previous one. `frame_changed` (system, tools or params
/// differ) rewrites everything, frame included.
pub fn measure(
    previous: &[SentUnit],
    current: &[SentUnit],
    frame_tokens: u64,
    frame_changed: bool,
) -> Rewrite {
    let units: u64 = current.iter().map(|u| u.tokens).sum();
    let request_tokens = frame_tokens + units;
    if frame_changed {
        return Rewrite {
            request_tokens,
            rewritten_tokens: request_tokens,
            appended_tokens: 0,
        };
    }
    let same = previous
        .iter()
        .zip(current)
        .take_while(|(a, b)| a.id == b.id)
        .count();
    let tail: u64 = current.iter().skip(same).map(|u| u.tokens).sum();
    if same == previous.len() {
        Rewrite {
            request_tokens,
            rewritten_tokens: 0,
            appended_tokens: tail,
        }
    } else {
        Rewrite {
            request_tokens,
            rewritten_tokens: tail,
            appended_tokens: 0,
        }
    }
}

/// Tokens of the longest prefix of `current` (ids with tokens) identical to `previous`.
pub fn unchanged_prefix_tokens<'a>(
    previous: &[SentUnit],
    current: impl Iterator<Item = (&'a MessageId, u64)>,
) -> u64 {
    previous
        .iter()
        .zip(current)
        .take_while(|(a, (id, _))| &a.id == *id)
        .map(|(_, (_, t))| t)
        .sum()
}
