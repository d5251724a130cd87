//! `PipelineSpec`: an ordered list of stage names with params, in TOML or JSON.

use serde::{Deserialize, Serialize};

use crate::registry::Params;

/// The default pipeline, in the order the design card names.
pub const DEFAULT_ORDER: [&str; 9] = [
    "wire.decode",
    "media.classify",
    "archive.spill",
    "refs.mint",
    "ranges.build",
    "fold",
    "pairing.repair",
    "layout.head_window",
    "wire.encode",
];

/// The passthrough pipeline: decode and encode, nothing else.
pub const PASSTHROUGH_ORDER: [&str; 2] = ["wire.decode", "wire.encode"];

/// One stage of a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StageSpecRepr")]
pub struct StageSpec {
    /// The registered stage name.
    pub name: String,
    /// Its params (null for defaults).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub params: Params,
}

/// A stage written as a bare name or as a table with params.
#[derive(Deserialize)]
#[serde(untagged)]
enum StageSpecRepr {
    Name(String),
    Full {
        name: String,
        #[serde(default)]
        params: Params,
    },
}

impl From<StageSpecRepr> for StageSpec {
    fn from(r: StageSpecRepr) -> Self {
        match r {
            StageSpecRepr::Name(name) => StageSpec {
                name,
                params: Params::Null,
            },
            StageSpecRepr::Full { name, params } => StageSpec { name, params },
        }
    }
}

impl StageSpec {
    /// A stage with default params.
    pub fn named(name: impl Into<String>) -> Self {
        StageSpec {
            name: name.into(),
            params: Params::Null,
        }
    }
}

/// An ordered list of stages.
///
/// TOML:
/// ```toml
/// name = "mine"
/// stages = ["wire.decode", { name = "fold", params = { policy = "fold.largest_first" } }, "wire.encode"]
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// A name for reports.
    #[serde(default = "custom_name")]
    pub name: String,
    /// The stages, in run order.
    pub stages: Vec<StageSpec>,
}

fn custom_name() -> String {
    "custom".to_owned()
}

/// Errors reading a spec.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not a valid TOML spec.
    #[error("pipeline spec {origin} is not valid TOML: {source}")]
    Toml {
        /// Where it came from.
        origin: String,
        /// The parse error.
        #[source]
        source: toml::de::Error,
    },
    /// Not a valid JSON spec.
    #[error("pipeline spec {origin} is not valid JSON: {source}")]
    Json {
        /// Where it came from.
        origin: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// Not a built-in name.
    #[error("no built-in pipeline named {0:?}; built-in pipelines: default, passthrough")]
    UnknownBuiltin(String),
    /// Larger than a pipeline spec can reasonably be (a name of megabytes, thousands of
    /// stages): refused before anything is built from it.
    #[error("pipeline spec {origin}: {what}")]
    TooLarge {
        /// Where it came from.
        origin: String,
        /// What is over which limit.
        what: String,
    },
}

/// The longest spec text accepted, in bytes.
pub const MAX_SPEC_BYTES: usize = 256 * 1024;
/// The longest pipeline name, in characters.
pub const MAX_NAME_CHARS: usize = 128;
/// The most stages one pipeline may have.
pub const MAX_STAGES: usize = 64;

impl PipelineSpec {
    /// A spec of stages with default params.
    pub fn of(name: &str, stages: &[&str]) -> Self {
        PipelineSpec {
            name: name.to_owned(),
            stages: stages.iter().map(|s| StageSpec::named(*s)).collect(),
        }
    }

    /// A built-in spec by name: `default` or `passthrough`.
    ///
    /// # Errors
    /// Any other name.
    pub fn builtin(name: &str) -> Result<Self, SpecError> {
        match name {
            "default" => Ok(PipelineSpec::of("default", &DEFAULT_ORDER)),
            "passthrough" => Ok(PipelineSpec::of("passthrough", &PASSTHROUGH_ORDER)),
            other => Err(SpecError::UnknownBuiltin(other.to_owned())),
        }
    }

    /// Parses a spec; JSON when the text starts with `{`, TOML otherwise.
    ///
    /// # Errors
    /// A parse error naming `origin`.
    pub fn parse(text: &str, origin: &str) -> Result<Self, SpecError> {
        let too_large = |what: String| SpecError::TooLarge {
            origin: origin.to_owned(),
            what,
        };
        if text.len() > MAX_SPEC_BYTES {
            return Err(too_large(format!(
                "{} bytes; a spec may have at most {MAX_SPEC_BYTES}",
                text.len()
            )));
        }
        let spec: PipelineSpec = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|source| SpecError::Json {
                origin: origin.to_owned(),
                source,
            })?
        } else {
            toml::from_str(text).map_err(|source| SpecError::Toml {
                origin: origin.to_owned(),
                source,
            })?
        };
        let chars = spec.name.chars().count();
        if chars > MAX_NAME_CHARS || spec.name.chars().any(char::is_control) {
            return Err(too_large(format!(
                "the name has {chars} characters{}; a name is at most {MAX_NAME_CHARS}, without control characters",
                if spec.name.chars().any(char::is_control) {
                    " and control characters"
                } else {
                    ""
                }
            )));
        }
        if spec.stages.len() > MAX_STAGES {
            return Err(too_large(format!(
                "{} stages; a pipeline has at most {MAX_STAGES}",
                spec.stages.len()
            )));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_forms_agree() {
        let t = PipelineSpec::parse(
            r#"name = "x"
stages = ["wire.decode", { name = "fold", params = { policy = "fold.largest_first" } }]"#,
            "t.toml",
        )
        .unwrap();
        let j = PipelineSpec::parse(
            r#"{"name":"x","stages":["wire.decode",{"name":"fold","params":{"policy":"fold.largest_first"}}]}"#,
            "t.json",
        )
        .unwrap();
        assert_eq!(t, j);
        assert_eq!(t.stages[1].params["policy"], "fold.largest_first");
        let err = PipelineSpec::parse("stages = 3", "bad.toml").unwrap_err();
        assert!(err.to_string().contains("bad.toml"));
        assert!(PipelineSpec::builtin("nope").is_err());
    }

    #[test]
    fn oversized_specs_are_refused_with_the_limit_named() {
        let long = format!(
            "name = \"{}\"\nstages = [\"wire.decode\"]",
            "x".repeat(10_000)
        );
        let e = PipelineSpec::parse(&long, "PUT").unwrap_err().to_string();
        assert!(
            e.contains("10000 characters") && e.contains("at most 128"),
            "{e}"
        );
        let huge = format!(
            "name = \"x\"\nstages = []\n# {}",
            "y".repeat(MAX_SPEC_BYTES)
        );
        let e = PipelineSpec::parse(&huge, "PUT").unwrap_err().to_string();
        assert!(e.contains("a spec may have at most"), "{e}");
        let many = format!(
            "{{\"stages\": [{}]}}",
            vec!["\"wire.decode\""; 65].join(",")
        );
        let e = PipelineSpec::parse(&many, "PUT").unwrap_err().to_string();
        assert!(e.contains("65 stages"), "{e}");
        let control = "name = \"a\\u0007b\"\nstages = []";
        assert!(PipelineSpec::parse(control, "PUT").is_err());
        assert!(PipelineSpec::parse("name = \"mine\"\nstages = []", "PUT").is_ok());
    }
}
