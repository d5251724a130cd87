//! Token estimators.
