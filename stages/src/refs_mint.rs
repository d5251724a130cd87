//! Stage `refs.mint`: gives every foldable unit its session ref, `m00001`… in first-seen
//! order.
//!
//! - A unit keeps the ref minted for its fingerprint in an earlier turn (the refs table is
//!   part of the persisted session state, so refs survive restarts).
//! - A new foldable unit gets `state.mint_ref`: the next number, monotonic, never reused.
//! - A unit held back from folding gets no ref this turn: it has a pin (hard protection,
//!   unrecoverable media, a failed archive write — `archive.spill` pins those), carries
//!   unrecoverable media, is an opaque item, or was made by foldwire (summaries, stubs).
//! - System and developer messages among the messages are frame
//!   ([`foldwire_core::Message::is_frame`]): never foldable, so they never get a ref and
//!   no range, fold or note can name them.
//!   No number is consumed for it; once it becomes foldable it is minted then, so its
//!   number is fresh (higher than every number issued before). A unit that already had a
//!   ref and is pinned for one turn gets that same ref back afterwards: a ref names one
//!   message forever, and blocks find their messages again by it.
//! - Archivable media needs no archive to fold safely: the compress operation keeps the
//!   exact bytes of every folded unit in the session state, so this stage only requires a
//!   decoded conversation and pipelines without media stages still build.

use foldhash::{HashMap, HashMapExt as _};
use std::sync::Arc;

use foldwire_core::state::RefEntry;
use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Conversation, Fact, MessageId,
    MessageKind, Origin, Ref, SessionState, Stage, StageCx, StageError, Turn, async_trait,
};
use serde::{Deserialize, Serialize};

/// Stage name.
pub const NAME: &str = RefsMintConfig::NAME;

/// What minting did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MintReport {
    /// Units that got a new ref.
    pub minted: usize,
    /// Units that found their ref from an earlier turn.
    pub known: usize,
    /// Client units held back (pinned, opaque, unrecoverable media).
    pub held_back: usize,
    /// System and developer messages, which are frame and never get a ref.
    pub frame: usize,
}

/// Assigns refs to the conversation's units, minting new ones in `state`.
pub fn mint_refs(state: &mut SessionState, conversation: &mut Conversation) -> MintReport {
    let mut report = MintReport::default();
    // First every unit's ref from the table as it stands, looked up by borrowed ids (the
    // table grows with the session; nothing of it is copied); then the new ones minted in
    // conversation order, a fingerprint seen twice this turn getting one ref.
    let mut fresh: Vec<usize> = Vec::new();
    {
        let mut known = KnownRefs::new(&state.refs);
        for (i, unit) in conversation.messages.iter_mut().enumerate() {
            unit.r#ref = None;
            if unit.origin != Origin::Client || unit.id.0.is_empty() {
                continue;
            }
            if unit.is_frame() {
                report.frame += 1;
                continue;
            }
            let held = unit.pin.is_some()
                || unit.kind == MessageKind::Opaque
                || unit.has_unrecoverable_media();
            if held {
                report.held_back += 1;
                continue;
            }
            match known.get(&unit.id) {
                Some(r) => {
                    unit.r#ref = Some(r);
                    report.known += 1;
                }
                None => fresh.push(i),
            }
        }
    }
    if fresh.is_empty() {
        return report;
    }
    // Sized once: a session's first turn mints thousands. The fingerprints are looked up
    // where the units hold them, and each is copied once, into the refs table.
    state.refs.reserve(fresh.len());
    let mut assigned: Vec<(usize, Ref)> = Vec::with_capacity(fresh.len());
    {
        let mut minted: HashMap<&str, Ref> = HashMap::with_capacity(fresh.len());
        for i in fresh {
            let Some(unit) = conversation.messages.get(i) else {
                continue;
            };
            let r = match minted.get(unit.id.0.as_str()) {
                Some(r) => {
                    report.known += 1;
                    *r
                }
                None => {
                    let r = state.mint_ref(unit.id.clone());
                    minted.insert(unit.id.0.as_str(), r);
                    report.minted += 1;
                    r
                }
            };
            assigned.push((i, r));
        }
    }
    for (i, r) in assigned {
        if let Some(unit) = conversation.messages.get_mut(i) {
            unit.r#ref = Some(r);
        }
    }
    report
}

/// The refs already minted, looked up by message fingerprint. A client resends its history
/// in the order the refs were minted, so each lookup first tries the entry after the last
/// one found; the hash map over all of them is built only when that guess misses (a unit
/// never seen, or one the client dropped or moved).
struct KnownRefs<'s> {
    refs: &'s [RefEntry],
    /// Where the next unit's entry is expected.
    next: usize,
    by_id: Option<HashMap<&'s str, (usize, Ref)>>,
}

impl<'s> KnownRefs<'s> {
    fn new(refs: &'s [RefEntry]) -> Self {
        KnownRefs {
            refs,
            next: 0,
            by_id: None,
        }
    }

    fn get(&mut self, id: &MessageId) -> Option<Ref> {
        if let Some(e) = self.refs.get(self.next)
            && e.message == *id
        {
            self.next += 1;
            return Some(e.r#ref);
        }
        let refs = self.refs;
        let by_id = self.by_id.get_or_insert_with(|| {
            // A fingerprint minted twice (only a hand-edited state has one) answers with
            // its first entry here; the guess in order takes whichever it meets.
            let mut map = HashMap::with_capacity(refs.len());
            for (i, e) in refs.iter().enumerate() {
                map.entry(e.message.0.as_str()).or_insert((i, e.r#ref));
            }
            map
        });
        let (at, r) = *by_id.get(id.0.as_str())?;
        self.next = at + 1;
        Some(r)
    }
}

/// The `refs.mint` stage (no parameters).
#[derive(Debug, Clone, Copy, Default)]
pub struct RefsMint;

#[async_trait]
impl Stage for RefsMint {
    fn name(&self) -> &'static str {
        NAME
    }
    fn requires(&self) -> &'static [Fact] {
        &[Fact::Decoded]
    }
    fn provides(&self) -> &'static [Fact] {
        &[Fact::RefsMinted]
    }
    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        let conversation = turn
            .conversation
            .as_mut()
            .ok_or(StageError::NotDecoded { stage: NAME })?;
        let report = mint_refs(&mut turn.state, conversation);
        turn.report.count("refs.minted", report.minted as u64);
        turn.report.count("refs.known", report.known as u64);
        turn.report.count("refs.held_back", report.held_back as u64);
        turn.report.count("refs.frame", report.frame as u64);
        Ok(())
    }
}

/// Parameters of `refs.mint` (none; unknown keys are refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefsMintConfig {}

impl ComponentConfig for RefsMintConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "refs.mint";
    const DESCRIPTION: &'static str =
        "Gives every unit a stable ref the session keeps across turns.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(RefsMint)))
    }
}

foldwire_core::register_config!(RefsMintConfig);
