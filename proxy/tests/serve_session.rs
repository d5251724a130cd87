#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Sessions through a running `foldwire serve`: pipeline swaps that must validate, topic
//! resets, and which session a request belongs to.

mod support;

use serde_json::{Value, json};
use support::{start_mock, start_proxy_with};

/// The default order with `fold` given params, or some stages left out.
fn default_stages(fold: Value, leave_out: &[&str]) -> Vec<Value> {
    foldwire_core::pipeline::DEFAULT_ORDER
        .iter()
        .filter(|s| !leave_out.contains(s))
        .map(|s| {
            if *s == "fold" {
                json!({"name": "fold", "params": fold})
            } else {
                json!(s)
            }
        })
        .collect()
}

#[tokio::test]
async fn put_pipeline_refuses_a_misspelled_strategy_and_unsafe_fold() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::new();
    let put = |spec: Value| {
        client
            .put(format!("http://{proxy}/admin/pipeline"))
            .body(spec.to_string())
            .send()
    };

    let typo = json!({"name": "typo", "stages": default_stages(json!({"policy": "fold.oldets_first"}), &[])});
    let resp = put(typo).await.unwrap();
    assert_eq!(resp.status(), 400);
    let err = resp.json::<Value>().await.unwrap()["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        err.contains("did you mean \"fold.oldest_first\"?") && err.contains("param policy"),
        "{err}"
    );

    let summarizer = json!({"name": "s", "stages": default_stages(json!({"summarizer": "summariser.extractive"}), &[])});
    let resp = put(summarizer).await.unwrap();
    assert_eq!(resp.status(), 400);
    let err = resp.text().await.unwrap();
    assert!(err.contains("did you mean"), "{err}");

    let unsafe_fold = json!({"name": "nomedia", "stages": default_stages(Value::Null, &["media.classify", "archive.spill"])});
    let resp = put(unsafe_fold).await.unwrap();
    assert_eq!(resp.status(), 400);
    let err = resp.text().await.unwrap();
    assert!(err.contains("fold requires media_classified"), "{err}");

    // Nothing was swapped in.
    let current: Value = client
        .get(format!("http://{proxy}/admin/pipeline"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(current["name"], "default");
}

fn foldwire(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_foldwire"))
        .args(args)
        .env_remove("FOLDWIRE_STATE")
        .output()
        .unwrap()
}

fn cli_json(args: &[&str]) -> Value {
    let out = foldwire(args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

#[tokio::test]
async fn session_commands_work_on_a_session_made_by_serve() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap().to_owned();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let body = support::history_body(foldwire_core::Wire::Anthropic, 20, 2000, false);
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}/v1/messages"))
        .header("x-foldwire-session", "served")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());

    // The request is recorded for the session commands off the request's path: the answer
    // can arrive before the write lands.
    let mut inspected = cli_json(&["inspect", "--session", "served", "--state", &st]);
    for _ in 0..50 {
        if inspected["refs"].as_array().is_some_and(|r| r.len() == 41) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        inspected = cli_json(&["inspect", "--session", "served", "--state", &st]);
    }
    let refs = inspected["refs"].as_array().unwrap();
    assert_eq!(refs.len(), 41, "{inspected}");
    assert_eq!(refs[0]["role"], "user");
    assert!(
        refs[1]["preview"]
            .as_str()
            .unwrap()
            .starts_with("assistant note 0"),
        "{}",
        refs[1]
    );
    let range = &inspected["ranges"][0];
    let (from, to) = (
        range["start"].as_str().unwrap(),
        range["end"].as_str().unwrap(),
    );

    let folded = cli_json(&[
        "fold",
        "--session",
        "served",
        "--state",
        &st,
        "--from",
        from,
        "--to",
        to,
        "--summary",
        "Old lorem notes about the quokka setup.",
        "--topic",
        "quokka",
    ]);
    assert_eq!(folded["blocks_created"][0], "b1", "{folded}");

    let hits = cli_json(&["search", "--session", "served", "--state", &st, "quokka"]);
    assert_eq!(hits[0]["block"], "b1", "{hits}");

    let out = foldwire(&[
        "restore",
        "--session",
        "served",
        "--state",
        &st,
        "--block",
        "b1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restored = String::from_utf8(out.stdout).unwrap();
    let sent = body.to_string();
    assert!(!restored.is_empty());
    for line in restored.lines() {
        assert!(sent.contains(line), "restored bytes not sent: {line}");
    }

    let reset = cli_json(&[
        "reset",
        "--session",
        "served",
        "--state",
        &st,
        "--transition",
        "Next: the billing bug.",
    ]);
    assert_eq!(reset["reset_generation"], 1, "{reset}");
}

/// Appends a message in the wire's shape.
fn push_message(wire: foldwire_core::Wire, body: &mut Value, role: &str, text: &str) {
    use foldwire_core::Wire;
    match wire {
        Wire::Anthropic | Wire::OpenAiChat => body["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": role, "content": text})),
        Wire::OpenAiResponses => body["input"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": role, "content": text})),
        Wire::Gemini => body["contents"].as_array_mut().unwrap().push(json!({
            "role": if role == "assistant" { "model" } else { "user" },
            "parts": [{"text": text}]
        })),
    }
}

async fn send(proxy: std::net::SocketAddr, wire: foldwire_core::Wire, session: &str, body: &Value) {
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}{}", support::path_of(wire, false)))
        .header("x-foldwire-session", session)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

/// Folds `m00002..m00006` of a session offline; the exit code and what it printed (stdout,
/// then stderr).
fn fold_early(session: &str, st: &str) -> (Option<i32>, String) {
    let out = foldwire(&[
        "fold",
        "--session",
        session,
        "--state",
        st,
        "--from",
        "m00002",
        "--to",
        "m00006",
        "--summary",
        "The opening notes of the old topic.",
    ]);
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Checks the forwarded request after a reset: the transition sits between the old history
/// and the new message, nothing of the old history is missing, and the old head, protected
/// before, now folds and restores exactly.
fn check_reset_turn(
    forwarded: &[u8],
    transition: &str,
    new_message: &str,
    old: &Value,
    session: &str,
    st: &str,
) {
    let sent = String::from_utf8_lossy(forwarded);
    let at = |needle: &str| {
        sent.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not forwarded: {sent}"))
    };
    assert!(at("Now please finish the task.") < at(transition), "{sent}");
    assert!(at(transition) < at(new_message), "{sent}");
    for i in 0..14 {
        at(&format!("user note {i}:"));
        at(&format!("assistant note {i}:"));
    }
    let (code, out) = fold_early(session, st);
    assert_eq!(code, Some(0), "{out}");
    let restored = foldwire(&[
        "restore",
        "--session",
        session,
        "--state",
        st,
        "--block",
        "b1",
    ]);
    assert!(restored.status.success());
    let restored = String::from_utf8(restored.stdout).unwrap();
    assert_eq!(restored.lines().count(), 5, "{restored}");
    let old = old.to_string();
    for line in restored.lines() {
        assert!(old.contains(line), "restored bytes not sent: {line}");
    }
}

#[tokio::test]
async fn admin_reset_starts_a_new_head_at_the_transition_on_two_wires() {
    use foldwire_core::Wire;
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap().to_owned();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::new();
    for (wire, session) in [(Wire::Anthropic, "reset-a"), (Wire::Gemini, "reset-g")] {
        let mut body = support::history_body(wire, 14, 1200, false);
        send(proxy, wire, session, &body).await;
        // The opening messages are the head: they do not fold.
        assert_eq!(fold_early(session, &st).0, Some(1), "{wire}");

        let url = format!("http://{proxy}/admin/sessions/{session}/reset");
        let empty = client.post(&url).body("  ").send().await.unwrap();
        assert_eq!(empty.status(), 400);
        let unknown = client
            .post(format!("http://{proxy}/admin/sessions/never-seen/reset"))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(unknown.status(), 404);
        let resp = client
            .post(&url)
            .body("We now work on the billing bug.")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let resp: Value = resp.json().await.unwrap();
        assert_eq!(resp["reset_generation"], 1, "{resp}");

        let old = body.clone();
        push_message(wire, &mut body, "assistant", "Finished.");
        push_message(wire, &mut body, "user", "What is wrong in billing.rs?");
        send(proxy, wire, session, &body).await;
        let forwarded = mock.bodies().last().unwrap().clone();
        check_reset_turn(
            &forwarded,
            "We now work on the billing bug.",
            "What is wrong in billing.rs?",
            &old,
            session,
            &st,
        );
    }
}

#[tokio::test]
async fn a_typed_newtopic_resets_once_when_enabled_on_two_wires() {
    use foldwire_core::Wire;
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap().to_owned();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.newtopic_command = true).await;
    let off_dir = tempfile::tempdir().unwrap();
    let off = start_proxy_with(upstream, off_dir.path(), |_| {}).await;
    let command = "/newtopic Billing: the invoice totals are off by one cent.";
    for (wire, session) in [
        (Wire::OpenAiChat, "topic-c"),
        (Wire::OpenAiResponses, "topic-r"),
    ] {
        let mut body = support::history_body(wire, 14, 1200, false);
        send(proxy, wire, session, &body).await;
        send(off, wire, session, &body).await;
        let old = body.clone();
        push_message(wire, &mut body, "assistant", "Finished.");
        push_message(wire, &mut body, "user", command);

        // Off by default: the message is only a message.
        send(off, wire, session, &body).await;
        let generation = |view: &Value| view["state"]["head"]["generation"].as_u64().unwrap_or(0);
        assert_eq!(generation(&support::admin(off, session).await), 0);

        send(proxy, wire, session, &body).await;
        let forwarded = mock.bodies().last().unwrap().clone();
        check_reset_turn(
            &forwarded,
            "Billing: the invoice totals are off by one cent.",
            command,
            &old,
            session,
            &st,
        );
        assert_eq!(generation(&support::admin(proxy, session).await), 1);
        // A retried request is not a second reset.
        send(proxy, wire, session, &body).await;
        assert_eq!(generation(&support::admin(proxy, session).await), 1);
    }
}

/// A request of a conversation after `turns` client turns: the shared opener, an
/// acknowledgement, the conversation's own question, then one exchange per later turn.
fn conversation(wire: foldwire_core::Wire, question: &str, turns: usize) -> Value {
    let mut body = support::history_body(wire, 0, 0, false);
    // history_body ends with one user message: make it the shared opener.
    let opener = "Today is Monday. My working directory is /work/app.";
    match wire {
        foldwire_core::Wire::Gemini => body["contents"][0]["parts"][0]["text"] = json!(opener),
        foldwire_core::Wire::OpenAiResponses => body["input"][0]["content"] = json!(opener),
        _ => {
            let last = body["messages"].as_array().unwrap().len() - 1;
            body["messages"][last]["content"] = json!(opener);
        }
    }
    push_message(
        wire,
        &mut body,
        "assistant",
        "Got it. Thanks for the context!",
    );
    push_message(wire, &mut body, "user", question);
    for t in 1..turns {
        push_message(
            wire,
            &mut body,
            "assistant",
            &format!("Answer {t} to {question}"),
        );
        push_message(
            wire,
            &mut body,
            "user",
            &format!("Follow-up {t} on {question}"),
        );
    }
    body
}

/// Sends a request with no session header.
async fn send_anonymous(proxy: std::net::SocketAddr, wire: foldwire_core::Wire, body: &Value) {
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}{}", support::path_of(wire, false)))
        .header("x-api-key", "sk-same-user")
        .header("x-goog-api-key", "sk-same-user")
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

/// Every session the proxy knows: id → (turns, refs).
async fn sessions(proxy: std::net::SocketAddr) -> std::collections::BTreeMap<String, (u64, u64)> {
    let list: Value = reqwest::get(format!("http://{proxy}/admin/sessions"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["session"].as_str().unwrap().to_owned(),
                (s["turns"].as_u64().unwrap(), s["refs"].as_u64().unwrap()),
            )
        })
        .collect()
}

