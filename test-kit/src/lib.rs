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
//! - [`proptest_cases`]: how many cases a property test runs.
// A test kit: a helper that cannot build what a test asked for fails that test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod archive;
pub mod conv;
pub mod layout;
pub mod probe;

/// How many cases a property test runs: `PROPTEST_CASES` when set (a soak run), else
/// `default`. A test's own `ProptestConfig::with_cases(n)` would override the variable,
/// so a longer run could not be asked for without editing the test.
pub fn proptest_cases(default: u32) -> u32 {
    cases_from(std::env::var("PROPTEST_CASES").ok().as_deref(), default)
}

/// The cases `PROPTEST_CASES` (`set`) asks for, or `default` when it is unset or not a count.
fn cases_from(set: Option<&str>, default: u32) -> u32 {
    set.and_then(|cases| cases.trim().parse().ok())
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::cases_from;

    #[test]
    fn the_variable_sets_the_cases_and_anything_else_keeps_the_default() {
        assert_eq!(cases_from(Some("5000"), 96), 5000);
        assert_eq!(cases_from(Some(" 12 "), 96), 12);
        assert_eq!(cases_from(None, 96), 96);
        assert_eq!(cases_from(Some("many"), 96), 96);
        assert_eq!(cases_from(Some("-3"), 96), 96);
    }
}
