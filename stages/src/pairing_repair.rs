//! Stage module `pairing_repair` (not yet implemented).
