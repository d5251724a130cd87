#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The agent CLIs from npm, in print mode, through the proxy to the scripted mock: Claude
//! Code (`claude -p`, Anthropic), Codex CLI (`codex exec` with a custom provider, OpenAI
//! Responses; and on its built-in provider, which asks for a WebSocket first) and Gemini CLI (`gemini -p`, Gemini). Each runs a multi-step session: the
//! mock's `cli` script calls the CLI's own shell tool six times (only a CLI that ran the
//! command can move on), calls the proxy's `compress` once a range is offered, then
//! answers with a fixed text. Each CLI must exit 0 printing exactly that text after exactly
//! one round per step plus the re-asked and the final one (a CLI that could not read an
//! answer sends its turn again), the fold must have happened, every forwarded request of
//! the session must still carry all of the CLI's own system prompt (system and `system`
//! messages / developer items / systemInstruction) before and after the fold, and side
//! requests that ask for JSON must reach the provider without the proxy's tools.
//!
//! The CLIs are installed by `scripts/test` (pinned in `proxy/tests/agents/package.json`)
//! and found through `FOLDWIRE_AGENT_CLIS` (their `node_modules/.bin`). Without it the
//! tests say they did not run, and fail under CI. Every CLI runs with a temporary HOME and
//! work dir, a clean environment and its telemetry, update and plugin look-ups off, so it
//! reaches nothing but the proxy on loopback.
//!
//! To look closer: `FOLDWIRE_AGENT_CLIS_DUMP=DIR` keeps every body the mock received, and
//! `FOLDWIRE_AGENT_CLIS_DIRECT=1` points the CLIs at the mock itself (what a CLI sends,
//! before the proxy; the checks then fail, as nothing compresses).

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use foldwire_core::Wire;
use foldwire_proxy::serve::tools::{self, SYSTEM_NOTE};
use serde_json::{Value, json};
use support::*;

/// Longest a CLI may take for its whole session.
const CLI_TIMEOUT: Duration = Duration::from_secs(120);
/// The proxy's window: small enough that the compress note lists ranges for a session of
/// a few steps, big enough for each CLI's system prompt and tools.
const WINDOW: u64 = 64_000;
/// The task each CLI is given.
const PROMPT: &str = "Run the six numbered steps with your shell tool, then report.";

/// The directory of the installed CLIs' executables, or `None` (said why) when the tests
/// should not run here.
fn clis_dir() -> Option<PathBuf> {
    match std::env::var_os("FOLDWIRE_AGENT_CLIS") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if std::env::var_os("CI").is_some() => panic!(
            "FOLDWIRE_AGENT_CLIS is not set under CI: scripts/test installs the agent CLIs \
             (proxy/tests/agents) and exports it"
        ),
        None => {
            eprintln!(
                "agent CLI test not run: set FOLDWIRE_AGENT_CLIS to the node_modules/.bin of \
                 proxy/tests/agents (scripts/test installs them)"
            );
            None
        }
    }
}

/// One CLI's invocation.
struct Invocation {
    program: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
}

/// Claude Code in print mode; its Bash tool allowed by `--allowedTools` (it refuses
/// `--dangerously-skip-permissions` as root, as CI runs); no telemetry, updates, error
/// reports or marketplace.
fn claude(proxy: &str) -> Invocation {
    Invocation {
        program: "claude",
        args: vec![
            "-p".into(),
            PROMPT.into(),
            "--allowedTools".into(),
            "Bash".into(),
            "--output-format".into(),
            "text".into(),
        ],
        env: vec![
            ("ANTHROPIC_BASE_URL", format!("http://{proxy}")),
            ("ANTHROPIC_API_KEY", "sk-ant-test".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            (
                "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL",
                "1".into(),
            ),
            ("DISABLE_TELEMETRY", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_ERROR_REPORTING", "1".into()),
        ],
    }
}

/// What every Codex run here adds to its `config.toml`: without the `[features]` lines it
/// looks up github.com, api.github.com and chatgpt.com at start (plugin marketplace,
/// remote models).
const CODEX_QUIET: &str = r#"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
plugin_discovery_prefetch = false
remote_models = false
"#;

/// Codex CLI's `exec` with `provider` (the top of its `config.toml`), the key in `key_env`,
/// `prompt`, its sandbox and approvals off (it runs in a temporary HOME and work dir).
fn codex_with(
    home: &Path,
    work: &Path,
    provider: &str,
    key_env: &'static str,
    prompt: &str,
) -> Invocation {
    let dir = home.join(".codex");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), format!("{provider}{CODEX_QUIET}")).unwrap();
    Invocation {
        program: "codex",
        args: vec![
            "exec".into(),
            "--skip-git-repo-check".into(),
            "--dangerously-bypass-approvals-and-sandbox".into(),
            "--color".into(),
            "never".into(),
            "-C".into(),
            work.display().to_string(),
            prompt.into(),
        ],
        env: vec![
            ("CODEX_HOME", dir.display().to_string()),
            (key_env, "sk-test".into()),
        ],
    }
}

