#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Rhai plugins: added, used, replaced and removed at run time; every way a plugin can
//! misbehave (throw, loop forever, run past its time, build an enormous value, answer
//! nonsense) makes the built-in decide, with a warning and a count.

use std::sync::Arc;

use foldwire_core::{
    Budget, FoldDemand, Params, Pipeline, RangeInfo, Ref, Registry, RegistryError, StrategySource,
};
use foldwire_plugins::sandbox::{Limits, PluginError, PluginStore};
use foldwire_stages::strategy_scope::StrategyScope;
use serde_json::json;

const NEWEST: &str = r#"
// Folds the newest range only.
fn choose(request) {
    let n = request.ranges.len();
    if n == 0 { return []; }
    [n - 1]
}
"#;

fn registry() -> Arc<Registry> {
    foldwire_plugins::link();
    Arc::new(Registry::from_inventory().unwrap())
}

fn ranges() -> Vec<RangeInfo> {
    (0..4u32)
        .map(|i| RangeInfo::new(Ref(i * 10 + 1), Ref(i * 10 + 5), 1000 + u64::from(i), 5))
        .collect()
}

fn demand() -> FoldDemand {
    FoldDemand::new(
        10_000,
        Budget {
            window: 4_000,
            reserve: 0,
            calibration: 1.0,
        },
    )
}

/// Builds the named fold policy as a running pipeline's stage does (through
/// [`StrategySource`]) and runs it in a turn scope: its choice and warnings.
fn choose(registry: &Registry, name: &str, params: Params) -> (Vec<usize>, Vec<String>) {
    let policy = StrategySource::fold_policy(registry, name, &params).unwrap();
    let scope = StrategyScope::default();
    let chosen = scope.enter(|| policy.choose(&ranges(), &demand()));
    let warnings = scope
        .take_warnings()
        .into_iter()
        .map(|w| format!("{} {}", w.strategy, w.message))
        .collect();
    (chosen, warnings)
}

#[test]
fn a_plugin_is_added_used_replaced_and_removed() {
    let registry = registry();
    let store = PluginStore::new(Limits::default(), None);
    let info = store.add(&registry, "fold.newest", NEWEST).unwrap();
    assert_eq!((info.revision, info.kind.as_str()), (1, "fold_policy"));
    assert!(
        registry
            .list()
            .iter()
            .any(|c| c.name == "fold.newest" && c.crate_name == "plugin (rhai)")
    );
    let (chosen, warnings) = choose(&registry, "fold.newest", Params::Null);
    assert_eq!((chosen, warnings.len()), (vec![3], 0));

    // A strategy built before the replacement keeps the script it was built with.
    let before = registry.fold_policy("fold.newest", &Params::Null).unwrap();
    let info = store
        .add(&registry, "fold.newest", "fn choose(request) { [0, 1] }")
        .unwrap();
    assert_eq!(info.revision, 2);
    assert_eq!(before.choose(&ranges(), &demand()), vec![3]);
    assert_eq!(choose(&registry, "fold.newest", Params::Null).0, vec![0, 1]);

    // Config from the pipeline spec reaches the script.
    store
        .add(
            &registry,
            "fold.configured",
            "fn choose(request) { [request.config.pick] }",
        )
        .unwrap();
    assert_eq!(
        choose(&registry, "fold.configured", json!({"config": {"pick": 2}})).0,
        vec![2]
    );

    // Removed: a turn already running keeps the revision it built; a pipeline swap naming
    // it is refused, saying so; pipelines built before fall back, with a warning, and
    // never fail.
    let running = registry.fold_policy("fold.newest", &Params::Null).unwrap();
    store.remove(&registry, "fold.newest").unwrap();
    assert!(store.list().iter().all(|p| p.name != "fold.newest"));
    assert!(registry.list().iter().all(|c| c.name != "fold.newest"));
    assert_eq!(running.choose(&ranges(), &demand()), vec![0, 1]);
    let swap = Pipeline::builder(&registry)
        .stage_named("fold", json!({"policy": "fold.newest"}))
        .unwrap()
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        swap.contains("\"fold.newest\" was removed while the host ran"),
        "{swap}"
    );
    assert!(matches!(
        registry.fold_policy("fold.newest", &Params::Null),
        Err(RegistryError::Removed { .. })
    ));
    let fallback = registry
        .fold_policy("fold.oldest_first", &Params::Null)
        .unwrap()
        .choose(&ranges(), &demand());
    let (chosen, warnings) = choose(&registry, "fold.newest", Params::Null);
    assert_eq!(chosen, fallback);
    assert!(warnings[0].contains("removed"), "{warnings:?}");
    assert!(matches!(
        store.remove(&registry, "fold.newest"),
        Err(PluginError::NotFound { .. })
    ));
    // And it can come back under the same name, which pipelines can name again.
    store.add(&registry, "fold.newest", NEWEST).unwrap();
    assert_eq!(choose(&registry, "fold.newest", Params::Null).0, vec![3]);
    assert_eq!(
        registry
            .fold_policy("fold.newest", &Params::Null)
            .unwrap()
            .choose(&ranges(), &demand()),
        vec![3]
    );
    // Linked names are never removed.
    assert!(matches!(
        registry.unregister("fold.oldest_first"),
        Err(RegistryError::Linked { .. })
    ));
}

