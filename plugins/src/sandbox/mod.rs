//! Sandboxed strategy plugins, added to a running host: Rhai scripts.
//!
//! A plugin is one script named like the strategy it provides — `fold.<name>`,
//! `layout.<name>` or `summarizer.<name>` — that defines the entry point of its kind:
//! `fn choose(request)` (an array of range indices), `fn arrange(request)` (a map with
//! `order`, and optionally `state` and `seal_head`) or `fn summarize(request)` (a string, or
//! a map with `summary` and `topic`). `request` is the same document an HTTP strategy gets
//! ([`crate::protocol`]), with the pipeline's `config` param added.
//!
//! **Why Rhai.** It is pure Rust with no unsafe code of its own reached from here, it builds
//! in about a third less time than a WASM interpreter with a text-format compiler (`wasmi` +
//! `wat`), plugins are plain text that any CI checks without a toolchain, and the JSON the
//! strategies trade maps straight onto its maps and arrays (a WASM plugin would need its own
//! JSON parser and an allocator ABI). A script reaches nothing but its argument: no files,
//! no network, no `eval`, no imports, `print` goes to the log.
//!
//! **Limits, per call** ([`Limits`]): operations (fuel), wall-clock time, the size of any
//! string, array or map it builds, call depth, expression depth, and the bytes all its
//! variables hold together (estimated generously, map keys included, which Rhai's own
//! size limits do not count). A call that exceeds one, throws, panics or returns something that does
//! not check out makes the built-in fallback decide, with a warning ([`crate::fallback`]).

pub mod store;
pub mod strategies;

use std::cell::Cell;
use std::time::{Duration, Instant};

use rhai::{AST, CallFnOptions, Dynamic, Engine, EvalAltResult, Scope};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use store::{PluginError, PluginInfo, PluginStore, description_of};

/// What one plugin call may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Most operations (statements, expressions, calls) one call may run.
    pub max_operations: u64,
    /// Longest one call may run, in milliseconds.
    pub timeout_ms: u64,
    /// Longest string it may build, in bytes.
    pub max_string_bytes: usize,
    /// Most items in an array or map it builds (nested items count toward the outer one).
    pub max_items: usize,
    /// Deepest function call nesting.
    pub max_call_depth: usize,
    /// Most bytes the values a call holds may take, estimated generously (see
    /// [`held_bytes`]); measured at least every [`MEMORY_CHECK_OPS`] operations (0: not
    /// measured).
    pub max_memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_operations: 2_000_000,
            timeout_ms: 250,
            max_string_bytes: 1 << 20,
            max_items: 100_000,
            max_call_depth: 64,
            max_memory_bytes: 64 << 20,
        }
    }
}

/// Why a plugin call gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// It ran out of operations.
    #[error("ran past its {0} operations")]
    Fuel(u64),
    /// It ran out of time.
    #[error("ran past its {0} ms")]
    Timeout(u64),
    /// It built a value over the size limits.
    #[error("built a value over its size limits: {0}")]
    Memory(String),
    /// It failed (threw, hit a type error, recursed too deep, panicked).
    #[error("failed: {0}")]
    Trap(String),
    /// Its answer does not check out.
    #[error("answered {0}")]
    Bad(String),
}

impl CallError {
    /// The reason label of the fallback counter.
    pub fn reason(&self) -> &'static str {
        match self {
            CallError::Fuel(_) => "fuel",
            CallError::Timeout(_) => "timeout",
            CallError::Memory(_) => "memory",
            CallError::Trap(_) => "trap",
            CallError::Bad(_) => "bad_answer",
        }
    }
}

thread_local! {
    /// The deadline of the plugin call running on this thread (calls are synchronous, so
    /// one engine serves concurrent calls on several threads, each with its own deadline).
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The memory meter of the plugin call running on this thread.
    static METER: Cell<Meter> = const { Cell::new(Meter { ops: 0, next_check: 0 }) };
}

/// Operations between two measurements of what a call holds, at least: a script that holds
/// `n` values is measured every `max(MEMORY_CHECK_OPS, n / 8)` operations, so measuring
/// costs about one value visited per eight operations at worst.
pub const MEMORY_CHECK_OPS: u64 = 64;

/// Where a call's memory meter stands.
#[derive(Debug, Clone, Copy)]
struct Meter {
    /// Operations the call has run.
    ops: u64,
    /// The operation count at which it is measured next.
    next_check: u64,
}

/// Bytes of one value slot (`Dynamic`), of a string's or blob's header, and of one map
/// entry besides its key's text and its value: rounded up, so the estimate errs high.
const SLOT_BYTES: usize = 16;
const HEADER_BYTES: usize = 32;
const ENTRY_BYTES: usize = 64;

/// Bytes `value` holds, estimated generously, and how many values it is made of. Rhai's
/// own limits count string lengths and item counts of one value (not its map keys, and
/// not across variables); this counts every byte of text, keys included, plus the slots.
pub fn held_bytes(value: &Dynamic) -> (usize, usize) {
    let mut bytes = SLOT_BYTES;
    let mut values = 1;
    if let Ok(s) = value.as_immutable_string_ref() {
        bytes += HEADER_BYTES + s.len();
    } else if let Ok(blob) = value.as_blob_ref() {
        bytes += HEADER_BYTES + blob.len();
    } else if let Ok(array) = value.as_array_ref() {
        bytes += HEADER_BYTES;
        for item in array.iter() {
            let (b, v) = held_bytes(item);
            bytes += b;
            values += v;
        }
    } else if let Ok(map) = value.as_map_ref() {
        bytes += HEADER_BYTES;
        for (key, item) in map.iter() {
            let (b, v) = held_bytes(item);
            bytes += ENTRY_BYTES + key.len() + b;
            values += v;
        }
    }
    (bytes, values)
}

