//! Token budgets and the estimator trait.

use serde::{Deserialize, Serialize};

/// How many tokens a request may use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// The model's context window, in tokens.
    pub window: u64,
    /// Tokens reserved for the response.
    pub reserve: u64,
    /// Calibration factor real/estimated (1.0 = trust the estimator).
    pub calibration: f64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            window: 200_000,
            reserve: 16_000,
            calibration: 1.0,
        }
    }
}

impl Budget {
    /// Lower and upper bounds on the calibration factor: usage reports outside them are
    /// treated as noise, not as a reason to halve or double every estimate.
    pub const CALIBRATION_BOUNDS: (f64, f64) = (0.5, 2.0);

    /// This budget for a model window of `window` tokens; the response reserve never takes
    /// more than a quarter of it, so small (or learned) windows keep room for the request.
    pub fn with_window(self, window: u64) -> Self {
        Budget {
            window,
            reserve: self.reserve.min(window / 4),
            ..self
        }
    }

    /// Estimated tokens available for the request itself.
    pub fn available(&self) -> u64 {
        let raw = self.window.saturating_sub(self.reserve) as f64;
        let factor = self
            .calibration
            .clamp(Self::CALIBRATION_BOUNDS.0, Self::CALIBRATION_BOUNDS.1);
        (raw / factor) as u64
    }
}

/// Estimates token counts without calling a provider.
pub trait TokenEstimator: Send + Sync + std::fmt::Debug {
    /// The estimator's name, for reports.
    fn name(&self) -> &'static str;

    /// Tokens in a piece of text.
    fn text_tokens(&self, text: &str) -> u64;

    /// Tokens a raw JSON span costs when the provider tokenizes it; by default the text
    /// estimate of its UTF-8 form.
    fn raw_tokens(&self, raw: &[u8]) -> u64 {
        self.text_tokens(&crate::text::utf8_lossy(raw))
    }
}

/// The fast estimate: about four bytes per token, never zero for non-empty text.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharEstimator;

impl TokenEstimator for CharEstimator {
    fn name(&self) -> &'static str {
        "chars"
    }

    fn text_tokens(&self, text: &str) -> u64 {
        (text.len() as u64).div_ceil(4)
    }

    fn raw_tokens(&self, raw: &[u8]) -> u64 {
        (raw.len() as u64).div_ceil(4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_respects_reserve_and_calibration() {
        let mut b = Budget {
            window: 10_000,
            reserve: 2_000,
            calibration: 1.0,
        };
        assert_eq!(b.available(), 8_000);
        b.calibration = 2.0;
        assert_eq!(b.available(), 4_000);
        b.calibration = 100.0;
        assert_eq!(b.available(), 4_000, "calibration is bounded");
        assert_eq!(CharEstimator.text_tokens("abcde"), 2);
        let small = Budget::default().with_window(8_000);
        assert_eq!((small.window, small.reserve), (8_000, 2_000));
        let large = Budget::default().with_window(1_000_000);
        assert_eq!(large.reserve, Budget::default().reserve);
    }
}
