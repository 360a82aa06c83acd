"""Writers for exported samples: JSONL, JSON, parquet, LLaMA-Factory.

Every writer is deterministic (keys in a fixed order, rows in the order
given) so that the same export with the same seed gives identical bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Sequence

SFT_FORMATS = ("messages", "prompt-completion", "llamafactory", "parquet")
RL_FORMATS = ("parquet", "jsonl", "openrlhf")


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "w") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def write_parquet(path: Path, rows: Sequence[dict[str, Any]], schema: Any = None) -> int:
    """Rows as one parquet table. ``schema`` (a pyarrow schema) pins the
    column types, so an export with zero rows or with a column that happens
    to be empty still has the same schema as any other."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    if schema is not None:
        table = pa.Table.from_pylist(list(rows), schema=schema)
    else:
        table = pa.Table.from_pylist(list(rows))
    pq.write_table(table, path)
    return table.num_rows


def render_text(messages: Sequence[dict[str, str]]) -> str:
    """Chat messages as plain text, for trainers that take a prompt string
    and apply no chat template of their own."""
    parts = []
    for message in messages:
        parts.append(message["content"].rstrip("\n"))
    return "\n\n".join(parts) + "\n"


def split_system(messages: Sequence[dict[str, str]]) -> tuple[str, list[dict[str, str]]]:
    """(system text, the other messages)."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    return system, [dict(m) for m in messages if m["role"] != "system"]


def llamafactory_dataset_info(name: str, file_name: str, style: str) -> dict[str, Any]:
    """The ``dataset_info.json`` entry LLaMA-Factory needs to find the file
    (data/README.md of LLaMA-Factory: alpaca and sharegpt formats)."""
    if style == "alpaca":
        return {
            name: {
                "file_name": file_name,
                "columns": {"prompt": "instruction", "query": "input", "response": "output", "system": "system"},
            }
        }
    if style == "sharegpt":
        return {
            name: {
                "file_name": file_name,
                "formatting": "sharegpt",
                "columns": {"messages": "conversations", "system": "system"},
                "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt"},
            }
        }
    raise ValueError(f"llamafactory style must be 'sharegpt' or 'alpaca', got '{style}'")
