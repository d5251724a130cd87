//! Stage module `wire_codec` (not yet implemented).
