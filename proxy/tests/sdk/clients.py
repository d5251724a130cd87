"""The official SDKs against `foldwire serve` (run by proxy/tests/sdk_conformance.rs).

Each client (anthropic, openai, google-genai) holds a long conversation on each of its wires,
streaming and not, keeping the whole history client-side like an agent does. The mock
provider behind the proxy follows the `sdk` script (proxy/tests/support/mod.rs, `sdk_turn`):
per turn a text answer, a client `bash` call, or text and a call to the proxy's `compress`
tool. Every turn checks that the SDK parses the answer, that no proxy tool is visible, that
the text is exact and that client tool calls arrive intact.

The anthropic, openai Responses and google-genai clients count their last turn's request
first (the SDKs' count_tokens / input_tokens.count / count_tokens), as a client that checks its
size before it sends: the row's "counted".

Usage: clients.py BASE_URL TURNS [ONLY]   (ONLY: rows by name, comma-separated, e.g.
"openai-responses-stream"; the chained Responses rows run only when named)
Prints one JSON object: {"rows": [...], "listings": {...}}.
"""

import json
import sys
import traceback

PROXY_TOOLS = {"compress", "restore", "search_context"}
SYSTEM = "You are a careful assistant working through numbered steps."
# Sized so 40 turns hold about 1.5 times the largest window the suite uses (24k).
FILLER = "The quick brown fox jumps over the lazy dog while we keep notes. " * 40
BASH_SCHEMA = {
    "type": "object",
    "properties": {"cmd": {"type": "string"}},
    "required": ["cmd"],
}


def answer(t):
    return f"Answer {t}. " + "lorem ipsum dolor sit amet " * 40


def expected(t, after_tool, proxy_tools=True):
    """The text and client call the mock's `sdk` script gives turn `t` (a request without
    the proxy's tools gets no call to them)."""
    if t % 10 == 8 and proxy_tools:
        return "Let me look back. " + answer(t), None
    if t % 5 == 1:
        if after_tool:
            return f"Ran step {t}.", None
        return f"Running step {t}.", ("bash", {"cmd": f"step-{t}-run"})
    if t % 5 == 3 and proxy_tools:
        return "Let me tidy up. " + answer(t), None
    return answer(t), None


def user_text(t):
    return f"Turn {t}: please do step {t} now. {FILLER}"


# Every SIDE_EVERY-th turn the client first makes a side request (like Gemini CLI's routing
# call): the history so far plus a question, with its output constrained to JSON or its tools
# forbidden. The proxy must not add its tools to it; the mock's `side` script answers this.
SIDE_EVERY = 10
SIDE_ANSWER = '{"route": "main"}'
SIDE_HEADERS = {"x-mock-script": "side"}


def side_text(t):
    return f"Before step {t}: which model should handle it? Answer in JSON."


def check_side(text, calls):
    if calls or text != SIDE_ANSWER:
        raise Failure(f"side request: text {text[:80]!r}, calls {calls}")


class Failure(Exception):
    pass


def check(t, after_tool, text, calls, proxy_tools=True):
    want_text, want_call = expected(t, after_tool, proxy_tools)
    names = [c[0] for c in calls]
    if PROXY_TOOLS & set(names):
        raise Failure(f"proxy tool visible: {names}")
    if text != want_text:
        raise Failure(f"text {text[:120]!r} != {want_text[:120]!r}")
    if want_call is None:
        if calls:
            raise Failure(f"unexpected calls {calls}")
        return None
    if len(calls) != 1 or calls[0][0] != want_call[0] or calls[0][1] != want_call[1]:
        raise Failure(f"calls {calls} != {want_call}")
    return calls[0]


# ---------------------------------------------------------------- anthropic / Messages


