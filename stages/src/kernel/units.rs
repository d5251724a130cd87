//! Facts about units the kernel needs everywhere: which units are covered by active blocks,
//! which units must travel together (a call with its results, reasoning with its act), token
//! sizes and tool-name globs.

use foldhash::{HashMap, HashMapExt as _};

use foldwire_core::{
    BlockId, Conversation, MediaClass, Message, MessageKind, Origin, Ref, Role, SessionState,
    TokenEstimator, Wire,
};
use foldwire_wire::tokens::{default_image_tokens, raw_tokens};

/// Refs hidden by active blocks, each mapped to the active block that hides it.
///
/// Consumed blocks are inactive, so every covered ref maps to exactly one top-level block.
pub fn coverage(state: &SessionState) -> Coverage {
    let highest = state
        .active_blocks()
        .flat_map(|b| b.effective.iter())
        .map(|r| r.0 as usize)
        .max();
    let count: usize = state.active_blocks().map(|b| b.effective.len()).sum();
    let Some(highest) = highest else {
        return Coverage::default();
    };
    // Refs are numbered densely from 1 per session, so a table indexed by ref number is
    // small; a state whose numbers are sparse (hand-made, or far apart) gets a map.
    if highest > 4 * count + 1024 {
        let mut covered = HashMap::new();
        for block in state.active_blocks() {
            for r in &block.effective {
                covered.entry(*r).or_insert(block.id);
            }
        }
        return Coverage::Sparse(covered);
    }
    let mut table = vec![None; highest + 1];
    for block in state.active_blocks() {
        for r in &block.effective {
            if let Some(slot @ None) = table.get_mut(r.0 as usize) {
                *slot = Some(block.id);
            }
        }
    }
    Coverage::Dense(table)
}

/// Which active block covers each ref ([`coverage`]). Looked up once per unit by every
/// pass over the history, so refs index a table rather than a hash map.
#[derive(Debug, Clone)]
pub enum Coverage {
    /// By ref number (refs are minted densely).
    Dense(Vec<Option<BlockId>>),
    /// By ref, for sparse numbers.
    Sparse(HashMap<Ref, BlockId>),
}

impl Default for Coverage {
    /// Nothing covered.
    fn default() -> Self {
        Coverage::Dense(Vec::new())
    }
}

impl Coverage {
    /// The block covering `r`, if any.
    pub fn get(&self, r: &Ref) -> Option<&BlockId> {
        match self {
            Coverage::Dense(table) => table.get(r.0 as usize).and_then(Option::as_ref),
            Coverage::Sparse(map) => map.get(r),
        }
    }

    /// True when an active block covers `r`.
    pub fn contains_key(&self, r: &Ref) -> bool {
        self.get(r).is_some()
    }

    /// True when no block covers anything.
    pub fn is_empty(&self) -> bool {
        match self {
            Coverage::Dense(table) => table.iter().all(Option::is_none),
            Coverage::Sparse(map) => map.is_empty(),
        }
    }
}

/// True when a unit may ever be folded: it came from the client, carries a ref (so it is
/// not pinned), is not an opaque pass-through item and is not frame (a system or developer
/// message).
pub fn foldable(unit: &Message) -> bool {
    unit.r#ref.is_some()
        && !unit.is_frame()
        && unit.pin.is_none()
        && unit.origin == Origin::Client
        && unit.kind != MessageKind::Opaque
        && !unit.has_unrecoverable_media()
}

/// True for the units that form an assistant's visible act: its text and its tool calls.
pub fn is_act(unit: &Message) -> bool {
    unit.role == Role::Assistant && matches!(unit.kind, MessageKind::Text | MessageKind::ToolCall)
}

/// True for reasoning units of the assistant.
pub fn is_reasoning(unit: &Message) -> bool {
    unit.role == Role::Assistant && unit.kind == MessageKind::Reasoning
}

/// The call id of a tool call unit.
pub fn call_id(unit: &Message) -> Option<&str> {
    match (&unit.kind, &unit.tool) {
        (MessageKind::ToolCall, Some(t)) => Some(t.call_id.as_str()),
        _ => None,
    }
}

/// The call id a tool result unit answers.
pub fn result_id(unit: &Message) -> Option<&str> {
    match (&unit.kind, &unit.tool) {
        (MessageKind::ToolResult, Some(t)) => Some(t.call_id.as_str()),
        _ => None,
    }
}

