//! Generated agent sessions for the economy bench: every request a coding agent sends over
//! a long session (Anthropic Messages, the whole history each turn), deterministic for a
//! seed.
//!
//! The session: a system prompt and tool definitions; a task; then turns of an assistant
//! step (a sentence and a tool call) and its tool result of 400–12,000 characters
//! (log-uniform: mostly small, some large logs and file dumps); long tool loops with no user
//! text in between; now and then a user remark; a screenshot (an inline PNG in a tool
//! result) every so often; and a topic reset part way through (a [`Event::Reset`], as
//! `foldwire replay` reads `{"foldwire_reset": …}`, and the user's new task).

use serde_json::{Value, json};

/// One event of a generated session.
#[derive(Debug, Clone)]
pub enum Event {
    /// A request body (JSON).
    Request(String),
    /// A topic reset with its transition text.
    Reset(String),
}

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items
            .get(self.below(items.len() as u64) as usize)
            .copied()
            .unwrap_or("")
    }
}

const WORDS: [&str; 24] = [
    "parser", "config", "handler", "cache", "router", "session", "token", "buffer", "index",
    "schema", "worker", "queue", "client", "server", "stream", "codec", "layout", "budget",
    "archive", "registry", "pipeline", "report", "window", "summary",
];
const TOOLS: [&str; 4] = ["bash", "read_file", "grep", "edit_file"];

fn sentence(rng: &mut Rng, words: usize) -> String {
    (0..words)
        .map(|_| rng.pick(&WORDS))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A tool output of exactly `size` characters: lines of code, log or test output.
fn output(rng: &mut Rng, turn: usize, size: usize) -> String {
    let mut out = String::with_capacity(size + 80);
    let mut line = 0usize;
    while out.len() < size {
        let w = sentence(rng, 4);
        out.push_str(&format!(
            "src/{}/{}.rs:{}: {} {} ({})\n",
            rng.pick(&WORDS),
            rng.pick(&WORDS),
            line + turn,
            w,
            rng.below(10_000),
            if rng.below(7) == 0 { "FAILED" } else { "ok" }
        ));
        line += 1;
    }
    out.truncate(size);
    out
}

/// A PNG of `width`×`height` (valid header; the estimator prices images by their size).
fn png(width: u32, height: u32, filler: usize) -> String {
    let mut bytes: Vec<u8> = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    bytes.extend_from_slice(&13u32.to_be_bytes());
    bytes.extend_from_slice(b"IHDR");
    bytes.extend_from_slice(&width.to_be_bytes());
    bytes.extend_from_slice(&height.to_be_bytes());
    bytes.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend((0..filler).map(|i| (i * 31 % 251) as u8));
    base64(&bytes)
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let idx = ((n >> (18 - 6 * i)) & 63) as usize;
                out.push(char::from(A.get(idx).copied().unwrap_or(b'A')));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The shape of a generated session.
#[derive(Debug, Clone, Copy)]
pub struct SessionShape {
    /// Requests (turns).
    pub turns: usize,
    /// Smallest and largest tool output, in characters.
    pub output_chars: (usize, usize),
    /// A screenshot every this many turns (0: none).
    pub image_every: usize,
    /// The turn of the topic reset (0: none).
    pub reset_at: usize,
}

impl Default for SessionShape {
    fn default() -> Self {
        SessionShape {
            turns: 300,
            output_chars: (400, 12_000),
            image_every: 45,
            reset_at: 190,
        }
    }
}

/// The events of a coding-agent session of `shape`, deterministic for `seed`.
pub fn coding_agent(seed: u64, shape: SessionShape) -> Vec<Event> {
    let mut rng = Rng::new(seed);
    let system = format!(
        "You are a coding agent working in a Rust repository. {}",
        (0..60)
            .map(|_| sentence(&mut rng, 12))
            .collect::<Vec<_>>()
            .join(". ")
    );
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|name| {
            json!({"name": name, "description": format!("{name}: {}", sentence(&mut rng, 40)),
                "input_schema": {"type": "object", "properties": {"arg": {"type": "string", "description": sentence(&mut rng, 20)}}, "required": ["arg"]}})
        })
        .collect();
    let mut history: Vec<Value> = vec![json!({"role": "user", "content": format!(
        "Task: {}. Fix the failing tests and keep the API stable.",
        sentence(&mut rng, 30)
    )})];
    let mut events = Vec::with_capacity(shape.turns + 1);
    let (lo, hi) = (
        shape.output_chars.0.max(1) as f64,
        shape.output_chars.1.max(1) as f64,
    );
    // Tool loops of 5–30 steps, then a user remark.
    let mut loop_left = 5 + rng.below(26);
    for t in 1..=shape.turns {
        if shape.reset_at > 0 && t == shape.reset_at {
            events.push(Event::Reset(
                "The user moved on to a new task; the earlier work is done.".to_owned(),
            ));
            history.push(json!({"role": "assistant", "content": "Done with that task."}));
            history.push(json!({"role": "user", "content": format!(
                "New task: {}. Start from the tests.",
                sentence(&mut rng, 25)
            )}));
            events.push(Event::Request(body(&system, &tools, &history)));
            continue;
        }
        let id = format!("toolu_{t:05}");
        let tool = rng.pick(&TOOLS);
        let words = 10 + rng.below(30) as usize;
        history.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {t}: {}.", sentence(&mut rng, words))},
            {"type": "tool_use", "id": id, "name": tool, "input": {"arg": format!("src/{}/{}.rs", rng.pick(&WORDS), rng.pick(&WORDS))}}
        ]}));
        let size = (lo * (hi / lo).powf(rng.unit())) as usize;
        let text = output(&mut rng, t, size);
        let result = if shape.image_every > 0 && t % shape.image_every == 0 {
            json!([{"type": "text", "text": text},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(1024, 768, 3000)}}])
        } else {
            Value::String(text)
        };
        let mut content =
            vec![json!({"type": "tool_result", "tool_use_id": id, "content": result})];
        loop_left = loop_left.saturating_sub(1);
        if loop_left == 0 {
            content.push(
                json!({"type": "text", "text": format!("Note: {}.", sentence(&mut rng, 15))}),
            );
            loop_left = 5 + rng.below(26);
        }
        history.push(json!({"role": "user", "content": content}));
        events.push(Event::Request(body(&system, &tools, &history)));
    }
    events
}

fn body(system: &str, tools: &[Value], history: &[Value]) -> String {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192,
        "system": system,
        "tools": tools,
        "messages": history,
    })
    .to_string()
}