def run_anthropic(base, session, stream, turns):
    import anthropic

    client = anthropic.Anthropic(
        base_url=base,
        api_key="sk-test",
        max_retries=0,
        default_headers={"x-mock-script": "sdk", "x-foldwire-session": session, "x-sdk-row": session},
    )
    tools = [{"name": "bash", "description": "Run a command.", "input_schema": BASH_SCHEMA}]
    history = []

    def ask():
        # As agents call the API now: adaptive thinking, and the SDK's top-level automatic
        # cache marker; the answer goes back into the history as the SDK returned it
        # (thinking blocks and signatures included), as Anthropic's docs show.
        kwargs = dict(
            model="m",
            max_tokens=1024,
            system=SYSTEM,
            messages=history,
            tools=tools,
            thinking={"type": "adaptive"},
            cache_control={"type": "ephemeral"},
        )
        if stream:
            with client.messages.stream(**kwargs) as s:
                for _ in s:
                    pass
                msg = s.get_final_message()
        else:
            msg = client.messages.create(**kwargs)
        text = "".join(b.text for b in msg.content if b.type == "text")
        calls = [(b.name, b.input, b.id) for b in msg.content if b.type == "tool_use"]
        if not any(b.type == "thinking" and b.signature for b in msg.content):
            raise Failure(f"no signed thinking in the answer: {[b.type for b in msg.content]}")
        history.append({"role": "assistant", "content": msg.content})
        return text, calls

    def side(t):
        msg = client.messages.create(
            model="m",
            max_tokens=256,
            system=SYSTEM,
            messages=history + [{"role": "user", "content": side_text(t)}],
            tools=tools,
            tool_choice={"type": "none"},
            extra_headers=SIDE_HEADERS,
        )
        text = "".join(b.text for b in msg.content if b.type == "text")
        check_side(text, [b.name for b in msg.content if b.type == "tool_use"])

    def turn(t):
        if t % SIDE_EVERY == 5:
            side(t)
        history.append({"role": "user", "content": user_text(t)})
        # The last turn is counted first, as a client that checks its size before it sends.
        counted = None
        if t == turns:
            counted = client.messages.count_tokens(
                model="m", system=SYSTEM, messages=history, tools=tools, thinking={"type": "adaptive"}
            ).input_tokens
        text, calls = ask()
        call = check(t, False, text, calls)
        if call:
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": call[2], "content": f"ran {call[1]['cmd']}"}
                    ],
                }
            )
            text, calls = ask()
            check(t, True, text, calls)
        return counted

    return turn


# ---------------------------------------------------------------- openai / Chat


def run_chat(base, session, stream, turns):
    import openai

    client = openai.OpenAI(
        base_url=base + "/v1",
        api_key="sk-test",
        max_retries=0,
        default_headers={"x-mock-script": "sdk", "x-foldwire-session": session, "x-sdk-row": session},
    )
    tools = [{"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": BASH_SCHEMA}}]
    history = [{"role": "system", "content": SYSTEM}]

    def ask():
        # As OpenRouter's users ask a model that signs its reasoning: the `reasoning` switch,
        # and the message sent back with its `reasoning_details` (which the SDK keeps as an
        # extra field, the streamed pieces put together by index).
        kwargs = dict(model="m", messages=history, tools=tools, extra_body={"reasoning": {"enabled": True}})
        if stream:
            with client.chat.completions.stream(**kwargs) as s:
                for _ in s:
                    pass
                completion = s.get_final_completion()
        else:
            completion = client.chat.completions.create(**kwargs)
        message = completion.choices[0].message
        text = message.content or ""
        calls = [
            (c.function.name, json.loads(c.function.arguments), c.id) for c in (message.tool_calls or [])
        ]
        details = (message.model_extra or {}).get("reasoning_details")
        if not details:
            raise Failure("no reasoning_details in the answer")
        entry = {"role": "assistant", "content": message.content, "reasoning_details": details}
        if message.tool_calls:
            entry["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in message.tool_calls
            ]
        history.append(entry)
        return text, calls

    def side(t):
        completion = client.chat.completions.create(
            model="m",
            messages=history + [{"role": "user", "content": side_text(t)}],
            response_format={"type": "json_object"},
            extra_headers=SIDE_HEADERS,
        )
        message = completion.choices[0].message
        check_side(message.content or "", [c.function.name for c in message.tool_calls or []])

    def turn(t):
        if t % SIDE_EVERY == 5:
            side(t)
        history.append({"role": "user", "content": user_text(t)})
        text, calls = ask()
        call = check(t, False, text, calls)
        if call:
            history.append({"role": "tool", "tool_call_id": call[2], "content": f"ran {call[1]['cmd']}"})
            text, calls = ask()
            check(t, True, text, calls)

    return turn


# ---------------------------------------------------------------- openai / Responses


def responses_answer(client, stream, kwargs):
    """One Responses answer, streamed (read to its end) or not."""
    if stream:
        with client.responses.stream(**kwargs) as s:
            for _ in s:
                pass
            return s.get_final_response()
    return client.responses.create(**kwargs)


