//! Stage `pairing.repair`: after anything that removes or reorders units, puts every tool
//! result right after its call in the shape the wire requires ([`crate::kernel::repair`]):
//! no fixed look-ahead window, a stub only when no result exists anywhere (and the stub
//! says so), results without a call dropped, results spread over several wire messages
//! joined. Every action is counted in the turn report (`pairing.*`).

use std::sync::Arc;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Fact, Stage, StageCx,
    StageError, Turn, async_trait,
};
use serde::{Deserialize, Serialize};

use crate::kernel::repair;

/// Stage name.
pub const NAME: &str = PairingRepairConfig::NAME;

/// The `pairing.repair` stage (no parameters).
#[derive(Debug, Clone, Copy, Default)]
pub struct PairingRepair;

#[async_trait]
impl Stage for PairingRepair {
    fn name(&self) -> &'static str {
        NAME
    }
    fn requires(&self) -> &'static [Fact] {
        &[Fact::Decoded]
    }
    fn provides(&self) -> &'static [Fact] {
        &[Fact::PairingRepaired]
    }
    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        let conversation = turn
            .conversation
            .as_mut()
            .ok_or(StageError::NotDecoded { stage: NAME })?;
        let report = repair(conversation);
        let r = &mut turn.report;
        r.count("pairing.moved_results", report.moved as u64);
        r.count("pairing.stub_results", report.stubs as u64);
        r.count(
            "pairing.orphan_results_dropped",
            report.orphans_dropped as u64,
        );
        r.count(
            "pairing.duplicate_results_dropped",
            report.duplicates_dropped as u64,
        );
        r.count("pairing.joined_results", report.joined as u64);
        if report.stubs > 0 {
            r.warn(
                NAME,
                "pairing_stub_results",
                format!(
                    "{} tool call(s) had no result anywhere; stub results say so",
                    report.stubs
                ),
            );
        }
        Ok(())
    }
}

/// Parameters of `pairing.repair` (none; unknown keys are refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairingRepairConfig {}

impl ComponentConfig for PairingRepairConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "pairing.repair";
    const DESCRIPTION: &'static str =
        "Puts every tool result right after its call, stubbing only results that exist nowhere.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(PairingRepair)))
    }
}

foldwire_core::register_config!(PairingRepairConfig);
