//! Content keys of the units a fold is about to archive, hashed before the fold starts.
//!
//! A session's first fold archives nearly its whole history (a first turn of 10,000
//! messages: 11 MB of originals), and planning that pack is mostly the SHA-256 of every
//! original. Hashed when the fold picks its ranges, it ran beside the fold's own work on a
//! 2-core machine and the fold then waited for it. The stages between the decode and the
//! fold (`refs.mint`, `ranges.build`) run on one core, so `archive.spill` starts the hashing
//! there, on a blocking thread ([`start_prehash`]), when the turn is one that will fold
//! most of what it holds: no active block yet and a body far over the window
//! ([`worth_prehashing`]). The fold hands what it computed to the archive
//! ([`foldwire_core::MediaArchive::plan_contents_known`]), which hashes only the payloads
//! it has no key for. A session whose fold left the keys unused hashes no more ahead
//! ([`PrehashUnused`]).

use bytes::Bytes;
use foldwire_archive::keys::sha256_hex;
use foldwire_core::{Budget, KnownDigests, Message, SessionState};

/// Bytes per token a body is taken to hold when judging whether it is far over the window:
/// generous (JSON framing and tool output run nearer three), so a body that passes is over.
const BYTES_PER_TOKEN: u64 = 4;

/// Left in [`foldwire_core::Turn::carry`] by a turn that started a prehash, and taken out by
/// the fold that used it: found by the next turn, it says the last prehash went unused (a
/// pipeline whose fold does not fold on its own, a policy that declined), and the session
/// hashes no more ahead, rather than hash its whole history on every turn for nothing.
#[derive(Debug, Clone, Copy)]
pub struct PrehashUnused;

/// The content keys of a turn's units, being computed on a blocking thread.
#[derive(Debug)]
pub struct Prehashing {
    /// How many payloads were handed to the thread.
    units: usize,
    task: tokio::task::JoinHandle<KnownDigests>,
}

impl Prehashing {
    /// How many units' bytes are being hashed (units with no bytes are left out).
    pub fn units(&self) -> usize {
        self.units
    }

    /// The keys, once computed; none when the thread stopped (the archive then hashes
    /// everything itself, as without a prehash). Call from a blocking thread.
    pub fn wait_on(self, runtime: &tokio::runtime::Handle) -> KnownDigests {
        runtime.block_on(self.task).unwrap_or_default()
    }
}

/// True when the turn will fold most of its history: the session has no active block and
/// the body, at a generous [`BYTES_PER_TOKEN`], is still over the window. (The stage also
/// asks whether the last prehash was used, [`PrehashUnused`].)
pub fn worth_prehashing(state: &SessionState, budget: &Budget, body_len: usize) -> bool {
    let no_block = !state.blocks.iter().any(|b| b.active);
    no_block && body_len as u64 / BYTES_PER_TOKEN > budget.window
}

/// Starts hashing the raw bytes of `units` (each a cheap clone, so the buffers stay alive
/// and their keys stay theirs) on a blocking thread; `None` when there is nothing to hash
/// or no Tokio runtime to hash on.
pub fn start_prehash<'a>(units: impl IntoIterator<Item = &'a Message>) -> Option<Prehashing> {
    let payloads: Vec<Bytes> = units
        .into_iter()
        .map(|u| u.client_bytes().clone())
        .filter(|raw| !raw.is_empty())
        .collect();
    if payloads.is_empty() {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    // One thread: the stages it runs beside use one core, and the fold that needs the keys
    // starts once they are done.
    let units = payloads.len();
    let task = runtime.spawn_blocking(move || {
        let mut known = KnownDigests::new();
        for payload in payloads {
            let key = sha256_hex(&payload);
            known.insert(payload, key);
        }
        known
    });
    Some(Prehashing { units, task })
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldwire_core::{Block, BlockId, Origin, Role};

    #[test]
    fn only_a_body_over_the_window_without_an_active_block_is_worth_it() {
        let budget = Budget::default().with_window(1_000);
        let mut state = SessionState::default();
        assert!(worth_prehashing(&state, &budget, 4_004));
        assert!(!worth_prehashing(&state, &budget, 4_000), "not over");
        let block = |active| Block {
            id: BlockId(1),
            active,
            ..Block::default()
        };
        state.blocks.push(block(false));
        assert!(
            worth_prehashing(&state, &budget, 4_004),
            "an inactive block folds nothing"
        );
        state.blocks.push(block(true));
        assert!(
            !worth_prehashing(&state, &budget, 1 << 20),
            "a session with an active block folds what is new, not its history"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_are_the_sha256_of_each_unit_and_found_by_its_buffer() {
        let body = Bytes::from_static(b"[{\"a\":1},{\"b\":22}]");
        let units: Vec<Message> = [1..8, 9..17]
            .into_iter()
            .map(|span| Message::synthesized(0, Role::User, "x", Origin::Client, body.slice(span)))
            .collect();
        let hashing = start_prehash(&units).expect("a runtime and two units");
        assert_eq!(hashing.units(), 2);
        let runtime = tokio::runtime::Handle::current();
        let known = tokio::task::spawn_blocking(move || hashing.wait_on(&runtime))
            .await
            .unwrap();
        assert_eq!(known.len(), 2);
        for unit in &units {
            assert_eq!(known.get(&unit.raw), Some(sha256_hex(&unit.raw).as_str()));
        }
        // Equal bytes elsewhere are not the buffer the key was computed from.
        let copy = Bytes::copy_from_slice(&units[0].raw);
        assert_eq!(known.get(&copy), None);
    }
}
