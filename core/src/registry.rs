//! The component registry: stages and strategies registered at link time through
//! [`register!`](crate::register) and at runtime through [`Registry::register`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::stage::Stage;
use crate::strategy::{FoldPolicy, Layout, Summarizer};
use crate::turn::Fact;

/// Parameters a component is built with (a JSON object, or null for defaults).
pub type Params = serde_json::Value;

/// The kinds of registered components.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// A built component.
#[derive(Clone)]
pub enum Component {
    /// A stage.
    Stage(Arc<dyn Stage>),
    /// A fold policy.
    FoldPolicy(Arc<dyn FoldPolicy>),
    /// A layout.
    Layout(Arc<dyn Layout>),
    /// A summarizer.
    Summarizer(Arc<dyn Summarizer>),
}

impl Component {
    /// The kind of this component.
    pub fn kind(&self) -> ComponentKind {
        match self {
            Component::Stage(_) => ComponentKind::Stage,
            Component::FoldPolicy(_) => ComponentKind::FoldPolicy,
            Component::Layout(_) => ComponentKind::Layout,
            Component::Summarizer(_) => ComponentKind::Summarizer,
        }
    }
}

impl fmt::Debug for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Component::{}", self.kind())
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

    /// Parses a component's params into its config type, with an error naming the component.
    pub fn parse_params<T: serde::de::DeserializeOwned + Default>(
        component: &str,
        params: &Params,
    ) -> Result<T, BuildError> {
        if params.is_null() {
            return Ok(T::default());
        }
        serde_json::from_value(params.clone())
            .map_err(|e| BuildError::new(component, format!("bad params: {e}")))
    }
}

/// A link-time factory.
pub type BuildFn = fn(&Params) -> Result<Component, BuildError>;

/// A runtime factory.
pub type DynBuildFn = Arc<dyn Fn(&Params) -> Result<Component, BuildError> + Send + Sync>;

/// One link-time registration, collected by inventory. Construct it through
/// [`register!`](crate::register).
#[derive(Debug)]
pub struct Registration {
    /// The kind.
    pub kind: ComponentKind,
    /// The dotted snake_case name.
    pub name: &'static str,
    /// The crate that registered it.
    pub crate_name: &'static str,
    /// The factory.
    pub build: BuildFn,
}

inventory::collect!(Registration);

/// Registers a stage or strategy at link time.
///
/// ```
/// use std::sync::Arc;
/// use foldwire_core::{async_trait, Component, BuildError, Params, Stage, StageCx, StageError, Turn};
///
/// struct Tag;
/// #[async_trait]
/// impl Stage for Tag {
///     fn name(&self) -> &'static str { "doc.tag" }
///     async fn run(&self, turn: &mut Turn, _: &StageCx) -> Result<(), StageError> {
///         turn.report.count("tagged", 1);
///         Ok(())
///     }
/// }
/// fn build_tag(_: &Params) -> Result<Component, BuildError> {
///     Ok(Component::Stage(Arc::new(Tag)))
/// }
/// foldwire_core::register!(Stage, "doc.tag", build_tag);
///
/// let registry = foldwire_core::Registry::from_inventory().unwrap();
/// assert!(registry.names(foldwire_core::ComponentKind::Stage).contains(&"doc.tag".to_string()));
/// ```
#[macro_export]
macro_rules! register {
    ($kind:ident, $name:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::registry::Registration {
                kind: $crate::registry::ComponentKind::$kind,
                name: $name,
                crate_name: ::core::env!("CARGO_PKG_NAME"),
                build: $build,
            }
        }
    };
}

/// Where a registry entry came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Registered at link time by a crate.
    Linked,
    /// Registered at runtime by host code.
    Runtime,
}

/// A registry entry as listed by `foldwire plugins`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentInfo {
    /// The kind.
    pub kind: ComponentKind,
    /// The name.
    pub name: String,
    /// The crate (or host) that registered it.
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// Link time or runtime.
    pub source: Source,
}

/// Registry errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
}

#[derive(Clone)]
struct Entry {
    info: ComponentInfo,
    build: DynBuildFn,
}

/// Every known stage and strategy, seeded from link-time registrations and open to runtime
/// additions.
pub struct Registry {
    entries: RwLock<BTreeMap<String, Entry>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("components", &self.list().len())
            .finish()
    }
}

impl Registry {
    /// A registry holding every link-time registration of the linked crates.
    ///
    /// # Errors
    /// Fails when two registrations share a name.
    pub fn from_inventory() -> Result<Self, RegistryError> {
        let registry = Registry::empty();
        for r in inventory::iter::<Registration> {
            let build = r.build;
            registry.insert(
                ComponentInfo {
                    kind: r.kind,
                    name: r.name.to_owned(),
                    crate_name: r.crate_name.to_owned(),
                    source: Source::Linked,
                },
                Arc::new(build),
            )?;
        }
        Ok(registry)
    }

    /// A registry with nothing in it.
    pub fn empty() -> Self {
        Registry {
            entries: RwLock::new(BTreeMap::new()),
        }
    }

