//! The seed's cache probe, shared by the probe test and the layout bench: 480 history
//! messages of 300 characters alternating user/assistant, head 400 tokens, recent 12,000, a
//! reset, then one 400-character message per request until the head has filled. A stand-in
//! for the kernel folds the oldest foldable history when the request passes 90% of the
//! budget, down to 60% (outside the head and the recent window), as the fold stage would
//! before the layout runs.
use crate::layout::*;
use foldwire_core::{Block, CharEstimator, Layout, MessageId, Role, SessionState, Wire};
use foldwire_stages::layout_head_window::{
    HeadState, HeadWindowConfig, Rewrite, cache_markers, head_fingerprints, lay_out, reset,
};

/// What one probe run measured.
#[derive(Debug, Clone)]
pub struct ProbeResult {
    /// Budget in tokens.
    pub budget: u64,
    /// Tokens of the request at the reset (R).
    pub r: u64,
    /// Rewritten tokens from the reset through the request where the head filled.
    pub rewritten: u64,
    /// The same plus appended tokens (the seed probe's own measure, which counts appends).
    pub rewritten_with_appends: u64,
    /// Requests from the reset through the fill.
    pub fill_requests: usize,
    /// Rewritten tokens from the reset through `extra` more requests after the fill.
    pub extended_rewritten: u64,
    /// The request (counted from the reset) where the head first went out ahead of the
    /// history, if it did.
    pub moved_at: Option<usize>,
    /// Folds made by the stand-in kernel after the reset.
    pub folds_after_reset: usize,
}

impl ProbeResult {
    /// Rewrite over R, through the fill.
    pub fn ratio(&self) -> f64 {
        self.rewritten as f64 / self.r as f64
    }
    /// Rewrite over R, counting appends as the seed's probe did.
    pub fn ratio_with_appends(&self) -> f64 {
        self.rewritten_with_appends as f64 / self.r as f64
    }
    /// Rewrite over R through the extended run.
    pub fn extended_ratio(&self) -> f64 {
        self.extended_rewritten as f64 / self.r as f64
    }
}

fn tokens_of(msgs: &[(Role, Vec<B>)]) -> Vec<u64> {
    // Text blocks are `{"type":"text","text":"…"}` with nothing to escape: 25 bytes around
    // the padded text. Anything else is measured by building it.
    msgs.iter()
        .map(|msg| match msg.1.as_slice() {
            [B::Text(label, chars)] => ((*chars).max(label.len() + 1) as u64 + 25).div_ceil(4),
            _ => conversation(Wire::Anthropic, std::slice::from_ref(msg))
                .messages
                .iter()
                .map(|m| (m.raw.len() as u64).div_ceil(4))
                .sum(),
        })
        .collect()
}

fn label(msg: &(Role, Vec<B>)) -> String {
    match &msg.1[0] {
        B::Text(l, _) | B::Marked(l, _) => l.clone(),
        B::Call(id) => format!("call-{id}"),
        B::Result(id, _) => format!("result-{id}"),
    }
}

