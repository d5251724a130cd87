//! Summarizers (not yet implemented).
