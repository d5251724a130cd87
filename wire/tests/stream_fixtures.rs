//! Every stream fixture: the normalized events carry the right content, no chunking changes
//! the result, and the raw bytes of the events give the stream back exactly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod stream_support;

use foldwire_core::Wire;
use foldwire_wire::stream::{Framing, LineEnding, StreamEvent, StreamFilter, Usage};
use stream_support::*;

/// Expected content of one fixture.
struct Expect {
    file: &'static str,
    text_chars: usize,
    text_start: &'static str,
    text_end: &'static str,
    reasoning_chars: usize,
    signatures: usize,
    /// (id, name, arguments as JSON)
    calls: &'static [(&'static str, &'static str, &'static str)],
    stops: &'static [&'static str],
    usage: (Option<u64>, Option<u64>),
    errors: &'static [&'static str],
}

const QUOTA: &str = "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.";

const EXPECTED: &[Expect] = &[
    Expect {
        file: "stream-after-tool-result.sse",
        text_chars: 277,
        text_start: "The version is **0.32a0**.",
        text_end: "plenty of room to grow!)",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[],
        stops: &["end_turn"],
        usage: (Some(707), Some(89)),
        errors: &[],
    },
    Expect {
        file: "stream-json-tool-input-json-delta.chunks.jsonl",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[(
            "toolu_01KFbKqPYSuAKujiL6mTfzYA",
            "json",
            r#"{"elements":[{"location":"San Francisco","temperature":58,"condition":"sunny"}]}"#,
        )],
        stops: &["tool_use"],
        usage: (Some(849), Some(47)),
        errors: &[],
    },
    Expect {
        file: "stream-server-tool-code-execution.sse",
        text_chars: 501,
        text_start: "I'll calculate that expression for you right away!Following",
        text_end: "Final Answer: **-428,330,955.97745**",
        reasoning_chars: 46,
        signatures: 1,
        calls: &[(
            "srvtoolu_01MwXaweAHve88x6s3Fc8x6Q",
            "bash_code_execution",
            r#"{"command":"echo \"65465-6544 * 65464-6+1.02255\" | bc -l"}"#,
        )],
        stops: &["end_turn"],
        usage: (Some(4714), Some(304)),
        errors: &[],
    },
    Expect {
        file: "stream-thinking-signature.sse",
        text_chars: 1021,
        text_start: "Here are the basic steps for safely crossing the street:",
        text_end: "safety over speed when crossing streets.",
        reasoning_chars: 202,
        signatures: 1,
        calls: &[],
        stops: &["end_turn"],
        usage: (Some(43), Some(282)),
        errors: &[],
    },
    Expect {
        file: "stream-thinking-then-tool-use.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 180,
        signatures: 1,
        calls: &[("toolu_01825dXWLSoJwCst1qTsiWdb", "fixed_version", "{}")],
        stops: &["tool_use"],
        usage: (Some(598), Some(92)),
        errors: &[],
    },
    Expect {
        file: "stream-tool-use-input-json-delta.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[(
            "toolu_01CzN6riCPqw4pVSuTd9Dwn7",
            "pelican_name_generator",
            "{}",
        )],
        stops: &["tool_use"],
        usage: (Some(543), Some(40)),
        errors: &[],
    },
    Expect {
        file: "stream-json-array-function-call.json",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 1,
        calls: &[("", "multiply", r#"{"y":3,"x":5}"#)],
        stops: &["STOP"],
        usage: (Some(60), Some(16)),
        errors: &[],
    },
    Expect {
        file: "stream-sse-function-call-thought-signature.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 1,
        calls: &[("", "get_country", "{}")],
        stops: &["STOP"],
        usage: (Some(29), Some(10)),
        errors: &[],
    },
    Expect {
        file: "stream-sse-thinking-thought-parts.sse",
        text_chars: 1938,
        text_start: "This is a great question! Safely crossing the street",
        text_end: "Always assume a driver might not see you.",
        reasoning_chars: 1575,
        signatures: 1,
        calls: &[],
        stops: &["STOP"],
        usage: (Some(34), Some(469)),
        errors: &[],
    },
    Expect {
        file: "stream-deepseek-reasoning-content.sse",
        text_chars: 40,
        text_start: "Hello there! 😊 How can I help you today?",
        text_end: "",
        reasoning_chars: 882,
        signatures: 0,
        calls: &[],
        stops: &["stop"],
        usage: (Some(6), Some(212)),
        errors: &[],
    },
    Expect {
        file: "stream-glm-text.sse",
        text_chars: 5,
        text_start: "Done.",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[],
        stops: &["stop"],
        usage: (Some(5360), Some(4)),
        errors: &[],
    },
    Expect {
        file: "stream-glm-tool-call-bash.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[(
            "call_09ba73f6ae4b4eab87dbda86",
            "bash",
            r#"{"command":"echo capture-test","description":"Print capture-test to stdout"}"#,
        )],
        stops: &["tool_calls"],
        usage: (Some(5330), Some(23)),
        errors: &[],
    },
    Expect {
        file: "stream-openrouter-error-midstream.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 42,
        signatures: 0,
        calls: &[],
        stops: &["length", "length"],
        usage: (Some(43), Some(10)),
        errors: &["Token limit reached"],
    },
    Expect {
        file: "stream-parallel-tool-calls-usage.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[
            ("call_3rqTYrA6H21AYUaRGP4F66oq", "get_country", "{}"),
            ("call_Xw9XMKBJU48kAAd78WgIswDx", "get_product_name", "{}"),
        ],
        stops: &["tool_calls"],
        usage: (Some(364), Some(40)),
        errors: &[],
    },
    Expect {
        file: "stream-tool-call-arguments-many-fragments.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[("call_4kc6691zCzjPnOuEtbEGUvz2", "final_result", "")],
        stops: &["tool_calls"],
        usage: (Some(448), Some(49)),
        errors: &[],
    },
    Expect {
        file: "stream-error-event.chunks.jsonl",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[],
        stops: &["failed"],
        usage: (None, None),
        errors: &[QUOTA, QUOTA],
    },
    Expect {
        file: "stream-function-call-arguments.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[(
            "call_kL0PCQV7M2WMoVX8V8OtYSAL",
            "get_capital",
            r#"{"country":"France"}"#,
        )],
        stops: &["completed"],
        usage: (Some(255), Some(16)),
        errors: &[],
    },
    Expect {
        file: "stream-reasoning-commentary-phase-function-call.sse",
        text_chars: 52,
        text_start: "I’ll check the capital lookup tool for “PotatoLand.”",
        text_end: "",
        reasoning_chars: 0,
        signatures: 1,
        calls: &[(
            "call_LabG58Uhrq9kZvR52BYKjToD",
            "get_capital",
            r#"{"country":"PotatoLand"}"#,
        )],
        stops: &["completed"],
        usage: (Some(63), Some(69)),
        errors: &[],
    },
    Expect {
        file: "stream-text-after-tool.sse",
        text_chars: 31,
        text_start: "The capital of France is Paris.",
        text_end: "",
        reasoning_chars: 0,
        signatures: 0,
        calls: &[],
        stops: &["completed"],
        usage: (Some(278), Some(9)),
        errors: &[],
    },
    Expect {
        file: "stream-usage-reasoning.sse",
        text_chars: 0,
        text_start: "",
        text_end: "",
        reasoning_chars: 0,
        signatures: 1,
        calls: &[(
            "call_CWXgs68YprAjp6t0371hiPOI",
            "final_result",
            r#"{"result":6666}"#,
        )],
        stops: &["completed"],
        usage: (Some(53), Some(469)),
        errors: &[],
    },
];

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn every_stream_fixture_has_the_expected_content() {
    let fixtures = stream_fixtures();
    if foldwire_core::fixtures::dir().is_none() {
        return;
    }
    assert_eq!(
        fixtures.len(),
        EXPECTED.len(),
        "a stream fixture has no expectation"
    );
    for (wire, path) in fixtures {
        let name = path.file_name().unwrap().to_str().unwrap();
        let expect = EXPECTED
            .iter()
            .find(|e| e.file == name)
            .unwrap_or_else(|| panic!("no expectation for {name}"));
        let events = parse_ok(wire, &stream_bytes(wire, &path));
        let s = summarize_stream(&events);
        assert_eq!(
            s.text.chars().count(),
            expect.text_chars,
            "{name}: text length"
        );
        assert!(
            s.text.starts_with(expect.text_start),
            "{name}: {:?}",
            s.text
        );
        assert!(s.text.ends_with(expect.text_end), "{name}: {:?}", s.text);
        assert_eq!(
            s.reasoning.chars().count(),
            expect.reasoning_chars,
            "{name}: reasoning"
        );
        assert_eq!(s.signatures.len(), expect.signatures, "{name}: signatures");
        assert!(s.signatures.iter().all(|sig| sig.len() > 20), "{name}");
        assert_eq!(s.stops, expect.stops, "{name}: stops");
        assert_eq!(s.errors, expect.errors, "{name}: errors");
        let usage = s.usage.clone().unwrap_or_default();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            expect.usage,
            "{name}: usage"
        );
        assert_eq!(
            s.calls.len(),
            expect.calls.len(),
            "{name}: calls {:?}",
            s.calls
        );
        for (call, (id, tool, args)) in s.calls.iter().zip(expect.calls) {
            assert_eq!(call.id, *id, "{name}");
            assert_eq!(call.name, *tool, "{name}");
            assert!(call.ended, "{name}: call {tool} never ended");
            let got = if call.args.is_empty() {
                "{}"
            } else {
                &call.args
            };
            let got = json(got);
            assert!(got.is_object(), "{name}: arguments are not an object");
            if !args.is_empty() {
                assert_eq!(got, json(args), "{name}: arguments of {tool}");
            }
        }
    }
}