/// The request as the fold stage leaves it: covered messages replaced, once, by their
/// block's summary; new folds made while the request is over 90% of `available`.
pub fn fold(
    all: &[(Role, Vec<B>)],
    state: &mut SessionState,
    available: u64,
    recent: u64,
) -> (Vec<(Role, Vec<B>)>, usize) {
    let mut made = 0;
    loop {
        let mut request: Vec<(Role, Vec<B>)> = Vec::new();
        let mut rendered: Vec<u32> = Vec::new();
        for msg in all {
            let id = MessageId(label(msg));
            match state
                .blocks
                .iter()
                .find(|b| b.active && b.message_ids.contains(&id))
            {
                Some(b) if rendered.contains(&b.id.0) => {}
                Some(b) => {
                    rendered.push(b.id.0);
                    request.push((Role::User, vec![text(&format!("summary-{}", b.id), 180)]));
                }
                None => request.push(msg.clone()),
            }
        }
        let tokens = tokens_of(&request);
        let total: u64 = tokens.iter().sum::<u64>() + 20;
        if total * 10 <= available * 9 {
            return (request, made);
        }
        let head = head_fingerprints(state);
        let mut protected_from = request.len();
        let mut tail = 0;
        while protected_from > 0 && tail + tokens[protected_from - 1] <= recent {
            tail += tokens[protected_from - 1];
            protected_from -= 1;
        }
        let need = total - available * 6 / 10;
        let mut saved = 0u64;
        let mut covered: Vec<MessageId> = Vec::new();
        for (i, msg) in request.iter().enumerate().take(protected_from) {
            let id = MessageId(label(msg));
            let foldable = !id.0.starts_with("summary-") && !head.contains(&id);
            if !foldable {
                if !covered.is_empty() {
                    break;
                }
                continue;
            }
            covered.push(id);
            saved += tokens[i];
            if saved >= need {
                break;
            }
        }
        if covered.is_empty() {
            return (request, made);
        }
        let id = state.next_block_id();
        state.blocks.push(Block {
            id,
            message_ids: covered.into(),
            active: true,
            summary: "s".into(),
            ..Block::default()
        });
        made += 1;
    }
}

/// Runs the probe with `layout` at `budget`, then `extra` more requests after the fill.
pub fn run(layout: &dyn Layout, budget: u64, extra: usize) -> ProbeResult {
    let config = HeadWindowConfig {
        head_tokens: Some(400),
        recent_tokens: Some(12_000),
        ..HeadWindowConfig::default()
    };
    let mut state = SessionState::default();
    let mut all = history("hist", 480, 300);
    let send = |all: &[(Role, Vec<B>)], state: &mut SessionState| -> (Rewrite, bool, usize) {
        let (request, folds) = fold(all, state, budget, 12_000);
        let mut t = turn(
            conversation(Wire::Anthropic, &request),
            std::mem::take(state),
            budget,
        );
        let out = lay_out(&mut t, layout, &CharEstimator, &config).unwrap();
        cache_markers::check_rules(t.conversation.as_ref().unwrap()).unwrap();
        *state = t.state;
        (out.rewrite, out.reordered, folds)
    };
    send(&all, &mut state);
    send(&all, &mut state);
    reset(&mut state, "A new topic.").unwrap();
    let (at_reset, moved, mut folds_after_reset) = send(&all, &mut state);
    let r = at_reset.request_tokens;
    let mut rewritten = at_reset.rewritten_tokens;
    let mut with_appends = at_reset.rewritten_tokens + at_reset.appended_tokens;
    let mut moved_at = moved.then_some(1);
    let mut requests = 1;
    let mut fill_requests = if HeadState::load(&state).unwrap().sealed {
        1
    } else {
        0
    };
    let mut extended = rewritten;
    let mut after_fill = 0;
    while after_fill <= extra && requests < 5_000 {
        let n = requests;
        let role = if n % 2 == 1 {
            Role::User
        } else {
            Role::Assistant
        };
        all.push((role, vec![text(&format!("post{n}"), 400)]));
        let (rw, moved, folds) = send(&all, &mut state);
        requests += 1;
        folds_after_reset += folds;
        if moved && moved_at.is_none() {
            moved_at = Some(requests);
        }
        extended += rw.rewritten_tokens;
        if fill_requests == 0 {
            rewritten += rw.rewritten_tokens;
            with_appends += rw.rewritten_tokens + rw.appended_tokens;
            if HeadState::load(&state).unwrap().sealed {
                fill_requests = requests;
            }
        } else {
            after_fill += 1;
        }
    }
    ProbeResult {
        budget,
        r,
        rewritten,
        rewritten_with_appends: with_appends,
        fill_requests,
        extended_rewritten: extended,
        moved_at,
        folds_after_reset,
    }
}
