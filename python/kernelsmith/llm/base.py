"""Shared machinery of the provider clients: parameters, retries with backoff,
per-request timeout, concurrency limit and usage accounting.

A provider subclass only builds the SDK client, sends one request and turns
the SDK's answer into a :class:`Completion`; every retry is ours (the SDKs'
own retries are switched off) so attempts are counted and bounded.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from .redact import mask_key, redact, register_secret
from .types import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    FATAL_KINDS,
    BudgetExceeded,
    Completion,
    LLMError,
    LLMTimeoutError,
    Usage,
)
from .usage import UsageMeter

log = logging.getLogger("kernelsmith.llm")

# 408 request timeout, 409 conflict (lock contention), 425 too early, 429 rate
# limit, 5xx server errors, 529 Anthropic "overloaded".
RETRY_STATUSES = (408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529)


@dataclass
class RetryPolicy:
    """Exponential backoff with jitter; honours Retry-After when the server sends it."""

    max_attempts: int = 5  # HTTP requests per call, the first one included
    backoff_base_s: float = 1.0  # wait after the first failure; doubles each retry
    backoff_max_s: float = 60.0  # cap of one wait
    jitter: float = 0.25  # each wait is scaled by a random factor in [1 - jitter, 1 + jitter]
    max_retry_after_s: float = 300.0  # a longer Retry-After is cut to this
    retry_statuses: tuple[int, ...] = RETRY_STATUSES

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"retry.max_attempts must be >= 1, got {self.max_attempts}")
        if self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise ValueError("retry.backoff_base_s and retry.backoff_max_s must be >= 0")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"retry.jitter must be in [0, 1], got {self.jitter}")
        self.retry_statuses = tuple(self.retry_statuses)

    def delay(self, failures: int, retry_after: Optional[float], rng: random.Random) -> float:
        """Seconds to wait after the ``failures``-th failed attempt."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_retry_after_s)
        base = min(self.backoff_max_s, self.backoff_base_s * (2 ** (failures - 1)))
        return max(0.0, base * (1.0 + self.jitter * (2.0 * rng.random() - 1.0)))


def parse_retry_after(headers: Any) -> Optional[float]:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date)."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return float(ms) / 1000.0
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


# Words with which providers refuse for money rather than for rate: OpenAI's
# 429 "insufficient_quota", Anthropic's 400 "credit balance is too low".
_QUOTA_WORDS = ("insufficient_quota", "quota", "billing", "credit balance", "payment")


def status_kind(status: int, text: str = "") -> str:
    """The failure kind (see ``FAILURE_KINDS``) of an HTTP error answer."""
    lowered = text.lower()
    if status in (401, 403):
        return "auth"
    if status == 402 or (status in (400, 429) and any(w in lowered for w in _QUOTA_WORDS)):
        return "quota"
    if status == 404:
        return "not-found"
    if status == 429:
        return "rate-limit"
    if status >= 500:
        return "server"
    return "bad-request" if status not in RETRY_STATUSES else "server"


@dataclass
class Failure:
    """What went wrong with one attempt, in provider-neutral terms."""

    kind: str  # one of kernelsmith.llm.types.FAILURE_KINDS
    message: str
    provider_message: str = ""
    status: Optional[int] = None
    retry_after: Optional[float] = None
    retryable: bool = False


@dataclass
class SamplingDefaults:
    temperature: Optional[float] = DEFAULT_TEMPERATURE  # None = leave to the server
    top_p: Optional[float] = DEFAULT_TOP_P  # None = leave to the server
    max_tokens: int = DEFAULT_MAX_TOKENS  # output cap per request
    timeout_s: float = 900.0  # one attempt, whole request; long for 32K-token answers
    extra: dict[str, Any] = field(default_factory=dict)  # provider-specific request fields


