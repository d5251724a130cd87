//! `wire.decode` and `wire.encode`: the first and last stages of every pipeline.

use std::sync::Arc;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Fact, Stage, StageCx,
    StageError, Turn, async_trait,
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
            _ => request::decode(turn.wire, turn.body.clone()).map_err(|e| {
                StageError::Malformed {
                    stage: DECODE,
                    message: e.to_string(),
                }
            })?,
        };
        turn.report.count("wire.entries", conv.entries.len() as u64);
        turn.report.count("wire.units", conv.messages.len() as u64);
        turn.conversation = Some(conv);
        Ok(())
    }
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