#[tokio::test]
async fn conversations_that_open_alike_get_sessions_of_their_own() {
    use foldwire_core::Wire;
    for wire in [Wire::Anthropic, Wire::Gemini] {
        let (upstream, _mock) = start_mock().await;
        let dir = tempfile::tempdir().unwrap();
        let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
        for turns in 1..=3 {
            send_anonymous(
                proxy,
                wire,
                &conversation(wire, "Fix the login bug.", turns),
            )
            .await;
            send_anonymous(
                proxy,
                wire,
                &conversation(wire, "Write the release notes.", turns),
            )
            .await;
        }
        let seen = sessions(proxy).await;
        assert_eq!(seen.len(), 2, "{wire}: {seen:?}");
        // Each session holds its own conversation: three turns, refs for its own 7 units.
        for (id, (turns, refs)) in &seen {
            assert!(id.starts_with("fp-"), "{id}");
            assert_eq!((*turns, *refs), (3, 7), "{wire} {id}: {seen:?}");
        }
    }
}

// acp §26 #123: a sub-agent that opens exactly like its agent but runs under other
// instructions gets sessions of its own; the first instructions keep the fingerprint's id.
#[tokio::test]
async fn sub_agents_under_other_instructions_get_sessions_of_their_own() {
    use foldwire_core::Wire;
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let with_system = |system: &str, turns: usize| {
        let mut body = conversation(Wire::Anthropic, "Review the diff.", turns);
        body["system"] = json!(system);
        body
    };
    for turns in 1..=3 {
        send_anonymous(
            proxy,
            Wire::Anthropic,
            &with_system("You are the lead agent.", turns),
        )
        .await;
        send_anonymous(
            proxy,
            Wire::Anthropic,
            &with_system("You are a code-review sub-agent.", turns),
        )
        .await;
    }
    let seen = sessions(proxy).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    let lead = seen.keys().find(|id| !id.contains("-sub-")).unwrap();
    let sub = seen.keys().find(|id| id.contains("-sub-")).unwrap();
    assert!(
        sub.starts_with(lead.as_str()),
        "{sub} is {lead}'s namespace"
    );
    // Each holds its own three turns of the same seven units.
    for (id, (turns, refs)) in &seen {
        assert_eq!((*turns, *refs), (3, 7), "{id}: {seen:?}");
    }
}

