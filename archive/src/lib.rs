//! foldwire-archive.