#[test]
fn every_misbehaviour_falls_back_with_a_warning_and_a_count() {
    let registry = registry();
    let limits = Limits {
        max_operations: 200_000,
        timeout_ms: 100,
        max_string_bytes: 64 * 1024,
        max_items: 10_000,
        max_call_depth: 32,
        max_memory_bytes: 4 << 20,
    };
    let store = PluginStore::new(limits, None);
    let unlimited_fuel = PluginStore::new(
        Limits {
            max_operations: 0,
            ..limits
        },
        None,
    );
    let cases: [(&Arc<PluginStore>, &str, &str, &str); 9] = [
        (
            &store,
            "fold.trap",
            r#"fn choose(r) { throw "no" }"#,
            "trap",
        ),
        (
            &store,
            "fold.type_error",
            "fn choose(r) { r.ranges + 1 }",
            "trap",
        ),
        (
            &store,
            "fold.recurse",
            "fn f(x) { f(x + 1) } fn choose(r) { f(0) }",
            "trap",
        ),
        (&store, "fold.endless", "fn choose(r) { loop {} }", "fuel"),
        (
            &unlimited_fuel,
            "fold.slow",
            "fn choose(r) { let i = 0; loop { i += 1; } }",
            "timeout",
        ),
        (
            &store,
            "fold.string_bomb",
            r#"fn choose(r) { let s = "xx"; loop { s += s; } }"#,
            "memory",
        ),
        (
            &store,
            "fold.array_bomb",
            "fn choose(r) { let a = [1]; loop { a += a; } }",
            "memory",
        ),
        (
            &store,
            "fold.nonsense",
            r#"fn choose(r) { "hello" }"#,
            "bad_answer",
        ),
        (
            &store,
            "fold.out_of_range",
            "fn choose(r) { [0, 99] }",
            "bad_answer",
        ),
    ];
    let fallback = registry
        .fold_policy("fold.largest_first", &Params::Null)
        .unwrap()
        .choose(&ranges(), &demand());
    for (store, name, source, reason) in cases {
        store.add(&registry, name, source).unwrap();
        let before = count(name, reason);
        let (chosen, warnings) = choose(&registry, name, json!({"fallback": "fold.largest_first"}));
        assert_eq!(chosen, fallback, "{name}");
        assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
        assert!(
            warnings[0].starts_with(&format!("{name} {reason}: ")),
            "{name}: {warnings:?}"
        );
        assert_eq!(count(name, reason), before + 1, "{name}");
    }

    // A nested structure Rhai's own size limits do not see growing (map keys are not
    // counted: 10,000 maps with a 32 KiB key each would hold over 300 MiB) is stopped by
    // the memory meter once everything the call holds passes `max_memory_bytes`.
    let name = "fold.nested_bomb";
    let source = r#"
        fn choose(r) {
            let key = "k";
            for i in 0..15 { key += key; }
            let nest = [];
            loop {
                let m = #{};
                m[key + nest.len()] = [nest.len()];
                nest.push(m);
            }
        }
    "#;
    store.add(&registry, name, source).unwrap();
    let (chosen, warnings) = choose(&registry, name, json!({"fallback": "fold.largest_first"}));
    assert_eq!(chosen, fallback);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!("{name} memory: ")) && warnings[0].contains("Memory held"),
        "{warnings:?}"
    );
    assert_eq!(count(name, "memory"), 1);
}

