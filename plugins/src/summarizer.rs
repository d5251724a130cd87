//! `summarizer.extractive`: a deterministic, offline summarizer.
//!
//! It writes no prose; it keeps the lines and tokens an agent most needs to carry on:
//! file paths, identifiers, error lines, commands (tool calls with their arguments) and
//! decisions, each deduplicated in first-seen order, under a bounded length. The summary
//! starts with `(extractive summary of N messages)` so readers — and the model — know no
//! model wrote it.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Message, MessageKind, Origin,
    StrategyError, Summarizer, Summary, SummaryRequest, async_trait,
};
use foldwire_stages::kernel::render::rendered_topic;
use foldwire_wire::any_of::AnyOf;
use serde::{Deserialize, Serialize};

/// Registered name.
pub const NAME: &str = ExtractiveConfig::NAME;

/// Settings of the extractive summarizer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExtractiveConfig {
    /// Upper bound on the summary, in characters (the request's bound applies too).
    pub max_chars: usize,
    /// At most this many items per section.
    pub max_items: usize,
}

impl Default for ExtractiveConfig {
    fn default() -> Self {
        ExtractiveConfig {
            max_chars: 1500,
            max_items: 12,
        }
    }
}

/// The extractive summarizer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extractive(pub ExtractiveConfig);

const ERROR_WORDS: [&str; 7] = [
    "error",
    "failed",
    "failure",
    "panic",
    "exception",
    "traceback",
    "fatal",
];
const DECISION_WORDS: [&str; 8] = [
    "decided", "decision", "we will", "i will", "i'll", "let's", "plan:", "instead",
];

/// How much text, in bytes, one summary reads line by line for paths, identifiers and `$`
/// commands. Those sections take the first items seen and keep looking until full; over a
/// history where one never fills (prose, data without identifiers) every word of every unit
/// was tested: 44 ms for a first turn's 10,000 messages (10 MB). Past this much text only
/// tool calls, and the lines of units the byte search finds error or decision words in,
/// are read: errors anywhere in a range still make its summary. About 4 ms of reading.
pub const LINE_SCAN_BYTES: usize = 1 << 20;

/// The error words, searched for in a unit's undecoded bytes ([`Lowered::may_mention`]),
/// lowercased first: no searcher keeps its speed when it ignores case itself.
static ERROR_FINDER: LazyLock<Option<AnyOf>> = LazyLock::new(|| AnyOf::new(&ERROR_WORDS));

/// The decision words, searched for in a unit's undecoded bytes ([`Lowered::may_mention`]).
static DECISION_FINDER: LazyLock<Option<AnyOf>> = LazyLock::new(|| AnyOf::new(&DECISION_WORDS));

/// A buffer the searches for section words lowercase into, reused across units and lines
/// (a first turn searches every folded unit once).
#[derive(Default)]
struct Lowered(String, Vec<u8>);

impl Lowered {
    /// Takes in `unit`'s bytes without decoding its text ([`foldwire_core::Text::searchable`],
    /// ASCII lowercased, once for every finder [`Self::may_mention`] then asks about).
    fn lower_source(&mut self, unit: &Message) {
        // Copied, then lowercased in place: both run over the whole slice at once (byte by
        // byte through an iterator, a first turn's megabytes of tool output took milliseconds).
        self.1.clear();
        self.1.extend_from_slice(unit.text.searchable());
        self.1.make_ascii_lowercase();
    }

    /// False when the unit last taken in ([`Self::lower_source`]) cannot mention any of the
    /// finder's words: on a first turn that folds a whole session, decoding every tool
    /// output only to find no error word in it was most of the summary's cost. Only a word
    /// broken by a JSON escape (`err\u006fr`) is missed, and `traceback` written with the
    /// Kelvin sign (the one letter outside ASCII that lowercases into one of the words'
    /// letters).
    fn may_mention(&self, finder: &Option<AnyOf>) -> bool {
        finder.as_ref().is_none_or(|f| f.is_match(&self.1))
    }

