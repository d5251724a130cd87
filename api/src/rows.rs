//! The rows of the session state's two long tables, the refs table ([`RefEntry`]) and the
//! archive index ([`ArchivedItem`]), and how the state stores them: a row that continues
//! the row before it is written in a packed form, every other row as the object it
//! serializes to.
//!
//! A first turn mints a ref for each of thousands of units and archives their originals
//! into one pack, so these tables are most of its state entry, and most of each row repeats
//! the row before: the next ref number and the same turn, the same pack key (64 digits) and
//! media type. Packed, a refs row is its fingerprint alone (`"c04f7ccbeec8b667"`: the next
//! ref, minted in the same turn) and an index row `[ref, key, size, offset]` (the pack,
//! media type and marks of the row before). A packed form stands only where the row has
//! nothing else to say (no media pointer, no fields of newer builds). States of earlier
//! builds, every row an object, read as they always did.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{
    BorrowedStrDeserializer, MapAccessDeserializer, SeqAccessDeserializer, StrDeserializer,
};
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::block::ExtraFields;
use crate::ids::Ref;
use crate::message::MessageId;
use crate::shared::Shared;

/// One row of the refs table: which message a ref names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RefEntry {
    /// The ref.
    pub r#ref: Ref,
    /// The message fingerprint it was minted for.
    pub message: MessageId,
    /// Turn number when minted.
    pub minted_turn: u64,
    /// Fields written by newer versions.
    #[serde(flatten)]
    pub extra: ExtraFields,
}

impl Default for RefEntry {
    fn default() -> Self {
        RefEntry {
            r#ref: Ref(1),
            message: MessageId(String::new()),
            minted_turn: 0,
            extra: ExtraFields::new(),
        }
    }
}

/// One archived payload of the session (media or the original of a folded message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ArchivedItem {
    /// The ref it was stored under.
    pub r#ref: Option<Ref>,
    /// The archive key (content-addressed).
    pub key: String,
    /// MIME type.
    pub media_type: String,
    /// Size in bytes.
    pub size: u64,
    /// True when it holds the original of a folded unit (not media).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub original: bool,
    /// True when it holds the whole output of a tool result trimmed on the wire.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub trimmed: bool,
    /// For spilled media: the fingerprint of the unit that carried it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For spilled media: the JSON pointer of the payload inside that unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// The content key of the pack its bytes were written in (none: an object of its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    /// Where in that pack its bytes start (their length is `size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Fields written by newer versions.
    #[serde(flatten)]
    pub extra: ExtraFields,
}

/// A row with a packed form that continues the row before it.
pub(crate) trait PackedRow: Sized + Serialize + DeserializeOwned {
    /// The packed form.
    type Packed<'a>: Serialize
    where
        Self: 'a;
    /// The packed form as read.
    type Read: DeserializeOwned;
    /// The table, for errors.
    const TABLE: &'static str;
    /// The packed form of `self` after `previous`, when `self` continues it.
    fn pack<'a>(&'a self, previous: &Self) -> Option<Self::Packed<'a>>;
    /// The row a packed form read after `previous` stands for.
    fn unpack(read: Self::Read, previous: &Self) -> Self;
}

impl PackedRow for RefEntry {
    type Packed<'a> = &'a MessageId;
    type Read = MessageId;
    const TABLE: &'static str = "refs table";

    fn pack<'a>(&'a self, previous: &Self) -> Option<&'a MessageId> {
        (self.r#ref.0 == previous.r#ref.0.wrapping_add(1)
            && self.minted_turn == previous.minted_turn
            && self.extra.is_empty())
        .then_some(&self.message)
    }

    fn unpack(message: MessageId, previous: &Self) -> Self {
        RefEntry {
            r#ref: Ref(previous.r#ref.0.wrapping_add(1)),
            message,
            minted_turn: previous.minted_turn,
            extra: ExtraFields::new(),
        }
    }
}

