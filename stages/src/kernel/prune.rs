//! Folding a conversation: covered units leave the wire and each active block's summary is
//! rendered once where its range began.

use std::borrow::Borrow;

use foldhash::{HashMap, HashMapExt as _};

use bytes::Bytes;
use foldwire_core::{BlockId, Conversation, Message, MessageKind, Origin, Role, SessionState};
use serde::{Deserialize, Serialize};

use super::render::rendered_text;
use super::units::{Links, call_id, coverage, result_id};

/// How the first-user pin was decided this turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstUserPin {
    /// The first user message was not covered; nothing to decide.
    NotCovered,
    /// Covered, and a user text message survives right behind it (a text, maybe with images
    /// beside it in the same wire message): it dropped like any covered message.
    Dropped,
    /// Covered, but the earliest surviving unit behind it is not part of a user text message
    /// (a tool result, an assistant turn, an image alone): it stays on the wire.
    Held,
    /// Covered and no user-role unit survives behind it at all: it stays, and this fold of
    /// the opening message is a no-op on the wire (the deliberate residual case).
    Residual,
}

/// What one fold did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldOutcome {
    /// Units removed from the wire.
    pub removed: usize,
    /// Summaries rendered.
    pub summaries: Vec<BlockId>,
    /// Covered units kept because a linked partner (call/result, reasoning/act) is not
    /// covered; folding them would orphan it.
    pub kept_for_pairing: usize,
    /// The first-user pin decision.
    pub first_user: FirstUserPin,
}

/// Folds `conversation` with the session's active blocks.
///
/// - A unit whose ref an active block covers leaves the wire, unless a unit linked to it
///   (its call or result, its reasoning or act) is not covered: groups leave whole or not
///   at all, so the fold never orphans a call, a result or a reasoning block.
/// - **First-user pin**: the first user unit, when covered, stays unless the earliest later
///   unit that is neither leaving nor a rendered summary belongs to a user text message
///   ([`leads_as_user_text`]: judged on its wire message, so an image beside the text, as
///   in an Anthropic `[image, text]` message, does not hold the pin); only the first user
///   unit is pinned.
/// - Each active block with at least one unit leaving renders one user-role summary
///   ([`rendered_text`]) at the position of its first unit present, moved back to the start
///   of a wire message and of an assistant run, and forward past the results of any call
///   still waiting for them. A block none of whose units the client sent is not rendered:
///   the client dropped that history itself.
pub fn fold_view(conversation: &mut Conversation, state: &SessionState) -> FoldOutcome {
    let Some(plan) = plan_fold(&conversation.messages, state, None) else {
        return FoldOutcome::nothing();
    };
    let units = std::mem::take(&mut conversation.messages);
    let staying = plan.staying();
    let kept = units
        .into_iter()
        .zip(plan.remove)
        .filter(|(_, leaves)| !leaves)
        .map(|(u, _)| u);
    assemble(
        conversation,
        (kept, staying),
        plan.inserts,
        plan.outcome,
        state,
    )
}

/// [`fold_view`] on a copy: the folded conversation and what folding did, with
/// `conversation` left as it is. Only the units that stay are copied (a first turn folds
/// most of a long session, whose texts the summarizer has decoded by then).
pub fn fold_copy(conversation: &Conversation, state: &SessionState) -> (Conversation, FoldOutcome) {
    fold_copy_linked(conversation, state, None)
}

/// [`fold_copy`], with the units' links when the caller has them for `conversation`.
pub fn fold_copy_linked(
    conversation: &Conversation,
    state: &SessionState,
    links: Option<&Links>,
) -> (Conversation, FoldOutcome) {
    let mut folded = Conversation {
        wire: conversation.wire,
        source: conversation.source.clone(),
        messages_span: conversation.messages_span.clone(),
        entries: conversation.entries.clone(),
        messages: Vec::new(),
        overrides: conversation.overrides.clone(),
        model: conversation.model.clone(),
        stream: conversation.stream,
    };
    let Some(plan) = plan_fold(&conversation.messages, state, links) else {
        folded.messages = conversation.messages.clone();
        return (folded, FoldOutcome::nothing());
    };
    let staying = plan.staying();
    let kept = conversation
        .messages
        .iter()
        .zip(plan.remove)
        .filter(|(_, leaves)| !leaves)
        .map(|(u, _)| u.clone());
    let outcome = assemble(
        &mut folded,
        (kept, staying),
        plan.inserts,
        plan.outcome,
        state,
    );
    (folded, outcome)
}

impl FoldOutcome {
    /// Nothing folded: no block covers a unit.
    fn nothing() -> Self {
        FoldOutcome {
            removed: 0,
            summaries: Vec::new(),
            kept_for_pairing: 0,
            first_user: FirstUserPin::NotCovered,
        }
    }
}

/// What a fold does to a conversation, decided on its units before any moves.
struct FoldPlan {
    /// Per input unit: it leaves the wire.
    remove: Vec<bool>,
    /// Summaries to render: (position among the staying units, anchor, block order, block).
    inserts: Vec<(usize, usize, usize, BlockId)>,
    /// The counts and the pin decision (summaries are filled in as they are rendered).
    outcome: FoldOutcome,
}