/// Measures what the call holds when it is due: every variable in scope (the script's
/// functions share one scope, so callers' variables count too).
fn meter(scope: &Scope, limit: usize) -> Result<(), Box<EvalAltResult>> {
    let due = METER.with(|m| {
        let meter = m.get();
        meter.ops >= meter.next_check
    });
    if !due {
        return Ok(());
    }
    let (mut bytes, mut values) = (0usize, 0usize);
    for (_, _, value) in scope.iter_raw() {
        let (b, v) = held_bytes(value);
        bytes += b;
        values += v;
    }
    METER.with(|m| {
        let mut meter = m.get();
        let every = MEMORY_CHECK_OPS.max(u64::try_from(values / 8).unwrap_or(u64::MAX));
        meter.next_check = meter.ops.saturating_add(every);
        m.set(meter);
    });
    if bytes > limit {
        return Err(Box::new(EvalAltResult::ErrorDataTooLarge(
            format!("Memory held (about {bytes} bytes, limit {limit})"),
            rhai::Position::NONE,
        )));
    }
    Ok(())
}

/// A compiled plugin: its engine (with the limits set) and its script.
pub struct Script {
    engine: Engine,
    ast: AST,
    limits: Limits,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Script")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// An engine that reaches nothing outside its arguments, with `limits` set.
fn engine(limits: Limits, name: &str) -> Engine {
    let mut engine = Engine::new();
    engine.set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new());
    engine.disable_symbol("eval");
    engine.set_max_operations(limits.max_operations);
    engine.set_max_string_size(limits.max_string_bytes);
    engine.set_max_array_size(limits.max_items);
    engine.set_max_map_size(limits.max_items);
    engine.set_max_call_levels(limits.max_call_depth);
    engine.set_max_expr_depths(64, 64);
    let (a, b) = (name.to_owned(), name.to_owned());
    engine.on_print(move |s| tracing::info!(plugin = %a, "{s}"));
    engine.on_debug(move |s, _, _| tracing::debug!(plugin = %b, "{s}"));
    let memory = limits.max_memory_bytes;
    // `on_var` is marked volatile, not deprecated: it is the one hook that sees the scope,
    // and a script reaches its data through variables, so it is where memory is metered.
    if memory > 0 {
        #[allow(deprecated)]
        engine.on_var(move |_, _, context| meter(context.scope(), memory).map(|()| None));
    }
    engine.on_progress(|ops| {
        METER.with(|m| {
            let mut meter = m.get();
            meter.ops = ops;
            m.set(meter);
        });
        // The clock is read every 256 operations: cheap, and fine-grained enough.
        if ops % 256 != 0 {
            return None;
        }
        let late = DEADLINE.with(|d| d.get().is_some_and(|at| Instant::now() >= at));
        late.then(|| Dynamic::from("timeout"))
    });
    engine
}

impl Script {
    /// Compiles a plugin and checks that it defines `entry` with one parameter.
    ///
    /// # Errors
    /// A syntax error, or no such function.
    pub fn compile(name: &str, source: &str, entry: &str, limits: Limits) -> Result<Self, String> {
        let engine = engine(limits, name);
        let ast = engine
            .compile(source)
            .map_err(|e| format!("does not compile: {e}"))?;
        let defined = ast
            .iter_functions()
            .any(|f| f.name == entry && f.params.len() == 1);
        if !defined {
            return Err(format!(
                "defines no `fn {entry}(request)`, the entry point of its kind"
            ));
        }
        Ok(Script {
            engine,
            ast,
            limits,
        })
    }

    /// Calls `entry` with a request; its answer as JSON.
    ///
    /// # Errors
    /// See [`CallError`].
    pub fn call(&self, entry: &str, request: &Value) -> Result<Value, CallError> {
        let arg = rhai::serde::to_dynamic(request)
            .map_err(|e| CallError::Trap(format!("the request does not convert: {e}")))?;
        let deadline = Instant::now() + Duration::from_millis(self.limits.timeout_ms.max(1));
        let previous = DEADLINE.with(|d| d.replace(Some(deadline)));
        let fresh = Meter {
            ops: 0,
            next_check: 0,
        };
        let previous_meter = METER.with(|m| m.replace(fresh));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut scope = Scope::new();
            self.engine.call_fn_with_options::<Dynamic>(
                CallFnOptions::new().eval_ast(false),
                &mut scope,
                &self.ast,
                entry,
                (arg,),
            )
        }));
        DEADLINE.with(|d| d.set(previous));
        METER.with(|m| m.set(previous_meter));
        let answer = match result {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(self.classify(*e)),
            Err(_) => return Err(CallError::Trap("panicked".to_owned())),
        };
        rhai::serde::from_dynamic::<Value>(&answer)
            .map_err(|e| CallError::Bad(format!("a value that is not data: {e}")))
    }

    fn classify(&self, e: EvalAltResult) -> CallError {
        match e {
            EvalAltResult::ErrorTooManyOperations(_) => CallError::Fuel(self.limits.max_operations),
            EvalAltResult::ErrorTerminated(..) => CallError::Timeout(self.limits.timeout_ms),
            EvalAltResult::ErrorDataTooLarge(what, _) => CallError::Memory(what),
            other => CallError::Trap(other.to_string()),
        }
    }
}