#[tokio::test]
async fn a_continuing_conversation_keeps_its_session_and_a_rewound_one_forks() {
    use foldwire_core::Wire;
    let wire = Wire::Anthropic;
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    for turns in 1..=10 {
        send_anonymous(
            proxy,
            wire,
            &conversation(wire, "Refactor the parser.", turns),
        )
        .await;
    }
    let seen = sessions(proxy).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (original, &(turns, _)) = seen.iter().next().unwrap();
    assert_eq!(turns, 10);

    // The client rewinds to turn 4 and edits its last message.
    let mut rewound = conversation(wire, "Refactor the parser.", 4);
    let last = rewound["messages"].as_array().unwrap().len() - 1;
    rewound["messages"][last]["content"] = json!("Actually, rename the lexer instead.");
    send_anonymous(proxy, wire, &rewound).await;
    let seen = sessions(proxy).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[original].0, 10, "the original session took the rewind");
    let fork = seen.keys().find(|k| *k != original).unwrap().clone();
    assert_eq!(seen[&fork].0, 1);
    // The fork continues as its own session; the original goes on too.
    push_message(wire, &mut rewound, "assistant", "Renamed.");
    push_message(wire, &mut rewound, "user", "Now run the tests.");
    send_anonymous(proxy, wire, &rewound).await;
    send_anonymous(proxy, wire, &conversation(wire, "Refactor the parser.", 11)).await;
    let seen = sessions(proxy).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[&fork].0, 2);
    assert_eq!(seen[original].0, 11);
}