impl FoldPlan {
    /// How many units stay on the wire.
    fn staying(&self) -> usize {
        self.remove.iter().filter(|leaves| !**leaves).count()
    }
}

/// Decides what folding `units` with `state`'s active blocks does (see [`fold_view`]);
/// `None` when no block covers anything.
/// `links`: the units' links, when the caller has them.
fn plan_fold(units: &[Message], state: &SessionState, links: Option<&Links>) -> Option<FoldPlan> {
    let covered = coverage(state);
    if covered.is_empty() {
        return None;
    }
    let n = units.len();
    let mut outcome = FoldOutcome::nothing();
    let holder: Vec<Option<BlockId>> = units
        .iter()
        .map(|u| u.r#ref.and_then(|r| covered.get(&r).copied()))
        .collect();
    let mut remove: Vec<bool> = holder.iter().map(Option::is_some).collect();
    let mut made = None;
    let links = Links::given_or(links, units, &mut made);
    for members in links.groups().values() {
        let all = members.iter().all(|&i| remove.get(i) == Some(&true));
        if !all {
            for &i in members {
                if let Some(r) = remove.get_mut(i)
                    && *r
                {
                    *r = false;
                    outcome.kept_for_pairing += 1;
                }
            }
        }
    }

    let first_user = units
        .iter()
        .position(|u| u.role == Role::User && u.origin == Origin::Client);
    if let Some(f) = first_user
        && remove.get(f) == Some(&true)
    {
        let survives = |j: &usize| {
            remove.get(*j) == Some(&false)
                && !matches!(units.get(*j).map(|u| u.origin), Some(Origin::Summary(_)))
        };
        let next = (f + 1..n).find(survives);
        let drop_safe = next.is_some_and(|j| leads_as_user_text(units, &remove, j));
        if drop_safe {
            outcome.first_user = FirstUserPin::Dropped;
        } else {
            let user_behind = (f + 1..n)
                .filter(survives)
                .any(|j| units.get(j).is_some_and(|u| u.role == Role::User));
            outcome.first_user = if user_behind {
                FirstUserPin::Held
            } else {
                FirstUserPin::Residual
            };
            // The pinned unit stays with everything linked to it (a tool result pinned as
            // the first user unit keeps its call), so the pin never orphans anything.
            let root = links.root(f);
            for i in 0..n {
                if links.root(i) == root
                    && let Some(r) = remove.get_mut(i)
                {
                    *r = false;
                }
            }
        }
    }

    // Anchors: each block's first present unit, if any of its units leaves.
    let already_rendered: Vec<BlockId> = units
        .iter()
        .filter_map(|u| match u.origin {
            Origin::Summary(b) => Some(b),
            _ => None,
        })
        .collect();
    let mut anchor: HashMap<BlockId, usize> = HashMap::new();
    let mut leaving: HashMap<BlockId, bool> = HashMap::new();
    for (i, h) in holder.iter().enumerate() {
        if let Some(b) = h {
            anchor.entry(*b).or_insert(i);
            if remove.get(i) == Some(&true) {
                leaving.insert(*b, true);
            }
        }
    }

    // Where each summary goes is chosen on the input, where the folded units still stand:
    // chosen after their removal, the walk back over an assistant run would cross runs the
    // fold itself made (`a SR` then `a F4` once `u F1 .. u F3` left) and put a summary of
    // later turns before an earlier reply.
    let reach_in = call_reach(units);
    let input_spot: HashMap<BlockId, usize> = anchor
        .iter()
        .map(|(&b, &a)| {
            (
                b,
                safe_position(units, &reach_in, a, Walk::EntryAndAssistantRun),
            )
        })
        .collect();

    // The staying units, where the summaries' spots are checked again.
    let mut out: Vec<&Message> = Vec::with_capacity(n);
    let mut out_pos_of_input: Vec<usize> = Vec::with_capacity(n + 1);
    for (i, u) in units.iter().enumerate() {
        out_pos_of_input.push(out.len());
        if remove.get(i) == Some(&true) {
            outcome.removed += 1;
        } else {
            out.push(u);
        }
    }
    out_pos_of_input.push(out.len());

    let reach = call_reach(&out);
    let mut inserts: Vec<(usize, usize, usize, BlockId)> = Vec::new();
    for (order, block) in state.active_blocks().enumerate() {
        if !leaving.contains_key(&block.id) || already_rendered.contains(&block.id) {
            continue;
        }
        let (Some(&a), Some(&spot)) = (anchor.get(&block.id), input_spot.get(&block.id)) else {
            continue;
        };
        let p = out_pos_of_input.get(spot).copied().unwrap_or(out.len());
        // On the output only a wire message and a call/result pair still bind the spot.
        inserts.push((
            safe_position(&out, &reach, p, Walk::Entry),
            a,
            order,
            block.id,
        ));
    }
    inserts.sort();
    Some(FoldPlan {
        remove,
        inserts,
        outcome,
    })
}

/// Builds the folded conversation from the staying units (in order) and the plan's
/// summaries ([`FoldPlan::inserts`]), each rendered where the plan put it.
fn assemble(
    conversation: &mut Conversation,
    (kept, staying): (impl Iterator<Item = Message>, usize),
    inserts: Vec<(usize, usize, usize, BlockId)>,
    mut outcome: FoldOutcome,
    state: &SessionState,
) -> FoldOutcome {
    // Sized for every unit that stays (a filtered iterator cannot say how many).
    let mut rendered: Vec<Message> = Vec::with_capacity(staying + inserts.len());
    let mut next = inserts.iter().peekable();
    let blocks: HashMap<BlockId, &foldwire_core::Block> =
        state.blocks.iter().map(|b| (b.id, b)).collect();
    let mut emit_until = |pos: usize, rendered: &mut Vec<Message>, conv: &mut Conversation| {
        while let Some((p, _, _, id)) = next.peek() {
            if *p > pos {
                break;
            }
            if let Some(block) = blocks.get(id) {
                let entry = conv.push_entry(Role::User);
                rendered.push(Message::synthesized(
                    entry,
                    Role::User,
                    rendered_text(block, state),
                    Origin::Summary(*id),
                    Bytes::new(),
                ));
                outcome.summaries.push(*id);
            }
            next.next();
        }
    };
    for (pos, u) in kept.enumerate() {
        emit_until(pos, &mut rendered, conversation);
        rendered.push(u);
    }
    emit_until(usize::MAX, &mut rendered, conversation);
    conversation.messages = rendered;
    outcome
}

/// For each position p, the last position of a result whose call sits before p (so a
/// summary inserted at p would separate them), or `None`.
fn call_reach<M: Borrow<Message>>(units: &[M]) -> Vec<Option<usize>> {
    let mut last_result: HashMap<&str, usize> = HashMap::new();
    for (i, u) in units.iter().enumerate() {
        if let Some(id) = result_id(u.borrow()) {
            last_result.insert(id, i);
        }
    }
    let mut reach = Vec::with_capacity(units.len() + 1);
    let mut best: Option<usize> = None;
    for u in units {
        reach.push(best);
        if let Some(&r) = call_id(u.borrow()).and_then(|id| last_result.get(id)) {
            best = Some(best.map_or(r, |b| b.max(r)));
        }
    }
    reach.push(best);
    reach
}

/// What an insertion point walks back over in [`safe_position`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// The rest of a wire message only.
    Entry,
    /// The rest of a wire message and the rest of a run of assistant messages.
    EntryAndAssistantRun,
}

