//! Fuzz the Anthropic response-stream parser and filter (see `foldwire_fuzz::check_stream`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    foldwire_fuzz::check_stream(foldwire_core::Wire::Anthropic, data);
});
