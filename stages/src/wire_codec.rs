//! `wire.decode` and `wire.encode`: the first and last stages of every pipeline.

use std::sync::Arc;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Conversation, Fact, LastDecode,
    Stage, StageCx, StageError, Turn, async_trait,
};
use foldwire_wire::request;
use serde::{Deserialize, Serialize};

/// Decodes the turn's body for its wire into `turn.conversation`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WireDecode;

/// The registered name of [`WireDecode`].
pub const DECODE: &str = WireDecodeConfig::NAME;
/// The registered name of [`WireEncode`].
pub const ENCODE: &str = WireEncodeConfig::NAME;

#[async_trait]
impl Stage for WireDecode {
    fn name(&self) -> &'static str {
        DECODE
    }

    fn provides(&self) -> &'static [Fact] {
        &[Fact::Decoded]
    }

    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        // A host that decoded the body already hands the turn that conversation
        // (`TurnRequest::decoded`): the body is not decoded twice.
        let conv = match turn.conversation.take() {
            Some(conv) if conv.wire == turn.wire => conv,
            _ => decode(turn)?,
        };
        turn.report.count("wire.entries", conv.entries.len() as u64);
        turn.report.count("wire.units", conv.messages.len() as u64);
        turn.conversation = Some(conv);
        Ok(())
    }
}

/// Decodes the turn's body, starting from the session's last decode when the turn carries
/// one, and leaves this decode for the next turn in its place.
fn decode(turn: &mut Turn) -> Result<Conversation, StageError> {
    let decoded = match turn.carry.remove::<LastDecode>() {
        Some(LastDecode(prior)) => request::decode_after(turn.wire, turn.body.clone(), prior),
        None => request::decode(turn.wire, turn.body.clone()).map(|conv| (conv, 0)),
    };
    // The decode is kept as made for the next turn; the stages work on a copy. (A body that
    // does not decode leaves nothing: the next turn decodes afresh.)
    let (conv, reused) = decoded.map_err(|e| StageError::Malformed {
        stage: DECODE,
        message: e.to_string(),
    })?;
    turn.report.count("wire.reused_entries", reused as u64);
    let copy = conv.clone();
    turn.carry.insert(LastDecode(conv));
    Ok(copy)
}

/// Encodes `turn.conversation` into `turn.output`.
#[derive(Debug, Clone, Copy, Default)]
pub struct WireEncode;

#[async_trait]
impl Stage for WireEncode {
    fn name(&self) -> &'static str {
        ENCODE
    }

    fn requires(&self) -> &'static [Fact] {
        &[Fact::Decoded]
    }

    fn provides(&self) -> &'static [Fact] {
        &[Fact::Encoded]
    }

    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        let conv = turn
            .conversation
            .as_ref()
            .ok_or(StageError::NotDecoded { stage: ENCODE })?;
        let out = request::encode(conv)
            .map_err(|e| StageError::caused(ENCODE, "cannot encode the request", e))?;
        turn.output = Some(out);
        Ok(())
    }
}

/// Parameters of `wire.decode` (none; unknown keys are refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireDecodeConfig {}

impl ComponentConfig for WireDecodeConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "wire.decode";
    const DESCRIPTION: &'static str =
        "Decodes the request body for its wire into units that keep their exact bytes.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(WireDecode)))
    }
}

/// Parameters of `wire.encode` (none; unknown keys are refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireEncodeConfig {}

impl ComponentConfig for WireEncodeConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "wire.encode";
    const DESCRIPTION: &'static str =
        "Writes the request back for its wire, splicing changes into the client's bytes.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(WireEncode)))
    }
}