fn count(strategy: &str, reason: &str) -> u64 {
    foldwire_plugins::fallback::counts()
        .into_iter()
        .find(|(s, r, _)| s == strategy && r == reason)
        .map_or(0, |(_, _, n)| n)
}

#[test]
fn bad_plugins_are_refused_when_added_with_the_reason() {
    let registry = registry();
    let store = PluginStore::new(Limits::default(), None);
    let refused =
        |name: &str, source: &str| store.add(&registry, name, source).unwrap_err().to_string();
    assert!(refused("newest", NEWEST).contains("must be `fold.<name>`"));
    assert!(refused("fold.Newest", NEWEST).contains("must be"));
    assert!(refused("stage.x", NEWEST).contains("must be"));
    assert!(
        refused("fold.oldest_first", NEWEST).contains("already registered by foldwire-plugins")
    );
    assert!(refused("fold.broken", "fn choose(r) {").contains("does not compile"));
    assert!(refused("layout.wrong_entry", NEWEST).contains("fn arrange(request)"));
    assert!(
        refused("fold.no_eval", r#"fn choose(r) { eval("[0]") }"#).contains("does not compile")
    );
    assert!(store.list().is_empty());
}

#[test]
fn plugins_follow_their_directory() {
    let registry = self::registry();
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let store = PluginStore::new(Limits::default(), Some(plugins.clone()));
    assert!(
        store.sync_dir(&registry).is_empty(),
        "a missing dir is empty"
    );
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("fold.from_file.rhai"), NEWEST).unwrap();
    std::fs::write(plugins.join("fold.broken.rhai"), "fn choose(").unwrap();
    std::fs::write(plugins.join("notes.txt"), "ignored").unwrap();
    let problems = store.sync_dir(&registry);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].to_string().contains("fold.broken"));
    assert_eq!(
        store
            .list()
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["fold.from_file"]
    );
    assert_eq!(choose(&registry, "fold.from_file", Params::Null).0, vec![3]);

    // Added by the host: written to the directory, so it survives a restart.
    store
        .add(
            &registry,
            "summarizer.short",
            r#"fn summarize(r) { "short" }"#,
        )
        .unwrap();
    assert!(plugins.join("summarizer.short.rhai").is_file());
    // A broken replacement changes nothing: the working plugin and its file stay.
    assert!(
        store
            .add(&registry, "summarizer.short", "fn summarize(")
            .is_err()
    );
    assert_eq!(
        std::fs::read_to_string(plugins.join("summarizer.short.rhai")).unwrap(),
        r#"fn summarize(r) { "short" }"#
    );
    assert_eq!(
        store
            .list()
            .iter()
            .find(|p| p.name == "summarizer.short")
            .unwrap()
            .revision,
        1
    );
    let restarted = PluginStore::new(Limits::default(), Some(plugins.clone()));
    let registry2 = self::registry();
    restarted.sync_dir(&registry2);
    assert_eq!(restarted.list().len(), 2);

    // A changed file is a new revision; a deleted one is removed.
    std::fs::write(plugins.join("fold.from_file.rhai"), "fn choose(r) { [0] }").unwrap();
    std::fs::remove_file(plugins.join("summarizer.short.rhai")).unwrap();
    store.sync_dir(&registry);
    let listed = store.list();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revision, 2);
    assert_eq!(choose(&registry, "fold.from_file", Params::Null).0, vec![0]);
}

