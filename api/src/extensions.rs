//! Typed values stages leave for later stages of the same turn, keyed by their type instead
//! of a string: the reader gets the type the writer put, with no JSON round trip and no key
//! to misspell. Define a type per value (a newtype when the payload is a shared type), so two
//! stages cannot collide by accident.
//!
//! ```
//! use foldwire_api::Extensions;
//!
//! /// What `ranges.build` protected this turn, for `fold` to reuse.
//! #[derive(Debug, Clone, PartialEq)]
//! struct ProtectedRecent(u64);
//!
//! let mut ext = Extensions::new();
//! assert!(ext.insert(ProtectedRecent(5_000)).is_none());
//! assert_eq!(ext.get::<ProtectedRecent>(), Some(&ProtectedRecent(5_000)));
//! // Another type is another slot.
//! assert_eq!(ext.get::<u64>(), None);
//! ```

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A map from a type to one value of it.
#[derive(Default)]
pub struct Extensions {
    values: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl Extensions {
    /// An empty map.
    pub fn new() -> Self {
        Extensions::default()
    }

    /// Stores `value`, returning the value of that type stored before, if any.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        self.values
            .insert(TypeId::of::<T>(), Box::new(value))
            .and_then(|old| old.downcast::<T>().ok())
            .map(|old| *old)
    }

    /// The value of type `T`, if one is stored.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }

    /// The value of type `T`, mutably, if one is stored.
    pub fn get_mut<T: Send + Sync + 'static>(&mut self) -> Option<&mut T> {
        self.values
            .get_mut(&TypeId::of::<T>())
            .and_then(|v| v.downcast_mut::<T>())
    }

    /// Removes and returns the value of type `T`, if one is stored.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<T> {
        self.values
            .remove(&TypeId::of::<T>())
            .and_then(|v| v.downcast::<T>().ok())
            .map(|v| *v)
    }

    /// How many values are stored.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values need not be Debug; their count is what a log can use.
        f.debug_struct("Extensions")
            .field("values", &self.values.len())
            .finish()
    }
}

/// A cloneable map from a type to one shared value of it, for values a host hands to a turn
/// (see [`TurnOptions::extensions`](crate::TurnOptions::extensions)): cloning the map shares
/// the values instead of copying them, so the values need not be `Clone` themselves.
#[derive(Default, Clone)]
pub struct SharedExtensions {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl SharedExtensions {
    /// An empty map.
    pub fn new() -> Self {
        SharedExtensions::default()
    }

    /// Stores `value`, replacing the value of that type stored before; returns whether one was.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> bool {
        self.values
            .insert(TypeId::of::<T>(), Arc::new(value))
            .is_some()
    }

    /// The value of type `T`, if one is stored.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }

    /// Removes the value of type `T`; returns whether one was stored.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> bool {
        self.values.remove(&TypeId::of::<T>()).is_some()
    }

    /// How many values are stored.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl fmt::Debug for SharedExtensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedExtensions")
            .field("values", &self.values.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_values_survive_a_clone_and_keep_one_slot_per_type() {
        let mut ext = SharedExtensions::new();
        assert!(!ext.insert(Note("a")));
        assert!(ext.insert(Note("b")));
        let copy = ext.clone();
        assert!(ext.remove::<Note>());
        assert_eq!(ext.get::<Note>(), None);
        assert_eq!(copy.get::<Note>(), Some(&Note("b")));
        assert_eq!(copy.len(), 1);
        assert_eq!(format!("{copy:?}"), "SharedExtensions { values: 1 }");
    }

    #[derive(Debug, PartialEq)]
    struct Note(&'static str);

    #[test]
    fn each_type_has_one_slot() {
        let mut ext = Extensions::new();
        assert!(ext.is_empty());
        assert_eq!(ext.insert(Note("a")), None);
        assert_eq!(ext.insert(Note("b")), Some(Note("a")));
        ext.insert(7_u32);
        assert_eq!(ext.len(), 2);
        if let Some(n) = ext.get_mut::<u32>() {
            *n += 1;
        }
        assert_eq!(ext.get::<u32>(), Some(&8));
        assert_eq!(ext.remove::<Note>(), Some(Note("b")));
        assert_eq!(ext.get::<Note>(), None);
        assert_eq!(format!("{ext:?}"), "Extensions { values: 1 }");
    }
}
