"""Finding the tasks of a suite folder.

Accepted layouts (KernelBench's own folders work as they are):

    SUITE/level1/19_ReLU.py          plain KernelBench problem files, one level per folder
    SUITE/level2/my_task/reference.py  task directories (reference.py [+ seed.py, task.yaml])
    SUITE/level1/                      a level folder given directly (its level is read from the name)
    SUITE/19_ReLU.py, SUITE/my_task/   a flat folder: tasks without a level
    CURATED/tasks/<family>/<name>/     ``kernelsmith curate``'s output folder as it is (or
                                       its tasks/ or one family's folder): task directories
                                       at any depth, each task's level from its task.yaml's
                                       ``difficulty`` (level1, level2, ...)
    KernelBenchX/ (or its data/kernelbenchx/, or one category folder)
                                       KernelBench-X: <Category>/<name>.py, read by
                                       kernelsmith.kernelbenchx; the category is kept

Outside a level folder, a task directory whose task.yaml gives a
``difficulty`` (levelN, or N) is of that level.

A plain file may get a seed program from ``--seeds DIR``: ``DIR/<stem>.py``
(or ``DIR/levelN/<stem>.py``) defining ``ModelNew``; without one the run
starts from the reference (a translation step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional
from .. import kernelbenchx

_LEVEL_DIR = re.compile(r"^level[_-]?(\d+)$", re.IGNORECASE)
_NUMBERED = re.compile(r"^(\d+)_")


@dataclass(frozen=True)
class SuiteTask:
    #: stable name inside the suite: "level1/19_ReLU" or "softmax"
    key: str
    #: level number (KernelBench level folders), None for a flat suite
    level: Optional[int]
    #: the plain file or the task directory
    path: Path
    #: operator category (KernelBench-X's folder), None elsewhere
    category: Optional[str] = None

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    def to_dict(self) -> dict:
        out = {"key": self.key, "level": self.level, "path": str(self.path)}
        if self.category is not None:
            out["category"] = self.category
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "SuiteTask":
        return cls(data["key"], data.get("level"), Path(data["path"]), data.get("category"))


def _level_of(name: str) -> Optional[int]:
    match = _LEVEL_DIR.match(name)
    return int(match.group(1)) if match else None


def _sort_key(path: Path) -> tuple:
    # KernelBench names start with the problem number: sort 2_ before 10_.
    match = _NUMBERED.match(path.name)
    return (int(match.group(1)) if match else 1 << 30, path.name)


def _difficulty_level(task_dir: Path) -> Optional[int]:
    """The level a task directory's task.yaml gives as ``difficulty``
    (``level2``, ``2``), None when it gives none."""
    path = task_dir / "task.yaml"
    if not path.is_file():
        return None
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return None  # the task's load says what is wrong with it
    value = data.get("difficulty") if isinstance(data, dict) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.match(r"^(?:level[_-]?)?(\d+)$", str(value or "").strip(), re.IGNORECASE)
    return int(match.group(1)) if match else None


#: how deep below a suite folder task directories are looked for when it has
#: no task of its own (curate's OUT/tasks/<family>/<name>/ is 3)
_MAX_DEPTH = 4


def _nested_task_dirs(root: Path) -> list[Path]:
    """Task directories below ``root`` (not in it), breadth first by folder, in a stable order."""
    found: list[Path] = []
    folders = [root]
    for _ in range(_MAX_DEPTH):
        below: list[Path] = []
        for folder in folders:
            for entry in sorted(folder.iterdir(), key=_sort_key):
                if entry.name.startswith((".", "_")) or not entry.is_dir() or entry.is_symlink():
                    continue
                if (entry / "reference.py").exists():
                    found.append(entry)
                elif entry.name != "work":  # curate's resume state, no tasks
                    below.append(entry)
        folders = below
    return found


def _tasks_in(folder: Path) -> list[Path]:
    found = []
    for entry in sorted(folder.iterdir(), key=_sort_key):
        if entry.name.startswith((".", "_")):
            continue
        if entry.is_dir() and (entry / "reference.py").exists():
            found.append(entry)
        elif entry.is_file() and entry.suffix == ".py":
            found.append(entry)
    return found


def discover(suite_dir: str | Path, levels: Iterable[int] | None = None) -> list[SuiteTask]:
    """Tasks of ``suite_dir`` in a stable order (level, problem number, name)."""
    root = Path(suite_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: suite folder not found")
    wanted = set(levels) if levels else None
    tasks: list[SuiteTask] = []
    if (root / "reference.py").exists():  # a single task directory
        return [SuiteTask(root.name, None, root)]

    if kernelbenchx.is_suite(root):
        found = [SuiteTask(f.key, None, f.path, f.category) for f in kernelbenchx.discover(root)]
        if not found:
            raise FileNotFoundError(f"{root}: a KernelBench-X folder without task files")
        return found
    level_dirs = sorted(
        ((lvl, d) for d in root.iterdir() if d.is_dir() and (lvl := _level_of(d.name)) is not None),
        key=lambda item: item[0],
    )
    if level_dirs:
        for level, folder in level_dirs:
            if wanted is not None and level not in wanted:
                continue
            for path in _tasks_in(folder):
                tasks.append(SuiteTask(f"level{level}/{path.name.removesuffix('.py')}", level, path))
    else:
        folder_level = _level_of(root.name)
        paths = _tasks_in(root) or _nested_task_dirs(root)
        keys: dict[str, int] = {}
        for path in paths:
            # a level folder's name wins, as in the levelN/ layout above
            level = folder_level if folder_level is not None or not path.is_dir() else _difficulty_level(path)
            if wanted is not None and level is not None and level not in wanted:
                continue
            key = path.name.removesuffix(".py")
            key = f"level{level}/{key}" if level is not None else key
            if key in keys:  # the same name in two families: the path below the suite tells them apart
                key = path.relative_to(root).as_posix().removesuffix(".py")
            keys[key] = 1
            tasks.append(SuiteTask(key, level, path))
        tasks.sort(key=lambda t: (t.level if t.level is not None else 1 << 30,))
    if not tasks:
        raise FileNotFoundError(
            f"{root}: no tasks found (expected levelN/ folders or *.py KernelBench files / task directories"
            + (f" for levels {sorted(wanted)}" if wanted else "")
            + ")"
        )
    return tasks


def seed_for(task: SuiteTask, seeds_dir: str | Path | None) -> Optional[Path]:
    """The seed program given for a plain-file task, if any."""
    if seeds_dir is None or task.path.is_dir():
        return None
    root = Path(seeds_dir)
    stem = task.path.stem
    for candidate in ([root / f"level{task.level}" / f"{stem}.py"] if task.level is not None else []) + [
        root / f"{stem}.py"
    ]:
        if candidate.exists():
            return candidate
    return None
