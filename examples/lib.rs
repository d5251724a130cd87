//! Host examples live beside this file: `cargo run -p foldwire-examples --example compose`.
