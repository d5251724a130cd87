#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Throughput and memory of `foldwire serve` under many sessions with the system allocator
//! (glibc's malloc), as shipped before mimalloc and with glibc held to two arenas: the
//! baseline for `proxy_memory`.
//!
//! `cargo bench -p foldwire-benches --bench proxy_memory --bench proxy_memory_system`

#[path = "support/memory_load.rs"]
mod memory_load;

fn main() {
    memory_load::main(
        "system allocator",
        &[
            ("serve defaults", 50, &[]),
            ("two arenas", 50, &[("MALLOC_ARENA_MAX", "2")]),
        ],
    );
}
