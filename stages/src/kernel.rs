//! Stage module `kernel` (not yet implemented).