#[tokio::test]
async fn a_header_less_conversation_decodes_only_what_each_turn_added() {
    use foldwire_core::Wire;
    for wire in [Wire::Anthropic, Wire::OpenAiChat, Wire::Gemini] {
        let (upstream, _mock) = start_mock().await;
        let dir = tempfile::tempdir().unwrap();
        let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
        // Long enough that consecutive requests share more than a few kilobytes.
        let question = format!(
            "Port the parser. {}",
            "Keep the grammar as it is. ".repeat(300)
        );
        for turns in 1..=4 {
            send_anonymous(proxy, wire, &conversation(wire, &question, turns)).await;
        }
        let seen = sessions(proxy).await;
        assert_eq!(seen.len(), 1, "{wire}: {seen:?}");
        let (session, (turns, _)) = seen.iter().next().unwrap();
        assert_eq!(*turns, 4, "{wire}");
        let view = support::admin(proxy, session).await;
        let reused: Vec<(u64, u64)> = view["reports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let n = r["counters"]["wire.reused_entries"].as_u64().unwrap_or(0);
                (r["turn"].as_u64().unwrap(), n)
            })
            .collect();
        // The first turn decodes everything; each later one takes over every wire message
        // of the one before but its last (whose closing bytes moved as the array grew).
        for (turn, n) in &reused {
            let before = conversation(wire, &question, (*turn as usize).saturating_sub(1));
            let entries = match wire {
                Wire::Gemini => before["contents"].as_array().map_or(0, Vec::len),
                _ => before["messages"].as_array().map_or(0, Vec::len),
            };
            if *turn <= 1 {
                assert_eq!(*n, 0, "{wire} turn {turn}: {reused:?}");
            } else {
                assert!(
                    *n + 1 >= entries as u64 && *n > 0,
                    "{wire} turn {turn}: {reused:?}"
                );
            }
        }
        assert_eq!(reused.len(), 4, "{wire}: {reused:?}");
    }
}