    /// True when the lowercased text holds one of `words` (ASCII text is lowercased
    /// without the Unicode tables, which gives the same text).
    fn mentions(&mut self, text: &str, words: &[&str]) -> bool {
        self.0.clear();
        if text.is_ascii() {
            self.0.push_str(text);
            self.0.make_ascii_lowercase();
        } else {
            self.0.extend(text.chars().flat_map(char::to_lowercase));
        }
        words.iter().any(|w| self.0.contains(w))
    }
}

/// False when no token of the line can pass [`is_identifier`]: each needs `_` (snake case),
/// `::`, `()` or an uppercase letter (camel case). Checked on ASCII lines only; any other
/// line may hold one.
fn may_hold_identifier(line: &str) -> bool {
    if !line.is_ascii() {
        return true;
    }
    let b = line.as_bytes();
    b.iter().any(|&c| c == b'_' || c.is_ascii_uppercase())
        || memchr::memmem::find(b, b"::").is_some()
        || memchr::memmem::find(b, b"()").is_some()
}

/// True when a token looks like a file path (`src/a.rs`, `./x.py`, `Cargo.toml`).
fn is_path(token: &str) -> bool {
    let has_ext = token.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty()
            && (1..=5).contains(&ext.len())
            && ext.chars().all(|c| c.is_ascii_alphanumeric())
            && ext.chars().any(|c| c.is_ascii_alphabetic())
    });
    let slashy = token.contains('/') && token.len() > 2 && !token.starts_with("http");
    (slashy && (has_ext || token.matches('/').count() >= 2))
        || (has_ext && token.contains('/'))
        || (has_ext
            && token
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
            && token.contains('_'))
}

/// True when a token looks like a code identifier (`snake_case`, `CamelCase`, `a::b`, `f()`).
fn is_identifier(token: &str) -> bool {
    // `trim_end_matches("()")` without building a substring searcher per token: this runs
    // on every word of every folded unit.
    let mut core = token;
    while let Some(shorter) = core.strip_suffix("()") {
        core = shorter;
    }
    if core.len() < 4
        || !core
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
    {
        return false;
    }
    if !core
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == ':')
    {
        return false;
    }
    let snake = core.contains('_') && core.chars().any(|c| c.is_alphabetic());
    let path = core.contains("::");
    let camel =
        core.chars().skip(1).any(|c| c.is_uppercase()) && core.chars().any(|c| c.is_lowercase());
    snake || path || camel || token.ends_with("()")
}

fn clean(token: &str) -> &str {
    token.trim_matches(|c: char| {
        matches!(
            c,
            '"' | '\'' | '`' | ',' | ';' | ':' | '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>'
        )
    })
}

/// A path as written in prose, without the sentence punctuation that can follow it
/// (`src/a.rs.`, `src/a.rs),` → `src/a.rs`), so one file is listed once.
fn path_of(token: &str) -> &str {
    token.trim_end_matches(['.', ',', ';', ':', ')'])
}

/// The summary's sections, in the order they are written.
const LABELS: [&str; 5] = ["files", "commands", "errors", "decisions", "identifiers"];
const FILES: usize = 0;
const COMMANDS: usize = 1;
const ERRORS: usize = 2;
const DECISIONS: usize = 3;
const IDENTIFIERS: usize = 4;

/// The sections as they fill, with what each would take in the written summary.
///
/// The summary is written section by section and stops at the first entry that does not fit,
/// so a section whose predecessors already take the whole length can never show. Items only
/// ever get added, so once a section is full or cannot show it stays so, and the scan skips
/// the work that could only feed it; over a long history every section fills or is crowded
/// out early and the rest of the scan would be lowercasing and tokenizing for nothing.
struct Sections {
    items: [Vec<String>; 5],
    /// Characters each section takes when written: `\n<label>:` and ` <item>;` per item.
    written: [usize; 5],
    seen: HashSet<String>,
    max_items: usize,
    /// The summary's length bound.
    limit: usize,
    /// Characters before the first section (the summary's first line).
    opening: usize,
}

