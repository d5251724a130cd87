//! The provider wire formats foldwire speaks.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A provider API wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wire {
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAiChat,
    /// OpenAI Responses (`POST /v1/responses`).
    OpenAiResponses,
    /// Google Gemini (`:generateContent` / `:streamGenerateContent`).
    Gemini,
}

impl Wire {
    /// Every wire, in a fixed order.
    pub const ALL: [Wire; 4] = [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ];

    /// The stable command-line / config name of this wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic",
            Wire::OpenAiChat => "openai-chat",
            Wire::OpenAiResponses => "openai-responses",
            Wire::Gemini => "gemini",
        }
    }
}

impl fmt::Display for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a wire name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown wire {given:?}: expected one of anthropic, openai-chat, openai-responses, gemini")]
pub struct UnknownWire {
    /// What was given.
    pub given: String,
}

impl FromStr for Wire {
    type Err = UnknownWire;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Wire::ALL
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| UnknownWire {
                given: s.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_is_named() {
        for w in Wire::ALL {
            assert_eq!(w.as_str().parse::<Wire>(), Ok(w));
        }
        let err = "claude".parse::<Wire>().unwrap_err();
        assert!(err.to_string().contains("\"claude\""));
    }
}
