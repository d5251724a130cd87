//! What every registered component shares, below the stage and strategy traits: its kind, its
//! params, the errors of building and resolving it. Kept apart from [`registry`](crate::registry)
//! so the traits can name these without the registry naming the traits back.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Parameters a component is built with (a JSON object, or null for defaults).
pub type Params = serde_json::Value;

/// The kinds of registered components.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ComponentKind {
    /// A pipeline stage.
    Stage,
    /// A fold policy strategy.
    FoldPolicy,
    /// A layout strategy.
    Layout,
    /// A summarizer strategy.
    Summarizer,
}

impl ComponentKind {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Stage => "stage",
            ComponentKind::FoldPolicy => "fold_policy",
            ComponentKind::Layout => "layout",
            ComponentKind::Summarizer => "summarizer",
        }
    }
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a component could not be built from its params.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{component}: {message}")]
pub struct BuildError {
    /// The component name.
    pub component: String,
    /// What was wrong with the params.
    pub message: String,
}

impl BuildError {
    /// A build error for a component.
    pub fn new(component: &str, message: impl Into<String>) -> Self {
        BuildError {
            component: component.to_owned(),
            message: message.into(),
        }
    }

    /// Parses a component's params into its config type (null: the defaults), with an error
    /// naming the component and, when one key is to blame, the field.
    pub fn parse_params<T: serde::de::DeserializeOwned + Default>(
        component: &str,
        params: &Params,
    ) -> Result<T, BuildError> {
        if params.is_null() {
            return Ok(T::default());
        }
        serde_json::from_value(params.clone()).map_err(|e| {
            let field = match params {
                // serde names an unknown field itself; a value of the wrong type it does not.
                Params::Object(map) if !e.to_string().contains("unknown field") => {
                    culprit::<T>(map)
                }
                _ => None,
            };
            let message = match field {
                Some(field) => format!("bad params: field `{field}`: {e}"),
                None => format!("bad params: {e}"),
            };
            BuildError::new(component, message)
        })
    }
}

/// The first key of `map` that `T` refuses on its own: each key is tried alone, the others
/// left at their defaults (`None` when `T` has required fields, so no key stands alone).
fn culprit<T: serde::de::DeserializeOwned>(
    map: &serde_json::Map<String, serde_json::Value>,
) -> Option<String> {
    serde_json::from_value::<T>(serde_json::Value::Object(serde_json::Map::new())).ok()?;
    map.iter()
        .find(|(key, value)| {
            let mut alone = serde_json::Map::new();
            alone.insert((*key).clone(), (*value).clone());
            serde_json::from_value::<T>(serde_json::Value::Object(alone)).is_err()
        })
        .map(|(key, _)| key.clone())
}

/// Registry errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two registrations share a name.
    #[error(
        "{name:?} is registered twice (by {first} and {second}); component names must be unique"
    )]
    Duplicate {
        /// The name.
        name: String,
        /// The first registrant.
        first: String,
        /// The second registrant.
        second: String,
    },
    /// No component by that name.
    #[error("no {kind} named {name:?} is registered{hint}; registered {kind} names: {known}")]
    Unknown {
        /// The kind looked for.
        kind: ComponentKind,
        /// The name.
        name: String,
        /// A did-you-mean hint (empty when no registered name is close).
        hint: String,
        /// The registered names of that kind.
        known: String,
    },
    /// The name is registered, but as another kind.
    #[error("{name:?} is a {actual}, not a {wanted}")]
    WrongKind {
        /// The name.
        name: String,
        /// The kind asked for.
        wanted: ComponentKind,
        /// The kind registered.
        actual: ComponentKind,
    },
    /// The factory refused the params.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The name was registered at runtime and has been removed since (a plugin deleted
    /// while the host runs): pipelines built before keep it, new ones cannot name it.
    #[error(
        "{kind} {name:?} was removed while the host ran (a deleted plugin); add it again or name another {kind}"
    )]
    Removed {
        /// The kind it had.
        kind: ComponentKind,
        /// The name.
        name: String,
    },
    /// Only components registered at runtime can be removed.
    #[error(
        "{name:?} is linked into the binary by {owner}; only components registered at runtime can be removed"
    )]
    Linked {
        /// The name.
        name: String,
        /// The crate that registered it.
        owner: String,
    },
}

/// A strategy a stage builds from the registry when it runs, declared so a pipeline can
/// resolve it when it is built: a misspelled name then fails validation instead of failing
/// every turn open.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyUse {
    /// The stage param that names it (`policy`, `summarizer`, `layout`).
    pub param: &'static str,
    /// The kind of strategy.
    pub kind: ComponentKind,
    /// Its registered name.
    pub name: String,
    /// The params it is built with.
    pub params: Params,
}

/// The closest registered name, when one is close enough to be a typo: `" (did you mean
/// \"x\"?)"`, or empty.
pub fn did_you_mean(name: &str, known: &[String]) -> String {
    known
        .iter()
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, k)| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("fodl", "fold"), 2);
        assert_eq!(edit_distance("fold", "fold"), 0);
        assert_eq!(
            did_you_mean("wire.decod", &["wire.decode".into()]),
            " (did you mean \"wire.decode\"?)"
        );
        assert_eq!(did_you_mean("zzzzzzzzzz", &["wire.decode".into()]), "");
    }
}