impl PackedRow for ArchivedItem {
    type Packed<'a> = (Ref, &'a str, u64, u64);
    type Read = (Ref, String, u64, u64);
    const TABLE: &'static str = "archive index";

    fn pack<'a>(&'a self, previous: &Self) -> Option<Self::Packed<'a>> {
        let continues = self.pack.is_some()
            && self.pack == previous.pack
            && self.media_type == previous.media_type
            && self.original == previous.original
            && self.trimmed == previous.trimmed
            && self.message.is_none()
            && self.pointer.is_none()
            && self.extra.is_empty();
        match (self.r#ref, self.offset) {
            (Some(r), Some(offset)) if continues => Some((r, &self.key, self.size, offset)),
            _ => None,
        }
    }

    fn unpack((r, key, size, offset): Self::Read, previous: &Self) -> Self {
        ArchivedItem {
            r#ref: Some(r),
            key,
            size,
            offset: Some(offset),
            media_type: previous.media_type.clone(),
            original: previous.original,
            trimmed: previous.trimmed,
            pack: previous.pack.clone(),
            ..ArchivedItem::default()
        }
    }
}

/// Writes a table (the refs table, the archive index), packing every row that continues the
/// one before it.
pub(crate) fn serialize_packed<T: PackedRow, S: Serializer>(
    rows: &Shared<Vec<T>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut seq = serializer.serialize_seq(Some(rows.len()))?;
    let mut previous: Option<&T> = None;
    for row in rows.iter() {
        match previous.and_then(|p| row.pack(p)) {
            Some(packed) => seq.serialize_element(&packed)?,
            None => seq.serialize_element(row)?,
        }
        previous = Some(row);
    }
    seq.end()
}

/// One row as written: the object, or its packed form.
enum Row<T: PackedRow> {
    Whole(T),
    Packed(T::Read),
}

impl<'de, T: PackedRow> Deserialize<'de> for Row<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RowVisitor(PhantomData))
    }
}

struct RowVisitor<T>(PhantomData<T>);

impl<'de, T: PackedRow> Visitor<'de> for RowVisitor<T> {
    type Value = Row<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a row of the {} or its packed form", T::TABLE)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Row<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Row::Whole)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Row<T>, A::Error> {
        T::Read::deserialize(SeqAccessDeserializer::new(seq)).map(Row::Packed)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Row<T>, E> {
        T::Read::deserialize(BorrowedStrDeserializer::new(v)).map(Row::Packed)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Row<T>, E> {
        T::Read::deserialize(StrDeserializer::new(v)).map(Row::Packed)
    }
}

/// Reads a table, packed rows and objects alike.
pub(crate) fn deserialize_packed<'de, T: PackedRow, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Shared<Vec<T>>, D::Error> {
    deserializer
        .deserialize_seq(RowsVisitor(PhantomData))
        .map(Shared::new)
}

struct RowsVisitor<T>(PhantomData<T>);

