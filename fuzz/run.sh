#!/usr/bin/env bash
# Runs foldwire's fuzz targets, each for SECONDS (default 30), seeded from the shared fixtures.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     # no TARGET: every target `cargo fuzz list` shows
#
# Works on stable Rust (`-s none`: coverage-guided libFuzzer without a sanitizer); with a
# nightly toolchain set FUZZ_TOOLCHAIN=nightly to get AddressSanitizer as well. Installs
# cargo-fuzz from crates.io if it is missing. Crashes land in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
shift || true
fixtures="${FOLDWIRE_FIXTURES:-$(pwd)/../shared/fixtures}"

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then
  run=(cargo "+$FUZZ_TOOLCHAIN" fuzz run)
else
  run=(cargo fuzz run -s none)
fi

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(cargo fuzz list)
fi

# Seeds: request bodies for the decoders; streams for the stream targets, behind the two
# bytes that the stream checks read as cut points.
seed() {
  local target="$1" dir="fuzz/corpus/$1" wire files
  mkdir -p "$dir"
  [[ -d "$fixtures" ]] || return 0
  case "$target" in
    *anthropic) wire=anthropic ;;
    *openai_chat) wire=openai-chat ;;
    *openai_responses) wire=openai-responses ;;
    *gemini) wire=gemini ;;
    response_bodies)
      for f in "$fixtures"/*/response-*.json "$fixtures"/*/error-*.json; do
        cp "$f" "$dir/$(basename "$f")"
      done
      return 0 ;;
    *) return 0 ;;
  esac
  case "$target" in
    request_*) for f in "$fixtures/$wire"/request-*; do cp "$f" "$dir/"; done ;;
    stream_*)
      for f in "$fixtures/$wire"/stream-*; do
        { printf '\x40\x90'; cat "$f"; } > "$dir/$(basename "$f")"
      done ;;
  esac
}

for target in "${targets[@]}"; do
  seed "$target"
  echo "== $target (${seconds}s)"
  "${run[@]}" "$target" -- -max_total_time="$seconds" -max_len=65536
done
