//! Hand-built conversations for the kernel tests; they live in `foldwire-test-kit` so other
//! crates' tests use the same ones without including this file by path.
pub use foldwire_test_kit::conv::*;
