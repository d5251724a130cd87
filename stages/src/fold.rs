//! Stage module `fold` (not yet implemented).
