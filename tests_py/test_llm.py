"""LLM clients against the scripted mock server, through the real SDKs."""

from __future__ import annotations

import asyncio
import logging
import random
import textwrap
from typing import Any

import pytest

from mock_llm_server import MockLLMServer, MockResponse, RecordedRequest

from kernelsmith.config import ConfigError, load_yaml
from kernelsmith.llm import (
    Budget,
    BudgetExceeded,
    Completion,
    EnsembleClient,
    LLMClient,
    LLMConfig,
    LLMError,
    LLMTimeoutError,
    Price,
    RedactingFilter,
    RetryPolicy,
    Usage,
    UsageMeter,
    build_client,
    make_client,
    parse_retry_after,
    redact,
    scrub_env,
    split_thinking,
)

KEY = "sk-test-0123456789abcdefXYZ"
ANT_KEY = "sk-ant-test-9876543210zyxwvuQ"
USER = [{"role": "user", "content": "write a kernel"}]
FAST = RetryPolicy(max_attempts=4, backoff_base_s=0.01, backoff_max_s=0.05, jitter=0.0)


def oai(server: MockLLMServer, **kw: Any):
    kw.setdefault("retry", FAST)
    return make_client("openai:test-model", base_url=server.openai_base_url, api_key=KEY, **kw)


def ant(server: MockLLMServer, **kw: Any):
    kw.setdefault("retry", FAST)
    return make_client("anthropic:claude-test", base_url=server.anthropic_base_url, api_key=ANT_KEY, **kw)


def run(coro):
    return asyncio.run(coro)


async def _one(client, messages=USER, **params):
    try:
        return await client.complete(messages, **params)
    finally:
        await client.aclose()


# -- OpenAI-compatible --------------------------------------------------------------------------


def test_openai_plain_sends_protocol_defaults_and_reads_usage(mock_llm):
    mock_llm.script(MockResponse(text="def kernel(): pass", prompt_tokens=123, completion_tokens=45))
    client = oai(mock_llm)
    assert isinstance(client, LLMClient)
    c = run(_one(client, [{"role": "system", "content": "be fast"}] + USER))
    assert c.text == "def kernel(): pass" and c.reasoning is None
    assert c.model == "openai:test-model" and c.attempts == 1 and c.finish_reason == "stop"
    assert c.usage == Usage(123, 45, None, 168)
    req = mock_llm.requests[0]
    assert req.api == "openai" and req.path == "/v1/chat/completions"
    assert req.body["model"] == "test-model"
    assert req.body["temperature"] == 0.6 and req.body["top_p"] == 0.95 and req.body["max_tokens"] == 32768
    assert req.body["messages"][0] == {"role": "system", "content": "be fast"}
    assert req.headers["authorization"] == f"Bearer {KEY}"


def test_openai_params_override_and_extra_fields_reach_the_body(mock_llm):
    mock_llm.script("ok")
    client = oai(mock_llm, max_tokens_param="max_completion_tokens", extra={"top_k": 20})
    run(_one(client, temperature=1.0, max_tokens=100, seed=7))
    body = mock_llm.requests[0].body
    assert body["temperature"] == 1.0 and body["max_completion_tokens"] == 100 and "max_tokens" not in body
    assert body["top_k"] == 20 and body["seed"] == 7


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_openai_reasoning_fields(mock_llm, field):
    mock_llm.script(MockResponse(text="answer", reasoning="let me think", reasoning_field=field, reasoning_tokens=17))
    c = run(_one(oai(mock_llm)))
    assert c.text == "answer" and c.reasoning == "let me think"
    assert c.usage.reasoning_tokens == 17


