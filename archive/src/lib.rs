//! foldwire-archive (not yet implemented).
