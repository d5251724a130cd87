#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every bundled stage and strategy is visible to a crate that calls `plugins::link()`.

use foldwire_core::{ComponentKind, PipelineSpec, Registry};

#[test]
fn every_bundled_component_is_registered_once() {
    foldwire_plugins::link();
    let registry = Registry::from_inventory().expect("no duplicate names");
    let expect = |kind: ComponentKind, names: &[&str]| {
        let have = registry.names(kind);
        for n in names {
            assert!(
                have.iter().any(|h| h == n),
                "{kind} {n} missing from {have:?}"
            );
        }
    };
    expect(
        ComponentKind::Stage,
        &foldwire_core::pipeline::DEFAULT_ORDER,
    );
    expect(
        ComponentKind::FoldPolicy,
        &[
            "fold.oldest_first",
            "fold.largest_first",
            "fold.http",
            "fold.scheduled",
        ],
    );
    expect(
        ComponentKind::Layout,
        &[
            "layout.head_first",
            "layout.store_order_fill",
            "layout.http",
        ],
    );
    expect(
        ComponentKind::Summarizer,
        &["summarizer.extractive", "summarizer.http", "summarizer.llm"],
    );
    for c in registry.list() {
        let expected_crate = if c.kind == ComponentKind::Stage {
            "foldwire-stages"
        } else {
            "foldwire-plugins"
        };
        assert_eq!(c.crate_name, expected_crate, "{}", c.name);
    }
    // Both built-in pipelines build from what is registered.
    for name in ["default", "passthrough"] {
        foldwire_core::Pipeline::from_spec(&PipelineSpec::builtin(name).unwrap(), &registry)
            .unwrap();
    }
}