/// Codex CLI's `exec` against a custom Responses provider (set in `config.toml`).
fn codex(home: &Path, work: &Path, proxy: &str) -> Invocation {
    let provider = format!(
        r#"model = "gpt-5-codex"
model_provider = "foldwire"

[model_providers.foldwire]
name = "foldwire"
base_url = "http://{proxy}/v1"
env_key = "FOLDWIRE_TEST_KEY"
wire_api = "responses"
"#
    );
    codex_with(home, work, &provider, "FOLDWIRE_TEST_KEY", PROMPT)
}

/// Gemini CLI in print mode with an API key, its shell tool allowed by `--yolo`.
fn gemini(home: &Path, proxy: &str) -> Invocation {
    let dir = home.join(".gemini");
    std::fs::create_dir_all(&dir).unwrap();
    let settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
    });
    std::fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
    Invocation {
        program: "gemini",
        args: vec!["-p".into(), PROMPT.into(), "--yolo".into()],
        env: vec![
            ("GOOGLE_GEMINI_BASE_URL", format!("http://{proxy}")),
            ("GEMINI_API_KEY", "test-key".into()),
            ("GEMINI_CLI_TRUST_WORKSPACE", "true".into()),
            ("GEMINI_CLI_NO_RELAUNCH", "true".into()),
        ],
    }
}