def run_responses(base, session, stream, turns):
    import openai

    client = openai.OpenAI(
        base_url=base + "/v1",
        api_key="sk-test",
        max_retries=0,
        default_headers={"x-mock-script": "sdk", "x-foldwire-session": session, "x-sdk-row": session},
    )
    tools = [{"type": "function", "name": "bash", "description": "Run a command.", "parameters": BASH_SCHEMA, "strict": False}]
    history = []

    def ask():
        # As Codex asks: encrypted reasoning, nothing stored, and every output item sent back
        # as the SDK returned it (reasoning items and ids included).
        kwargs = dict(
            model="m",
            instructions=SYSTEM,
            input=history,
            tools=tools,
            include=["reasoning.encrypted_content"],
            store=False,
        )
        response = responses_answer(client, stream, kwargs)
        text = ""
        calls = []
        if not any(item.type == "reasoning" for item in response.output):
            raise Failure(f"no reasoning item in the answer: {[i.type for i in response.output]}")
        for item in response.output:
            history.append(item.model_dump(exclude_none=True))
            if item.type == "message":
                text += "".join(c.text for c in item.content if c.type == "output_text")
            elif item.type == "function_call":
                calls.append((item.name, json.loads(item.arguments), item.call_id))
        if text != response.output_text:
            raise Failure(f"output_text {response.output_text[:80]!r} disagrees with the items {text[:80]!r}")
        return text, calls

    def side(t):
        response = client.responses.create(
            model="m",
            instructions=SYSTEM,
            input=history + [{"role": "user", "content": side_text(t)}],
            text={"format": {"type": "json_object"}},
            extra_headers=SIDE_HEADERS,
        )
        check_side(response.output_text, [o.name for o in response.output if o.type == "function_call"])

    def turn(t):
        if t % SIDE_EVERY == 5:
            side(t)
        history.append({"role": "user", "content": user_text(t)})
        # The last turn is counted first, as a client that checks its size before it sends.
        counted = None
        if t == turns:
            counted = client.responses.input_tokens.count(
                model="m", instructions=SYSTEM, input=history, tools=tools
            ).input_tokens
        text, calls = ask()
        call = check(t, False, text, calls)
        if call:
            history.append({"type": "function_call_output", "call_id": call[2], "output": f"ran {call[1]['cmd']}"})
            text, calls = ask()
            check(t, True, text, calls)
        return counted

    return turn


def run_responses_chained(base, session, stream, turns):
    """The openai client as the Responses guide shows it: the provider keeps the
    conversation (`store` left at its default), and each request names the previous response
    and sends only what is new. foldwire cannot fold a history it is not sent, so it must
    forward these requests as sent, a tool call's output included, without its tools; the
    mock provider reads each request on top of the response it names. No session header:
    the proxy must not make a session of each request."""
    import openai

    client = openai.OpenAI(
        base_url=base + "/v1",
        api_key="sk-test",
        max_retries=0,
        default_headers={"x-mock-script": "sdk", "x-sdk-row": session},
    )
    tools = [{"type": "function", "name": "bash", "description": "Run a command.", "parameters": BASH_SCHEMA, "strict": False}]
    previous = {"id": None}

    def chained(new_items):
        kwargs = dict(model="m", instructions=SYSTEM, input=new_items, tools=tools)
        if previous["id"]:
            kwargs["previous_response_id"] = previous["id"]
        return kwargs

    def ask(new_items):
        kwargs = chained(new_items)
        response = responses_answer(client, stream, kwargs)
        previous["id"] = response.id
        calls = [(i.name, json.loads(i.arguments), i.call_id) for i in response.output if i.type == "function_call"]
        return response.output_text, calls

    def turn(t):
        new_items = [{"role": "user", "content": user_text(t)}]
        # The last turn is counted first, on top of the stored conversation too.
        counted = None
        if t == turns:
            counted = client.responses.input_tokens.count(**chained(new_items)).input_tokens
        text, calls = ask(new_items)
        call = check(t, False, text, calls, proxy_tools=t == 1)
        if call:
            output = {"type": "function_call_output", "call_id": call[2], "output": f"ran {call[1]['cmd']}"}
            text, calls = ask([output])
            check(t, True, text, calls, proxy_tools=False)
        return counted

    return turn


# ---------------------------------------------------------------- google-genai / Gemini