def test_openai_think_tags_are_moved_to_reasoning(mock_llm):
    mock_llm.script(
        MockResponse(text="\nfinal code", reasoning="step 1\nstep 2", think_tags=True),
        MockResponse(
            body={
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "length",
                        "message": {"role": "assistant", "content": "<think>cut off while thin"},
                    }
                ],
            }
        ),
    )
    client = oai(mock_llm)

    async def both():
        try:
            return await client.complete(USER), await client.complete(USER)
        finally:
            await client.aclose()

    tagged, cut = run(both())
    assert tagged.text == "final code" and tagged.reasoning == "step 1\nstep 2"
    assert "<think>" not in tagged.text
    # Unterminated leading <think>: everything is reasoning, and a missing usage block counts as 0.
    assert cut.text == "" and cut.reasoning == "cut off while thin" and cut.finish_reason == "length"
    assert cut.usage.total_tokens == 0


def test_split_thinking_cases():
    assert split_thinking("plain") == ("plain", None)
    assert split_thinking("<think>a</think>b") == ("b", "a")
    assert split_thinking("a</think>b") == ("b", "a")  # template opened the tag in the prompt
    assert split_thinking("<think>a</think>x<think>c</think>y") == ("xy", "a\n\nc")
    assert split_thinking("  <think>unfinished") == ("", "unfinished")
    assert split_thinking("") == ("", None)


# -- Anthropic ------------------------------------------------------------------------------------


def test_anthropic_text_system_and_defaults(mock_llm):
    mock_llm.script(MockResponse(text="hello", prompt_tokens=50, completion_tokens=5))
    msgs = [{"role": "system", "content": "you write kernels"}] + USER
    c = run(_one(ant(mock_llm), msgs))
    assert c.text == "hello" and c.reasoning is None and c.model == "anthropic:claude-test"
    assert c.finish_reason == "end_turn" and c.usage == Usage(50, 5, None, 55)
    req = mock_llm.requests[0]
    assert req.api == "anthropic" and req.path == "/v1/messages"
    assert req.body["system"] == "you write kernels"
    assert req.body["messages"] == USER  # no system role among messages
    assert req.body["temperature"] == 0.6 and "top_p" not in req.body  # recent Claude refuse both
    assert req.body["max_tokens"] == 32768 and "thinking" not in req.body
    assert req.body["stream"] is True  # long answers are streamed by default
    assert KEY not in str(req.headers) and ANT_KEY in (
        req.headers.get("x-api-key", "") + req.headers.get("authorization", "")
    )


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_thinking_blocks_become_reasoning(mock_llm, stream):
    mock_llm.script(
        MockResponse(text="the kernel", reasoning="considering tiling", completion_tokens=900, finish_reason="length")
    )
    c = run(_one(ant(mock_llm, thinking_budget=4096, stream=stream)))
    assert c.text == "the kernel" and c.reasoning == "considering tiling"
    assert c.usage == Usage(10, 900, None, 910) and c.finish_reason == "max_tokens"
    assert mock_llm.requests[0].body.get("stream", False) is stream
    body = mock_llm.requests[0].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert "temperature" not in body  # the API refuses temperature with thinking
    with pytest.raises(ValueError, match="thinking_budget"):
        ant(mock_llm, thinking_budget=100)


# -- retries, backoff, timeouts -------------------------------------------------------------------


def test_429_with_retry_after_then_success(mock_llm):
    mock_llm.script(MockResponse.error(429, "slow down", retry_after=0.3), "done")
    meter = UsageMeter()
    c = run(_one(oai(mock_llm, meter=meter)))
    assert c.text == "done" and c.attempts == 2
    first, second = mock_llm.requests
    assert second.received_at - first.received_at >= 0.29  # Retry-After beat the 0.01 s backoff
    assert second.headers.get("x-stainless-retry-count", "0") == "0"  # the SDK did not retry itself
    assert meter.per_model["openai:test-model"].attempts == 2
    assert meter.per_model["openai:test-model"].requests == 1


def test_5xx_retries_with_exponential_backoff(mock_llm):
    mock_llm.script(MockResponse.error(500), MockResponse.error(503), MockResponse.error(529), "ok")
    retry = RetryPolicy(max_attempts=5, backoff_base_s=0.05, backoff_max_s=1.0, jitter=0.0)
    c = run(_one(oai(mock_llm, retry=retry)))
    assert c.text == "ok" and c.attempts == 4
    t = [r.received_at for r in mock_llm.requests]
    gaps = [b - a for a, b in zip(t, t[1:])]
    assert gaps[0] >= 0.049 and gaps[1] >= 0.099 and gaps[2] >= 0.199