foldwire_core::register_config!(WireDecodeConfig);
foldwire_core::register_config!(WireEncodeConfig);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use bytes::Bytes;
    use foldwire_core::{Registry, SessionId, SessionState, Wire};

    fn turn(wire: Wire, body: &str) -> Turn {
        Turn::new(
            SessionId::new("s").unwrap(),
            wire,
            Bytes::from(body.to_owned()),
            SessionState::default(),
        )
    }

    fn cx() -> StageCx {
        StageCx::new(Arc::new(Registry::empty()))
    }

    const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"yo"}]}],"max_tokens":5}"#;

    #[tokio::test]
    async fn decode_then_encode_passes_the_body_through() {
        let mut t = turn(Wire::Anthropic, BODY);
        WireDecode.run(&mut t, &cx()).await.unwrap();
        let conv = t.conversation.as_ref().unwrap();
        assert_eq!(conv.messages.len(), 2);
        assert_eq!(t.report.counter("wire.units"), 2);
        WireEncode.run(&mut t, &cx()).await.unwrap();
        assert_eq!(t.output.as_deref(), Some(BODY.as_bytes()));
    }

    // The proxy decodes a request without a session header to tell sessions apart by
    // history, and hands that conversation to the turn: decode must not parse the body again
    // (here the body would not parse, so a second decode would fail the turn).
    #[tokio::test]
    async fn decode_starts_from_a_conversation_the_host_decoded() {
        let decoded = request::decode(Wire::Anthropic, Bytes::from(BODY)).unwrap();
        let mut t = turn(Wire::Anthropic, "not json");
        t.conversation = Some(decoded.clone());
        WireDecode.run(&mut t, &cx()).await.unwrap();
        assert_eq!(t.conversation.as_ref(), Some(&decoded));
        assert_eq!(t.report.counter("wire.units"), 2);
        // One decoded for another wire is not taken.
        let mut other = turn(Wire::Gemini, "not json");
        other.conversation = Some(decoded);
        assert!(WireDecode.run(&mut other, &cx()).await.is_err());
    }

    #[tokio::test]
    async fn encode_writes_stage_changes() {
        let mut t = turn(Wire::Anthropic, BODY);
        WireDecode.run(&mut t, &cx()).await.unwrap();
        t.conversation.as_mut().unwrap().messages.remove(1);
        WireEncode.run(&mut t, &cx()).await.unwrap();
        let out = String::from_utf8(t.output.unwrap().to_vec()).unwrap();
        assert_eq!(
            out,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}"#
        );
    }

    #[tokio::test]
    async fn malformed_body_is_a_malformed_error_with_the_path() {
        let mut t = turn(
            Wire::OpenAiChat,
            r#"{"messages":[{"role":"user","content":7}]}"#,
        );
        let err = WireDecode.run(&mut t, &cx()).await.unwrap_err();
        match err {
            StageError::Malformed { stage, message } => {
                assert_eq!(stage, "wire.decode");
                assert!(message.contains("openai-chat"), "{message}");
                assert!(message.contains("messages[0].content"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(t.conversation.is_none());
    }

    #[tokio::test]
    async fn encode_without_decode_says_so() {
        let mut t = turn(Wire::Gemini, "{}");
        let err = WireEncode.run(&mut t, &cx()).await.unwrap_err();
        assert!(matches!(
            err,
            StageError::NotDecoded {
                stage: "wire.encode"
            }
        ));
    }

    /// Three requests of one session, each resending the last one's history.
    const GROWING: [&str; 3] = [
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}"#,
        BODY,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"yo"}]},{"role":"user","content":"go on"}],"max_tokens":5}"#,
    ];

    #[tokio::test]
    async fn decode_starts_from_the_last_decode_and_leaves_its_own() {
        let prior = request::decode(Wire::Anthropic, Bytes::from(GROWING[0])).unwrap();
        let mut t = turn(Wire::Anthropic, BODY);
        t.carry.insert(LastDecode(prior.clone()));
        WireDecode.run(&mut t, &cx()).await.unwrap();
        assert_eq!(t.report.counter("wire.reused_entries"), 1);
        let fresh = request::decode(Wire::Anthropic, Bytes::from(BODY)).unwrap();
        assert_eq!(t.conversation.as_ref(), Some(&fresh));
        // The turn's own decode, untouched by later stages, is left for the next turn.
        t.conversation.as_mut().unwrap().messages.clear();
        let left = t.carry.get::<LastDecode>().unwrap();
        assert_eq!(&left.0, &fresh);
        // A body that does not decode is the same error as without a last decode, and
        // leaves none.
        let mut bad = turn(Wire::Anthropic, "{\"messages\":[");
        bad.carry.insert(LastDecode(prior));
        let err = WireDecode.run(&mut bad, &cx()).await.unwrap_err();
        let mut alone = turn(Wire::Anthropic, "{\"messages\":[");
        let without = WireDecode.run(&mut alone, &cx()).await.unwrap_err();
        assert_eq!(err.to_string(), without.to_string());
        assert!(bad.carry.get::<LastDecode>().is_none());
    }

    /// An engine running decode then encode, dropping a session's carry after `forget`.
    fn codec_engine(forget: Option<std::time::Duration>) -> foldwire_core::Engine {
        let registry = Arc::new(Registry::empty());
        let pipeline = foldwire_core::Pipeline::builder(&registry)
            .name("codec")
            .stage(WireDecode)
            .stage(WireEncode)
            .build()
            .unwrap();
        let store = Arc::new(foldwire_core::MemoryStateStore::new());
        foldwire_core::Engine::builder(pipeline, store, registry)
            .forget_carry_after(forget)
            .start()
            .unwrap()
    }

    async fn codec_turn(
        engine: &foldwire_core::Engine,
        session: &SessionId,
        body: &'static str,
    ) -> foldwire_core::TurnOutcome {
        let request = foldwire_core::TurnRequest::new(Wire::Anthropic, Bytes::from(body));
        engine.run_turn(session, request).await.unwrap()
    }

    #[tokio::test]
    async fn an_idle_session_gives_its_carry_back() {
        let engine = codec_engine(Some(std::time::Duration::from_millis(400)));
        let session = SessionId::new("idle").unwrap();
        codec_turn(&engine, &session, GROWING[0]).await;
        let soon = codec_turn(&engine, &session, GROWING[1]).await;
        assert_eq!(soon.report.counter("wire.reused_entries"), 1);
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        let later = codec_turn(&engine, &session, GROWING[2]).await;
        assert_eq!(later.report.counter("wire.reused_entries"), 0);
        assert_eq!(later.output, Bytes::from(GROWING[2]));
        // A session at work keeps it however long it works (here twice the idle time):
        // each turn counts from itself.
        for _ in 0..16 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let busy = codec_turn(&engine, &session, GROWING[2]).await;
            assert_eq!(busy.report.counter("wire.reused_entries"), 3);
        }
    }

    #[tokio::test]
    async fn the_session_carries_the_last_decode_from_turn_to_turn() {
        let engine = codec_engine(None);
        let one = SessionId::new("one").unwrap();
        let other = SessionId::new("other").unwrap();
        let run = |session: SessionId, body: &'static str| {
            let engine = &engine;
            async move {
                let request = foldwire_core::TurnRequest::new(Wire::Anthropic, Bytes::from(body));
                engine.run_turn(&session, request).await.unwrap()
            }
        };
        let first = run(one.clone(), GROWING[0]).await;
        assert_eq!(first.report.counter("wire.reused_entries"), 0);
        let second = run(one.clone(), GROWING[1]).await;
        assert_eq!(second.report.counter("wire.reused_entries"), 1);
        assert_eq!(second.output, Bytes::from(GROWING[1]));
        // A request that fails to decode is forwarded as sent and breaks nothing.
        let third = run(one.clone(), GROWING[2]).await;
        assert_eq!(third.report.counter("wire.reused_entries"), 2);
        assert_eq!(third.output, Bytes::from(GROWING[2]));
        // A request that fails to decode is forwarded as sent; the next one is decoded
        // afresh.
        let broken = run(one.clone(), "{\"messages\":[").await;
        assert!(broken.report.fail_open.is_some());
        assert_eq!(broken.output, Bytes::from("{\"messages\":["));
        let again = run(one.clone(), GROWING[2]).await;
        assert_eq!(again.report.counter("wire.reused_entries"), 0);
        assert_eq!(again.output, Bytes::from(GROWING[2]));
        // Another session starts from nothing.
        let elsewhere = run(other, GROWING[2]).await;
        assert_eq!(elsewhere.report.counter("wire.reused_entries"), 0);
    }

    #[test]
    fn stages_declare_facts_and_are_registered() {
        assert_eq!(WireDecode.provides(), &[Fact::Decoded]);
        assert_eq!(WireEncode.requires(), &[Fact::Decoded]);
        assert_eq!(WireEncode.provides(), &[Fact::Encoded]);
        let registry = Registry::from_inventory().unwrap();
        let names = registry.names(foldwire_core::ComponentKind::Stage);
        assert!(names.contains(&"wire.decode".to_owned()), "{names:?}");
        assert!(names.contains(&"wire.encode".to_owned()), "{names:?}");
        let err = registry
            .stage(DECODE, &serde_json::json!({"x": 1}))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("wire.decode") && err.contains("unknown field `x`"),
            "{err}"
        );
        assert!(registry.stage(ENCODE, &foldwire_core::Params::Null).is_ok());
    }
}
