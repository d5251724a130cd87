//! The component registry: stages and strategies registered at link time through
//! [`register!`](crate::register) and at runtime through [`Registry::register`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::component::did_you_mean;
pub use crate::component::{BuildError, ComponentKind, Params, RegistryError, StrategyUse};
use crate::stage::Stage;
use crate::strategy::{FoldPolicy, Layout, StrategySource, Summarizer};
use crate::turn::Fact;

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

/// A link-time factory: the params from the pipeline spec, and the build context with the
/// registry (so a stage resolves the strategies it uses once, when its pipeline is built).
pub type BuildFn = fn(&Params, &BuildCx<'_>) -> Result<Component, BuildError>;

/// A runtime factory, stored as the registry calls it.
pub type DynBuildFn =
    Arc<dyn Fn(&Params, &BuildCx<'_>) -> Result<Component, BuildError> + Send + Sync>;

/// What a factory gets besides its params: the registry it is built from, so a stage can
/// resolve the strategies it names (see [`Resolved`](crate::resolve::Resolved)) when its
/// pipeline is built rather than on every turn.
#[derive(Debug, Clone, Copy)]
pub struct BuildCx<'a> {
    registry: &'a Registry,
}

impl<'a> BuildCx<'a> {
    /// A context building from `registry`.
    pub fn new(registry: &'a Registry) -> Self {
        BuildCx { registry }
    }

    /// The registry the component is built from.
    pub fn registry(&self) -> &'a Registry {
        self.registry
    }
}

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
    /// Description and defaults, for components registered through
    /// [`register_config!`](crate::register_config).
    pub about: Option<About>,
}

/// What a typed component says about itself (see [`ComponentConfig`](crate::ComponentConfig)).
#[derive(Debug, Clone, Copy)]
pub struct About {
    /// One line saying what the component does.
    pub description: &'static str,
    /// Its default params.
    pub defaults: fn() -> Params,
}

inventory::collect!(Registration);