def test_non_retryable_status_fails_at_once(mock_llm):
    mock_llm.script(MockResponse.error(400, "context too long"), "never")
    with pytest.raises(LLMError, match="HTTP 400.*context too long") as info:
        run(_one(oai(mock_llm)))
    assert info.value.attempts == 1 and info.value.status == 400 and not info.value.retryable
    assert mock_llm.pending == 1


def test_retries_exhausted_gives_clear_error(mock_llm):
    mock_llm.script(*[MockResponse.error(502, "bad gateway")] * 3)
    with pytest.raises(LLMError, match="failed after 3 attempts: HTTP 502") as info:
        run(_one(oai(mock_llm, retry=RetryPolicy(max_attempts=3, backoff_base_s=0.001))))
    assert info.value.attempts == 3 and info.value.status == 502 and info.value.retryable


def test_malformed_json_is_retried(mock_llm):
    mock_llm.script(MockResponse.malformed(), "fine")
    c = run(_one(oai(mock_llm)))
    assert c.text == "fine" and c.attempts == 2


def test_timeout_retries_then_fails_clearly(mock_llm):
    mock_llm.script(MockResponse.slow(3.0), MockResponse.slow(3.0), "never reached")
    meter = UsageMeter()
    client = oai(mock_llm, meter=meter, retry=RetryPolicy(max_attempts=2, backoff_base_s=0.01), timeout_s=0.3)
    with pytest.raises(LLMTimeoutError, match="failed after 2 attempts.*(timed out|no answer within 0.3s)") as info:
        run(_one(client))
    assert info.value.attempts == 2 and len(mock_llm.requests) == 2
    assert meter.per_model["openai:test-model"].failed_requests == 1


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_retries_malformed_overloaded_and_slow(mock_llm, stream):
    mock_llm.script(
        MockResponse.malformed(),
        MockResponse.error(529, "overloaded"),
        MockResponse.slow(3.0),
        MockResponse(text="<think>tagged</think>finally"),
    )
    c = run(_one(ant(mock_llm, stream=stream, retry=RetryPolicy(max_attempts=4, backoff_base_s=0.01)), timeout=0.4))
    assert c.text == "finally" and c.reasoning == "tagged" and c.attempts == 4


def test_timeout_then_success(mock_llm):
    mock_llm.script(MockResponse.slow(3.0), "second try")
    c = run(_one(oai(mock_llm), timeout=0.3))
    assert c.text == "second try" and c.attempts == 2


def test_retry_after_parsing():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    policy = RetryPolicy(backoff_base_s=1.0, backoff_max_s=3.0, jitter=0.5, max_retry_after_s=10)
    rng = random.Random(0)
    assert policy.delay(1, 60.0, rng) == 10  # a huge Retry-After is capped
    assert all(0.5 <= policy.delay(1, None, rng) <= 1.5 for _ in range(50))
    assert all(1.5 <= policy.delay(6, None, rng) <= 4.5 for _ in range(50))  # capped at backoff_max_s


# -- concurrency ---------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [2, 4])
def test_concurrency_limit_limits_requests_in_flight(mock_llm, limit):
    mock_llm.handler = lambda req: MockResponse(text="x", delay_s=0.3)
    client = oai(mock_llm, max_concurrency=limit)

    async def many():
        try:
            return await asyncio.gather(*[client.complete(USER) for _ in range(8)])
        finally:
            await client.aclose()

    results = run(many())
    assert len(results) == 8 and len(mock_llm.requests) == 8
    assert mock_llm.max_in_flight == limit  # reached, never exceeded
    assert client.max_in_flight == limit


# -- usage, prices, budget ----------------------------------------------------------------------