/// The id of a call kept as a unit of kind other that names its tool: one the provider ran
/// itself (Anthropic's `server_tool_use`, its result in the same message) or a Responses
/// built-in tool's call (`shell_call`, …, its output an item of a type of its own). It
/// folds with its result, but the two are no client tool pair, so pairing repair leaves
/// them alone.
fn server_call_id(unit: &Message) -> Option<&str> {
    match (&unit.kind, &unit.tool) {
        (MessageKind::Other, Some(t)) if t.name.is_some() => Some(t.call_id.as_str()),
        _ => None,
    }
}

/// The call id a server tool's result (a unit of kind other with a nameless link) answers.
fn server_result_id(unit: &Message) -> Option<&str> {
    match (&unit.kind, &unit.tool) {
        (MessageKind::Other, Some(t)) if t.name.is_none() => Some(t.call_id.as_str()),
        _ => None,
    }
}

/// Estimated tokens of one unit on `wire`: its exact bytes (inline images priced by their
/// pixel size, see [`raw_tokens`]), or its text for synthesized units; an image the unit
/// only references (a remote URL, a provider file) costs the wire's default image price,
/// since the provider reads the image even though foldwire never sees it. The wire
/// message around the unit is not counted here; [`super::measure`] adds it.
pub fn unit_tokens(wire: Wire, unit: &Message, estimator: &dyn TokenEstimator) -> u64 {
    let own = if unit.raw.is_empty() {
        estimator.text_tokens(&unit.text)
    } else {
        raw_tokens(wire, &unit.raw, estimator)
    };
    let referenced = unit
        .media
        .iter()
        .filter(|m| m.kind == "image" && matches!(m.class, MediaClass::Unrecoverable { .. }))
        .count() as u64;
    if referenced == 0 {
        return own;
    }
    own + referenced * default_image_tokens(wire)
}

/// The estimates a turn made of its client units ([`unit_tokens`]), by the bytes each was
/// made from, so the stages after the one that made them (a first turn measures the whole
/// history three times) do not read every unit's bytes again.
///
/// Only units whose bytes lie in the request body are kept: the body lives as long as the
/// turn, so no other unit's bytes can sit at the same address, and a unit a stage changed
/// (new bytes) is simply estimated again.
#[derive(Debug, Clone)]
pub struct KnownUnitTokens {
    wire: Wire,
    /// Which estimator made them (name and address, as the ranges stage's memo tells).
    estimator: (&'static str, usize),
    /// Per kept unit: where its bytes start, their length and its estimate; sorted by start
    /// (units lie in the body in conversation order).
    by_bytes: Vec<(usize, usize, u64)>,
    /// Whether `by_bytes[i]` is unit `i` (every unit was kept): a unit asked for at the
    /// same position in the same conversation is then found without a search.
    aligned: bool,
}

impl KnownUnitTokens {
    /// `tokens` (one per unit of `conversation`, made by `estimator`) kept by each unit's
    /// bytes.
    pub fn of(conversation: &Conversation, estimator: &dyn TokenEstimator, tokens: &[u64]) -> Self {
        let body = conversation.source.as_ptr_range();
        let mut by_bytes: Vec<(usize, usize, u64)> = conversation
            .messages
            .iter()
            .zip(tokens)
            .filter_map(|(unit, t)| {
                let bytes = unit.raw.as_ptr_range();
                let inside = body.start <= bytes.start && bytes.end <= body.end;
                (!unit.raw.is_empty() && inside).then(|| (bytes.start.addr(), unit.raw.len(), *t))
            })
            .collect();
        let mut aligned = by_bytes.len() == conversation.messages.len();
        if !by_bytes.is_sorted_by_key(|(start, ..)| *start) {
            by_bytes.sort_by_key(|(start, ..)| *start);
            aligned = false;
        }
        KnownUnitTokens {
            wire: conversation.wire,
            estimator: estimator_id(estimator),
            by_bytes,
            aligned,
        }
    }

