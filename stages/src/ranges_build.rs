//! Stage module `ranges_build` (not yet implemented).
