//! Substrings each wire's shapes of a kind always contain, searched with searchers built
//! once: a unit without any of its wire's markers is passed over without being parsed.
//! Every unit of every request goes through such a check, so it is one vectorized pass over
//! the unit for all of a wire's markers and nothing more.

use foldwire_core::Wire;

use super::{Dialect, dialect};
use crate::any_of::AnyOf;

/// One searcher per wire, for all of that wire's markers.
pub struct WireMarkers {
    searchers: [Option<AnyOf>; Wire::ALL.len()],
}

impl WireMarkers {
    /// The searchers for the markers `of` names for each wire's dialect.
    pub fn new(of: impl Fn(&dyn Dialect) -> &'static [&'static [u8]]) -> Self {
        WireMarkers {
            searchers: Wire::ALL.map(|wire| AnyOf::new(of(dialect(wire)))),
        }
    }

    /// Whether `raw`, a span of a `wire` request body, contains one of the wire's markers.
    pub fn any_in(&self, wire: Wire, raw: &[u8]) -> bool {
        let at = Wire::ALL
            .iter()
            .position(|w| *w == wire)
            .unwrap_or_default();
        self.searchers
            .get(at)
            .is_some_and(|s| s.as_ref().is_some_and(|s| s.is_match(raw)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wire_searches_for_its_own_markers() {
        let markers = WireMarkers::new(|d| d.inline_image_markers());
        let gemini_part = br#"{"inline_data":{"mime_type":"image/png","data":"iVBOR"}}"#;
        assert!(markers.any_in(Wire::Gemini, gemini_part));
        assert!(!markers.any_in(Wire::Anthropic, gemini_part));
        let data_url = br#"{"url":"data:image/png;base64,iVBOR"}"#;
        for wire in Wire::ALL {
            assert!(markers.any_in(wire, data_url), "{wire}");
            assert!(!markers.any_in(wire, b"plain text"), "{wire}");
        }
    }

    /// With several markers (one vectorized pass where the machine has it), each marker is
    /// found anywhere in a long span, and a span without any is passed over.
    #[test]
    fn every_marker_is_found_in_one_pass() {
        let markers = WireMarkers::new(|d| d.media_markers());
        for wire in Wire::ALL {
            let all = dialect(wire).media_markers();
            let filler = "tool output line without the words\n".repeat(2000);
            assert!(!markers.any_in(wire, filler.as_bytes()), "{wire}");
            for m in all {
                for at in [0, filler.len() / 2, filler.len()] {
                    let mut raw = filler.clone().into_bytes();
                    raw.splice(at..at, m.iter().copied());
                    assert!(markers.any_in(wire, &raw), "{wire}: {:?} at {at}", m);
                }
            }
        }
    }
}
