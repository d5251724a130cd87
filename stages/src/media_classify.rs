//! Stage module `media_classify` (not yet implemented).