/// What a finished CLI run left.
struct Run {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs the CLI to its end (killed after [`CLI_TIMEOUT`]); its output goes to files so
/// nothing blocks on a full pipe while the test polls.
async fn spawn(dir: &Path, inv: Invocation, home: &Path, work: &Path) -> Run {
    let out_path = home.join("cli.stdout");
    let err_path = home.join("cli.stderr");
    let mut child = std::process::Command::new(dir.join(inv.program))
        .args(&inv.args)
        .current_dir(work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TERM", "dumb")
        .env("NO_COLOR", "1")
        .envs(inv.env)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", inv.program));
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > CLI_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not finish within {CLI_TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}",
                inv.program,
                std::fs::read_to_string(&out_path).unwrap_or_default(),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Run {
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// The client's own system text of a forwarded body, the proxy's note taken out: the
/// system blocks, the instructions and every developer/system item, the systemInstruction.
fn client_system(wire: Wire, body: &Value) -> Vec<String> {
    let texts = |v: &Value| -> Vec<String> {
        match v {
            Value::String(s) => vec![s.clone()],
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    };
    let mut out = match wire {
        Wire::Anthropic => {
            // Claude Code also sends `system` messages inside `messages`.
            let mut out = texts(&body["system"]);
            for message in body["messages"].as_array().into_iter().flatten() {
                if message["role"] == "system" {
                    out.extend(texts(&message["content"]));
                }
            }
            out
        }
        Wire::OpenAiResponses => {
            let mut out = texts(&body["instructions"]);
            for item in body["input"].as_array().into_iter().flatten() {
                if matches!(item["role"].as_str(), Some("developer" | "system")) {
                    out.extend(texts(&item["content"]));
                }
            }
            out
        }
        Wire::Gemini => {
            let slot = if body["systemInstruction"].is_null() {
                &body["system_instruction"]
            } else {
                &body["systemInstruction"]
            };
            texts(&slot["parts"])
        }
        Wire::OpenAiChat => unreachable!("no agent CLI here speaks Chat"),
    };
    for text in &mut out {
        *text = text
            .replace(&format!("\n\n{SYSTEM_NOTE}"), "")
            .replace(SYSTEM_NOTE, "");
    }
    out.retain(|t| !t.is_empty());
    out
}

/// Runs one CLI's session and checks it.
async fn session(name: &str, wire: Wire, make: impl FnOnce(&Path, &Path, &str) -> Invocation) {
    let Some(dir) = clis_dir() else { return };
    let (upstream, mock) = start_mock_scripted("cli").await;
    let state = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, state.path(), |c| c.window = WINDOW).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // FOLDWIRE_AGENT_CLIS_DIRECT=1 points the CLI at the mock itself, to tell what the CLI
    // sends from what the proxy forwards (the checks below then fail: nothing compresses).
    let base = match std::env::var_os("FOLDWIRE_AGENT_CLIS_DIRECT") {
        Some(_) => upstream.to_string(),
        None => proxy.to_string(),
    };
    let inv = make(home.path(), work.path(), &base);
    let run = spawn(&dir, inv, home.path(), work.path()).await;

    let received = mock.received.lock().unwrap().clone();
    // To look at what the CLI sent: FOLDWIRE_AGENT_CLIS_DUMP=DIR keeps every forwarded body.
    if let Some(dump) = std::env::var_os("FOLDWIRE_AGENT_CLIS_DUMP") {
        let dump = PathBuf::from(dump).join(name);
        std::fs::create_dir_all(&dump).unwrap();
        for (i, r) in received.iter().enumerate() {
            std::fs::write(dump.join(format!("{i:02}.json")), &r.body).unwrap();
        }
    }
    let bodies: Vec<Value> = received
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap_or_default())
        .collect();
    let trace: Vec<String> = received
        .iter()
        .zip(&bodies)
        .map(|(r, body)| {
            let text = body.to_string();
            let step = (1..=CLI_STEPS)
                .rev()
                .find(|k| text.contains(&format!("fw-step-{k}-42")))
                .unwrap_or(0);
            let shell = cli_shell(body).map(|(n, _)| n).unwrap_or_default();
            format!(
                "{} ({} bytes, shell tool {shell:?}, steps done {step}, fold result {})",
                r.path,
                r.body.len(),
                text.contains("folded into b")
            )
        })
        .collect();
    let problems = check(wire, &run, &bodies, &received);
    assert!(
        problems.is_empty(),
        "{name}:\n- {}\n\nexit {:?}\nstdout:\n{}\nstderr:\n{}\nupstream requests:\n{}",
        problems.join("\n- "),
        run.status,
        run.stdout,
        run.stderr,
        trace.join("\n")
    );
    println!(
        "{name}: {} rounds passed ({} upstream requests): exit 0, exact final text, a fold, the system prompt kept on every round",
        bodies.iter().filter(|b| cli_shell(b).is_some()).count(),
        received.len()
    );
}

/// Everything wrong with a finished session.
fn check(wire: Wire, run: &Run, bodies: &[Value], received: &[Received]) -> Vec<String> {
    let mut problems = Vec::new();
    if !run.status.success() {
        problems.push(format!("exited with {:?}", run.status));
    }
    // A CLI that prints every text of its session (Gemini CLI) also prints the words the
    // model wrote before its compress call: the proxy hides the call, not the words.
    let printed = run.stdout.trim();
    let printed = printed.strip_prefix(CLI_BEFORE_COMPRESS).unwrap_or(printed);
    if printed.trim() != CLI_FINAL {
        problems.push(format!(
            "printed {:?}, not {CLI_FINAL:?}",
            run.stdout.trim()
        ));
    }
    // The session's rounds: the requests that offer the CLI's shell tool.
    let rounds: Vec<&Value> = bodies.iter().filter(|b| cli_shell(b).is_some()).collect();
    // Claude Code offers its ToolSearch; the script loads a deferred tool with it once.
    let searches = usize::from(wire == Wire::Anthropic);
    // Every step, the tool search, the round re-asked after the compress call, the final
    // answer: a round more means the CLI sent a turn again (it could not read an answer of
    // the proxy's).
    if rounds.len() != CLI_STEPS + searches + 2 {
        problems.push(format!(
            "{} rounds, not {} (one per step, {searches} tool search, the one re-asked after the compress call, the final answer)",
            rounds.len(),
            CLI_STEPS + searches + 2
        ));
    }
    problems.extend(loaded_tools_stay_loaded(&rounds, searches));
    let folded = rounds
        .iter()
        .position(|b| b.to_string().contains("folded into b"))
        .map_or_else(|| "none".to_owned(), |i| i.to_string());
    if folded == "none" {
        problems.push("no round carries a successful fold".into());
    }
    let summary = "Early chatter about the setup";
    if !rounds
        .last()
        .is_some_and(|b| b.to_string().contains(summary))
    {
        problems.push("the last round does not carry the fold's summary".into());
    }
    // The CLI may add to its system prompt (Claude Code adds `system` messages as the
    // session goes on); nothing it sent first may go.
    let system = rounds
        .first()
        .map(|b| client_system(wire, b))
        .unwrap_or_default();
    if system.is_empty() {
        problems.push("no system prompt in the first round".into());
    }
    for (i, body) in rounds.iter().enumerate() {
        let now = client_system(wire, body);
        let lost: Vec<String> = system
            .iter()
            .filter(|t| !now.contains(t))
            .map(|t| t.chars().take(80).collect())
            .collect();
        if !lost.is_empty() {
            problems.push(format!(
                "round {i} (the fold's result came in round {folded}) lost part of the CLI's system prompt: {lost:?}"
            ));
        }
    }
    // Side requests that constrain their output (Gemini CLI's routing asks for JSON) get
    // none of the proxy's tools: a provider refuses function calling with JSON mode.
    for (body, r) in bodies.iter().zip(received) {
        let constrained = ["responseMimeType", "responseJsonSchema", "responseSchema"]
            .iter()
            .any(|k| !body["generationConfig"][k].is_null());
        let tools_text = body["tools"].to_string();
        let injected: Vec<&str> = tools::NAMES
            .iter()
            .copied()
            .filter(|n| tools_text.contains(&format!("\"name\":\"{n}\"")))
            .collect();
        if constrained && !injected.is_empty() {
            problems.push(format!(
                "the proxy added {injected:?} to a side request that asks for JSON ({})",
                r.path
            ));
        }
    }
    problems
}

/// What is wrong with the deferred tool the script loaded: the CLI's answer to its tool
/// search (a `tool_reference` to [`CLI_LOADED_TOOL`]) must reach the provider in every round
/// after it, folds or not, or the model loses the tool's schema while the CLI believes it
/// loaded.
fn loaded_tools_stay_loaded(rounds: &[&Value], searches: usize) -> Vec<String> {
    let loads = |b: &Value| {
        let blocks = b["messages"].as_array().into_iter().flatten();
        let blocks = blocks.flat_map(|m| m["content"].as_array().into_iter().flatten());
        let results = blocks.filter(|c| c["type"] == "tool_result");
        let mut inner = results.flat_map(|r| r["content"].as_array().into_iter().flatten());
        inner.any(|c| c["type"] == "tool_reference" && c["tool_name"] == CLI_LOADED_TOOL)
    };
    let Some(first) = rounds.iter().position(|b| loads(b)) else {
        return if searches > 0 {
            vec![format!(
                "no round carries the CLI's tool_reference to {CLI_LOADED_TOOL}"
            )]
        } else {
            Vec::new()
        };
    };
    rounds
        .iter()
        .enumerate()
        .skip(first)
        .filter(|(_, b)| !loads(b))
        .map(|(i, _)| {
            format!("round {i} lost the tool_reference to {CLI_LOADED_TOOL} loaded in round {first}: a fold took it")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_print_mode_compresses_and_keeps_its_system_prompt() {
    session("claude", Wire::Anthropic, |_, _, proxy| claude(proxy)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_compresses_and_keeps_its_system_prompt() {
    session("codex", Wire::OpenAiResponses, codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_print_mode_compresses_and_keeps_its_system_prompt() {
    session("gemini", Wire::Gemini, |home, _, proxy| gemini(home, proxy)).await;
}

/// A finished run of the real Codex on its built-in provider, pointed at foldwire with
/// `openai_base_url` as the README shows.
struct BuiltIn {
    /// The mock provider behind the proxy.
    mock: Mock,
    /// The proxy's address.
    proxy: std::net::SocketAddr,
    /// What the run left.
    run: Run,
    /// Its stdout and stderr, for failure messages.
    output: String,
    /// The proxy's state and Codex's HOME and work dir, kept while the test reads them.
    _dirs: [tempfile::TempDir; 3],
}

/// Runs Codex on its built-in provider with `prompt`, the mock's `script` behind a proxy
/// laid out for `window`.
async fn codex_built_in(dir: &Path, script: &str, window: u64, prompt: &str) -> BuiltIn {
    let (upstream, mock) = start_mock_scripted(script).await;
    let state = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, state.path(), |c| c.window = window).await;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let provider = format!("openai_base_url = \"http://{proxy}/v1\"\n");
    let inv = codex_with(
        home.path(),
        work.path(),
        &provider,
        "OPENAI_API_KEY",
        prompt,
    );
    let run = spawn(dir, inv, home.path(), work.path()).await;
    let output = format!("{}\n{}", run.stdout, run.stderr);
    BuiltIn {
        mock,
        proxy,
        run,
        output,
        _dirs: [state, home, work],
    }
}

/// Codex on its built-in OpenAI provider, pointed at foldwire with `openai_base_url` as the
/// README shows, asks for the Responses API over a WebSocket first. The proxy answers 426,
/// on which Codex takes HTTP for the session at once, and the turn goes through foldwire.
/// Before, the upgrade was forwarded without its headers and refused upstream: Codex tried
/// five more times with backoff (about six seconds, each printed as an error) before it
/// fell back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_on_its_built_in_provider_takes_http_at_once() {
    let Some(dir) = clis_dir() else { return };
    let BuiltIn {
        mock,
        proxy,
        run,
        output,
        ..
    } = codex_built_in(&dir, "", WINDOW, "Say hello.").await;
    assert!(run.status.success(), "{output}");
    assert_eq!(run.stdout.trim(), "ok", "{output}");
    for retry in ["Reconnecting", "Falling back from WebSockets"] {
        assert!(
            !output.contains(retry),
            "Codex retried the WebSocket: {output}"
        );
    }
    let through: Vec<Received> = mock
        .received
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.path.ends_with("/responses"))
        .cloned()
        .collect();
    assert!(
        !through.is_empty() && through.iter().all(|r| r.method == "POST"),
        "every request reached the provider as a POST"
    );
    // Each was a turn of foldwire's pipeline. (Codex's default requests declare their tools
    // in an input item, so the proxy adds none of its own.)
    assert_eq!(turns_made(proxy).await, through.len() as u64);
    assert!(
        through
            .iter()
            .all(|r| String::from_utf8_lossy(&r.body).contains("\"type\":\"additional_tools\"")),
        "Codex's default requests declare their tools in an input item"
    );
    let metrics = metrics(proxy).await;
    assert!(
        metrics.contains("foldwire_websocket_refused_total 1\n"),
        "{metrics}"
    );
}

/// Codex on its built-in provider, its default model: "Responses lite" requests, whose
/// tools are declared in an `additional_tools` input item and run through its `exec` tool
/// (JavaScript that calls the nested `exec_command`). The mock's model runs eight steps
/// that way, each printing enough that foldwire folds the session at its window. The real
/// Codex must run every step and finish, and every request must still carry its tools
/// item, first and unchanged, while the folds took earlier steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_by_default_keeps_its_tools_through_folds() {
    let Some(dir) = clis_dir() else { return };
    let BuiltIn {
        mock, run, output, ..
    } = codex_built_in(
        &dir,
        "cli-lite",
        40_000,
        "Run the numbered steps with exec, then report.",
    )
    .await;
    assert!(run.status.success(), "{output}");
    assert!(run.stdout.contains(LITE_FINAL), "{output}");
    assert!(mock.refused.lock().unwrap().is_empty(), "{output}");
    let bodies: Vec<Value> = mock
        .received
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/responses"))
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let declared = bodies[0]["input"][0].clone();
    assert_eq!(declared["type"], "additional_tools", "{}", bodies[0]);
    for (i, body) in bodies.iter().enumerate() {
        assert_eq!(body["input"][0], declared, "request {i} lost Codex's tools");
        assert!(
            body.get("tools").is_none(),
            "request {i} got the proxy's tools"
        );
    }
    let text: Vec<String> = bodies.iter().map(Value::to_string).collect();
    for k in 1..=LITE_STEPS {
        assert!(
            text.iter().any(|t| t.contains(&lite_done(k))),
            "step {k} never ran: {output}"
        );
    }
    assert!(
        text.iter().any(|t| t.contains("[foldwire b")),
        "no fold happened in {} requests",
        bodies.len()
    );
    // The first step stays in the head; a later one left the last request for a summary.
    let last = text.last().unwrap();
    assert!(
        (2..LITE_STEPS).any(|k| !last.contains(&lite_done(k))),
        "no step's output was folded"
    );
    // A summary folded again is named by its topic, not by nested headers.
    let headers: Vec<&str> = last
        .split("[foldwire b")
        .skip(1)
        .map(|h| h.split("\\n").next().unwrap_or_default())
        .collect();
    assert!(
        !last.contains("· [foldwire b"),
        "summary headers: {headers:?}"
    );
}
