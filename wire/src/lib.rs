//! foldwire-wire.
