//! Stage module `refs_mint` (not yet implemented).
