//! `foldwire plugins`: every registered stage and strategy, with the sandboxed plugins in
//! `<state>/plugins/` (listed as crate `plugin (rhai)`); a plugin file that does not load is
//! named on stderr.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use foldwire_plugins::sandbox::{Limits, PluginStore};

use super::write_stdout;
use crate::serve::admin::plugin_dir;
use crate::setup;

/// Prints the registry as a table or JSON.
///
/// # Errors
/// A registry that cannot load.
pub fn run(json: bool, state: Option<&str>) -> Result<ExitCode> {
    let registry = setup::registry()?;
    let store = PluginStore::new(Limits::default(), plugin_dir(state));
    for problem in store.sync_dir(&registry) {
        eprintln!("foldwire: plugin not loaded: {problem}");
    }
    let list = registry.list();
    let text = if json {
        let mut s = serde_json::to_string_pretty(&list)?;
        s.push('\n');
        s
    } else {
        let mut s = format!("{:<12} {:<28} {}\n", "KIND", "NAME", "CRATE");
        for c in &list {
            let _ = writeln!(s, "{:<12} {:<28} {}", c.kind.as_str(), c.name, c.crate_name);
        }
        s
    };
    write_stdout(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