impl<'de, T: PackedRow> Visitor<'de> for RowsVisitor<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "the {}, a list of rows", T::TABLE)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut rows: Vec<T> = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(row) = seq.next_element::<Row<T>>()? {
            let row = match row {
                Row::Whole(row) => row,
                Row::Packed(read) => {
                    let Some(previous) = rows.last() else {
                        return Err(de::Error::custom(format!(
                            "the first row of the {} is packed, but a packed row continues the row before it",
                            T::TABLE
                        )));
                    };
                    T::unpack(read, previous)
                }
            };
            rows.push(row);
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn original(r: u32, pack: &str, offset: u64) -> ArchivedItem {
        ArchivedItem {
            r#ref: Some(Ref(r)),
            key: format!("key{r}"),
            media_type: "application/vnd.foldwire.original+json".into(),
            size: 10 + u64::from(r),
            original: true,
            pack: Some(pack.into()),
            offset: Some(offset),
            ..ArchivedItem::default()
        }
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Doc {
        #[serde(
            serialize_with = "serialize_packed",
            deserialize_with = "deserialize_packed"
        )]
        archive: Shared<Vec<ArchivedItem>>,
    }

    #[test]
    fn rows_continuing_a_pack_are_packed_and_read_back_whole() {
        let media = ArchivedItem {
            key: "img".into(),
            media_type: "image/png".into(),
            size: 4,
            message: Some("fp".into()),
            pointer: Some("/source/data".into()),
            pack: Some("p1".into()),
            offset: Some(40),
            ..ArchivedItem::default()
        };
        let mut later = original(9, "p2", 0);
        later.extra.insert("later".into(), serde_json::json!(1));
        let doc = Doc {
            archive: Shared::new(vec![
                original(1, "p1", 0),
                original(2, "p1", 11),
                original(3, "p1", 23),
                media,
                original(4, "p1", 50),
                original(5, "p2", 0),
                later,
                original(6, "p2", 30),
            ]),
        };
        let json = serde_json::to_value(&doc).unwrap();
        let rows = json["archive"].as_array().unwrap();
        // A pack's first row is whole, the rows after it packed; the media row (a pointer)
        // stays whole, and so does the row after it (another media type), a new pack's
        // first row and a row with a field of a newer build.
        let packed: Vec<bool> = rows.iter().map(|r| r.is_array()).collect();
        assert_eq!(
            packed,
            [false, true, true, false, false, false, false, true]
        );
        assert_eq!(rows[1], serde_json::json!(["m00002", "key2", 12, 11]));
        let back: Doc = serde_json::from_value(json).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn packed_rows_are_far_smaller_than_objects() {
        let pack = "7".repeat(64);
        let rows: Vec<ArchivedItem> = (1..=1000)
            .map(|r| ArchivedItem {
                key: format!("{r:064}"),
                ..original(r, &pack, u64::from(r) * 100)
            })
            .collect();
        let packed = serde_json::to_vec(&Doc {
            archive: Shared::new(rows.clone()),
        })
        .unwrap();
        let whole = serde_json::to_vec(&serde_json::json!({ "archive": rows })).unwrap();
        assert!(
            packed.len() * 2 < whole.len(),
            "{} vs {}",
            packed.len(),
            whole.len()
        );
    }

    #[test]
    fn bad_rows_are_refused_by_what_is_wrong() {
        let err = serde_json::from_str::<Doc>(r#"{"archive":[["m00001","k",1,0]]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("first row of the archive index is packed"),
            "{err}"
        );
        let err = serde_json::from_str::<Doc>(
            r#"{"archive":[{"ref":"m00001","key":"k","size":1,"pack":"p","offset":0},["m00002","k2",1]]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("size 4"), "{err}");
    }
    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Refs {
        #[serde(
            serialize_with = "serialize_packed",
            deserialize_with = "deserialize_packed"
        )]
        refs: Shared<Vec<RefEntry>>,
    }

    #[test]
    fn refs_minted_in_a_row_are_their_fingerprints_alone() {
        let row = |r: u32, turn: u64| RefEntry {
            r#ref: Ref(r),
            message: MessageId(format!("fp{r}")),
            minted_turn: turn,
            extra: ExtraFields::new(),
        };
        let mut later = row(6, 2);
        later.extra.insert("later".into(), serde_json::json!(true));
        let refs = Refs {
            refs: Shared::new(vec![
                row(1, 0),
                row(2, 0),
                row(3, 0),
                row(5, 0),
                later,
                row(7, 2),
                row(8, 3),
            ]),
        };
        let json = serde_json::to_value(&refs).unwrap();
        let rows = json["refs"].as_array().unwrap();
        // A gap in the numbers, a row with a newer build's field, and a new turn are whole.
        let packed: Vec<bool> = rows.iter().map(|r| r.is_string()).collect();
        assert_eq!(packed, [false, true, true, false, false, true, false]);
        assert_eq!(rows[1], serde_json::json!("fp2"));
        let back: Refs = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, refs);
        // Read from bytes too (borrowed strings).
        let back: Refs = serde_json::from_slice(&serde_json::to_vec(&json).unwrap()).unwrap();
        assert_eq!(back, refs);
        let err = serde_json::from_str::<Refs>(r#"{"refs":["fp1"]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("first row of the refs table is packed"),
            "{err}"
        );
    }
}
