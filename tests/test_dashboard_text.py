"""The dashboard words a memory as the other faces do: its summary cut at a word with "…"
(``humanize.shown_summary``), in every view that names a memory (the memories table, search
results, the memory page's heading, the preview's "In the block" and "Trimmed" tables, the delete
confirmation). The page's ``shownSummary`` is run in Node (Debian's ``nodejs``) and compared with
the Python function on the same inputs; the browser tests check the views themselves."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import support

from memlocal.humanize import shown_summary
from memlocal.model import default_summary

APP_JS = Path(__file__).resolve().parents[1] / "memlocal" / "faces" / "dashboard" / "static" / "app.js"

CONTENTS = [
    "Note 0 about the quarterly report layout and its tables.",
    "The customer asked to move the launch from 9 to 27 December because of the holidays",
    "Refund request PAY-902 blocked until finance signs off on the exception",
    "Short and whole.",
    "Exactly fifty characters long, no more and no less",
    "Exactly fifty characters long, no more and no less!",
    "A multi-line\n\ncontent   with    runs of whitespace that goes on past fifty characters",
    "Averyveryverylongsinglewordthatgoesonandonwithoutanyspaceatallforsure and more",
    "Ends on a comma at the fifty character mark, here, and then continues",
    "Peanut allergy: severe",
]


def cases() -> list[tuple[str, str]]:
    out = [(default_summary(c), c) for c in CONTENTS]
    out += [("Peanut allergy", "Has a severe peanut allergy; never suggest recipes with peanuts."),  # its own summary
            ("", "x" * 60), ("Already cut…", "Already cut and the content goes on")]
    return out


def test_the_page_cuts_summaries_as_the_cli_does() -> None:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node is missing: apt-get install -y nodejs (the browser tests check the page too)")
    source = APP_JS.read_text(encoding="utf-8")
    function = re.search(r"^function shownSummary\(.*?^}\n", source, re.M | re.S)
    assert function, "app.js defines shownSummary"
    script = function.group(0) + f"\nconsole.log(JSON.stringify({json.dumps(cases())}.map(([s, c]) => shownSummary(s, c))));"
    out = support.run([node, "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [shown_summary(s, c) for s, c in cases()]
    # The examples: cut at a word, with the ellipsis.
    assert shown_summary(default_summary(CONTENTS[1]), CONTENTS[1]) == "The customer asked to move the launch from 9 to 27…"
    assert shown_summary(default_summary(CONTENTS[2]), CONTENTS[2]) == "Refund request PAY-902 blocked until finance signs…"


def test_every_view_names_a_memory_by_its_shown_summary() -> None:
    """No view writes a memory's raw summary into the page (the detail view's field list aside,
    which shows every stored field as it is)."""
    source = APP_JS.read_text(encoding="utf-8")
    assert not re.findall(r"\.summary\s*\|\||\$\{\w+\.summary\}", source)
    assert source.count("memoryName(") >= 7  # the definition and the six places that name a memory
