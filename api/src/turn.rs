//! What flows through the pipeline for one request.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::conversation::Conversation;
use crate::extensions::{Extensions, SharedExtensions};
use crate::ids::SessionId;
use crate::report::TurnReport;
use crate::state::SessionState;
use crate::wire::Wire;

/// A fact a stage establishes about the turn, which later stages may require.
///
/// Third-party stages that order among themselves name their own facts with
/// [`Fact::Custom`]; the pipeline builder checks those like the built-in ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Fact {
    /// The body was decoded into a conversation.
    Decoded,
    /// Media was classified archivable / unrecoverable.
    MediaClassified,
    /// Archivable payloads are stored.
    Archived,
    /// Refs are minted.
    RefsMinted,
    /// Compressible ranges are known.
    RangesBuilt,
    /// Active blocks are applied.
    Folded,
    /// Tool pairing is valid.
    PairingRepaired,
    /// The head-window layout is applied.
    LaidOut,
    /// The output body is encoded.
    Encoded,
    /// A fact a third-party stage defines, by a dotted name of its own (`acme.redacted`).
    Custom(&'static str),
}

/// The built-in facts, for reading a fact back by name.
const BUILT_IN: [Fact; 9] = [
    Fact::Decoded,
    Fact::MediaClassified,
    Fact::Archived,
    Fact::RefsMinted,
    Fact::RangesBuilt,
    Fact::Folded,
    Fact::PairingRepaired,
    Fact::LaidOut,
    Fact::Encoded,
];

impl Serialize for Fact {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Fact {
    /// Built-in facts only: a custom fact's name is `'static` and lives in its stage's code.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        BUILT_IN
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown fact {name:?}; built-in facts: {}",
                    BUILT_IN.map(Fact::as_str).join(", ")
                ))
            })
    }
}

impl Fact {
    /// The snake_case name used in messages and specs.
    pub fn as_str(self) -> &'static str {
        match self {
            Fact::Decoded => "decoded",
            Fact::MediaClassified => "media_classified",
            Fact::Archived => "archived",
            Fact::RefsMinted => "refs_minted",
            Fact::RangesBuilt => "ranges_built",
            Fact::Folded => "folded",
            Fact::PairingRepaired => "pairing_repaired",
            Fact::LaidOut => "laid_out",
            Fact::Encoded => "encoded",
            Fact::Custom(name) => name,
        }
    }
}

impl std::fmt::Display for Fact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-request options that override the pipeline's defaults for one turn (command-line
/// flags of `foldwire run`, what the proxy learns from the request). Stages read what
/// concerns them; unset fields leave the pipeline's configuration in force.
///
/// ```
/// use foldwire_api::TurnOptions;
///
/// /// A value a host hands to its own stage, keyed by its type.
/// #[derive(Debug, PartialEq)]
/// struct Tenant(&'static str);
///
/// let mut options = TurnOptions::default();
/// options.layout = Some("layout.head_first".to_owned());
/// options.extensions.insert(Tenant("acme"));
/// let copy = options.clone();
/// assert_eq!(copy.extensions.get::<Tenant>(), Some(&Tenant("acme")));
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TurnOptions {
    /// The context window in tokens for this turn (the layout applies it to the budget).
    pub window: Option<u64>,
    /// The layout strategy for this turn, by registered name; its params are the defaults
    /// unless it is the pipeline's own strategy.
    pub layout: Option<String>,
    /// The head-window size in tokens.
    pub head_tokens: Option<u64>,
    /// The recent-window size in tokens.
    pub recent_tokens: Option<u64>,
    /// Leave the proxy's tools out of this turn (`tools.inject` skips it): a side request
    /// whose tool choices and output constraints stay as the client sent them.
    pub skip_tool_loop: bool,
    /// Run the turn on a copy of the session's state and keep nothing of it: the state is
    /// not saved and the next turn gets nothing the stages carry. What a request would be
    /// sent as, without it being a turn (a token-count request, which asks what the model
    /// would be sent).
    pub dry_run: bool,
    /// Values the host hands to stages and strategies of its own, keyed by type (e.g. the
    /// session's upstream for `summarizer.llm`).
    pub extensions: SharedExtensions,
}

/// One request in flight: body, decoded conversation, the session's state (owned while the
/// turn runs), budget, report, and the encoded output once a stage produced it.
#[derive(Debug)]
pub struct Turn {
    /// The session.
    pub session: SessionId,
    /// The wire of the request.
    pub wire: Wire,
    /// The request body exactly as received.
    pub body: Bytes,
    /// The decoded conversation, once `wire.decode` ran.
    pub conversation: Option<Conversation>,
    /// The session's state; moved in by the session actor and back out after the turn.
    pub state: SessionState,
    /// The token budget.
    pub budget: Budget,
    /// Per-turn overrides.
    pub options: TurnOptions,
    /// What happened.
    pub report: TurnReport,
    /// The request body to forward, once `wire.encode` ran.
    pub output: Option<Bytes>,
    /// The compressible ranges `ranges.build` found this turn (oldest first), for the fold
    /// stage, its policy and the CLI.
    pub ranges: Vec<crate::strategy::RangeInfo>,
    /// Typed values a stage leaves for later stages of the same turn, keyed by type (no JSON
    /// round trip, no key to misspell; e.g. the protection `ranges.build` used, which `fold`
    /// reuses). Never persisted.
    pub extensions: Extensions,
    /// Values stages leave for the session's next turn: what this turn decoded, classified,
    /// … so a next request that resends it is not worked through again. The session actor
    /// hands them from turn to turn in memory only (never persisted; dropped once the session
    /// sits idle, see `EngineBuilder::forget_carry_after`), so each is a cache: a stage gives
    /// the same result without it.
    pub carry: Extensions,
    /// When true, a stage may leave a write that the new state names under way
    /// ([`Turn::pending_writes`]) rather than wait for it; only a caller that then waits for
    /// them before storing the state sets it (the session actor does).
    pub defer_writes: bool,
    /// Writes left under way by stages (see [`Turn::defer_writes`]).
    pub pending_writes: crate::archive::PendingWrites,
}

impl Turn {
    /// A new turn for a body.
    pub fn new(session: SessionId, wire: Wire, body: Bytes, state: SessionState) -> Self {
        let report = TurnReport {
            session: session.to_string(),
            wire: wire.to_string(),
            ..TurnReport::default()
        };
        Turn {
            session,
            wire,
            body,
            conversation: None,
            state,
            budget: Budget::default(),
            options: TurnOptions::default(),
            report,
            output: None,
            ranges: Vec::new(),
            extensions: Extensions::new(),
            carry: Extensions::new(),
            defer_writes: false,
            pending_writes: crate::archive::PendingWrites::default(),
        }
    }

    /// The body to send on: the encoded output, or the original body when no stage encoded.
    pub fn outgoing(&self) -> Bytes {
        self.output.clone().unwrap_or_else(|| self.body.clone())
    }
}
