"""Lengths of exported rows in tokens, and prompts compacted to fit.

Trainers cut or drop rows by token count (verl's ``RLHFDataset`` drops every
prompt over ``data.max_prompt_length`` when ``filter_overlong_prompts`` is on;
TRL truncates at ``max_length``), and kernelsmith prompts are long (a
reference, history, top programs, inspirations, the current program: 9-16K
characters). Export therefore counts tokens with the tokenizer the user
names, warns about rows over the length the user sets, and can drop the
optional parts of the recorded prompt until it fits.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

#: optional sections of a recorded user prompt, least useful first
#: (titles as kernelsmith.prompts renders them)
OPTIONAL_SECTIONS = ("Inspirations", "Top programs", "Previous attempts")

Messages = list[dict[str, Any]]


class TokenCounter:
    """Counts tokens of chat messages and texts.

    ``tokenizer``: a local path (or a name already in the Hugging Face cache;
    nothing is downloaded) loaded with ``transformers.AutoTokenizer``. Chat
    messages are counted through the tokenizer's chat template when it has
    one (what verl and TRL do), with the generation prompt. Without a
    tokenizer, characters / 4 stands in, and ``method`` says so.
    """

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = None
        self.method = "chars/4 (estimate: no tokenizer given)"
        if tokenizer is None:
            return
        if isinstance(tokenizer, str):
            try:
                from transformers import AutoTokenizer

                tokenizer_obj = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
            except (OSError, ValueError) as exc:
                raise ValueError(f"--tokenizer {tokenizer}: cannot load a tokenizer from it ({exc})") from None
            self.method = f"tokenizer {tokenizer}"
        else:
            tokenizer_obj = tokenizer
            self.method = f"tokenizer {type(tokenizer).__name__}"
        self.tokenizer = tokenizer_obj

    def text(self, text: str) -> int:
        if self.tokenizer is None:
            return (len(text) + 3) // 4
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def messages(self, messages: Messages, generation_prompt: bool = True) -> int:
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            return sum(self.text(str(m.get("content", ""))) for m in messages)
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return len(ids)


def _sections(text: str) -> list[tuple[str, int, int]]:
    """(title, start, end) of every ``## `` section of a prompt."""
    starts = [(m.group(1).strip(), m.start()) for m in re.finditer(r"(?m)^## (.+)$", text)]
    out = []
    for i, (title, start) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(text)
        out.append((title, start, end))
    return out


def _programs(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of the ``### N.`` programs inside one section."""
    marks = [m.start() for m in re.finditer(r"(?m)^### \d+\. ", text[start:end])]
    return [(start + a, start + (marks[i + 1] if i + 1 < len(marks) else end - start)) for i, a in enumerate(marks)]


def _drop_one(text: str) -> Optional[tuple[str, str]]:
    """The prompt with its least useful optional part removed, and what went;
    None when nothing optional is left. Inspirations go one by one from the
    last, then top programs from the last (the best stays longest), then the
    history of previous attempts as a whole."""
    sections = {title: (start, end) for title, start, end in _sections(text)}
    for title in OPTIONAL_SECTIONS:
        if title not in sections:
            continue
        start, end = sections[title]
        programs = _programs(text, start, end)
        if len(programs) > 1:
            a, b = programs[-1]
            return text[:a] + text[b:], f"{title.lower()}: one program"
        return text[:start] + text[end:], f"{title.lower()}: section"
    return None


@dataclass
class CompactResult:
    messages: Messages
    tokens: int
    dropped: list[str] = field(default_factory=list)
    fits: bool = True


def compact_messages(messages: Messages, max_tokens: int, count: Callable[[Messages], int]) -> CompactResult:
    """Drops optional parts of the last user message (inspirations, top
    programs, history) until ``count(messages) <= max_tokens``. The task,
    the reference, the current program with its evaluation and the
    instruction always stay."""
    messages = [dict(m) for m in messages]
    tokens = count(messages)
    dropped: list[str] = []
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    while tokens > max_tokens and users:
        i = users[-1]
        step = _drop_one(str(messages[i]["content"]))
        if step is None:
            break
        messages[i]["content"], what = step
        dropped.append(what)
        tokens = count(messages)
    return CompactResult(messages, tokens, dropped, tokens <= max_tokens)


@dataclass
class LengthReport:
    """Token lengths of the exported rows, for the summary."""

    method: str
    limit: Optional[int] = None
    prompt: list[int] = field(default_factory=list)
    completion: list[int] = field(default_factory=list)
    over_limit: int = 0
    compacted: int = 0
    #: whether prompts over the limit were compacted (--compact): the advice
    #: for rows still over it is then another, not --compact again
    compact: bool = False

    def add(self, prompt_tokens: int, completion_tokens: Optional[int] = None) -> None:
        self.prompt.append(prompt_tokens)
        if completion_tokens is not None:
            self.completion.append(completion_tokens)
        total = prompt_tokens + (completion_tokens or 0)
        if self.limit is not None and total > self.limit:
            self.over_limit += 1

    @staticmethod
    def _stats(values: Sequence[int]) -> dict[str, int]:
        if not values:
            return {}
        ordered = sorted(values)
        return {
            "min": ordered[0],
            "median": int(statistics.median(ordered)),
            "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            "max": ordered[-1],
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method,
            "limit": self.limit,
            "rows_over_limit": self.over_limit,
            "rows_compacted": self.compacted,
            "prompt_tokens": self._stats(self.prompt),
        }
        if self.compacted:
            out["compacted_line"] = self.compacted_line()
        if self.completion:
            out["completion_tokens"] = self._stats(self.completion)
        return out

    def warning(self, what: str) -> Optional[str]:
        if self.limit is None or not self.over_limit:
            return None
        head = (
            f"{self.over_limit} of {len(self.prompt)} rows are longer than {self.limit} tokens ({what}, {self.method})"
        )
        if self.compact:
            # --compact dropped all it may (inspirations, top programs,
            # history): what is left is the task, the parent and the answer
            return (
                f"{head} even after --compact (nothing more can be dropped from them); trainers cut or drop "
                "them: raise the trainer's limit and --max-tokens"
            )
        return f"{head}; trainers cut or drop them: raise the trainer's limit, or export with --compact"

    def compacted_line(self) -> Optional[str]:
        """The summary's line on compaction: how many were shortened, how many now fit."""
        if not self.compacted:
            return None
        still = f"; {self.over_limit} still over it" if self.over_limit else ", all now fit"
        return f"compacted {self.compacted} prompt(s) over {self.limit} tokens{still}"
