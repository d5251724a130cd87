#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Pipeline bench ([`pipeline_turn`] says what it measures), with the allocator the `foldwire` binary ships (mimalloc); `pipeline_system` runs the
//! same with glibc's malloc.
//!
//! `cargo bench -p foldwire-benches --bench pipeline`; add `-- zzz` to skip criterion's own
//! loops (no benchmark matches it) and print only the interleaved table.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "support/pipeline_turn.rs"]
mod pipeline_turn;

fn bench(c: &mut Criterion) {
    pipeline_turn::pipeline(c, "mimalloc");
}

criterion_group!(benches, bench);
criterion_main!(benches);
