//! Fold policies (not yet implemented).
