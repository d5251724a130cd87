//! Fuzz the Gemini request decoder: no input panics, and whatever decodes encodes back to the
//! exact input bytes (nothing changed the conversation).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = bytes::Bytes::copy_from_slice(data);
    if let Ok(conversation) = foldwire_wire::request::decode(foldwire_core::Wire::Gemini, body) {
        let encoded = foldwire_wire::request::encode(&conversation)
            .expect("a decoded conversation must encode");
        assert_eq!(
            &encoded[..],
            data,
            "untouched round trip is not byte-identical"
        );
    }
});