def run_gemini(base, session, stream, turns):
    from google import genai
    from google.genai import types

    client = genai.Client(
        api_key="test-key",
        http_options=types.HttpOptions(
            base_url=base, headers={"x-mock-script": "sdk", "x-foldwire-session": session, "x-sdk-row": session}
        ),
    )
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(name="bash", description="Run a command.", parameters_json_schema=BASH_SCHEMA)
                ]
            )
        ],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        thinking_config=types.ThinkingConfig(include_thoughts=True),
    )
    # A Gemini 3 model, as Gemini CLI uses: it thinks and signs its calls, and the history
    # keeps every part as the SDK returned it.
    model = "gemini-3-pro-preview"
    history = []

    def ask():
        parts = []
        if stream:
            for chunk in client.models.generate_content_stream(model=model, contents=history, config=config):
                for cand in chunk.candidates or []:
                    if cand.content and cand.content.parts:
                        parts.extend(cand.content.parts)
        else:
            response = client.models.generate_content(model=model, contents=history, config=config)
            parts = list(response.candidates[0].content.parts or [])
        text = "".join(p.text for p in parts if p.text and not p.thought)
        calls = [(p.function_call.name, dict(p.function_call.args or {}), None) for p in parts if p.function_call]
        if not any(p.thought for p in parts):
            raise Failure("no thought part in the answer")
        history.append(types.Content(role="model", parts=parts))
        return text, calls

    side_config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        response_mime_type="application/json",
        http_options=types.HttpOptions(headers=SIDE_HEADERS),
    )

    def side(t):
        contents = history + [types.Content(role="user", parts=[types.Part(text=side_text(t))])]
        response = client.models.generate_content(model=model, contents=contents, config=side_config)
        parts = list(response.candidates[0].content.parts or [])
        check_side("".join(p.text for p in parts if p.text and not p.thought), [p.function_call.name for p in parts if p.function_call])

    def turn(t):
        if t % SIDE_EVERY == 5:
            side(t)
        history.append(types.Content(role="user", parts=[types.Part(text=user_text(t))]))
        # The last turn is counted first, as a client that checks its size before it sends.
        counted = None
        if t == turns:
            counted = client.models.count_tokens(model=model, contents=history).total_tokens
        text, calls = ask()
        call = check(t, False, text, calls)
        if call:
            history.append(
                types.Content(
                    role="user",
                    parts=[types.Part.from_function_response(name="bash", response={"output": f"ran {call[1]['cmd']}"})],
                )
            )
            text, calls = ask()
            check(t, True, text, calls)
        return counted

    return turn


RUNS = [
    ("anthropic", "anthropic", run_anthropic),
    ("openai", "openai-chat", run_chat),
    ("openai", "openai-responses", run_responses),
    ("google-genai", "gemini", run_gemini),
    # Run only when ONLY names it: its requests are forwarded as sent, which the suite's
    # checks of a folded session do not describe (sdk_conformance.rs checks it apart).
    ("openai", "openai-responses-chained", run_responses_chained),
]
ON_REQUEST = {"openai-responses-chained"}


def listings(base):
    """Each SDK lists models: a route foldwire forwards untouched."""
    out = {}
    try:
        import anthropic

        out["anthropic"] = [m.id for m in anthropic.Anthropic(base_url=base, api_key="k", max_retries=0).models.list()]
    except Exception as e:  # noqa: BLE001 - reported, not raised
        out["anthropic"] = f"error: {e!r}"
    try:
        import openai

        out["openai"] = [m.id for m in openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0).models.list()]
    except Exception as e:  # noqa: BLE001
        out["openai"] = f"error: {e!r}"
    try:
        from google import genai
        from google.genai import types

        client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=base))
        out["google-genai"] = [m.name for m in client.models.list()]
    except Exception as e:  # noqa: BLE001
        out["google-genai"] = f"error: {e!r}"
    return out


def main():
    base, turns = sys.argv[1], int(sys.argv[2])
    only = sys.argv[3] if len(sys.argv) > 3 else ""
    prefix = sys.argv[4] if len(sys.argv) > 4 else "sdk"
    rows = []
    for client, wire, run in RUNS:
        for stream in (False, True):
            name = f"{wire}-{'stream' if stream else 'json'}"
            asked = only.split(",") if only else []
            if (asked and name not in asked) or (not asked and wire in ON_REQUEST):
                continue
            session = f"{prefix}-{name}"
            row = {"client": client, "wire": wire, "stream": stream, "session": session, "turns": turns, "passed": 0, "failure": None, "history_chars": 0}
            try:
                turn = run(base, session, stream, turns)
                for t in range(1, turns + 1):
                    try:
                        counted = turn(t)
                        if counted is not None:
                            row["counted"] = counted
                    except Failure as e:
                        row["failure"] = f"turn {t}: {e}"
                        break
                    except Exception as e:  # noqa: BLE001 - the SDK refused the answer
                        row["failure"] = f"turn {t}: {type(e).__name__}: {str(e)[:400]}"
                        break
                    row["passed"] = t
                    row["history_chars"] += len(user_text(t)) + sum(
                        len(expected(t, after)[0]) for after in ((False, True) if t % 5 == 1 else (False,))
                    )
            except Exception:  # noqa: BLE001
                row["failure"] = traceback.format_exc()[-400:]
            rows.append(row)
    print(json.dumps({"rows": rows, "listings": listings(base)}))


if __name__ == "__main__":
    main()
