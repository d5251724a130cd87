#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Registry and pipeline building: link-time and runtime registrations, and the build-time
//! validation messages that tell a host how to fix an ordering.

use std::sync::Arc;

use bytes::Bytes;
use foldwire_core::{
    BuildError, Component, ComponentKind, Fact, Params, Pipeline, PipelineError, PipelineSpec,
    Registry, SessionId, SessionState, Stage, StageCx, StageError, Turn, Wire, async_trait,
};

/// A stage with configurable facts, for ordering tests.
struct Marker {
    name: &'static str,
    requires: &'static [Fact],
    provides: &'static [Fact],
}

#[async_trait]
impl Stage for Marker {
    fn name(&self) -> &'static str {
        self.name
    }
    fn requires(&self) -> &'static [Fact] {
        self.requires
    }
    fn provides(&self) -> &'static [Fact] {
        self.provides
    }
    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        turn.report.count(self.name, 1);
        Ok(())
    }
}

fn build_decoder(_: &Params) -> Result<Component, BuildError> {
    Ok(Component::Stage(Arc::new(Marker {
        name: "test.decode",
        requires: &[],
        provides: &[Fact::Decoded],
    })))
}

fn build_archiver(_: &Params) -> Result<Component, BuildError> {
    Ok(Component::Stage(Arc::new(Marker {
        name: "test.archive",
        requires: &[Fact::Decoded],
        provides: &[Fact::Archived],
    })))
}

fn build_folder(params: &Params) -> Result<Component, BuildError> {
    #[derive(serde::Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct FolderConfig {
        #[serde(default)]
        #[allow(dead_code)]
        aggressive: bool,
    }
    let _cfg: FolderConfig = BuildError::parse_params("test.fold", params)?;
    Ok(Component::Stage(Arc::new(Marker {
        name: "test.fold",
        requires: &[Fact::Archived],
        provides: &[Fact::Folded],
    })))
}

foldwire_core::register!(Stage, "test.decode", build_decoder);
foldwire_core::register!(Stage, "test.archive", build_archiver);
foldwire_core::register!(Stage, "test.fold", build_folder);

fn registry() -> Registry {
    Registry::from_inventory().unwrap()
}

fn turn() -> Turn {
    Turn::new(
        SessionId::new("s1").unwrap(),
        Wire::Anthropic,
        Bytes::from_static(b"{}"),
        SessionState::default(),
    )
}

#[test]
fn link_time_registrations_are_listed_with_their_crate() {
    let list = registry().list();
    let decode = list.iter().find(|c| c.name == "test.decode").unwrap();
    assert_eq!(decode.kind, ComponentKind::Stage);
    assert_eq!(decode.crate_name, "foldwire-core");
}

#[tokio::test]
async fn a_valid_custom_ordering_runs_every_stage_in_order() {
    let registry = registry();
    let spec = PipelineSpec::parse(
        r#"name = "mine"
stages = ["test.decode", "test.archive", { name = "test.fold", params = { aggressive = true } }]"#,
        "inline",
    )
    .unwrap();
    let pipeline = Pipeline::from_spec(&spec, &registry).unwrap();
    assert_eq!(
        pipeline.names(),
        ["test.decode", "test.archive", "test.fold"]
    );
    let mut t = turn();
    pipeline
        .run(&mut t, &StageCx::new(Arc::new(registry)))
        .await
        .unwrap();
    let ran: Vec<_> = t.report.stages.iter().map(|s| s.stage.as_str()).collect();
    assert_eq!(ran, ["test.decode", "test.archive", "test.fold"]);
    assert_eq!(t.report.counter("test.fold"), 1);
}

#[test]
fn unmet_requirement_says_which_stage_to_move_or_add() {
    let registry = registry();
    let moved = Pipeline::from_spec(
        &PipelineSpec::of("x", &["test.decode", "test.fold", "test.archive"]),
        &registry,
    )
    .unwrap_err();
    assert!(matches!(
        moved,
        PipelineError::Unmet {
            fact: Fact::Archived,
            ..
        }
    ));
    assert_eq!(
        moved.to_string(),
        "pipeline \"x\": test.fold requires archived: put test.archive before test.fold"
    );

    let missing = Pipeline::from_spec(
        &PipelineSpec::of("y", &["test.decode", "test.fold"]),
        &registry,
    )
    .unwrap_err();
    assert_eq!(
        missing.to_string(),
        "pipeline \"y\": test.fold requires archived: add test.archive before test.fold"
    );
}

#[test]
fn unknown_names_duplicates_and_bad_params_are_refused() {
    let registry = registry();
    let unknown = Pipeline::from_spec(
        &PipelineSpec::of("u", &["test.decode", "test.arhcive"]),
        &registry,
    )
    .unwrap_err();
    let msg = unknown.to_string();
    assert!(
        msg.contains("stage #2 \"test.arhcive\": not a registered stage"),
        "{msg}"
    );
    assert!(msg.contains("did you mean \"test.archive\"?"), "{msg}");

    let dup = Pipeline::from_spec(
        &PipelineSpec::of("d", &["test.decode", "test.decode"]),
        &registry,
    )
    .unwrap_err();
    assert_eq!(
        dup.to_string(),
        "pipeline \"d\": stage \"test.decode\" appears at #1 and #2; a stage runs once per pipeline, remove one"
    );

    let bad = PipelineSpec::parse(
        r#"{"stages":["test.decode","test.archive",{"name":"test.fold","params":{"agressive":true}}]}"#,
        "inline",
    )
    .unwrap();
    let err = Pipeline::from_spec(&bad, &registry)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("stage #3: test.fold: bad params: unknown field `agressive`"),
        "{err}"
    );

    let empty = Pipeline::from_spec(&PipelineSpec::of("e", &[]), &registry).unwrap_err();
    assert!(matches!(empty, PipelineError::Empty { .. }));
}