    /// [`unit_tokens`] of `unit`, unit `at` of its conversation: the kept estimate when it
    /// was made from these very bytes by this estimator, else a fresh one.
    pub fn unit(
        &self,
        wire: Wire,
        at: usize,
        unit: &Message,
        estimator: &dyn TokenEstimator,
    ) -> u64 {
        let same_source = self.wire == wire && self.estimator == estimator_id(estimator);
        let start = unit.raw.as_ptr().addr();
        let kept = (same_source && !unit.raw.is_empty())
            .then(|| {
                let here = self
                    .by_bytes
                    .get(at)
                    .filter(|k| self.aligned && k.0 == start);
                here.or_else(|| {
                    let i = self.by_bytes.binary_search_by_key(&start, |k| k.0).ok()?;
                    self.by_bytes.get(i)
                })
            })
            .flatten();
        match kept {
            Some((_, len, t)) if *len == unit.raw.len() => *t,
            _ => unit_tokens(wire, unit, estimator),
        }
    }
}

/// An estimator's identity within a turn: its name and where it lives.
pub(crate) fn estimator_id(estimator: &dyn TokenEstimator) -> (&'static str, usize) {
    (
        estimator.name(),
        std::ptr::from_ref(estimator).cast::<()>().addr(),
    )
}

/// Groups of units that must stay together: a tool call with every result carrying its call
/// id (wherever it sits), and a run of reasoning with the run of assistant acts it precedes.
/// Folding, range building and restoring treat each group as indivisible.
#[derive(Debug, Clone)]
pub struct Links {
    parent: Vec<usize>,
    /// Smallest member position of each unit's group.
    first: Vec<usize>,
    /// Largest member position of each unit's group.
    last: Vec<usize>,
}

impl Links {
    /// Links the units of a conversation.
    pub fn new(units: &[Message]) -> Self {
        let n = units.len();
        let mut links = Links {
            parent: (0..n).collect(),
            first: Vec::new(),
            last: Vec::new(),
        };
        // Sized once: a first turn links thousands of calls, and growing the map a doubling
        // at a time rehashed every call id a dozen times.
        let mut calls: HashMap<&str, usize> = HashMap::with_capacity(n / 2);
        for (i, u) in units.iter().enumerate() {
            if let Some(id) = call_id(u).or_else(|| server_call_id(u)) {
                calls.entry(id).or_insert(i);
            }
        }
        for (i, u) in units.iter().enumerate() {
            let answers = result_id(u).or_else(|| server_result_id(u));
            if let Some(call) = answers.and_then(|id| calls.get(id)) {
                links.union(*call, i);
            }
        }
        let mut i = 0;
        while i < n {
            if units.get(i).is_some_and(is_reasoning) {
                let start = i;
                while units.get(i).is_some_and(is_reasoning) {
                    i += 1;
                }
                let mut j = i;
                while units.get(j).is_some_and(is_act) {
                    j += 1;
                }
                if j > i {
                    for k in start + 1..j {
                        links.union(start, k);
                    }
                }
            } else {
                i += 1;
            }
        }
        links.first = (0..n).collect();
        links.last = (0..n).collect();
        for i in 0..n {
            let r = links.root(i);
            if let Some(f) = links.first.get_mut(r) {
                *f = (*f).min(i);
            }
            if let Some(l) = links.last.get_mut(r) {
                *l = (*l).max(i);
            }
        }
        links
    }

    fn find(&mut self, mut i: usize) -> usize {
        while let Some(&p) = self.parent.get(i) {
            if p == i {
                break;
            }
            let gp = self.parent.get(p).copied().unwrap_or(p);
            if let Some(slot) = self.parent.get_mut(i) {
                *slot = gp;
            }
            i = p;
        }
        i
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            if let Some(slot) = self.parent.get_mut(hi) {
                *slot = lo;
            }
        }
    }