impl Sections {
    fn new(max_items: usize, limit: usize, opening: usize) -> Self {
        Sections {
            items: Default::default(),
            written: [0; 5],
            seen: HashSet::new(),
            max_items,
            limit,
            opening,
        }
    }

    /// True while an item added to section `k` could still change the summary: the section
    /// is not full, and what is written before it leaves room for its label and an entry.
    fn wants(&self, k: usize) -> bool {
        let (Some(items), Some(label)) = (self.items.get(k), LABELS.get(k)) else {
            return false;
        };
        let before: usize = self.opening + self.written.iter().take(k).sum::<usize>();
        // `\n<label>:` and the shortest entry, ` x;`.
        items.len() < self.max_items && before + label.len() + 2 + 3 <= self.limit
    }

    /// True once no section can change the summary any more.
    fn settled(&self) -> bool {
        !(0..LABELS.len()).any(|k| self.wants(k))
    }

    /// Adds a new item to section `k`, keeping first-seen order and the section bound.
    fn add(&mut self, k: usize, item: String) {
        let Some(items) = self.items.get_mut(k) else {
            return;
        };
        if items.len() < self.max_items && !item.is_empty() && self.seen.insert(item.clone()) {
            let label = LABELS.get(k).map_or(0, |l| l.len());
            let opened = if items.is_empty() { label + 2 } else { 0 };
            if let Some(w) = self.written.get_mut(k) {
                *w += opened + item.len() + 2;
            }
            items.push(item);
        }
    }

    fn len(&self, k: usize) -> usize {
        self.items.get(k).map_or(0, Vec::len)
    }
}

