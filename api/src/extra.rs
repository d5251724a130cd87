//! [`ExtraFields`]: the fields a newer version wrote that this build does not know.

use std::ops::{Deref, DerefMut};
use std::sync::LazyLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The map an [`ExtraFields`] that holds nothing reads as.
static NONE: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// Extra fields kept verbatim so newer state files survive older binaries.
///
/// It reads and writes as a `serde_json::Map` (through `Deref`), and (flattened) serializes
/// as that map's fields. Every row of a session's tables carries one, and it is empty on
/// almost all of them: held as a pointer that stays null until a field arrives, so an empty
/// one is 8 bytes, not a map's 72 (a first turn at 10,000 messages makes some 30,000 rows).
#[derive(Clone, Default)]
pub struct ExtraFields(Option<Box<Map<String, Value>>>);

impl ExtraFields {
    /// No fields.
    pub fn new() -> Self {
        ExtraFields(None)
    }
}

impl Deref for ExtraFields {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        self.0.as_deref().unwrap_or(&NONE)
    }
}

impl DerefMut for ExtraFields {
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        self.0.get_or_insert_default()
    }
}

impl From<Map<String, Value>> for ExtraFields {
    fn from(map: Map<String, Value>) -> Self {
        ExtraFields((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl From<ExtraFields> for Map<String, Value> {
    fn from(extra: ExtraFields) -> Self {
        extra.0.map(|map| *map).unwrap_or_default()
    }
}

/// Equal when the fields are (none held and an emptied map are the same).
impl PartialEq for ExtraFields {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for ExtraFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for ExtraFields {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ExtraFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::deserialize(deserializer).map(ExtraFields::from)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// Flattened into a row, it carries the unknown fields through a read and a write, and
    /// an empty one writes nothing.
    #[test]
    fn flattened_it_round_trips_unknown_fields_and_writes_nothing_when_empty() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Row {
            known: u32,
            #[serde(flatten)]
            extra: ExtraFields,
        }
        let read: Row = serde_json::from_value(json!({"known": 1, "later": [1, 2]})).unwrap();
        assert_eq!(read.extra.get("later"), Some(&json!([1, 2])));
        assert_eq!(
            serde_json::to_value(&read).unwrap(),
            json!({"known": 1, "later": [1, 2]})
        );
        let plain: Row = serde_json::from_value(json!({"known": 2})).unwrap();
        assert!(plain.extra.0.is_none(), "nothing allocated for no fields");
        assert_eq!(serde_json::to_value(&plain).unwrap(), json!({"known": 2}));
    }

    /// Writing through it allocates the map; emptied again it equals one never written.
    #[test]
    fn an_emptied_map_equals_none_and_writes_land() {
        let mut extra = ExtraFields::new();
        assert!(extra.is_empty());
        extra.insert("x".into(), json!(1));
        assert_eq!(extra["x"], json!(1));
        assert_ne!(extra, ExtraFields::new());
        extra.remove("x");
        assert_eq!(extra, ExtraFields::new());
        assert!(std::mem::size_of::<ExtraFields>() <= 8);
    }
}
