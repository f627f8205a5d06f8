"""README.md as a new user runs it: the CLI tour, as written, on a fresh database (its
placeholder id made --supersedes, history, get and delete fail), and the LangGraph example run
twice (a put of an unchanged value stored a new version: 4 memories, 2 superseded), its comment
true to what it prints."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import support

from memlocal import MemoryBank

ROOT = Path(__file__).resolve().parent.parent


def _block(section: str, lang: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    found = re.search(rf"^```{lang}\n(.*?)^```", text[start:], flags=re.M | re.S)
    assert found, f"README.md's {section!r} has a ```{lang} block"
    return found.group(1)


@pytest.mark.slow  # nineteen memlocal processes
def test_the_cli_tour_runs_as_written_on_a_fresh_database(tmp_path: Path) -> None:
    tour = _block("A tour of the CLI", "sh")
    assert "mem-" not in tour, "the tour names no id a fresh database cannot have"
    env = {**os.environ, "MEMLOCAL_DB": str(tmp_path / "tour.db"), "MEMLOCAL_LOCAL_ONLY_NOTICE": "false",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = support.run(["bash", "-e", "-o", "pipefail", "-c", tour], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "Error" not in result.stderr, result.stderr
    out = result.stdout
    superseded = re.search(r"Ana now works from Lisbon .*supersedes (mem-[0-9a-f]{8})", out)
    assert superseded, out
    old = superseded.group(1)
    assert re.search(rf"{old}\s+\S+ now\s+superseded by mem-", out), out  # history (and list --all)
    assert f"deleted {old}" in out and "imported 0, unchanged 4, rejected 0" in out, out


def test_the_langgraph_example_twice_stores_two_memories_and_says_what_it_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("langgraph")
    example = _block("A LangGraph store", "python")
    assert 'editor next ("Ana" alone)' in example
    monkeypatch.setenv("MEMLOCAL_DB", str(tmp_path / "lg.db"))
    monkeypatch.setenv("MEMLOCAL_LOCAL_ONLY_NOTICE", "false")
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        exec(compile(example, "README.md", "exec"), {"__name__": "readme_example"})
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == ["diet", "editor", "[('users',", "['diet']"] * 2, lines
    diet, editor = lines[0], lines[1]
    assert diet.startswith("diet ") and "'terms': ['Ana'], 'clusters': ['food']" in diet, diet
    assert editor.startswith("editor ") and "'terms': ['Ana'], 'clusters': []" in editor, editor
    with MemoryBank(tmp_path / "lg.db") as bank:
        stats = bank.stats()
    assert (stats["totalMemories"], stats["supersededMemories"]) == (2, 0), stats


def test_a_put_of_an_unchanged_value_changes_nothing(bank: MemoryBank) -> None:
    pytest.importorskip("langgraph")
    from memlocal.integrations.langgraph import MemlocalStore

    store = MemlocalStore(bank)
    store.put(("users", "ana"), "diet", {"text": "Ana is allergic to peanuts", "tags": ("food",)})
    first = store.get(("users", "ana"), "diet")
    store.put(("users", "ana"), "diet", {"text": "Ana is allergic to peanuts", "tags": ["food"]})
    again = store.get(("users", "ana"), "diet")
    assert first is not None and again is not None and again.updated_at == first.updated_at
    assert bank.stats()["totalMemories"] == 1
    store.put(("users", "ana"), "diet", {"text": "Ana is allergic to peanuts and shellfish"})
    assert (bank.stats()["totalMemories"], bank.stats()["supersededMemories"]) == (2, 1)
    store.put(("users", "ana"), "diet", {"text": "Ana is allergic to peanuts and shellfish"}, index=False)
    assert bank.stats()["totalMemories"] == 3  # the same value kept out of the ranking is a change
