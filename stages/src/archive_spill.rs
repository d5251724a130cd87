//! Stage module `archive_spill` (not yet implemented).
