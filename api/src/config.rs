//! Typed component configs: one place for a component's kind, registered name, one-line
//! description and default params, so none of them is written twice and `foldwire plugins
//! --json` can print them.
//!
//! A component implements [`ComponentConfig`] on its params struct (deny unknown fields,
//! default every field) and registers with [`register_config!`](crate::register_config):
//!
//! ```
//! use std::sync::Arc;
//! use foldwire_api::{
//!     BuildCx, BuildError, Component, ComponentConfig, ComponentKind, FoldDemand, FoldPolicy,
//!     Params, RangeInfo, Registry,
//! };
//! use serde::{Deserialize, Serialize};
//!
//! /// Params of `doc.first_n`.
//! #[derive(Debug, Clone, Serialize, Deserialize)]
//! #[serde(deny_unknown_fields, default)]
//! struct FirstN {
//!     /// How many ranges to fold when over budget.
//!     n: usize,
//! }
//! impl Default for FirstN {
//!     fn default() -> Self { FirstN { n: 2 } }
//! }
//!
//! #[derive(Debug)]
//! struct FirstNPolicy(FirstN);
//! impl FoldPolicy for FirstNPolicy {
//!     fn name(&self) -> &'static str { FirstN::NAME }
//!     fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
//!         if demand.request_tokens <= demand.budget.available() { return Vec::new(); }
//!         (0..ranges.len().min(self.0.n)).collect()
//!     }
//! }
//!
//! impl ComponentConfig for FirstN {
//!     const KIND: ComponentKind = ComponentKind::FoldPolicy;
//!     const NAME: &'static str = "doc.first_n";
//!     const DESCRIPTION: &'static str = "Folds the first n ranges whenever over budget.";
//!     fn build(self, _: &BuildCx<'_>) -> Result<Component, BuildError> {
//!         if self.n == 0 {
//!             return Err(BuildError::new(Self::NAME, "n must be at least 1"));
//!         }
//!         Ok(Component::FoldPolicy(Arc::new(FirstNPolicy(self))))
//!     }
//! }
//! foldwire_api::register_config!(FirstN);
//!
//! let registry = Registry::from_inventory().unwrap();
//! let info = registry.list().into_iter().find(|c| c.name == "doc.first_n").unwrap();
//! assert_eq!(info.description.as_deref(), Some("Folds the first n ranges whenever over budget."));
//! assert_eq!(info.default_params, Some(serde_json::json!({ "n": 2 })));
//! // Unknown keys and invalid values are refused by name when the pipeline is built.
//! let typo = registry.fold_policy("doc.first_n", &serde_json::json!({ "m": 1 })).unwrap_err();
//! assert!(typo.to_string().contains("unknown field `m`"), "{typo}");
//! assert!(registry.fold_policy("doc.first_n", &serde_json::json!({ "n": 0 })).is_err());
//! ```

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::component::{BuildError, ComponentKind, Params, RegistryError};
use crate::registry::{BuildCx, Component, ComponentInfo, Registry, Source};

/// A component's params type, carrying everything the registry lists about the component.
pub trait ComponentConfig: Serialize + DeserializeOwned + Default + 'static {
    /// What kind of component it configures.
    const KIND: ComponentKind;
    /// The registered dotted snake_case name.
    const NAME: &'static str;
    /// One line saying what the component does, for `foldwire plugins`.
    const DESCRIPTION: &'static str;

    /// Builds the component from its parsed params; refuse values out of range here, with a
    /// [`BuildError`] naming what was wrong. A stage resolves the strategies it names through
    /// `cx` ([`Resolved::build`](crate::resolve::Resolved::build)), so an unknown name fails
    /// here, when the pipeline is built.
    ///
    /// # Errors
    /// Params that parse but cannot be used, or a strategy that cannot be resolved.
    fn build(self, cx: &BuildCx<'_>) -> Result<Component, BuildError>;
}

/// The factory [`register_config!`](crate::register_config) registers: null params mean the
/// defaults; anything else is parsed strictly into `C`, then built.
///
/// # Errors
/// Params of the wrong shape (naming the component and the field), or refused by `C::build`.
pub fn build_with<C: ComponentConfig>(
    params: &Params,
    cx: &BuildCx<'_>,
) -> Result<Component, BuildError> {
    BuildError::parse_params::<C>(C::NAME, params)?.build(cx)
}

/// `C`'s default params as JSON, as `foldwire plugins --json` prints them.
pub fn default_params_of<C: ComponentConfig>() -> Params {
    serde_json::to_value(C::default()).unwrap_or(Params::Null)
}

// Here rather than in `registry`, so the registry does not depend on typed configs (which
// depend on the registry's `Component`).
impl Registry {
    /// Registers a typed component at runtime, with its description and defaults.
    ///
    /// # Errors
    /// Fails when the name is taken.
    pub fn register_config<C: ComponentConfig>(&self, owner: &str) -> Result<(), RegistryError> {
        self.insert(
            ComponentInfo {
                kind: C::KIND,
                name: C::NAME.to_owned(),
                crate_name: owner.to_owned(),
                source: Source::Runtime,
                description: Some(C::DESCRIPTION.to_owned()),
                default_params: Some(default_params_of::<C>()),
            },
            Arc::new(build_with::<C>),
        )
    }
}

/// Registers a component at link time from its [`ComponentConfig`]: name, kind, description
/// and defaults all come from the config type, written once.
#[macro_export]
macro_rules! register_config {
    ($config:ty) => {
        $crate::inventory::submit! {
            $crate::registry::Registration {
                kind: <$config as $crate::config::ComponentConfig>::KIND,
                name: <$config as $crate::config::ComponentConfig>::NAME,
                crate_name: ::core::env!("CARGO_PKG_NAME"),
                build: $crate::config::build_with::<$config>,
                about: ::core::option::Option::Some($crate::registry::About {
                    description: <$config as $crate::config::ComponentConfig>::DESCRIPTION,
                    defaults: $crate::config::default_params_of::<$config>,
                }),
            }
        }
    };
}