def test_usage_per_request_and_per_run(mock_llm):
    mock_llm.script(
        MockResponse(text="a", prompt_tokens=100, completion_tokens=10, reasoning_tokens=4),
        MockResponse(text="b", prompt_tokens=200, completion_tokens=20),
        MockResponse(text="c", prompt_tokens=300, completion_tokens=30),
    )
    meter = UsageMeter()
    o, a = oai(mock_llm, meter=meter), ant(mock_llm, meter=meter)

    async def go():
        try:
            return [await o.complete(USER), await o.complete(USER), await a.complete(USER)]
        finally:
            await o.aclose()
            await a.aclose()

    c1, c2, c3 = run(go())
    assert (c1.usage.total_tokens, c2.usage.total_tokens, c3.usage.total_tokens) == (110, 220, 330)
    s = meter.summary()
    assert s["requests"] == 3 and s["prompt_tokens"] == 600 and s["completion_tokens"] == 60
    assert s["total_tokens"] == 660 and s["reasoning_tokens"] == 4
    assert s["per_model"]["openai:test-model"]["total_tokens"] == 330
    assert s["per_model"]["anthropic:claude-test"]["total_tokens"] == 330
    restored = UsageMeter.from_dict(meter.to_dict())  # checkpoints keep the spend
    assert restored.summary() == s


def test_prices_and_money_budget_stop_before_sending(mock_llm):
    mock_llm.handler = lambda req: MockResponse(text="x", prompt_tokens=1000, completion_tokens=500)
    meter = UsageMeter(
        prices={"openai:test-model": Price(input_per_mtok=1.0, output_per_mtok=2.0)}, budget=Budget(max_usd=0.003)
    )
    client = oai(mock_llm, meter=meter)

    async def go():
        out = []
        try:
            for _ in range(5):
                out.append(await client.complete(USER))
        finally:
            await client.aclose()
        return out

    with pytest.raises(BudgetExceeded, match="money budget") as info:
        run(go())
    assert len(mock_llm.requests) == 2  # 0.002 $ each: the third is never sent
    assert meter.total_usd == pytest.approx(0.004)
    assert info.value.spent_usd == pytest.approx(0.004)
    assert meter.summary()["cost_usd"] == pytest.approx(0.004)


def test_price_by_bare_name_and_cost_on_completion(mock_llm):
    mock_llm.script(MockResponse(text="x", prompt_tokens=2_000_000, completion_tokens=1_000_000))
    meter = UsageMeter(prices={"test-model": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}})
    c = run(_one(oai(mock_llm, meter=meter)))
    assert c.cost_usd == pytest.approx(2.5)


def test_money_budget_without_price_is_refused(mock_llm):
    client = oai(mock_llm, meter=UsageMeter(budget=Budget(max_usd=1.0)))
    with pytest.raises(BudgetExceeded, match="no price"):
        run(_one(client))
    assert mock_llm.requests == []


def test_token_budget_stop(mock_llm):
    mock_llm.handler = lambda req: MockResponse(text="x", prompt_tokens=20, completion_tokens=10)
    meter = UsageMeter(budget=Budget(max_tokens=70))
    client = oai(mock_llm, meter=meter)

    async def go():
        n = 0
        try:
            while True:
                await client.complete(USER)
                n += 1
        except BudgetExceeded as exc:
            return n, exc
        finally:
            await client.aclose()

    n, exc = run(go())
    assert n == 3 and len(mock_llm.requests) == 3  # 30, 60, 90 >= 70: stop
    assert exc.spent_tokens == 90 and "token budget" in str(exc)
    assert meter.exhausted_reason() is not None


