#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Throughput and memory of `foldwire serve` under many sessions, with the allocator the
//! `foldwire` binary ships (mimalloc): with its defaults, without the admin report cache, and
//! with freed pages purged at once. Run beside `proxy_memory_system` to compare allocators:
//!
//! `cargo bench -p foldwire-benches --bench proxy_memory --bench proxy_memory_system`

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/memory_load.rs"]
mod memory_load;

fn main() {
    memory_load::main(
        "mimalloc",
        &[
            ("serve defaults", 50, &[]),
            ("no report cache", 0, &[]),
            ("purge at once", 50, &[("MIMALLOC_PURGE_DELAY", "0")]),
        ],
    );
}
