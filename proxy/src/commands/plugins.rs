//! `foldwire plugins`: every registered stage and strategy, with the sandboxed plugins in
//! `<state>/plugins/` (listed as crate `plugin (rhai)`); a plugin file that does not load is
//! named on stderr.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;

use super::write_stdout;
use crate::serve::admin::load_cli_plugins;
use crate::setup;

/// What `foldwire plugins` is told.
#[derive(Debug, clap::Args)]
pub struct PluginsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also lists the sandboxed plugins in `<state>/plugins/`.
    #[command(flatten)]
    pub state: super::StateArgs,
}

/// Prints the registry as a table or JSON; components with a typed config also give their
/// one-line description and (in JSON) their default params.
///
/// # Errors
/// A registry that cannot load.
pub fn run(args: PluginsArgs) -> Result<ExitCode> {
    let registry = setup::registry()?;
    load_cli_plugins(args.state.state.as_deref(), &registry);
    let list = registry.list();
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&list)?;
        s.push('\n');
        s
    } else {
        let mut s = format!(
            "{:<12} {:<28} {:<18} {}\n",
            "KIND", "NAME", "CRATE", "DESCRIPTION"
        );
        for c in &list {
            let _ = writeln!(
                s,
                "{:<12} {:<28} {:<18} {}",
                c.kind.as_str(),
                c.name,
                c.crate_name,
                c.description.as_deref().unwrap_or("")
            );
        }
        s
    };
    write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
