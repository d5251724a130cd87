//! Substrings each wire's shapes of a kind always contain, searched with searchers built
//! once: a unit without any of its wire's markers is passed over without being parsed.
//! Every unit of every request goes through such a check, so it is one vectorized pass per
//! marker and nothing more.

use foldwire_core::Wire;
use memchr::memmem::Finder;

use super::{Dialect, dialect};

/// One searcher per marker, per wire.
pub struct WireMarkers {
    finders: [Vec<Finder<'static>>; Wire::ALL.len()],
}

impl WireMarkers {
    /// The searchers for the markers `of` names for each wire's dialect.
    pub fn new(of: impl Fn(&dyn Dialect) -> &'static [&'static [u8]]) -> Self {
        WireMarkers {
            finders: Wire::ALL
                .map(|wire| of(dialect(wire)).iter().map(|m| Finder::new(*m)).collect()),
        }
    }

    /// Whether `raw`, a span of a `wire` request body, contains one of the wire's markers.
    pub fn any_in(&self, wire: Wire, raw: &[u8]) -> bool {
        let at = Wire::ALL
            .iter()
            .position(|w| *w == wire)
            .unwrap_or_default();
        self.finders
            .get(at)
            .is_some_and(|finders| finders.iter().any(|f| f.find(raw).is_some()))
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
}
