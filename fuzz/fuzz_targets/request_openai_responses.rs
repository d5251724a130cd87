//! Fuzz the OpenAI Responses request decoder (see `foldwire_fuzz::check_request`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    foldwire_fuzz::check_request(foldwire_core::Wire::OpenAiResponses, data);
});
