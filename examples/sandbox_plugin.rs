//! The sandboxed plugin in `examples/plugins/fold.tool_heavy_first.rhai`, loaded the way
//! `foldwire serve` loads `<state>/plugins/`: into a plugin store that registers it, then
//! built by name from the registry and asked which ranges to fold.
//!
//! `cargo run -p foldwire-examples --example sandbox_plugin`

use anyhow::{Result, bail};
use foldwire_core::{Budget, FoldDemand, RangeInfo, Ref, Registry};
use foldwire_plugins::sandbox::{Limits, PluginStore};
use foldwire_stages::strategy_scope::StrategyScope;
use serde_json::json;

fn main() -> Result<()> {
    foldwire_plugins::link();
    let registry = Registry::from_inventory()?;
    // A plugin directory of its own, holding a copy of the example plugin.
    let dir = std::env::temp_dir().join(format!("foldwire-sandbox-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let plugin = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/plugins/fold.tool_heavy_first.rhai"
    );
    std::fs::copy(plugin, dir.join("fold.tool_heavy_first.rhai"))?;
    let store = PluginStore::new(Limits::default(), Some(dir.clone()));
    let problems = store.sync_dir(&registry);
    if !problems.is_empty() {
        bail!("the example plugin did not load: {problems:?}");
    }

    let policy = registry.fold_policy(
        "fold.tool_heavy_first",
        &json!({"config": {"threshold": 0.8, "target": 0.6}}),
    )?;
    let range = |i: u32, calls: u32| {
        RangeInfo::new(Ref(i * 10 + 1), Ref(i * 10 + 9), 4_000, 9)
            .with_tool_calls([("bash".to_owned(), calls)])
            .with_tool_units(2 * calls as usize)
    };
    let ranges = [range(0, 1), range(1, 6), range(2, 0), range(3, 4)];
    let demand = FoldDemand::new(
        14_000,
        Budget {
            window: 12_000,
            reserve: 0,
            calibration: 1.0,
        },
    );
    let scope = StrategyScope::default();
    let mut chosen = scope.enter(|| policy.choose(&ranges, &demand));
    chosen.sort_unstable();
    let warnings = scope.take_warnings();
    std::fs::remove_dir_all(&dir)?;
    if !warnings.is_empty() {
        bail!("the plugin fell back: {warnings:?}");
    }
    // Tool-heaviest first: range 1 (6 calls), then 3 (4 calls): 7,200 tokens saved of the
    // 6,800 needed to bring 14,000 down to 60% of 12,000.
    if chosen != vec![1, 3] {
        bail!("expected ranges [1, 3], got {chosen:?}");
    }
    println!("fold.tool_heavy_first chose {chosen:?}");
    Ok(())
}