#[tokio::test]
async fn layout_and_summarizer_plugins_decide_and_fall_back() {
    use foldwire_core::{SummaryRequest, Wire};
    let registry = registry();
    let store = PluginStore::new(Limits::default(), None);
    store
        .add(
            &registry,
            "summarizer.count",
            r#"fn summarize(r) { #{ summary: `${r.units.len()} units`, topic: "counted" } }"#,
        )
        .unwrap();
    store
        .add(
            &registry,
            "summarizer.too_long",
            r#"fn summarize(r) { "x".pad(r.max_chars + 1, "x") }"#,
        )
        .unwrap();
    let units = vec![foldwire_core::Message::synthesized(
        0,
        foldwire_core::Role::User,
        "look at src/a.rs".to_owned(),
        foldwire_core::Origin::Client,
        bytes::Bytes::new(),
    )];
    let ask = || SummaryRequest {
        wire: Wire::Anthropic,
        messages: &units,
        max_chars: 100,
    };
    let s = registry
        .summarizer("summarizer.count", &Params::Null)
        .unwrap();
    let summary = s.summarize(ask()).await.unwrap();
    assert_eq!(
        (
            summary.text.as_str(),
            summary.topic.as_deref(),
            summary.author.as_str()
        ),
        ("1 units", Some("counted"), "summarizer.count")
    );
    let s = registry
        .summarizer("summarizer.too_long", &Params::Null)
        .unwrap();
    let scope = StrategyScope::default();
    let summary = scope.scoped(s.summarize(ask())).await.unwrap();
    assert_eq!(summary.author, "summarizer.extractive");
    assert!(scope.take_warnings()[0].message.starts_with("bad_answer"));
    // A layout that must keep whole wire messages: a plugin returning store order is fine;
    // the same plugin's nonsense would fall back (checked like layout.http's answers).
    store
        .add(
            &registry,
            "layout.identity",
            "fn arrange(r) { let o = []; for u in r.units { o.push(u.index); } #{ order: o } }",
        )
        .unwrap();
    assert!(registry.layout("layout.identity", &Params::Null).is_ok());
}

#[test]
fn a_plugin_describes_itself_from_its_leading_comment_or_its_file() {
    let registry = registry();
    let store = PluginStore::new(Limits::default(), None);
    let listed = |name: &str| {
        registry
            .info(name)
            .unwrap_or_else(|| panic!("{name} is not registered"))
    };

    let documented = "\n// Folds the newest range first,\n//   so the oldest stay verbatim.\n\n// Not part of it.\nfn choose(request) { [3] }";
    let info = store.add(&registry, "fold.documented", documented).unwrap();
    let line = "Folds the newest range first, so the oldest stay verbatim.";
    assert_eq!(info.description, line);
    let entry = listed("fold.documented");
    assert_eq!(entry.description.as_deref(), Some(line));
    assert_eq!(
        entry.default_params,
        Some(json!({"fallback": null, "fallback_params": null, "config": null}))
    );

    // No comment: a line naming its kind and file.
    store
        .add(&registry, "summarizer.bare", "fn summarize(r) { \"s\" }")
        .unwrap();
    assert_eq!(
        listed("summarizer.bare").description.as_deref(),
        Some("sandboxed summarizer plugin summarizer.bare.rhai")
    );

    // A replacement describes itself anew.
    store
        .add(
            &registry,
            "fold.documented",
            "/// Picks nothing.\nfn choose(request) { [] }",
        )
        .unwrap();
    assert_eq!(
        listed("fold.documented").description.as_deref(),
        Some("Picks nothing.")
    );
}