    fn insert(&self, info: ComponentInfo, build: DynBuildFn) -> Result<(), RegistryError> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = entries.get(&info.name) {
            return Err(RegistryError::Duplicate {
                name: info.name.clone(),
                first: existing.info.crate_name.clone(),
                second: info.crate_name,
            });
        }
        entries.insert(info.name.clone(), Entry { info, build });
        Ok(())
    }

    /// Registers a factory at runtime ("hot-add"); a pipeline built afterwards can use it.
    ///
    /// # Errors
    /// Fails when the name is taken.
    pub fn register(
        &self,
        kind: ComponentKind,
        name: &str,
        owner: &str,
        build: impl Fn(&Params) -> Result<Component, BuildError> + Send + Sync + 'static,
    ) -> Result<(), RegistryError> {
        self.insert(
            ComponentInfo {
                kind,
                name: name.to_owned(),
                crate_name: owner.to_owned(),
                source: Source::Runtime,
            },
            Arc::new(build),
        )
    }

    /// Every registered component, sorted by kind then name.
    pub fn list(&self) -> Vec<ComponentInfo> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<ComponentInfo> = entries.values().map(|e| e.info.clone()).collect();
        all.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        all
    }

    /// Names of the registered components of one kind, sorted.
    pub fn names(&self, kind: ComponentKind) -> Vec<String> {
        self.list()
            .into_iter()
            .filter(|c| c.kind == kind)
            .map(|c| c.name)
            .collect()
    }

    /// The kind a name is registered as, if any.
    pub fn kind_of(&self, name: &str) -> Option<ComponentKind> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.get(name).map(|e| e.info.kind)
    }

    /// Builds a component of the expected kind.
    ///
    /// # Errors
    /// Unknown name, wrong kind, or params the factory refuses.
    pub fn build(
        &self,
        kind: ComponentKind,
        name: &str,
        params: &Params,
    ) -> Result<Component, RegistryError> {
        let entry = {
            let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
            entries.get(name).cloned()
        };
        let Some(entry) = entry else {
            let known = self.names(kind);
            return Err(RegistryError::Unknown {
                kind,
                name: name.to_owned(),
                hint: did_you_mean(name, &known),
                known: known.join(", "),
            });
        };
        if entry.info.kind != kind {
            return Err(RegistryError::WrongKind {
                name: name.to_owned(),
                wanted: kind,
                actual: entry.info.kind,
            });
        }
        let component = (entry.build)(params)?;
        if component.kind() != kind {
            return Err(RegistryError::Build(BuildError::new(
                name,
                format!(
                    "registered as a {kind} but its factory built a {}",
                    component.kind()
                ),
            )));
        }
        Ok(component)
    }

    /// Builds a stage.
    ///
    /// # Errors
    /// As [`Registry::build`].
    pub fn stage(&self, name: &str, params: &Params) -> Result<Arc<dyn Stage>, RegistryError> {
        match self.build(ComponentKind::Stage, name, params)? {
            Component::Stage(s) => Ok(s),
            other => Err(wrong(name, ComponentKind::Stage, other.kind())),
        }
    }

    /// Builds a fold policy.
    ///
    /// # Errors
    /// As [`Registry::build`].
    pub fn fold_policy(
        &self,
        name: &str,
        params: &Params,
    ) -> Result<Arc<dyn FoldPolicy>, RegistryError> {
        match self.build(ComponentKind::FoldPolicy, name, params)? {
            Component::FoldPolicy(s) => Ok(s),
            other => Err(wrong(name, ComponentKind::FoldPolicy, other.kind())),
        }
    }

    /// Builds a layout.
    ///
    /// # Errors
    /// As [`Registry::build`].
    pub fn layout(&self, name: &str, params: &Params) -> Result<Arc<dyn Layout>, RegistryError> {
        match self.build(ComponentKind::Layout, name, params)? {
            Component::Layout(s) => Ok(s),
            other => Err(wrong(name, ComponentKind::Layout, other.kind())),
        }
    }

    /// Builds a summarizer.
    ///
    /// # Errors
    /// As [`Registry::build`].
    pub fn summarizer(
        &self,
        name: &str,
        params: &Params,
    ) -> Result<Arc<dyn Summarizer>, RegistryError> {
        match self.build(ComponentKind::Summarizer, name, params)? {
            Component::Summarizer(s) => Ok(s),
            other => Err(wrong(name, ComponentKind::Summarizer, other.kind())),
        }
    }

    /// Registered stages (built with default params) that provide a fact, by name.
    pub fn providers_of(&self, fact: Fact) -> Vec<String> {
        self.names(ComponentKind::Stage)
            .into_iter()
            .filter(|name| {
                self.stage(name, &Params::Null)
                    .map(|s| s.provides().contains(&fact))
                    .unwrap_or(false)
            })
            .collect()
    }
}

fn wrong(name: &str, wanted: ComponentKind, actual: ComponentKind) -> RegistryError {
    RegistryError::WrongKind {
        name: name.to_owned(),
        wanted,
        actual,
    }
}

/// The closest registered name, when one is close enough to be a typo.
pub(crate) fn did_you_mean(name: &str, known: &[String]) -> String {
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