def test_budget_rechecked_after_waiting_for_a_slot(mock_llm):
    # Requests queued behind the concurrency limit must not be sent once the
    # requests ahead of them have spent the budget.
    mock_llm.handler = lambda req: MockResponse(text="x", prompt_tokens=20, completion_tokens=10, delay_s=0.05)
    client = oai(mock_llm, meter=UsageMeter(budget=Budget(max_tokens=30)), max_concurrency=1)

    async def go():
        try:
            return await asyncio.gather(*[client.complete(USER) for _ in range(4)], return_exceptions=True)
        finally:
            await client.aclose()

    results = run(go())
    assert sum(isinstance(r, Completion) for r in results) == 1
    assert sum(isinstance(r, BudgetExceeded) for r in results) == 3
    assert len(mock_llm.requests) == 1


# -- ensemble -------------------------------------------------------------------------------------


def _echo(req: RecordedRequest) -> MockResponse:
    return MockResponse(text=f"{req.api}:{req.model}")


def test_ensemble_weights_pick_both_and_record_which(mock_llm):
    mock_llm.handler = _echo
    meter = UsageMeter()

    def make(seed):
        return EnsembleClient(
            [(oai(mock_llm, meter=meter), 3.0), (ant(mock_llm, meter=meter), 1.0)], seed=seed, meter=meter
        )

    async def go(ens, n):
        try:
            return [await ens.complete(USER) for _ in range(n)]
        finally:
            await ens.aclose()

    out = run(go(make(42), 60))
    models = [c.model for c in out]
    for c in out:  # the recorded model is the one that answered
        assert (
            c.text
            == {"openai:test-model": "openai:test-model", "anthropic:claude-test": "anthropic:claude-test"}[c.model]
        )
    n_openai = models.count("openai:test-model")
    assert 30 <= n_openai <= 57 and models.count("anthropic:claude-test") == 60 - n_openai
    assert meter.per_model["openai:test-model"].requests == n_openai
    # Same seed, same picks; the stream position survives a checkpoint.
    assert [c.model for c in run(go(make(42), 60))] == models
    ens = make(42)
    ens.load_state_dict({"seed": 42, "draws": 10})
    assert [c.model for c in run(go(ens, 5))] == models[10:15]
    # Keyed picks do not depend on call order.
    e1, e2 = make(1), make(1)
    assert [e1.pick(k).model for k in range(20)] == [e2.pick(k).model for k in reversed(range(20))][::-1]


def test_ensemble_zero_weight_never_picked():
    meter = UsageMeter()
    a = make_client("openai:a", base_url="http://127.0.0.1:9/v1", api_key=KEY, meter=meter)
    b = make_client("openai:b", base_url="http://127.0.0.1:9/v1", api_key=KEY, meter=meter)
    ens = EnsembleClient([(a, 1.0), (b, 0.0)], seed=3)
    assert {ens.pick().model for _ in range(200)} == {"openai:a"}
    with pytest.raises(ValueError, match="weights"):
        EnsembleClient([(a, 0.0)])


# -- environment and configuration ----------------------------------------------------------------


