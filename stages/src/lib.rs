//! foldwire-stages.