fn line_of(text: &str, max: usize) -> String {
    let t = text.trim();
    if t.chars().count() <= max {
        t.to_owned()
    } else {
        let mut s: String = t.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

impl Extractive {
    /// Reads units until no section can change the summary; returns the sections and how
    /// many units were read.
    fn collect(&self, units: &[Message], limit: usize, opening: usize) -> (Sections, usize) {
        let mut s = Sections::new(self.0.max_items, limit, opening);
        let mut lowered = Lowered::default();
        let mut read = 0;
        // Text read line by line for the sections that take any line's tokens.
        let mut scanned = 0usize;
        for u in units {
            // The topic is the first path, so paths are collected until there is one even
            // when the section itself cannot show.
            if s.settled() && s.len(FILES) > 0 {
                break;
            }
            read += 1;
            if u.kind == MessageKind::ToolCall && s.wants(COMMANDS) {
                let name = u
                    .tool
                    .as_ref()
                    .and_then(|t| t.name.as_deref())
                    .unwrap_or("tool");
                s.add(COMMANDS, format!("{name} {}", line_of(&u.text, 120)));
            }
            // Reasoning, whether a reasoning unit or written inline as `<think>…</think>` at
            // the start of an answer, is the model's scratch work, not what the range holds
            // (acp §26 #120): only the answer is read.
            let reasoning = u.kind == MessageKind::Reasoning;
            // One search of the whole unit first, for the sections still wanted: most units
            // hold none of the words, and then no line of them needs a search of its own.
            // Its undecoded bytes are searched before its text.
            let errors_wanted = !reasoning && s.wants(ERRORS);
            let decisions_wanted = u.kind == MessageKind::Text && s.wants(DECISIONS);
            if errors_wanted || decisions_wanted {
                lowered.lower_source(u);
            }
            let maybe_errors = errors_wanted && lowered.may_mention(&ERROR_FINDER);
            let maybe_decisions = decisions_wanted && lowered.may_mention(&DECISION_FINDER);
            // The sections any line can feed, while the budget lasts ([`LINE_SCAN_BYTES`]).
            let line_items = scanned < LINE_SCAN_BYTES
                && (s.wants(COMMANDS)
                    || s.wants(FILES)
                    || s.len(FILES) == 0
                    || s.wants(IDENTIFIERS));
            // Nothing a line could add: the unit's text is not even decoded.
            if !(maybe_errors || maybe_decisions || line_items) {
                continue;
            }
            let answer = u.answer_text();
            if line_items {
                scanned += answer.len();
            }
            let unit_errors = maybe_errors && lowered.mentions(answer, &ERROR_WORDS);
            let unit_decisions = maybe_decisions && lowered.mentions(answer, &DECISION_WORDS);
            for line in answer.lines() {
                if s.settled() && s.len(FILES) > 0 {
                    break;
                }
                let want_errors = unit_errors && s.wants(ERRORS);
                let want_decisions = unit_decisions && s.wants(DECISIONS);
                if want_errors && lowered.mentions(line, &ERROR_WORDS) {
                    s.add(ERRORS, line_of(line, 160));
                }
                if want_decisions && lowered.mentions(line, &DECISION_WORDS) {
                    s.add(DECISIONS, line_of(line, 160));
                }
                if !line_items {
                    continue;
                }
                if s.wants(COMMANDS)
                    && let Some(cmd) = line.trim().strip_prefix("$ ")
                {
                    s.add(COMMANDS, line_of(cmd, 120));
                }
                let want_paths = s.wants(FILES) || s.len(FILES) == 0;
                let want_idents = s.wants(IDENTIFIERS) && may_hold_identifier(line);
                if !want_paths && !want_idents {
                    continue;
                }
                for raw in line.split_whitespace() {
                    let token = clean(raw);
                    let path = path_of(token);
                    // A path never counts as an identifier, even once paths are full; with
                    // paths full the cheaper identifier test goes first.
                    if !want_paths {
                        if is_identifier(token) && !is_path(path) {
                            s.add(IDENTIFIERS, token.to_owned());
                        }
                    } else if is_path(path) {
                        s.add(FILES, path.to_owned());
                    } else if want_idents && is_identifier(token) {
                        s.add(IDENTIFIERS, token.to_owned());
                    }
                }
            }
        }
        (s, read)
    }

    /// Summarizes units (synchronous core of [`Summarizer::summarize`]).
    pub fn summarize_units(&self, units: &[Message], max_chars: usize) -> Summary {
        let limit = max_chars.min(self.0.max_chars).max(40);
        let mut text = format!("(extractive summary of {} messages)", units.len());
        let (s, _) = self.collect(units, limit, text.len());
        'outer: for (label, items) in LABELS.iter().zip(&s.items) {
            if items.is_empty() {
                continue;
            }
            let head = format!("\n{label}:");
            if text.len() + head.len() > limit {
                break;
            }
            text.push_str(&head);
            for item in items {
                let entry = format!(" {item};");
                if text.len() + entry.len() > limit {
                    break 'outer;
                }
                text.push_str(&entry);
            }
        }
        let first_path = s.items.first().and_then(|files| files.first()).cloned();
        let topic = first_path.or_else(|| {
            units
                .iter()
                .filter(|u| u.kind == MessageKind::Text)
                .find_map(|u| {
                    let text = u.answer_text();
                    let text = text.trim();
                    // A summary folded again offers its own topic: its header would nest
                    // (`[foldwire b11 · [foldwire b9 · …`).
                    if matches!(u.origin, Origin::Summary(_)) {
                        return rendered_topic(text).map(str::to_owned);
                    }
                    let first = text.lines().next().filter(|l| !l.trim().is_empty())?;
                    Some(line_of(first, 48))
                })
        });
        Summary::new(text, NAME).with_topic(topic)
    }
}

#[async_trait]
impl Summarizer for Extractive {
    fn name(&self) -> &'static str {
        NAME
    }
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, StrategyError> {
        if request.messages.is_empty() {
            return Err(StrategyError::new(
                NAME,
                "asked to summarize an empty range",
            ));
        }
        Ok(self.summarize_units(request.messages, request.max_chars))
    }
}