def test_env_vars_and_openai_api_base_alias(mock_llm, monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        make_client("openai:m")
    monkeypatch.setenv("OPENAI_API_BASE", mock_llm.openai_base_url)
    local = make_client("openai:m")  # a local server needs no key
    assert local.base_url == mock_llm.openai_base_url
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    mock_llm.script("via env", "precedence")
    c = run(_one(make_client("openai:m")))
    assert c.text == "via env" and mock_llm.requests[0].headers["authorization"] == f"Bearer {KEY}"
    monkeypatch.setenv("OPENAI_BASE_URL", mock_llm.openai_base_url)  # the newer name wins
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")
    assert run(_one(make_client("openai:m"))).text == "precedence"
    monkeypatch.setenv("MY_KEY", "sk-other-key-0000000000000")
    assert make_client("openai:m", api_key_env="MY_KEY")._api_key == "sk-other-key-0000000000000"


def test_anthropic_env_vars(mock_llm, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", mock_llm.anthropic_base_url)
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        make_client("anthropic:c")
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANT_KEY)
    mock_llm.script("from env")
    assert run(_one(make_client("anthropic:c"))).text == "from env"


def test_sampling_switch_and_pick_key_not_sent(mock_llm):
    cfg = LLMConfig.from_dict(
        {"models": [{"spec": "openai:o-model", "sampling": False, "base_url": mock_llm.openai_base_url}]}
    )
    mock_llm.script(lambda req: f"computed from {req.last_user}")  # a callable in the script
    client = build_client(cfg)
    c = run(_one(client, pick_key=3))
    assert c.text == "computed from write a kernel"
    body = mock_llm.requests[0].body
    assert "temperature" not in body and "top_p" not in body and "pick_key" not in body


def test_spec_parsing_errors():
    with pytest.raises(ValueError, match="PROVIDER:NAME"):
        make_client("gpt-4")
    with pytest.raises(ValueError, match="anthropic, openai"):
        make_client("google:gemini")
    c = make_client("openai:qwen3:32b", base_url="http://127.0.0.1:9/v1")
    assert c.name == "qwen3:32b" and c.model == "openai:qwen3:32b"


def test_llm_config_from_yaml_builds_shared_ensemble(tmp_path, mock_llm, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANT_TEST_KEY", ANT_KEY)
    path = tmp_path / "run.yaml"
    path.write_text(
        textwrap.dedent(f"""
        llm:
          models:
            - {{spec: "openai:test-model", weight: 2, base_url: "{mock_llm.openai_base_url}"}}
            - spec: anthropic:claude-test
              weight: 1
              base_url: "{mock_llm.anthropic_base_url}"
              api_key_env: ANT_TEST_KEY
              thinking_budget: 2048
          temperature: 0.7
          max_tokens: 8192
          seed: 5
          retry: {{max_attempts: 2, backoff_base_s: 0.01}}
          prices:
            test-model: {{input_per_mtok: 1.0, output_per_mtok: 4.0}}
          budget: {{max_tokens: 100000}}
        """)
    )
    cfg = load_yaml(LLMConfig, path, section="llm")
    assert cfg.models[1].thinking_budget == 2048 and cfg.prices["test-model"].output_per_mtok == 4.0
    assert cfg.retry.max_attempts == 2 and cfg.budget.max_tokens == 100000
    client = build_client(cfg)
    assert isinstance(client, EnsembleClient)
    assert all(c.meter is client.meter for c, _ in client.members)
    mock_llm.handler = _echo

    async def go():
        try:
            return [await client.complete(USER) for _ in range(12)]
        finally:
            await client.aclose()

    out = run(go())
    assert {c.model for c in out} == {"openai:test-model", "anthropic:claude-test"}
    oai_req = next(r for r in mock_llm.requests if r.api == "openai")
    ant_req = next(r for r in mock_llm.requests if r.api == "anthropic")
    assert oai_req.body["temperature"] == 0.7 and oai_req.body["max_tokens"] == 8192
    assert ant_req.body["thinking"]["budget_tokens"] == 2048
    assert client.meter.summary()["requests"] == 12
    assert LLMConfig.from_dict(cfg.to_dict()) == cfg  # the run directory's config snapshot loads back


def test_llm_config_rejects_unknown_keys_and_keys_in_files():
    with pytest.raises(ConfigError, match="llm.tempreature"):
        LLMConfig.from_dict({"tempreature": 0.5})
    # Keys never go into config files (they would land in the run snapshot).
    with pytest.raises(ConfigError, match=r"llm.models\[0\].api_key'"):
        LLMConfig.from_dict({"models": [{"spec": "openai:x", "api_key": KEY}]})
    with pytest.raises(ConfigError, match="llm.budget.max_dollars"):
        LLMConfig.from_dict({"budget": {"max_dollars": 3}})
    with pytest.raises(ConfigError, match="PROVIDER:NAME"):
        LLMConfig.from_dict({"models": ["gpt-4"]})
    with pytest.raises(ConfigError, match="no model"):
        build_client(LLMConfig())


# -- keys stay secret -----------------------------------------------------------------------------


def test_keys_masked_in_repr_errors_and_logs(mock_llm, caplog):
    client = oai(mock_llm, retry=RetryPolicy(max_attempts=2, backoff_base_s=0.001))
    assert KEY not in repr(client) and "api_key='***'" in repr(client)
    ant_client = ant(mock_llm)
    assert ANT_KEY not in repr(ant_client) and ANT_KEY not in repr(EnsembleClient([(client, 1), (ant_client, 1)]))
    # A server that echoes the key in its error text must not leak it into our logs or errors.
    mock_llm.script(MockResponse.error(500, f"invalid key {KEY}"), MockResponse.error(401, f"bad key {KEY}"))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(LLMError) as info:
        run(_one(client))
    assert KEY not in str(info.value) and "***" in str(info.value)
    assert any("attempt 1/2 failed" in r.getMessage() for r in caplog.records)
    assert all(KEY not in r.getMessage() for r in caplog.records)
    run(ant_client.aclose())


def test_redact_helpers():
    text = f"key={KEY} other sk-proj-AAAAAAAAAAAAAAAAAAAA Authorization: Bearer abcdefghijklmnop1234 hf_{'x' * 30}"
    out = redact(text)
    assert KEY not in out and "sk-proj-AAAA" not in out and "abcdefghijklmnop1234" not in out
    assert "hf_xxxx" not in out and "Authorization: Bearer ***" in out
    assert redact("api_key: 'supersecretvalue99'") == "api_key: '***'"
    assert redact("an ordinary sentence about sk and keys") == "an ordinary sentence about sk and keys"
    assert redact("custom value plainsecret", extra_secrets=["plainsecret"]) == "custom value ***"
    env = {"OPENAI_API_KEY": "a", "ANTHROPIC_API_KEY": "b", "MY_SERVICE_API_KEY": "c", "PATH": "/bin"}
    assert scrub_env(env) == {"PATH": "/bin"}
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "using %s", (KEY,), None)
    assert RedactingFilter().filter(record) and KEY not in record.getMessage()


def test_completion_round_trip():
    c = Completion(
        text="t",
        reasoning="r",
        model="openai:m",
        usage=Usage(1, 2, 1),
        latency_s=0.5,
        finish_reason="stop",
        attempts=2,
        cost_usd=0.1,
    )
    assert Completion.from_dict(c.to_dict()) == c
    assert c.usage.total == 3 and (c.usage + Usage(1, 1)).total_tokens == 5


@pytest.mark.parametrize(
    "api, reply, kind, attempts",
    [
        ("openai", MockResponse.error(401, "Incorrect API key provided"), "auth", 1),
        ("anthropic", MockResponse.error(403, "permission denied"), "auth", 1),
        ("openai", MockResponse.error(429, "You exceeded your current quota, check your plan and billing"), "quota", 1),
        ("anthropic", MockResponse.error(400, "Your credit balance is too low to access the API"), "quota", 1),
        ("openai", MockResponse.error(404, "The model `m` does not exist"), "not-found", 1),
        ("openai", MockResponse.error(400, "context too long"), "bad-request", 1),
        ("openai", MockResponse.error(429, "Rate limit reached, slow down"), "rate-limit", 2),
        ("anthropic", MockResponse.error(529, "Overloaded"), "server", 2),
        ("openai", MockResponse.dropped(), "connection", 2),
        ("openai", MockResponse.malformed(), "malformed", 2),
    ],
)
def test_failures_say_their_kind_and_the_providers_message(mock_llm, api, reply, kind, attempts):
    mock_llm.handler = lambda request: reply
    client = (oai if api == "openai" else ant)(mock_llm, retry=RetryPolicy(max_attempts=2, backoff_base_s=0.001))
    with pytest.raises(LLMError) as info:
        run(_one(client))
    error = info.value
    assert error.kind == kind and error.attempts == attempts == len(mock_llm.requests)
    assert error.fatal == (kind in ("auth", "quota", "not-found"))
    if reply.status >= 400:
        assert error.status == reply.status and reply.text in error.provider_message
    assert error.to_dict()["kind"] == kind