#[derive(Debug)]
struct Newest;
impl foldwire_core::FoldPolicy for Newest {
    fn name(&self) -> &'static str {
        "fold.newest_first"
    }
    fn choose(
        &self,
        ranges: &[foldwire_core::RangeInfo],
        _: &foldwire_core::FoldDemand,
    ) -> Vec<usize> {
        (0..ranges.len()).rev().collect()
    }
}

#[test]
fn runtime_registration_adds_strategies_and_refuses_taken_names() {
    let registry = registry();
    registry
        .register(
            ComponentKind::FoldPolicy,
            "fold.newest_first",
            "host",
            |_| Ok(Component::FoldPolicy(Arc::new(Newest))),
        )
        .unwrap();
    let policy = registry
        .fold_policy("fold.newest_first", &Params::Null)
        .unwrap();
    assert_eq!(policy.name(), "fold.newest_first");
    let listed = registry.list();
    let info = listed
        .iter()
        .find(|c| c.name == "fold.newest_first")
        .unwrap();
    assert_eq!(info.source, foldwire_core::registry::Source::Runtime);

    let dup = registry
        .register(ComponentKind::Stage, "test.decode", "host", build_decoder)
        .unwrap_err();
    assert!(dup.to_string().contains("registered twice"), "{dup}");

    // A strategy name is not a stage.
    let err = Pipeline::builder(&registry)
        .stage_named("fold.newest_first", Params::Null)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("is a fold_policy, not a stage"),
        "{err}"
    );
}

#[test]
fn builder_mixes_host_stages_and_named_stages() {
    let registry = registry();
    let pipeline = Pipeline::builder(&registry)
        .name("host")
        .stage_named("test.decode", Params::Null)
        .unwrap()
        .stage(Marker {
            name: "host.tag",
            requires: &[Fact::Decoded],
            provides: &[],
        })
        .build()
        .unwrap();
    assert_eq!(pipeline.names(), ["test.decode", "host.tag"]);

    let err = Pipeline::builder(&registry)
        .stage(Marker {
            name: "host.tag",
            requires: &[Fact::Decoded],
            provides: &[],
        })
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "pipeline \"custom\": host.tag requires decoded: add test.decode before host.tag"
    );
}

/// A folding stage that names its policy in a param, as the built-in `fold` does.
struct PolicyFolder {
    policy: String,
}

#[async_trait]
impl Stage for PolicyFolder {
    fn name(&self) -> &'static str {
        "test.policy_fold"
    }
    fn strategies(&self) -> Vec<foldwire_core::StrategyUse> {
        vec![foldwire_core::StrategyUse {
            param: "policy",
            kind: ComponentKind::FoldPolicy,
            name: self.policy.clone(),
            params: Params::Null,
        }]
    }
    async fn run(&self, _turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        Ok(())
    }
}

#[test]
fn a_misspelled_strategy_fails_the_build_with_a_did_you_mean() {
    let registry = registry();
    registry
        .register(
            ComponentKind::FoldPolicy,
            "test.oldest_first",
            "host",
            |_| Ok(Component::FoldPolicy(Arc::new(Newest))),
        )
        .unwrap();
    let err = Pipeline::builder(&registry)
        .stage(PolicyFolder {
            policy: "test.oldets_first".into(),
        })
        .build()
        .unwrap_err();
    assert!(matches!(err, PipelineError::Strategy { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("param policy")
            && message.contains("test.oldets_first")
            && message.contains("did you mean \"test.oldest_first\"?"),
        "{message}"
    );
    // A strategy of another kind is refused too; the right name builds.
    let wrong = Pipeline::builder(&registry)
        .stage(PolicyFolder {
            policy: "test.decode".into(),
        })
        .build()
        .unwrap_err();
    assert!(wrong.to_string().contains("not a fold_policy"), "{wrong}");
    Pipeline::builder(&registry)
        .stage(PolicyFolder {
            policy: "test.oldest_first".into(),
        })
        .build()
        .unwrap();
}

#[test]
fn third_party_stages_order_themselves_with_their_own_facts() {
    const REDACTED: Fact = Fact::Custom("acme.redacted");
    let registry = Registry::empty();
    let redact = || Marker {
        name: "acme.redact",
        requires: &[],
        provides: &[REDACTED],
    };
    let audit = || Marker {
        name: "acme.audit",
        requires: &[REDACTED],
        provides: &[],
    };
    let ok = Pipeline::builder(&registry)
        .stage(redact())
        .stage(audit())
        .build()
        .unwrap();
    assert_eq!(ok.names(), ["acme.redact", "acme.audit"]);
    let err = Pipeline::builder(&registry)
        .stage(audit())
        .stage(redact())
        .build()
        .unwrap_err();
    assert!(
        matches!(err, PipelineError::Unmet { fact, .. } if fact == REDACTED),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("acme.audit requires acme.redacted: put acme.redact before acme.audit"),
        "{err}"
    );
    // Facts print by name; built-in ones read back, custom ones are named in the error.
    assert_eq!(serde_json::to_value(REDACTED).unwrap(), "acme.redacted");
    assert_eq!(
        serde_json::from_value::<Fact>(serde_json::json!("refs_minted")).unwrap(),
        Fact::RefsMinted
    );
    let unknown = serde_json::from_value::<Fact>(serde_json::json!("acme.redacted")).unwrap_err();
    assert!(unknown.to_string().contains("unknown fact"), "{unknown}");
}
