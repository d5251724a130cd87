#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Placeholder until this bench is written; criterion needs a main.
use criterion::{Criterion, criterion_group, criterion_main};

fn nothing(_c: &mut Criterion) {}

criterion_group!(benches, nothing);
criterion_main!(benches);
