//! # foldwire-plugins
//!
//! The bundled strategies, registered at link time: fold policies (`fold.*`) and
//! summarizers (`summarizer.*`). Depending on this crate also links every built-in stage.
//!
//! inventory only sees crates the final binary references, so every binary and integration
//! test that relies on registrations calls [`link`]: a crate listed in `Cargo.toml` but never
//! named in code silently loses its plugins.

pub mod fallback;
pub mod fold_policy;
pub mod http;
pub mod layout;
pub mod llm;
pub mod protocol;
pub mod sandbox;
pub mod summarizer;

/// Names every crate whose link-time registrations foldwire relies on, so none is dropped.
pub fn link() {
    foldwire_stages::link();
}
