//! `foldwire pipeline check`: validate a spec and print the resolved ordering.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use serde::Serialize;

use super::write_stdout;
use crate::setup;

#[derive(Serialize)]
struct ResolvedStage {
    position: usize,
    name: &'static str,
    requires: Vec<&'static str>,
    provides: Vec<&'static str>,
}

/// `foldwire pipeline …`.
#[derive(Debug, clap::Subcommand)]
pub enum PipelineCommand {
    /// Validate a spec (a TOML/JSON file or a built-in name) and print the resolved ordering.
    Check(CheckArgs),
}

/// What `foldwire pipeline check` is told.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The spec file or built-in name.
    pub spec: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `foldwire pipeline` action.
///
/// # Errors
/// As the action.
pub fn run(action: PipelineCommand) -> Result<ExitCode> {
    match action {
        PipelineCommand::Check(args) => check(&args.spec, args.json),
    }
}

/// Validates a spec against the registry and prints the ordering.
///
/// # Errors
/// An invalid spec, with the message saying how to fix the ordering.
pub fn check(spec: &str, json: bool) -> Result<ExitCode> {
    let registry = setup::registry()?;
    let pipeline = setup::pipeline(spec, &registry)?;
    let stages: Vec<ResolvedStage> = pipeline
        .stages()
        .iter()
        .enumerate()
        .map(|(i, s)| ResolvedStage {
            position: i + 1,
            name: s.name(),
            requires: s.requires().iter().map(|f| f.as_str()).collect(),
            provides: s.provides().iter().map(|f| f.as_str()).collect(),
        })
        .collect();
    let text = if json {
        let mut s = serde_json::to_string_pretty(&serde_json::json!({
            "pipeline": pipeline.name(),
            "valid": true,
            "stages": stages,
        }))?;
        s.push('\n');
        s
    } else {
        let mut s = format!("pipeline {:?} is valid:\n", pipeline.name());
        for st in &stages {
            let _ = writeln!(
                s,
                "{:>2}. {:<20} requires [{}] provides [{}]",
                st.position,
                st.name,
                st.requires.join(", "),
                st.provides.join(", ")
            );
        }
        s
    };
    write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
