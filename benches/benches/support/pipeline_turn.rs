//! Pipeline bench body, shared by `pipeline` (the allocator the `foldwire` binary ships,
//! mimalloc) and `pipeline_system` (glibc's malloc, what a host embedding the library gets
//! unless it picks one): one steady-state turn of the 1,000-turn session through the actor
//! engine (the same body again, after a first turn folded it into the window), with the
//! `default` pipeline and with `passthrough`, side by side with a `serde_json::Value` parse +
//! serialize of the same bytes, on each wire. The default pipeline's turn includes everything
//! a proxy request costs before forwarding: decode, classify and spill media, refs, ranges,
//! folds re-applied from the state, pairing repair, head-window layout, encode, and the state
//! save.

use std::hint::black_box;

use bytes::Bytes;
use criterion::Criterion;
use foldwire_benches::ratio;
use foldwire_core::{Engine, SessionId, StageCx, TurnRequest, Wire};
use foldwire_proxy::setup;
use tokio::runtime::Runtime;

const TURNS: usize = 1000;
const OUTPUT: usize = 2000;

fn body(wire: Wire) -> Bytes {
    Bytes::from(match wire {
        Wire::Anthropic => foldwire_benches::anthropic_turns(TURNS, OUTPUT),
        Wire::OpenAiChat => foldwire_benches::chat_turns(TURNS, OUTPUT),
        Wire::OpenAiResponses => foldwire_benches::responses_turns(TURNS, OUTPUT),
        Wire::Gemini => foldwire_benches::gemini_turns(TURNS, OUTPUT),
    })
}

/// An engine running the named pipeline over in-memory state and archive.
fn engine(pipeline: &str) -> Engine {
    let registry = setup::registry().unwrap();
    let pipeline = setup::pipeline(pipeline, &registry).unwrap();
    let backends = setup::backends(Some("memory://")).unwrap();
    let cx = StageCx::new(registry.clone()).with_archive(backends.media);
    Engine::builder(pipeline, backends.state, registry)
        .context(cx)
        .workers(1)
        .start()
        .unwrap()
}

/// One turn; returns the forwarded body's size. Panics when the pipeline failed open or
/// refused, so the bench never times a turn that did no work.
fn turn(rt: &Runtime, engine: &Engine, session: &SessionId, wire: Wire, body: &Bytes) -> usize {
    let outcome = rt
        .block_on(engine.run_turn(session, TurnRequest::new(wire, body.clone())))
        .unwrap();
    assert!(
        outcome.report.fail_open.is_none(),
        "{:?}",
        outcome.report.fail_open
    );
    assert!(
        outcome.report.refusal.is_none(),
        "{:?}",
        outcome.report.refusal
    );
    outcome.output.len()
}

/// The bench: criterion's own loops per wire, then the interleaved table, which names the
/// allocator it ran under.
pub fn pipeline(c: &mut Criterion, allocator: &str) {
    let rt = Runtime::new().unwrap();
    let default = engine("default");
    let passthrough = engine("passthrough");
    let mut rows = Vec::new();
    for wire in Wire::ALL {
        let body = body(wire);
        let session = SessionId::new(format!("bench-{wire}")).unwrap();
        // The first turn folds the over-window body; later turns re-apply those folds.
        let first = turn(&rt, &default, &session, wire, &body);
        assert!(
            first < body.len(),
            "{wire}: the default pipeline folded nothing"
        );
        turn(&rt, &passthrough, &session, wire, &body);

        let mut group = c.benchmark_group(format!("pipeline/{wire}"));
        group.sample_size(20);
        group.bench_function("default turn", |b| {
            b.iter(|| turn(&rt, &default, &session, wire, black_box(&body)))
        });
        group.bench_function("passthrough turn", |b| {
            b.iter(|| turn(&rt, &passthrough, &session, wire, black_box(&body)))
        });
        group.bench_function("serde_json::Value round trip", |b| {
            b.iter(|| foldwire_benches::value_round_trip(black_box(&body)))
        });
        group.finish();

        let [value, full, pass] = foldwire_benches::interleaved(
            15,
            [
                &mut || foldwire_benches::value_round_trip(&body),
                &mut || turn(&rt, &default, &session, wire, &body),
                &mut || turn(&rt, &passthrough, &session, wire, &body),
            ],
        );
        rows.push((wire, body.len(), first, value, full, pass));
    }
    println!(
        "\none engine turn vs serde_json::Value round trip, {allocator} (15 interleaved rounds; min / median):"
    );
    for (wire, len, sent, value, full, pass) in rows {
        println!(
            "  {wire:<16} {len:>7} B -> {sent:>7} B  value {:>7.2?}/{:>7.2?}  default {:>7.2?}/{:>7.2?} = {:.2}x/{:.2}x  passthrough {:>7.2?}/{:>7.2?} = {:.2}x/{:.2}x",
            value.0,
            value.1,
            full.0,
            full.1,
            ratio(full.0, value.0),
            ratio(full.1, value.1),
            pass.0,
            pass.1,
            ratio(pass.0, value.0),
            ratio(pass.1, value.1),
        );
    }
}
