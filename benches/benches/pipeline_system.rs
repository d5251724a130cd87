#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Pipeline bench ([`pipeline_turn`] says what it measures), with the system allocator (glibc's malloc), what a host embedding the library gets
//! unless it sets one; `pipeline` runs the same with mimalloc, which the `foldwire` binary
//! ships.
//!
//! `cargo bench -p foldwire-benches --bench pipeline_system`; add `-- zzz` to skip criterion's own
//! loops (no benchmark matches it) and print only the interleaved table.

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "support/pipeline_turn.rs"]
mod pipeline_turn;

fn bench(c: &mut Criterion) {
    pipeline_turn::pipeline(c, "glibc malloc");
}

criterion_group!(benches, bench);
criterion_main!(benches);