    /// How many units were linked.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// True when no unit was linked.
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// `given` when it links `units` (as many as there are), else `units` linked now into
    /// `made`: the passes of one fold turn share the links of its unchanged conversation.
    pub fn given_or<'a>(
        given: Option<&'a Links>,
        units: &[Message],
        made: &'a mut Option<Links>,
    ) -> &'a Links {
        match given {
            Some(links) if links.len() == units.len() => links,
            _ => made.insert(Links::new(units)),
        }
    }

    /// The group representative of a unit (stable for the life of this value).
    pub fn root(&self, mut i: usize) -> usize {
        while let Some(&p) = self.parent.get(i) {
            if p == i {
                break;
            }
            i = p;
        }
        i
    }

    /// The first and last position of the group a unit belongs to.
    pub fn span(&self, i: usize) -> (usize, usize) {
        let r = self.root(i);
        (
            self.first.get(r).copied().unwrap_or(i),
            self.last.get(r).copied().unwrap_or(i),
        )
    }

    /// Every group with more than one member, as lists of positions in order.
    pub fn groups(&self) -> Groups {
        let n = self.parent.len();
        let roots: Vec<usize> = (0..n).map(|i| self.root(i)).collect();
        let mut sizes = vec![0usize; n];
        for r in &roots {
            if let Some(s) = sizes.get_mut(*r) {
                *s += 1;
            }
        }
        // Each group of two or more gets a slice of `members`, in order of its root (its
        // first member), members in position order.
        let mut start = vec![usize::MAX; n];
        let mut bounds = Vec::new();
        let mut total = 0;
        for (r, size) in sizes.iter().enumerate() {
            if *size > 1 {
                if let Some(s) = start.get_mut(r) {
                    *s = total;
                }
                bounds.push(total..total + size);
                total += size;
            }
        }
        let mut members = vec![0; total];
        for (i, r) in roots.iter().enumerate() {
            if let Some(at) = start.get_mut(*r).filter(|s| **s != usize::MAX) {
                if let Some(slot) = members.get_mut(*at) {
                    *slot = i;
                }
                *at += 1;
            }
        }
        Groups { members, bounds }
    }
}

/// The link groups of two or more units ([`Links::groups`]).
#[derive(Debug, Clone, Default)]
pub struct Groups {
    members: Vec<usize>,
    bounds: Vec<std::ops::Range<usize>>,
}

impl Groups {
    /// Each group's member positions, in order.
    pub fn values(&self) -> impl Iterator<Item = &[usize]> + '_ {
        self.bounds
            .iter()
            .filter_map(|b| self.members.get(b.clone()))
    }
}

/// A test of tool names against glob `patterns` ([`glob_match`]) that remembers each
/// distinct name's answer: an agent calls a handful of tools thousands of times.
pub fn name_matcher<'n>(patterns: &'n [String]) -> impl FnMut(&'n str) -> bool {
    let mut seen: HashMap<&'n str, bool> = HashMap::new();
    move |name| {
        !patterns.is_empty()
            && *seen
                .entry(name)
                .or_insert_with(|| patterns.iter().any(|p| glob_match(p, name)))
    }
}

/// Case-insensitive glob match of a tool name: `*` matches any run, `?` one character.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    // Tool names and patterns are ASCII in practice: matched byte by byte, nothing
    // allocated (this runs for every unit against every pattern each turn).
    if pattern.is_ascii() && name.is_ascii() {
        return glob_match_by(pattern.as_bytes(), name.as_bytes(), |a, b| {
            a.eq_ignore_ascii_case(b)
        });
    }
    let p: Vec<char> = pattern.to_lowercase().chars().collect();
    let n: Vec<char> = name.to_lowercase().chars().collect();
    glob_match_by(&p, &n, |a, b| a == b)
}

/// The glob match over any symbols, `eq` saying when two match.
fn glob_match_by<T: Copy + PartialEq + GlobSymbol>(
    p: &[T],
    n: &[T],
    eq: impl Fn(&T, &T) -> bool,
) -> bool {
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some(c) if c.is_any() => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(c) if c.is_one() || n.get(ni).is_some_and(|x| eq(c, x)) => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    while p.get(pi).is_some_and(GlobSymbol::is_any) {
        pi += 1;
    }
    pi == p.len()
}

/// The wildcards of a glob symbol.
trait GlobSymbol {
    /// `*`: any run.
    fn is_any(&self) -> bool;
    /// `?`: one symbol.
    fn is_one(&self) -> bool;
}

impl GlobSymbol for char {
    fn is_any(&self) -> bool {
        *self == '*'
    }
    fn is_one(&self) -> bool {
        *self == '?'
    }
}

impl GlobSymbol for u8 {
    fn is_any(&self) -> bool {
        *self == b'*'
    }
    fn is_one(&self) -> bool {
        *self == b'?'
    }
}