/// Registers a stage or strategy at link time, with a factory of its params alone
/// (`fn(&Params) -> Result<Component, BuildError>`); a component that resolves strategies
/// when built registers through [`register_config!`](crate::register_config), whose
/// factory also gets the [`BuildCx`].
///
/// ```
/// use std::sync::Arc;
/// use foldwire_api::{async_trait, Component, BuildError, Params, Stage, StageCx, StageError, Turn};
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
/// foldwire_api::register!(Stage, "doc.tag", build_tag);
///
/// let registry = foldwire_api::Registry::from_inventory().unwrap();
/// assert!(registry.names(foldwire_api::ComponentKind::Stage).contains(&"doc.tag".to_string()));
/// ```
#[macro_export]
macro_rules! register {
    ($kind:ident, $name:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::registry::Registration {
                kind: $crate::registry::ComponentKind::$kind,
                name: $name,
                crate_name: ::core::env!("CARGO_PKG_NAME"),
                // A plain factory takes its params alone; typed configs
                // (`register_config!`) get the build context.
                build: |params, _cx| ($build)(params),
                about: ::core::option::Option::None,
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
    /// One line saying what it does (components registered with a typed config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The params it is built with when a spec gives none (components registered with a
    /// typed config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_params: Option<Params>,
}

#[derive(Clone)]
struct Entry {
    info: ComponentInfo,
    build: DynBuildFn,
}

/// Every known stage and strategy, seeded from link-time registrations and open to runtime
/// additions.
///
/// ```
/// use std::sync::Arc;
/// use foldwire_api::{
///     Component, ComponentKind, FoldDemand, FoldPolicy, Params, RangeInfo, Registry,
///     RegistryError,
/// };
///
/// #[derive(Debug)]
/// struct Never;
/// impl FoldPolicy for Never {
///     fn name(&self) -> &'static str { "doc.never" }
///     fn choose(&self, _: &[RangeInfo], _: &FoldDemand) -> Vec<usize> { Vec::new() }
/// }
///
/// let registry = Registry::empty();
/// // Host code adds a factory at runtime; pipelines built afterwards can name it.
/// registry
///     .register(ComponentKind::FoldPolicy, "doc.never", "my-host", |_: &Params| {
///         Ok(Component::FoldPolicy(Arc::new(Never)))
///     })
///     .unwrap();
/// assert_eq!(registry.fold_policy("doc.never", &Params::Null).unwrap().name(), "doc.never");
///
/// // A typo is caught with a suggestion, not a silent default.
/// let err = registry.fold_policy("doc.nevr", &Params::Null).unwrap_err();
/// assert!(matches!(err, RegistryError::Unknown { .. }));
/// assert!(err.to_string().contains("did you mean \"doc.never\""), "{err}");
/// ```
pub struct Registry {
    entries: RwLock<BTreeMap<String, Entry>>,
    /// Runtime entries removed since: only the strategies of pipelines already built
    /// (through [`StrategySource`]) still build from them.
    retired: RwLock<BTreeMap<String, Entry>>,
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
                    description: r.about.map(|a| a.description.to_owned()),
                    default_params: r.about.map(|a| (a.defaults)()),
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
            retired: RwLock::new(BTreeMap::new()),
        }
    }

    pub(crate) fn insert(
        &self,
        info: ComponentInfo,
        build: DynBuildFn,
    ) -> Result<(), RegistryError> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = entries.get(&info.name) {
            return Err(RegistryError::Duplicate {
                name: info.name.clone(),
                first: existing.info.crate_name.clone(),
                second: info.crate_name,
            });
        }
        // A name registered again after its removal is live again.
        let mut retired = self.retired.write().unwrap_or_else(|p| p.into_inner());
        retired.remove(&info.name);
        entries.insert(info.name.clone(), Entry { info, build });
        Ok(())
    }

    /// Removes a component registered at runtime ("hot-remove"): a pipeline built afterwards
    /// cannot name it ([`RegistryError::Removed`]), while the strategies of pipelines built
    /// before, which ask through [`StrategySource`], still build from its factory.
    ///
    /// # Errors
    /// No such component, or one linked into the binary.
    pub fn unregister(&self, name: &str) -> Result<ComponentInfo, RegistryError> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let linked = match entries.get(name) {
            Some(e) => (e.info.source != Source::Runtime).then(|| e.info.crate_name.clone()),
            None => {
                let gone = self.retired.read().unwrap_or_else(|p| p.into_inner());
                return Err(match gone.get(name) {
                    Some(e) => RegistryError::Removed {
                        kind: e.info.kind,
                        name: name.to_owned(),
                    },
                    None => RegistryError::Unknown {
                        kind: ComponentKind::Stage,
                        name: name.to_owned(),
                        hint: did_you_mean(name, &entries.keys().cloned().collect::<Vec<_>>()),
                        known: entries.keys().cloned().collect::<Vec<_>>().join(", "),
                    },
                });
            }
        };
        if let Some(owner) = linked {
            return Err(RegistryError::Linked {
                name: name.to_owned(),
                owner,
            });
        }
        let mut retired = self.retired.write().unwrap_or_else(|p| p.into_inner());
        let removed = entries.remove(name).map(|entry| {
            let info = entry.info.clone();
            retired.insert(name.to_owned(), entry);
            info
        });
        removed.ok_or_else(|| RegistryError::Removed {
            kind: ComponentKind::Stage,
            name: name.to_owned(),
        })
    }

    /// Registers a factory at runtime ("hot-add"); a pipeline built afterwards can use it.
    /// What a runtime factory builds may change between calls (a hot-added plugin is
    /// replaced), so a stage resolves a runtime strategy again on every turn (see
    /// [`Resolved`](crate::resolve::Resolved)).
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
                description: None,
                default_params: None,
            },
            Arc::new(move |params: &Params, _: &BuildCx<'_>| build(params)),
        )
    }

    /// Sets what listings say about a component registered at runtime: its one-line
    /// description and default params (a hot-added plugin describes itself anew when it is
    /// replaced). Returns false, changing nothing, for an unknown or linked name.
    pub fn describe(&self, name: &str, description: String, default_params: Params) -> bool {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        match entries.get_mut(name) {
            Some(e) if e.info.source == Source::Runtime => {
                e.info.description = Some(description);
                e.info.default_params = Some(default_params);
                true
            }
            _ => false,
        }
    }

    /// Every registered component, sorted by kind then name.
    pub fn list(&self) -> Vec<ComponentInfo> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<ComponentInfo> = entries.values().map(|e| e.info.clone()).collect();
        all.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        all
    }

    /// What the registry lists about one name, if it is registered.
    pub fn info(&self, name: &str) -> Option<ComponentInfo> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.get(name).map(|e| e.info.clone())
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
        self.build_entry(kind, name, params, false)
    }

    /// Builds from the live entries, and from removed ones too when `retired` is set.
    fn build_entry(
        &self,
        kind: ComponentKind,
        name: &str,
        params: &Params,
        retired: bool,
    ) -> Result<Component, RegistryError> {
        let entry = {
            let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
            entries.get(name).cloned()
        };
        let entry = match entry {
            Some(entry) => Some(entry),
            None => {
                let gone = self.retired.read().unwrap_or_else(|p| p.into_inner());
                match gone.get(name) {
                    Some(entry) if retired => Some(entry.clone()),
                    Some(entry) => {
                        return Err(RegistryError::Removed {
                            kind: entry.info.kind,
                            name: name.to_owned(),
                        });
                    }
                    None => None,
                }
            }
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
        let component = (entry.build)(params, &BuildCx::new(self))?;
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
        self.fold_policy_in(name, params, false)
    }

    fn fold_policy_in(
        &self,
        name: &str,
        params: &Params,
        retired: bool,
    ) -> Result<Arc<dyn FoldPolicy>, RegistryError> {
        match self.build_entry(ComponentKind::FoldPolicy, name, params, retired)? {
            Component::FoldPolicy(s) => Ok(s),
            other => Err(wrong(name, ComponentKind::FoldPolicy, other.kind())),
        }
    }

    /// Builds a layout.
    ///
    /// # Errors
    /// As [`Registry::build`].
    pub fn layout(&self, name: &str, params: &Params) -> Result<Arc<dyn Layout>, RegistryError> {
        self.layout_in(name, params, false)
    }

    fn layout_in(
        &self,
        name: &str,
        params: &Params,
        retired: bool,
    ) -> Result<Arc<dyn Layout>, RegistryError> {
        match self.build_entry(ComponentKind::Layout, name, params, retired)? {
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
        self.summarizer_in(name, params, false)
    }

    fn summarizer_in(
        &self,
        name: &str,
        params: &Params,
        retired: bool,
    ) -> Result<Arc<dyn Summarizer>, RegistryError> {
        match self.build_entry(ComponentKind::Summarizer, name, params, retired)? {
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

/// What stages ask at turn time: a pipeline already running keeps the strategies it was
/// built with, so removed runtime entries still build here (their factories decide what
/// a removed strategy does — a plugin falls back to its built-in, with a warning).
impl StrategySource for Registry {
    fn fold_policy(
        &self,
        name: &str,
        params: &Params,
    ) -> Result<Arc<dyn FoldPolicy>, RegistryError> {
        self.fold_policy_in(name, params, true)
    }

    fn layout(&self, name: &str, params: &Params) -> Result<Arc<dyn Layout>, RegistryError> {
        self.layout_in(name, params, true)
    }

    fn summarizer(
        &self,
        name: &str,
        params: &Params,
    ) -> Result<Arc<dyn Summarizer>, RegistryError> {
        self.summarizer_in(name, params, true)
    }
}

fn wrong(name: &str, wanted: ComponentKind, actual: ComponentKind) -> RegistryError {
    RegistryError::WrongKind {
        name: name.to_owned(),
        wanted,
        actual,
    }
}