/// Moves an insertion point so it never lands inside a wire message, between a tool call
/// and its result, or (with [`Walk::EntryAndAssistantRun`]) inside a run of assistant
/// messages.
pub fn safe_position<M: Borrow<Message>>(
    units: &[M],
    reach: &[Option<usize>],
    mut p: usize,
    walk: Walk,
) -> usize {
    let len = units.len();
    for _ in 0..=len + 1 {
        let before = p;
        while let (Some(prev), Some(cur)) = (
            p.checked_sub(1).and_then(|i| units.get(i)).map(M::borrow),
            units.get(p).map(M::borrow),
        ) {
            let same_entry = prev.entry == cur.entry;
            let assistant_run = walk == Walk::EntryAndAssistantRun
                && prev.role == Role::Assistant
                && cur.role == Role::Assistant;
            if !(same_entry || assistant_run) {
                break;
            }
            p -= 1;
        }
        if let Some(Some(r)) = reach.get(p)
            && *r >= p
        {
            p = r + 1;
            let entry = |i: usize| units.get(i).map(|u| u.borrow().entry);
            while p < len && entry(p) == entry(p - 1) {
                p += 1;
            }
        }
        if p == before {
            break;
        }
    }
    p.min(len)
}

/// True when unit `j` belongs to a wire message that reaches the provider as a user text
/// message: every unit of it that stays (not in `remove`, not a summary) is a client user
/// text or media part, and at least one is text. The wire message is what a provider sees,
/// so the test looks at it rather than at unit `j` alone: units are per content part, and
/// an `[image, text]` user message (Anthropic, Chat, Responses, Gemini alike) leads a
/// conversation as well as a text does — the kernel's Anthropic image core counts as text
/// too. A tool result, or a message left with only media, still holds the pin.
fn leads_as_user_text(units: &[Message], remove: &[bool], j: usize) -> bool {
    let Some(entry) = units.get(j).map(|u| u.entry) else {
        return false;
    };
    let staying = units
        .iter()
        .enumerate()
        .filter(|(i, u)| u.entry == entry && remove.get(*i) == Some(&false))
        .map(|(_, u)| u)
        .filter(|u| !matches!(u.origin, Origin::Summary(_)));
    let mut text = false;
    for u in staying {
        let user_part = u.role == Role::User
            && u.origin == Origin::Client
            && matches!(u.kind, MessageKind::Text | MessageKind::Media);
        if !user_part {
            return false;
        }
        text |= u.kind == MessageKind::Text;
    }
    text
}
