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

/// Every bundled component has a typed config: it says what it does and what it is built
/// with, is built from its printed defaults as from no params at all, and refuses an unknown
/// or ill-typed param by naming itself and the field.
#[test]
fn every_bundled_component_has_a_typed_config() {
    foldwire_plugins::link();
    let registry = Registry::from_inventory().unwrap();
    let all = registry.list();
    assert_eq!(all.len(), 21, "{:?}", registry.names(ComponentKind::Stage));
    for c in &all {
        let description = c.description.as_deref().unwrap_or_default();
        assert!(
            !description.is_empty() && !description.contains('\n'),
            "{}: one-line description, got {description:?}",
            c.name
        );
        let defaults = c.default_params.clone().unwrap_or_default();
        assert!(defaults.is_object(), "{}: {defaults}", c.name);
        let from_defaults = registry.build(c.kind, &c.name, &defaults).map(|_| ());
        let from_null = registry
            .build(c.kind, &c.name, &serde_json::Value::Null)
            .map(|_| ());
        assert_eq!(
            from_defaults.is_ok(),
            from_null.is_ok(),
            "{}: defaults {from_defaults:?}, null {from_null:?}",
            c.name
        );
        // Only the HTTP strategies need a param (their endpoint).
        assert_eq!(from_null.is_err(), c.name.ends_with(".http"), "{}", c.name);

        let unknown = registry
            .build(c.kind, &c.name, &serde_json::json!({"no_such_field": 1}))
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains(&c.name) && unknown.contains("unknown field `no_such_field`"),
            "{unknown}"
        );
        // A field given a value of the wrong type is named too.
        let typed = defaults
            .as_object()
            .and_then(|m| m.iter().find(|(_, v)| !v.is_null()));
        if let Some((field, _)) = typed {
            let wrong = serde_json::json!({ field.clone(): [[["not this"]]] });
            let err = registry
                .build(c.kind, &c.name, &wrong)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&c.name) && err.contains(&format!("field `{field}`")),
                "{err}"
            );
        }
    }
}
