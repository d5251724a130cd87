//! Token estimators: the tiktoken o200k tokenizer (the char estimate lives in core as
//! `CharEstimator`), and image token estimates by each provider's published rules.

use std::sync::OnceLock;

use foldwire_core::{CharEstimator, TokenEstimator, Wire};
use tiktoken_rs::CoreBPE;

/// The o200k BPE, loaded once per process; `None` if it failed to load, in which case the
/// estimator falls back to the char estimate rather than failing a turn.
fn o200k() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()).as_ref()
}

/// Counts tokens with the o200k_base BPE (GPT-4o family); a close estimate for the other
/// providers, whose tokenizers are not public.
#[derive(Debug, Clone, Copy, Default)]
pub struct TiktokenEstimator;

impl TiktokenEstimator {
    /// An estimator; the BPE loads on first use.
    pub fn new() -> Self {
        TiktokenEstimator
    }

    /// True when the BPE loaded (false means the char estimate is being used instead).
    pub fn is_loaded(&self) -> bool {
        o200k().is_some()
    }
}

impl TokenEstimator for TiktokenEstimator {
    fn name(&self) -> &'static str {
        "tiktoken-o200k"
    }

    fn text_tokens(&self, text: &str) -> u64 {
        match o200k() {
            Some(bpe) => bpe.encode_ordinary(text).len() as u64,
            None => CharEstimator.text_tokens(text),
        }
    }
}

/// Anthropic: the long side is at most 1568 px and the area at most 1.15 megapixels.
const ANTHROPIC_MAX_SIDE: f64 = 1568.0;
const ANTHROPIC_MAX_PIXELS: f64 = 1_150_000.0;
const ANTHROPIC_PIXELS_PER_TOKEN: f64 = 750.0;
/// OpenAI high detail: fit 2048×2048, then the short side to 768, then 512-px tiles.
const OPENAI_FIT: f64 = 2048.0;
const OPENAI_SHORT_SIDE: f64 = 768.0;
const OPENAI_TILE: f64 = 512.0;
const OPENAI_BASE_TOKENS: u64 = 85;
const OPENAI_TILE_TOKENS: u64 = 170;
/// Gemini: 258 tokens for an image at most 384 px both ways, else 258 per 768×768 tile.
const GEMINI_SMALL: u64 = 384;
const GEMINI_TILE: u64 = 768;
const GEMINI_TILE_TOKENS: u64 = 258;

/// Estimated input tokens of one image of `width` × `height` pixels on `wire`, by each
/// provider's published rule. A zero-sized image costs nothing.
pub fn image_tokens(wire: Wire, width: u32, height: u32) -> u64 {
    if width == 0 || height == 0 {
        return 0;
    }
    let (w, h) = (f64::from(width), f64::from(height));
    match wire {
        Wire::Anthropic => {
            let scale = 1.0_f64
                .min(ANTHROPIC_MAX_SIDE / w.max(h))
                .min((ANTHROPIC_MAX_PIXELS / (w * h)).sqrt());
            let (w, h) = ((w * scale).floor().max(1.0), (h * scale).floor().max(1.0));
            (w * h / ANTHROPIC_PIXELS_PER_TOKEN).ceil() as u64
        }
        Wire::OpenAiChat | Wire::OpenAiResponses => {
            let fit = 1.0_f64.min(OPENAI_FIT / w.max(h));
            let (w, h) = (w * fit, h * fit);
            let short = 1.0_f64.min(OPENAI_SHORT_SIDE / w.min(h));
            let (w, h) = ((w * short).floor().max(1.0), (h * short).floor().max(1.0));
            let tiles = (w / OPENAI_TILE).ceil() as u64 * (h / OPENAI_TILE).ceil() as u64;
            OPENAI_BASE_TOKENS + OPENAI_TILE_TOKENS * tiles
        }
        Wire::Gemini => {
            let (w, h) = (u64::from(width), u64::from(height));
            if w <= GEMINI_SMALL && h <= GEMINI_SMALL {
                GEMINI_TILE_TOKENS
            } else {
                w.div_ceil(GEMINI_TILE) * h.div_ceil(GEMINI_TILE) * GEMINI_TILE_TOKENS
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiktoken_counts_known_strings() {
        let e = TiktokenEstimator::new();
        assert!(e.is_loaded());
        assert_eq!(e.text_tokens(""), 0);
        assert_eq!(e.text_tokens("hello"), 1);
        // o200k splits this into a handful of tokens, far fewer than its 44 bytes.
        let n = e.text_tokens("The quick brown fox jumps over the lazy dog.");
        assert!((8..=12).contains(&n), "{n}");
        assert_eq!(e.name(), "tiktoken-o200k");
    }

    #[test]
    fn anthropic_images_scale_then_divide_by_750() {
        // 200×200 = 40,000 px → 54 tokens (40,000 / 750 rounded up).
        assert_eq!(image_tokens(Wire::Anthropic, 200, 200), 54);
        // 1000×1000 fits both limits: 1,000,000 / 750 → 1334.
        assert_eq!(image_tokens(Wire::Anthropic, 1000, 1000), 1334);
        // A huge image is capped near 1.15 MP / 750 ≈ 1534.
        let big = image_tokens(Wire::Anthropic, 8000, 6000);
        assert!((1500..=1534).contains(&big), "{big}");
        // A long thin image is capped by the 1568-px long side.
        assert_eq!(
            image_tokens(Wire::Anthropic, 3136, 100),
            (1568.0_f64 * 50.0 / 750.0).ceil() as u64
        );
    }

    #[test]
    fn openai_images_use_512_tiles_after_fitting() {
        // OpenAI's own worked examples: 1024×1024 → 768×768 → 4 tiles → 765.
        assert_eq!(image_tokens(Wire::OpenAiChat, 1024, 1024), 765);
        // 2048×4096 → 1024×2048 → 768×1536 → 6 tiles → 1105.
        assert_eq!(image_tokens(Wire::OpenAiResponses, 2048, 4096), 1105);
        // A small image is one tile.
        assert_eq!(image_tokens(Wire::OpenAiChat, 100, 100), 255);
    }

    #[test]
    fn gemini_images_are_258_per_tile() {
        assert_eq!(image_tokens(Wire::Gemini, 384, 384), 258);
        assert_eq!(image_tokens(Wire::Gemini, 385, 100), 258);
        assert_eq!(image_tokens(Wire::Gemini, 1536, 1000), 258 * 4);
        assert_eq!(image_tokens(Wire::Gemini, 0, 10), 0);
    }
}
