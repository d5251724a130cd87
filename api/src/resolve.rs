//! Strategies a stage names, resolved when its pipeline is built: the stage's factory gets a
//! [`BuildCx`] and turns each name into a [`Resolved`] handle once, so an unknown name or bad
//! params fail the build, and a turn does not look the strategy up again.
//!
//! A strategy registered at runtime ([`Registry::register`], a hot-added plugin) may build
//! something else tomorrow (the plugin is replaced or removed), so its handle is checked at
//! build time and built again at the start of each turn's use, from the turn's registry.
//!
//! ```
//! use std::sync::Arc;
//! use foldwire_api::resolve::Resolved;
//! use foldwire_api::{BuildCx, Component, ComponentKind, FoldDemand, FoldPolicy, RangeInfo, Registry};
//!
//! #[derive(Debug)]
//! struct Never;
//! impl FoldPolicy for Never {
//!     fn name(&self) -> &'static str { "doc.never" }
//!     fn choose(&self, _: &[RangeInfo], _: &FoldDemand) -> Vec<usize> { Vec::new() }
//! }
//! let registry = Registry::empty();
//! registry
//!     .register(ComponentKind::FoldPolicy, "doc.never", "host", |_| {
//!         Ok(Component::FoldPolicy(Arc::new(Never)))
//!     })
//!     .unwrap();
//! let cx = BuildCx::new(&registry);
//! let policy =
//!     Resolved::<dyn FoldPolicy>::build(&cx, "doc.stage", "policy", "doc.never", &Default::default())
//!         .unwrap();
//! assert_eq!(policy.get(&registry).unwrap().name(), "doc.never");
//! // A misspelled name fails when the stage is built, naming the stage and its param.
//! let err = Resolved::<dyn FoldPolicy>::build(&cx, "doc.stage", "policy", "doc.nevr", &Default::default())
//!     .unwrap_err()
//!     .to_string();
//! assert!(err.starts_with("doc.stage: param policy: ") && err.contains("did you mean"), "{err}");
//! ```

use std::fmt;
use std::sync::Arc;

use crate::component::{BuildError, ComponentKind, Params, RegistryError, StrategyUse};
use crate::registry::{BuildCx, Source};
use crate::strategy::{FoldPolicy, Layout, StrategySource, Summarizer};

/// A strategy kind a stage can name: `dyn FoldPolicy`, `dyn Layout` or `dyn Summarizer`.
pub trait StrategyKind: Send + Sync + fmt::Debug + 'static {
    /// The component kind it is registered as.
    const KIND: ComponentKind;

    /// Builds one from a source by name.
    ///
    /// # Errors
    /// As [`StrategySource::fold_policy`].
    fn from_source(
        source: &dyn StrategySource,
        name: &str,
        params: &Params,
    ) -> Result<Arc<Self>, RegistryError>;
}

/// Implements [`StrategyKind`] for a strategy trait object and the source method building it.
macro_rules! strategy_kind {
    ($($trait:ident => $kind:ident, $method:ident;)*) => {$(
        impl StrategyKind for dyn $trait {
            const KIND: ComponentKind = ComponentKind::$kind;
            fn from_source(
                source: &dyn StrategySource,
                name: &str,
                params: &Params,
            ) -> Result<Arc<Self>, RegistryError> {
                source.$method(name, params)
            }
        }
    )*};
}

strategy_kind! {
    FoldPolicy => FoldPolicy, fold_policy;
    Layout => Layout, layout;
    Summarizer => Summarizer, summarizer;
}

/// A strategy a stage uses: built once when the stage was built from the registry, or
/// built from the turn's registry on each [`Resolved::get`] (a runtime registration, or a
/// stage constructed in host code without a registry).
pub struct Resolved<T: StrategyKind + ?Sized> {
    uses: StrategyUse,
    built: Option<Arc<T>>,
}

impl<T: StrategyKind + ?Sized> Clone for Resolved<T> {
    fn clone(&self) -> Self {
        Resolved {
            uses: self.uses.clone(),
            built: self.built.clone(),
        }
    }
}

impl<T: StrategyKind + ?Sized> fmt::Debug for Resolved<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolved")
            .field("name", &self.uses.name)
            .field("per_turn", &self.built.is_none())
            .finish()
    }
}

impl<T: StrategyKind + ?Sized> Resolved<T> {
    /// Resolves the strategy `stage` names in its param `param`, at build time.
    ///
    /// # Errors
    /// An unknown name (with a did-you-mean), another kind under that name, or params the
    /// strategy refuses; the message names the stage and the param.
    pub fn build(
        cx: &BuildCx<'_>,
        stage: &str,
        param: &'static str,
        name: &str,
        params: &Params,
    ) -> Result<Self, BuildError> {
        let registry = cx.registry();
        let built = T::from_source(registry, name, params)
            .map_err(|e| BuildError::new(stage, format!("param {param}: {e}")))?;
        let runtime = registry
            .info(name)
            .is_some_and(|info| info.source == Source::Runtime);
        Ok(Resolved {
            uses: StrategyUse {
                param,
                kind: T::KIND,
                name: name.to_owned(),
                params: params.clone(),
            },
            built: (!runtime).then_some(built),
        })
    }

    /// A strategy resolved from the turn's registry on every [`Resolved::get`], for a stage
    /// constructed without a registry.
    pub fn per_turn(param: &'static str, name: &str, params: &Params) -> Self {
        Resolved {
            uses: StrategyUse {
                param,
                kind: T::KIND,
                name: name.to_owned(),
                params: params.clone(),
            },
            built: None,
        }
    }

    /// The strategy for this turn: the one built with the pipeline, else built now from
    /// `source` (the turn's registry), so a turn keeps the revision it got here.
    ///
    /// # Errors
    /// As [`StrategySource::fold_policy`], for a strategy built per turn.
    pub fn get(&self, source: &dyn StrategySource) -> Result<Arc<T>, RegistryError> {
        match &self.built {
            Some(strategy) => Ok(Arc::clone(strategy)),
            None => T::from_source(source, &self.uses.name, &self.uses.params),
        }
    }

    /// What the stage names: the param, kind, name and params.
    pub fn uses(&self) -> &StrategyUse {
        &self.uses
    }

    /// True when the strategy is built again on every turn.
    pub fn per_turn_only(&self) -> bool {
        self.built.is_none()
    }
}
