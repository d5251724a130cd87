//! # foldwire-test-kit
//!
//! Helpers the tests and benches of several crates share, in one crate they take as a
//! dev-dependency instead of including each other's test files by path:
//!
//! - [`archive`]: an archive that notes which thread wrote each batch.
//! - [`conv`]: conversations built unit by unit in each wire's block shapes, minted turns
//!   and a stage context (the kernel and strategy tests).
//! - [`layout`]: conversations of labelled, sized blocks and turns for the head-window
//!   layout tests.
//! - [`probe`]: the seed's cache probe (a reset, then requests until the new head fills),
//!   shared by the probe test and the layout bench.
// A test kit: a helper that cannot build what a test asked for fails that test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod archive;
pub mod conv;
pub mod layout;
pub mod probe;