impl ComponentConfig for ExtractiveConfig {
    const KIND: ComponentKind = ComponentKind::Summarizer;
    const NAME: &'static str = "summarizer.extractive";
    const DESCRIPTION: &'static str =
        "Summarizes a range offline: its paths, identifiers, errors, commands and decisions.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        if self.max_chars < 40 || self.max_items == 0 {
            return Err(BuildError::new(
                NAME,
                "max_chars must be at least 40 and max_items at least 1",
            ));
        }
        Ok(Component::Summarizer(Arc::new(Extractive(self))))
    }
}

foldwire_core::register_config!(ExtractiveConfig);

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use foldwire_core::{Origin, Role};

    fn text(t: &str) -> Message {
        Message::synthesized(0, Role::User, t.to_owned(), Origin::Client, Bytes::new())
    }

    /// An Anthropic request of one `bash` call per output, each answered by a tool result
    /// holding that output (a JSON string literal), decoded as the pipeline decodes it: the
    /// results' texts stay undecoded until read.
    fn decoded_tool_session(outputs: &[String]) -> foldwire_core::Conversation {
        let mut body = String::from(r#"{"model":"m","max_tokens":5,"messages":["#);
        for (i, output) in outputs.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            body.push_str(&format!(
                r#"{sep}{{"role":"assistant","content":[{{"type":"tool_use","id":"t{i}","name":"bash","input":{{"cmd":"ls"}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":{output}}}]}}"#
            ));
        }
        body.push_str("]}");
        foldwire_wire::request::decode(foldwire_core::Wire::Anthropic, Bytes::from(body))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The tool results of a conversation, in order.
    fn tool_results(conversation: &foldwire_core::Conversation) -> Vec<&Message> {
        conversation
            .messages
            .iter()
            .filter(|u| u.kind == MessageKind::ToolResult)
            .collect()
    }

    #[test]
    fn paths_lose_trailing_punctuation_and_are_listed_once() {
        let units = [
            text(
                "I changed src/auth/part0.rs. Then src/auth/part0.rs again; see (src/auth/part0.rs),",
            ),
            text("also src/auth/part1.rs: and src/auth/part1.rs; done"),
        ];
        let summary = Extractive::default().summarize_units(&units, 1000);
        let files = summary
            .text
            .lines()
            .find(|l| l.starts_with("files:"))
            .unwrap_or_default()
            .to_owned();
        assert_eq!(files, "files: src/auth/part0.rs; src/auth/part1.rs;");
        assert_eq!(summary.topic.as_deref(), Some("src/auth/part0.rs"));
    }

    /// A unit's undecoded bytes decide whether its text is read for error and decision
    /// words: a tool output that holds none stays undecoded once the other sections are
    /// settled, and one that holds a word in any case is read and gives its line.
    #[test]
    fn units_without_section_words_are_not_decoded() {
        let output = |i: usize, extra: &str| {
            serde_json::to_string(&format!(
                "line one of output {i}\nplain \"quoted\" text{extra}"
            ))
            .unwrap_or_default()
        };
        let outputs: Vec<String> = (0..40)
            .map(|i| {
                let extra = match i {
                    0 => "\nsee src/a.rs and some_ident",
                    30 => "\nTraceBack at step 30",
                    _ => "",
                };
                output(i, extra)
            })
            .collect();
        let conversation = decoded_tool_session(&outputs);
        let units = &conversation.messages;
        let results = tool_results(&conversation);
        assert!(results.iter().all(|u| !u.text.is_decoded()));
        let mut lowered = Lowered::default();
        lowered.lower_source(results[3]);
        assert!(!lowered.may_mention(&ERROR_FINDER));
        lowered.lower_source(results[30]);
        assert!(lowered.may_mention(&ERROR_FINDER));
        let summarizer = Extractive(ExtractiveConfig {
            max_items: 1,
            ..ExtractiveConfig::default()
        });
        let summary = summarizer.summarize_units(units, 1000);
        assert!(
            summary.text.contains("errors: TraceBack at step 30;"),
            "{}",
            summary.text
        );
        // Read: the first units (files, commands and identifiers were still wanted) and the
        // one with the error word; not decoded: the others after the sections settled.
        assert!(results[30].text.is_decoded());
        assert!(!results[20].text.is_decoded());
        assert!(!results[39].text.is_decoded());
    }

    /// Over a history whose line-read sections never fill, only [`LINE_SCAN_BYTES`] of text
    /// is read line by line: a path past it is not listed and a plain unit past it is never
    /// decoded, while an error line past it still is.
    #[test]
    fn lines_are_read_for_paths_and_identifiers_only_up_to_the_budget() {
        let plain = "plain words only here, nothing to list\n".repeat(100_000 / 40);
        let outputs: Vec<String> = (0..14)
            .map(|i| match i {
                12 => "see src/late/file.rs\nerror: late failure".to_owned(),
                _ => plain.clone(),
            })
            .map(|output| serde_json::to_string(&output).unwrap_or_default())
            .collect();
        let conversation = decoded_tool_session(&outputs);
        let units = &conversation.messages;
        let results = tool_results(&conversation);
        assert!(results.iter().take(12).map(|u| u.text.len()).sum::<usize>() > LINE_SCAN_BYTES);
        let summary = Extractive::default().summarize_units(units, 1500);
        assert!(
            summary.text.contains("errors: error: late failure;"),
            "{}",
            summary.text
        );
        assert!(!summary.text.contains("src/late"), "{}", summary.text);
        // Read line by line: the units up to the budget; past it only the one with an error
        // word is decoded.
        assert!(results[0].text.is_decoded());
        assert!(results[12].text.is_decoded());
        assert!(!results[13].text.is_decoded());
        // Within the budget the same path is listed.
        let early = Extractive::default().summarize_units(&units[10..], 1500);
        assert!(
            early.text.contains("files: src/late/file.rs;"),
            "{}",
            early.text
        );
    }

    /// Once one section is full the others still fill, in first-seen order: the scan only
    /// skips work for sections that are full.
    #[test]
    fn full_sections_stop_while_the_others_keep_filling() {
        let summarizer = Extractive(ExtractiveConfig {
            max_items: 2,
            ..ExtractiveConfig::default()
        });
        let units = [
            text("src/a/one.rs src/a/two.rs src/a/three.rs"),
            text("error: first_fail\nerror: second_fail\nerror: third_fail"),
            text("src/a/four.rs then alpha_ident() and beta::gamma and delta_ident"),
            text("$ cargo test\n$ cargo build\n$ cargo run"),
        ];
        let summary = summarizer.summarize_units(&units, 1000);
        let section = |label: &str| {
            summary
                .text
                .lines()
                .find(|l| l.starts_with(label))
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(section("files:"), "files: src/a/one.rs; src/a/two.rs;");
        assert_eq!(
            section("errors:"),
            "errors: error: first_fail; error: second_fail;"
        );
        assert_eq!(
            section("identifiers:"),
            "identifiers: first_fail; second_fail;"
        );
        assert_eq!(section("commands:"), "commands: cargo test; cargo build;");
    }

    /// Once what is collected fills the summary, the rest of the range is not read: a
    /// history whose first units fill every section that can show is summarized from those
    /// units, and what comes later cannot change the summary.
    #[test]
    fn the_scan_stops_once_nothing_more_can_show() {
        let summarizer = Extractive::default();
        let mut units: Vec<Message> = (0..12)
            .map(|i| {
                text(&format!(
                    "$ cargo test --package crate_{i} --features long,list,of,features,to,fill\nsee src/mod{i}/file{i}.rs"
                ))
            })
            .collect();
        let head = units.len();
        let tail = |word: &str| -> Vec<Message> {
            (0..500)
                .map(|i| {
                    text(&format!(
                        "error: {word}_{i} failed in src/{word}/late{i}.rs"
                    ))
                })
                .collect()
        };
        units.extend(tail("first"));
        let limit = 400;
        let opening = "(extractive summary of 512 messages)".len();
        let (_, read) = summarizer.collect(&units, limit, opening);
        assert!(read <= head, "read {read} units of {}", units.len());
        let summary = summarizer.summarize_units(&units, limit);
        units.truncate(head);
        units.extend(tail("other"));
        assert_eq!(summarizer.summarize_units(&units, limit), summary);
        assert!(
            summary.text.contains("files: src/mod0/file0.rs;"),
            "{}",
            summary.text
        );
        // With room to show it, the same tail is read and its errors are listed.
        let roomy = summarizer.summarize_units(&units, 1500);
        assert!(
            roomy.text.contains("errors: error: other_0"),
            "{}",
            roomy.text
        );
    }

    /// A line is skipped for identifiers only when none of its tokens is one.
    #[test]
    fn lines_without_an_identifier_mark_are_skipped_only_when_none_is_there() {
        let lines = [
            "Build FAILED in src/a.rs",
            "all good, 12 passed",
            "snake_case and CamelCase and a::b and call()",
            "plain words only here",
            "Ünïcode Wörds",
        ];
        for line in lines {
            let any_identifier = line.split_whitespace().any(|raw| is_identifier(clean(raw)));
            assert!(
                may_hold_identifier(line) || !any_identifier,
                "{line}: skipped a line with an identifier"
            );
        }
        assert!(!may_hold_identifier("plain words only here (ok)"));
        assert!(may_hold_identifier("a_b"));
        // The word search ignores case on ASCII and on other text alike.
        let mut lowered = Lowered::default();
        assert!(lowered.mentions("Build FAILED", &ERROR_WORDS));
        assert!(lowered.mentions("ÉCHEC: Fatal", &ERROR_WORDS));
        assert!(!lowered.mentions("all good", &ERROR_WORDS));
        // The buffer holds only the text searched last.
        assert!(!lowered.mentions("ok", &ERROR_WORDS));
    }

    // acp §26 #120
    #[test]
    fn inline_and_structured_reasoning_stay_out_of_the_summary() {
        let assistant = |t: &str, kind: MessageKind| {
            let mut m = text(t);
            m.role = Role::Assistant;
            m.kind = kind;
            m
        };
        let units = [
            text("Why does the build fail?"),
            assistant(
                "<think>\nMaybe src/secret/hunch.rs has an error; check hidden_guess_fn.\n</think>\n\nThe failure is in src/build/main.rs: missing_symbol_x.",
                MessageKind::Text,
            ),
            assistant(
                "error in src/reasoned/only.rs via reasoning_only_fn",
                MessageKind::Reasoning,
            ),
            assistant("<think>\nonly_thought_fn\n</think>", MessageKind::Text),
        ];
        let summary = Extractive::default().summarize_units(&units, 1000);
        for hidden in [
            "hunch.rs",
            "hidden_guess_fn",
            "think",
            "reasoned/only.rs",
            "reasoning_only_fn",
            "only_thought_fn",
        ] {
            assert!(
                !summary.text.contains(hidden),
                "{hidden:?} in {}",
                summary.text
            );
        }
        for shown in ["src/build/main.rs", "missing_symbol_x"] {
            assert!(
                summary.text.contains(shown),
                "{shown:?} missing: {}",
                summary.text
            );
        }
        // The topic comes from the answer, never from the reasoning before it.
        let thinking_first = [assistant(
            "<think>\nponder deeply\n</think>\nShip it now.",
            MessageKind::Text,
        )];
        let topic = Extractive::default()
            .summarize_units(&thinking_first, 1000)
            .topic;
        assert_eq!(topic.as_deref(), Some("Ship it now."));
    }
}
