"""Every default the docs state is the one ``memlocal config show`` prints: each table with a
``default`` column whose row names a setting, and each mention of a setting with its value in
parentheses (`` `sync.hydrate_deadline_s` (5 s) ``), in README.md and every docs/ page
(``sync.deadline_s`` was 12 in docs/sync.md and ``config show`` but 15 in docs/configuration.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

from conftest import Cli

from memlocal.config import SETTINGS

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_NUMBER = r"-?\d[\d_,]*(?:\.\d+)?"
_KEY = re.compile(r"`([a-z_]+\.[a-z_]+)`")
# A value in parentheses right after a setting's name: a number and its unit, then the end of the
# parenthesis, "by default" or the next clause ("(2 processes here)" is not a default).
_PROSE = re.compile(rf"`([a-z_]+\.[a-z_]+)`\s+\(({_NUMBER})\s*(KiB|MiB|GiB|s|characters|days)?(?=\)|\s+by default|;|,)")


def _value(cell: str) -> Any:
    """A table cell as a value (``None``: words, which state no value: "unset", "the user data dir")."""
    text = cell.strip()
    first = re.match(r"`([^`]*)`", text)
    bare = first.group(1) if first else text
    if bare in ("true", "false"):
        return bare == "true"
    number = re.fullmatch(rf"({_NUMBER})\s*(KiB|MiB|GiB)?", bare)
    if number:
        return float(number.group(1).replace("_", "").replace(",", "")) * _UNITS.get(number.group(2) or "", 1)
    string = re.fullmatch(r'"([^"]*)"', bare)
    if string:
        return string.group(1)
    return bare if first else None


def _same(doc: Any, shown: str) -> bool:
    if isinstance(doc, bool):
        return shown == ("true" if doc else "false")
    if isinstance(doc, float):
        try:
            return float(shown) == doc
        except ValueError:
            return False
    return bool(doc == shown)


def _stated() -> Iterator[tuple[str, int, str, Any]]:
    """(page, line, setting, the value the page states as its default)."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        column: int | None = None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.startswith("|"):
                column = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if column is None:
                lowered = [c.lower() for c in cells]
                column = lowered.index("default") if "default" in lowered else -1
                continue
            key = _KEY.fullmatch(cells[0])
            if column < 0 or len(cells) <= column or key is None or key.group(1) not in SETTINGS:
                continue
            value = _value(cells[column])
            if value is not None:
                yield page.name, number, key.group(1), value
        for found in _PROSE.finditer(text):
            if found.group(1) in SETTINGS:
                value = float(found.group(2).replace("_", "").replace(",", "")) * _UNITS.get(found.group(3) or "", 1)
                yield page.name, text[:found.start()].count("\n") + 1, found.group(1), value


def test_every_stated_default_is_what_config_show_prints(cli: Cli) -> None:
    shown = {row["key"]: row for row in cli.json("config", "show", "--json", db=None)["settings"]}
    defaults = {key: ("" if row["value"] is None else str(row["value"]).lower() if isinstance(row["value"], bool)
                      else str(row["value"])) for key, row in shown.items() if row["source"] == "default"}
    defaults["store.path"] = SETTINGS["store.path"].default  # shown resolved: the user data dir's file
    stated = list(_stated())
    assert len({key for _, _, key, _ in stated}) >= 40, "the parser finds the settings tables"
    wrong = [f"{page}:{line}: `{key}` is stated as {value!r}, config show prints {defaults[key]!r}"
             for page, line, key, value in stated if key in defaults and not _same(value, defaults[key])]
    assert not wrong, "\n".join(wrong)