/// A one-line preview of a unit's text, at most `max` characters.
pub fn preview(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    let trimmed = flat.trim();
    if trimmed.chars().count() <= max {
        trimmed.to_owned()
    } else {
        let mut out: String = trimmed.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use foldwire_core::Block;

    /// An estimator that is not [`foldwire_core::CharEstimator`] (another name, other
    /// numbers).
    #[derive(Debug)]
    struct Doubled;

    impl TokenEstimator for Doubled {
        fn name(&self) -> &'static str {
            "test.doubled"
        }
        fn text_tokens(&self, text: &str) -> u64 {
            2 * text.len() as u64
        }
    }

    #[test]
    fn known_estimates_are_taken_only_for_the_bytes_and_estimator_they_were_made_for() {
        use foldwire_core::CharEstimator;
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}},{{"role":"assistant","content":"{}"}}],"max_tokens":5}}"#,
            "a".repeat(400),
            "b".repeat(800)
        );
        let conv =
            foldwire_wire::request::decode(Wire::Anthropic, bytes::Bytes::from(body)).unwrap();
        let fresh: Vec<u64> = conv
            .messages
            .iter()
            .map(|u| unit_tokens(Wire::Anthropic, u, &CharEstimator))
            .collect();
        // Marked numbers, so a kept estimate shows.
        let marked: Vec<u64> = fresh.iter().map(|t| t + 10_000).collect();
        let known = KnownUnitTokens::of(&conv, &CharEstimator, &marked);
        for (i, (unit, mark)) in conv.messages.iter().zip(&marked).enumerate() {
            assert_eq!(known.unit(Wire::Anthropic, i, unit, &CharEstimator), *mark);
            // Found by its bytes wherever it sits now (a folded copy moves units).
            let elsewhere = conv.messages.len() - 1 - i;
            assert_eq!(
                known.unit(Wire::Anthropic, elsewhere, unit, &CharEstimator),
                *mark
            );
        }
        // Another estimator, another wire: estimated afresh.
        let first = &conv.messages[0];
        assert_eq!(
            known.unit(Wire::Anthropic, 0, first, &Doubled),
            unit_tokens(Wire::Anthropic, first, &Doubled)
        );
        assert_eq!(
            known.unit(Wire::OpenAiChat, 0, first, &CharEstimator),
            unit_tokens(Wire::OpenAiChat, first, &CharEstimator)
        );
        // A unit with other bytes (a stage rewrote it), even of the same length: afresh.
        let mut rewritten = first.clone();
        rewritten.raw = bytes::Bytes::from(first.raw.to_vec());
        assert_eq!(
            known.unit(Wire::Anthropic, 0, &rewritten, &CharEstimator),
            fresh[0]
        );
        let mut shorter = first.clone();
        shorter.raw = first.raw.slice(..first.raw.len() - 1);
        assert_eq!(
            known.unit(Wire::Anthropic, 0, &shorter, &CharEstimator),
            unit_tokens(Wire::Anthropic, &shorter, &CharEstimator)
        );
        // Measuring with the true estimates kept is measuring.
        let kept = KnownUnitTokens::of(&conv, &CharEstimator, &fresh);
        assert_eq!(
            crate::kernel::measure_knowing(&conv, &CharEstimator, Some(&kept)),
            crate::kernel::measure(&conv, &CharEstimator)
        );
    }

    #[test]
    fn given_links_serve_only_a_conversation_of_their_length() {
        let body = br#"{"model":"m","max_tokens":5,"messages":[
            {"role":"user","content":"go"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}"#;
        let conv = foldwire_wire::request::decode(Wire::Anthropic, bytes::Bytes::from_static(body))
            .unwrap();
        let units = &conv.messages;
        let given = Links::new(units);
        assert_eq!(given.len(), units.len());
        // Its own conversation's links are used as they are, not made again.
        let mut made = None;
        let used = Links::given_or(Some(&given), units, &mut made);
        assert!(std::ptr::eq(used, &given));
        assert!(made.is_none());
        // Links of another length are not these units' links: made afresh, and they link
        // the call with its result.
        let shorter = Links::new(&units[..1]);
        let mut made = None;
        let used = Links::given_or(Some(&shorter), units, &mut made);
        assert_eq!(used.len(), units.len());
        assert_eq!(used.root(2), used.root(1));
        assert_ne!(used.root(0), used.root(1));
        assert!(made.is_some());
        let mut made = None;
        assert_eq!(Links::given_or(None, units, &mut made).len(), units.len());
        assert!(Links::new(&[]).is_empty());
    }

    fn block(id: u32, refs: &[u32], active: bool) -> Block {
        Block {
            id: BlockId(id),
            effective: refs.iter().map(|r| Ref(*r)).collect(),
            active,
            ..Block::default()
        }
    }

    #[test]
    fn coverage_maps_each_ref_to_its_first_active_block_dense_or_sparse() {
        for far in [9, 4_000_000] {
            let mut state = SessionState::default();
            state.blocks.push(block(1, &[2, 3], true));
            state.blocks.push(block(2, &[3, far], true));
            state.blocks.push(block(3, &[5], false));
            let covered = coverage(&state);
            let dense = matches!(covered, Coverage::Dense(_));
            assert_eq!(dense, far == 9, "far ref {far}");
            for (r, holder) in [
                (1, None),
                (2, Some(1)),
                (3, Some(1)),
                (5, None),
                (far, Some(2)),
            ] {
                assert_eq!(covered.get(&Ref(r)).map(|b| b.0), holder, "ref {r}");
                assert_eq!(covered.contains_key(&Ref(r)), holder.is_some());
            }
            assert!(covered.get(&Ref(u32::MAX)).is_none());
            assert!(!covered.is_empty());
        }
        assert!(coverage(&SessionState::default()).is_empty());
    }

    #[test]
    fn groups_list_each_linked_set_once_in_position_order() {
        let mut links = Links {
            parent: (0..7).collect(),
            first: Vec::new(),
            last: Vec::new(),
        };
        links.union(1, 4);
        links.union(4, 6);
        links.union(2, 3);
        let mut groups: Vec<Vec<usize>> = links.groups().values().map(<[usize]>::to_vec).collect();
        groups.sort();
        assert_eq!(groups, vec![vec![1, 4, 6], vec![2, 3]]);
    }

    #[test]
    fn globs_are_case_insensitive_with_wildcards() {
        let patterns = vec!["mcp_*".to_owned(), "Skill".to_owned()];
        let mut matcher = name_matcher(&patterns);
        for name in [
            "MCP_search",
            "skill",
            "read",
            "MCP_search",
            "read",
            "search_mcp",
        ] {
            let expected = patterns.iter().any(|p| glob_match(p, name));
            assert_eq!(matcher(name), expected, "{name}");
        }
        assert!(!name_matcher(&[])("anything"));
        assert!(glob_match("mcp_*", "MCP_search"));
        assert!(glob_match("Skill", "skill"));
        assert!(glob_match("re?d", "read"));
        assert!(glob_match("*", "anything"));
        assert!(!glob_match("mcp_*", "search_mcp"));
        assert!(!glob_match("read", "reader"));
        assert!(glob_match("*_file", "write_file"));
        // Outside ASCII the match folds case by Unicode rules.
        assert!(glob_match("ÉCRIRE_*", "écrire_fichier"));
        assert!(glob_match("?crire", "écrire"));
        assert!(!glob_match("écrire", "ecrire"));
    }

    #[test]
    fn referenced_images_cost_the_wire_default_and_synthesized_units_their_text() {
        use foldwire_core::{MediaRef, MessageId, UnitSlot};
        let mut unit = Message::synthesized(
            0,
            Role::User,
            "a summary of forty characters, or so....",
            Origin::Injected,
            bytes::Bytes::new(),
        );
        let est = foldwire_core::CharEstimator;
        assert_eq!(unit_tokens(Wire::Anthropic, &unit, &est), 10);
        let url = r#"{"type":"image","source":{"type":"url","url":"https://x.test/a.png"}}"#;
        unit.raw = bytes::Bytes::from_static(url.as_bytes());
        unit.id = MessageId("u".into());
        unit.slot = UnitSlot::Content(1);
        unit.media.push(MediaRef {
            kind: "image".into(),
            media_type: None,
            class: MediaClass::Unrecoverable {
                reason: "remote URL".into(),
            },
            pointer: "/source/url".into(),
            size: None,
        });
        for wire in Wire::ALL {
            assert_eq!(
                unit_tokens(wire, &unit, &est),
                (url.len() as u64).div_ceil(4) + default_image_tokens(wire),
                "{wire}"
            );
        }
    }

    #[test]
    fn previews_are_bounded_single_lines() {
        assert_eq!(preview("a\nb", 10), "a b");
        assert_eq!(preview("abcdefgh", 4), "abc…");
    }
}
