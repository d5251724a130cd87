//! The policy as the fold stage meets it: found by name in the registry, listed with its
//! description and defaults, refused with bad params, and folding an over-budget request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use foldwire_core::{
    Budget, CharEstimator, ComponentConfig, Params, Registry, SessionState, StageCx,
};
use foldwire_example_fold_policy::ToolHeavyFirst;
use foldwire_test_kit::conv::{Conv, sized, turn_for};

fn registry() -> Arc<Registry> {
    foldwire_plugins::link();
    Arc::new(Registry::from_inventory().unwrap())
}

#[test]
fn the_registry_lists_it_with_its_description_and_defaults() {
    let registry = registry();
    let info = registry
        .list()
        .into_iter()
        .find(|c| c.name == ToolHeavyFirst::NAME)
        .unwrap();
    assert_eq!(info.crate_name, "foldwire-example-fold-policy");
    assert_eq!(
        info.description.as_deref(),
        Some(ToolHeavyFirst::DESCRIPTION)
    );
    assert_eq!(
        info.default_params,
        Some(serde_json::json!({"threshold": 0.8, "target": 0.6}))
    );
    let bad = registry
        .fold_policy(ToolHeavyFirst::NAME, &serde_json::json!({"target": 0.9}))
        .unwrap_err();
    assert!(bad.to_string().contains("target <= threshold"), "{bad}");
}

#[tokio::test]
async fn the_fold_stage_folds_with_it_when_over_budget() {
    let mut conv = Conv::new(foldwire_core::Wire::Anthropic);
    conv.user("refactor src/lib.rs");
    for i in 0..20 {
        let id = format!("call{i}");
        conv.turn(
            None,
            Some(&format!("step {i}: reading src/mod{i}.rs")),
            &[(&id, "bash", r#"{"command":"cat"}"#)],
        )
        .results(&[(&id, &sized(&format!("output {i}"), 400))]);
    }
    conv.user("continue");
    let registry = registry();
    let cx = StageCx::new(registry.clone()).with_estimator(Arc::new(CharEstimator));
    let mut turn = turn_for(conv.build(), SessionState::default());
    turn.budget = Budget {
        window: 6_000,
        reserve: 0,
        calibration: 1.0,
    };
    let protection = serde_json::json!({"recent_tokens": 1000});
    let params = |name: &str| match name {
        "ranges.build" => serde_json::json!({ "protection": protection }),
        "fold" => serde_json::json!({
            "policy": ToolHeavyFirst::NAME,
            "compress": { "protection": protection },
        }),
        _ => Params::Null,
    };
    for name in ["refs.mint", "ranges.build", "fold", "pairing.repair"] {
        let stage = registry.stage(name, &params(name)).unwrap();
        stage.run(&mut turn, &cx).await.unwrap();
    }
    assert!(
        turn.report.counter("fold.blocks_created") > 0,
        "{:?}",
        turn.report
    );
    // The stage builds this policy when it is built itself: bad params stop the build.
    let err = registry
        .stage(
            "fold",
            &serde_json::json!({
                "policy": ToolHeavyFirst::NAME,
                "policy_params": { "target": 0.9 },
            }),
        )
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("fold: param policy: ") && err.contains("target <= threshold"),
        "{err}"
    );
}