#[test]
fn many_fragment_arguments_join_to_the_full_object() {
    let path = foldwire_core::fixtures::files("openai-chat", "stream-tool-call-arguments-many");
    let Some(path) = path.first() else { return };
    let events = parse_ok(Wire::OpenAiChat, &stream_bytes(Wire::OpenAiChat, path));
    let fragments = events
        .iter()
        .flat_map(|e| &e.events)
        .filter(|e| matches!(e, StreamEvent::ToolCallArgsDelta { .. }))
        .count();
    assert!(fragments > 30, "only {fragments} fragments");
    let s = summarize_stream(&events);
    let args = json(&s.calls[0].args);
    let answers = args["answers"].as_array().unwrap();
    assert_eq!(answers[0]["answer"], "Mexico City");
}

#[test]
fn usage_details_are_normalized_per_wire() {
    let cases: &[(Wire, &str, Usage)] = &[
        (
            Wire::OpenAiChat,
            "stream-glm-text.sse",
            Usage {
                input_tokens: Some(5360),
                output_tokens: Some(4),
                cache_read: Some(5312),
                cache_write: None,
                reasoning_tokens: Some(0),
                total_tokens: Some(5364),
            },
        ),
        (
            Wire::Anthropic,
            "stream-thinking-then-tool-use.sse",
            Usage {
                input_tokens: Some(598),
                output_tokens: Some(92),
                cache_read: Some(0),
                cache_write: Some(0),
                reasoning_tokens: Some(53),
                total_tokens: None,
            },
        ),
        (
            Wire::OpenAiResponses,
            "stream-usage-reasoning.sse",
            Usage {
                input_tokens: Some(53),
                output_tokens: Some(469),
                cache_read: Some(0),
                cache_write: None,
                reasoning_tokens: Some(448),
                total_tokens: Some(522),
            },
        ),
        // A capture that reports cache writes (none this time) beside cached tokens.
        (
            Wire::OpenAiResponses,
            "stream-reasoning-commentary-phase-function-call.sse",
            Usage {
                input_tokens: Some(63),
                output_tokens: Some(69),
                cache_read: Some(0),
                cache_write: Some(0),
                reasoning_tokens: Some(26),
                total_tokens: Some(132),
            },
        ),
        (
            Wire::Gemini,
            "stream-sse-thinking-thought-parts.sse",
            Usage {
                input_tokens: Some(34),
                output_tokens: Some(469),
                cache_read: None,
                cache_write: None,
                reasoning_tokens: Some(787),
                total_tokens: Some(1290),
            },
        ),
    ];
    for (wire, file, usage) in cases {
        let Some(path) = foldwire_core::fixtures::files(wire.as_str(), file).pop() else {
            return;
        };
        let s = summarize_stream(&parse_ok(*wire, &stream_bytes(*wire, &path)));
        assert_eq!(s.usage.as_ref(), Some(usage), "{file}");
    }
}

