//! # foldwire-proxy
//!
//! The `foldwire` binary: offline pipeline commands for scripts (`plugins`, `run`,
//! `pipeline check`) and the HTTP proxy (`serve`).

pub mod cli;
pub mod commands;
pub mod economy;
pub mod offline;
pub mod serve;
pub mod setup;
