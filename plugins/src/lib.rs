//! foldwire-plugins.