#[test]
fn raw_bytes_concatenate_to_the_stream_and_filter_passes_through() {
    for (wire, path) in stream_fixtures() {
        let bytes = stream_bytes(wire, &path);
        let events = parse_ok(wire, &bytes);
        assert_eq!(concat_raw(&events), bytes, "{}", path.display());
        for (n, e) in events.iter().enumerate() {
            assert_eq!(e.number, n);
        }
        // Nothing hidden (and a hidden name that never occurs): the client gets every byte.
        let mut filter = StreamFilter::new(wire, ["compress", "restore"]);
        let mut out = Vec::new();
        for e in &events {
            let current = filter.push(e).unwrap();
            // A Responses reasoning item is held until the next item starts, then let go.
            for (_, b) in filter.take_released() {
                out.extend_from_slice(&b);
            }
            out.extend_from_slice(&current.unwrap_or_default());
        }
        for (_, b) in filter.flush() {
            out.extend_from_slice(&b);
        }
        assert_eq!(out, bytes, "{}", path.display());
        assert!(filter.finish().is_empty());
    }
}

#[test]
fn gemini_framings_are_recognized() {
    for (wire, path) in stream_fixtures() {
        if wire != Wire::Gemini {
            continue;
        }
        let bytes = stream_bytes(wire, &path);
        let events = parse_ok(wire, &bytes);
        let name = path.file_name().unwrap().to_str().unwrap();
        if name.ends_with(".json") {
            assert!(matches!(
                events[0].framing,
                Framing::ArrayElement { start: 1, .. }
            ));
            assert!(matches!(events[1].framing, Framing::ArrayElement { .. }));
            assert!(matches!(events[2].framing, Framing::ArrayTrailer));
            assert_eq!(&events[2].raw[..], b"\n]");
            // Whitespace after `]` is one more trailer, emitted at the end of the stream.
            let tail = usize::from(bytes.last().unwrap().is_ascii_whitespace());
            assert_eq!(events.len(), 3 + tail);
        } else {
            assert!(events.iter().all(|e| matches!(
                e.framing,
                Framing::Sse {
                    line_ending: LineEnding::CrLf
                }
            )));
        }
    }
}

