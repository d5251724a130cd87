//! What every command sets up the same way: the registry, the pipeline, the state store.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use foldwire_core::{Pipeline, PipelineSpec, Registry, StageSpec};

/// A registry holding every linked stage and strategy.
///
/// # Errors
/// Two registrations with one name.
pub fn registry() -> Result<Arc<Registry>> {
    foldwire_plugins::link();
    Ok(Arc::new(
        Registry::from_inventory().context("loading the link-time registrations")?,
    ))
}

/// Reads a pipeline spec given as a built-in name (`default`, `passthrough`) or a file
/// (TOML or JSON).
///
/// # Errors
/// Neither a file nor a built-in name, or an invalid spec.
pub fn spec(name_or_file: &str) -> Result<PipelineSpec> {
    let path = Path::new(name_or_file);
    if path.is_file() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading pipeline spec {}", path.display()))?;
        return Ok(PipelineSpec::parse(&text, &path.display().to_string())?);
    }
    match PipelineSpec::builtin(name_or_file) {
        Ok(spec) => Ok(spec),
        Err(_) => bail!(
            "--pipeline {name_or_file:?} is neither a file nor a built-in pipeline (default, passthrough)"
        ),
    }
}

/// Builds and validates a pipeline from a name or file.
///
/// # Errors
/// As [`spec`], or an ordering the registry refuses.
pub fn pipeline(name_or_file: &str, registry: &Registry) -> Result<Pipeline> {
    let spec = spec(name_or_file)?;
    Ok(Pipeline::from_spec(&spec, registry)?)
}

/// The spec with the tool loop's `tools.inject` stage put right before `wire.encode`, when
/// the spec builds ranges (the loop offers them) and does not place the stage itself; any
/// other spec is returned as it is.
pub fn with_tool_loop(mut spec: PipelineSpec) -> PipelineSpec {
    let has = |name: &str| spec.stages.iter().any(|s| s.name == name);
    if has(foldwire_stages::tool_loop::inject::NAME) || !has("ranges.build") {
        return spec;
    }
    if let Some(at) = spec.stages.iter().position(|s| s.name == "wire.encode") {
        spec.stages.insert(
            at,
            StageSpec::named(foldwire_stages::tool_loop::inject::NAME),
        );
    }
    spec
}

/// The stages that rebuild what the model saw: refs minted and ranges built, nothing folded.
pub const VIEW_STAGES: [&str; 5] = [
    "wire.decode",
    "media.classify",
    "archive.spill",
    "refs.mint",
    "ranges.build",
];

/// The pipeline that rebuilds a request's view, for the session commands that check refs
/// against what the model saw.
///
/// # Errors
/// A registry without the view stages.
pub fn view_pipeline(registry: &Registry) -> Result<Pipeline> {
    Pipeline::from_spec(&PipelineSpec::of("view", &VIEW_STAGES), registry)
        .context("building the view pipeline")
}

/// The default state location: `<user data dir>/foldwire`.
pub fn default_state_dir() -> PathBuf {
    dirs::data_dir()
        .or_else(|| dirs::home_dir().map(|h| h.join(".local/share")))
        .unwrap_or_else(std::env::temp_dir)
        .join("foldwire")
}

/// Opens the state store and media archive a `--state` value names (a directory or a URL);
/// the default is the user's data dir.
///
/// # Errors
/// An unusable location.
pub fn backends(state: Option<&str>) -> Result<foldwire_archive::Backends> {
    let location = match state {
        Some(s) => s.to_owned(),
        None => default_state_dir().display().to_string(),
    };
    foldwire_archive::open(&location)
        .with_context(|| format!("opening state and archive at {location}"))
}