class BaseClient:
    """One model behind one endpoint. Subclasses: OpenAIClient, AnthropicClient."""

    provider = ""

    def __init__(
        self,
        name: str,
        *,
        api_key: Optional[str],
        base_url: Optional[str],
        defaults: Optional[SamplingDefaults] = None,
        retry: Optional[RetryPolicy] = None,
        max_concurrency: int = 8,
        meter: Optional[UsageMeter] = None,
        rng: Optional[random.Random] = None,
    ) -> None:
        if not name:
            raise ValueError(f"{self.provider} client: model name must not be empty")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.name = name
        self.model = f"{self.provider}:{name}"
        self.base_url = base_url
        self._api_key = api_key
        register_secret(api_key)
        self.defaults = defaults or SamplingDefaults()
        self.retry = retry or RetryPolicy()
        self.max_concurrency = max_concurrency
        self.meter = meter if meter is not None else UsageMeter()
        self._rng = rng or random.Random()
        self._semaphore: Optional[asyncio.Semaphore] = None
        self._sdk: Any = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        # Observability for tests and the progress bar.
        self.in_flight = 0
        self.max_in_flight = 0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key={mask_key(self._api_key)}, max_concurrency={self.max_concurrency})"
        )

    __str__ = __repr__

    # -- per event loop state --------------------------------------------------
    def _bind_loop(self) -> None:
        """SDK HTTP clients and semaphores belong to one event loop; make new
        ones when called from another (e.g. successive asyncio.run calls)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop = loop
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
            self._sdk = self._make_sdk()

    def _make_sdk(self) -> Any:
        raise NotImplementedError

    async def _send(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> Completion:
        raise NotImplementedError

    #: the SDK module ("openai" or "anthropic") and the error its parser
    #: raises for a 200 that is not a usable answer; both SDKs name their
    #: transport errors alike, so one classifier serves every provider
    sdk_module: str = ""
    malformed_error: type = ValueError

    def _classify(self, exc: BaseException) -> Failure:
        """What went wrong and whether to retry; unknown errors propagate."""
        import json

        sdk = import_sdk(self.sdk_module)
        if isinstance(exc, sdk.APITimeoutError):
            return Failure("timeout", f"timed out: {exc}", str(exc), retryable=True)
        if isinstance(exc, sdk.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f"{exc} ({type(cause).__name__}: {cause})" if cause is not None else str(exc)
            return Failure("connection", f"connection error: {detail}", detail, retryable=True)
        if isinstance(exc, sdk.APIStatusError):
            status = exc.status_code
            kind = status_kind(status, f"{exc.message} {getattr(exc, 'code', '') or ''} {exc.body!r}")
            return Failure(
                kind,
                f"HTTP {status}: {exc.message}",
                str(exc.message),
                status=status,
                retry_after=parse_retry_after(exc.response.headers),
                retryable=kind not in FATAL_KINDS and status in self.retry.retry_statuses,
            )
        if isinstance(exc, (sdk.APIResponseValidationError, json.JSONDecodeError, self.malformed_error)):
            return Failure("malformed", f"malformed response: {exc}", str(exc), retryable=True)
        raise exc

    async def aclose(self) -> None:
        sdk, self._sdk, self._loop = self._sdk, None, None
        if sdk is not None:
            try:
                await sdk.close()
            except RuntimeError:  # its loop is gone already
                pass

    # -- the call --------------------------------------------------------------
    def _merge(self, params: dict[str, Any]) -> dict[str, Any]:
        d = self.defaults
        merged: dict[str, Any] = {
            "temperature": d.temperature,
            "top_p": d.top_p,
            "max_tokens": d.max_tokens,
            "timeout": d.timeout_s,
        }
        extra = dict(d.extra)
        for key, value in params.items():
            if key in merged:
                merged[key] = value
            else:
                extra[key] = value
        if merged["max_tokens"] is None or int(merged["max_tokens"]) < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {merged['max_tokens']!r}")
        merged["max_tokens"] = int(merged["max_tokens"])
        if merged["timeout"] is None or float(merged["timeout"]) <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {merged['timeout']!r}")
        merged["timeout"] = float(merged["timeout"])
        merged["extra"] = extra
        return merged

    async def complete(self, messages: list[dict[str, Any]], *, pick_key: Any = None, **params: Any) -> Completion:
        """Send ``messages``; retry transient failures; count usage.

        ``pick_key`` is accepted (and ignored) so callers can pass it to any
        client alike; an :class:`EnsembleClient` uses it to choose the model.

        Raises :class:`BudgetExceeded` (before sending) when the meter's budget
        is spent, :class:`LLMTimeoutError` when the last attempt timed out, and
        :class:`LLMError` for any other final failure.
        """
        if not messages:
            raise ValueError("messages must not be empty")
        merged = self._merge(params)
        self._bind_loop()
        assert self._semaphore is not None
        start = time.monotonic()
        attempts = 0
        last: Optional[Failure] = None
        while True:
            self.meter.check(self.model)
            async with self._semaphore:
                # Again after the wait for a slot: other requests may have
                # spent the budget meanwhile.
                self.meter.check(self.model)
                attempts += 1
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    # The SDK timeout bounds each read; wait_for bounds the
                    # whole request, so a server that trickles bytes cannot
                    # hold a slot for ever.
                    completion = await asyncio.wait_for(self._send(messages, merged), timeout=merged["timeout"])
                except (BudgetExceeded, asyncio.CancelledError):
                    raise
                except asyncio.TimeoutError:
                    last = Failure(
                        "timeout",
                        f"no answer within {merged['timeout']:g}s",
                        f"no answer within {merged['timeout']:g}s",
                        retryable=True,
                    )
                except Exception as exc:  # noqa: BLE001 -- classified below, re-raised if unknown
                    last = self._classify(exc)
                else:
                    last = None
                finally:
                    self.in_flight -= 1
            if last is None:
                break
            if not last.retryable or attempts >= self.retry.max_attempts:
                self.meter.record_failure(self.model, attempts=attempts)
                cls = LLMTimeoutError if last.kind == "timeout" else LLMError
                what = "failed" if not last.retryable else f"failed after {attempts} attempts"
                raise cls(
                    redact(f"{self.model}: request {what}: {last.message}"),
                    model=self.model,
                    attempts=attempts,
                    status=last.status,
                    retryable=last.retryable,
                    kind=last.kind,
                    provider_message=redact(last.provider_message),
                )
            wait = self.retry.delay(attempts, last.retry_after, self._rng)
            log.warning(
                "%s",
                redact(
                    f"{self.model}: attempt {attempts}/{self.retry.max_attempts} "
                    f"failed ({last.message}); retrying in {wait:.2f}s"
                ),
            )
            await asyncio.sleep(wait)
        completion.model = self.model
        completion.attempts = attempts
        completion.latency_s = time.monotonic() - start
        completion.cost_usd = self.meter.record(
            self.model, completion.usage, attempts=attempts, latency_s=completion.latency_s
        )
        return completion


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def usage_from(prompt: Any, completion: Any, reasoning: Any = None, total: Any = None) -> Usage:
    r = None if reasoning is None else _int(reasoning)
    return Usage(_int(prompt), _int(completion), r, _int(total))


def import_sdk(name: str) -> Any:
    """The provider SDK module, or an ImportError that says how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(
            f"the '{name}' package is needed for '{name}:' models; install it with: pip install 'kernelsmith[llm]'"
        ) from exc