/// Every way of cutting the stream gives the same events.
fn assert_split_invariant(wire: Wire, bytes: &[u8], label: &str, exhaustive: bool) {
    let whole = parse_cut(wire, bytes, &[]);
    assert!(whole.1.is_none(), "{label}: {:?}", whole.1);
    // One byte at a time: every boundary at once.
    let every: Vec<usize> = (1..bytes.len()).collect();
    assert_eq!(
        parse_cut(wire, bytes, &every),
        whole,
        "{label}: byte by byte"
    );
    if exhaustive && bytes.len() <= 3000 {
        for cut in 0..=bytes.len() {
            assert_eq!(
                parse_cut(wire, bytes, &[cut]),
                whole,
                "{label}: cut at {cut}"
            );
        }
        for a in (0..=bytes.len()).step_by(61) {
            for b in (a..=bytes.len()).step_by(89) {
                assert_eq!(parse_cut(wire, bytes, &[a, b]), whole, "{label}: {a},{b}");
            }
        }
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ bytes.len() as u64);
    for round in 0..60 {
        let cuts = rng.cuts(bytes.len(), 1 + round % 12);
        assert_eq!(
            parse_cut(wire, bytes, &cuts),
            whole,
            "{label}: cuts {cuts:?}"
        );
    }
}

#[test]
fn chunk_boundaries_never_change_the_result() {
    for (wire, path) in stream_fixtures() {
        let bytes = stream_bytes(wire, &path);
        assert_split_invariant(wire, &bytes, &path.display().to_string(), true);
    }
}

#[test]
fn line_ending_variants_give_the_same_events() {
    for (wire, path) in stream_fixtures() {
        let bytes = stream_bytes(wire, &path);
        if path.extension().unwrap() == "json" {
            continue;
        }
        let text = String::from_utf8(bytes).unwrap().replace("\r\n", "\n");
        let base = summarize_stream(&parse_ok(wire, text.as_bytes()));
        for ending in ["\r\n", "\r"] {
            let variant = text.replace('\n', ending);
            let events = parse_ok(wire, variant.as_bytes());
            assert_eq!(
                summarize_stream(&events),
                base,
                "{} {ending:?}",
                path.display()
            );
            assert_split_invariant(wire, variant.as_bytes(), "variant", false);
        }
    }
}
