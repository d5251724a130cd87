//! Errors keep what caused them: a host can walk `source()` down to the underlying error
//! instead of parsing a flattened message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::error::Error as _;

use foldwire_api::{ComponentKind, Params, Registry, RegistryError, StageError, StrategyError};

#[test]
fn a_stage_failure_keeps_the_registry_error_that_caused_it() {
    let registry = Registry::empty();
    let cause = registry
        .fold_policy("policy.nowhere", &Params::Null)
        .unwrap_err();
    let err = StageError::caused("fold", "cannot build the fold policy", cause);
    assert_eq!(
        err.to_string(),
        "fold: cannot build the fold policy: no fold_policy named \"policy.nowhere\" is \
         registered; registered fold_policy names: "
    );
    let source = err.source().unwrap();
    let registry_error = source.downcast_ref::<RegistryError>().unwrap();
    assert!(matches!(
        registry_error,
        RegistryError::Unknown {
            kind: ComponentKind::FoldPolicy,
            ..
        }
    ));
}

#[test]
fn a_strategy_failure_keeps_its_cause_and_a_plain_one_has_none() {
    let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "model call timed out");
    let err = StrategyError::caused("summarizer.llm", "cannot summarize", io);
    assert_eq!(err.to_string(), "summarizer.llm: cannot summarize");
    let source = err.source().unwrap();
    assert_eq!(
        source.downcast_ref::<std::io::Error>().unwrap().kind(),
        std::io::ErrorKind::TimedOut
    );
    assert!(StrategyError::new("x", "empty range").source().is_none());
}
