"""Imports that say what happened: a file that is not JSON Lines stops with one line,
Ctrl-C says how many were imported and that the same import continues, and a line written by
hand (its text alone) is dated now, and says so, rather than rejected."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import support
from conftest import Cli

from memlocal import MemoryBank
from memlocal.bank.portability import NOT_JSONL_AFTER, import_jsonl


def _line(i: int) -> str:
    return json.dumps({"id": f"mem-{i:08x}", "profileName": "bulk", "rawInput": f"Bulk fact number {i} about deploys",
                       "createdAt": "2026-01-02T03:04:05Z"}) + "\n"


def test_a_binary_file_stops_after_a_few_lines_with_one_line(tmp_path: Path, cli: Cli) -> None:
    binary = tmp_path / "photo.jpg"
    binary.write_bytes(bytes(range(256)) * 40 + b"\n".join(bytes([200 + i % 50]) * 30 for i in range(600)))
    code, out, err = cli("import", binary)
    assert code == 1 and out == "", out
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"Error: {binary} is not JSON Lines: lines 1-{NOT_JSONL_AFTER} are not JSON objects"), err
    assert "imported 0" in err
    code, out, _ = cli("import", binary, "--json")
    report = json.loads(out)
    assert code == 1 and report["stopped"] and len(report["rejected"]) == NOT_JSONL_AFTER


def test_many_bad_lines_are_counted_after_the_first_twenty(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "half.jsonl"
    path.write_text(_line(1) + "".join(json.dumps({"id": f"mem-{i:08x}", "profileName": "bulk", "rawInput": "x",
                                                   "createdAt": "2026-01-02T03:04:05Z", "confidence": 7}) + "\n"
                                       for i in range(2, 40)))
    code, out, err = cli("import", path)
    assert code == 1 and "imported 1, unchanged 0, rejected 38" in out
    assert len(err.splitlines()) == 21 and err.splitlines()[-1].startswith("... and 18 more rejected lines"), err


def test_a_line_with_only_its_text_is_dated_now_and_says_so(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "hand.jsonl"
    path.write_text('{"content": "Ana likes green tea"}\n{"rawInput": "Ana takes the 8:10 train"}\n')
    code, out, err = cli("import", path, "-p", "ana")
    assert code == 0, err
    assert out.strip() == ("imported 2, unchanged 0, rejected 0 (2 lines without createdAt dated now; "
                           "2 lines without an id given one)"), out
    memories = cli.json("list", "-p", "ana", "--json")["memories"]
    assert sorted(m["processedContent"] for m in memories) == ["Ana likes green tea", "Ana takes the 8:10 train"]
    assert all(m["createdAt"].startswith(memories[0]["createdAt"][:10]) for m in memories)
    code, out, _ = cli("import", path, "-p", "ana")  # its id comes from its text: found again, not copied
    assert code == 0 and out.startswith("imported 0, unchanged 2"), out
    code, out, err = cli("import", path)  # no profile anywhere: that is the one thing it lacks
    assert code == 1 and "lacks 'profileName' (give one on the line, or --profile)" in err, err


def test_stop_ends_an_import_between_lines_and_the_same_import_continues(bank: MemoryBank) -> None:
    lines = [_line(i) for i in range(5000)]
    asked = iter(range(10**6))
    report = import_jsonl(bank, lines, stop=lambda: next(asked) >= 2345)
    assert (report.interrupted, report.imported) == (2346, 2345)
    assert report.summary().startswith("interrupted before line 2346: imported 2345, unchanged 0, rejected 0; run "
                                       "the same import again to continue")
    assert bank.stats()["totalMemories"] == 2345
    again = import_jsonl(bank, lines)
    assert (again.imported, again.unchanged, again.interrupted) == (2655, 2345, None)


def test_ctrl_c_during_an_import_says_how_many_and_that_it_continues(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    MemoryBank(db).close()
    proc = support.spawn([sys.executable, "-m", "memlocal", "--db", str(db), "import", "-"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write("".join(_line(i) for i in range(2500)).encode())
        proc.stdin.flush()

        def stored() -> int:
            with sqlite3.connect(db) as conn:
                return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])

        support.wait_for(lambda: stored() >= 2000, timeout=60, what="the first batch to be written")
        proc.send_signal(signal.SIGINT)  # the reader waits for line 2501 on the pipe
        out, err = proc.communicate(_line(2500).encode(), timeout=60)  # line 2501, then the end
    finally:
        support.stop(proc)
    assert proc.returncode == 130, err
    assert out.decode().strip() == ("interrupted before line 2501: imported 2500, unchanged 0, rejected 0; run the "
                                    "same import again to continue (the lines already imported are skipped as "
                                    "unchanged)"), (out, err)
    assert "Traceback" not in err.decode() and "aborted" not in err.decode()
    with MemoryBank(db) as bank:
        assert bank.stats()["totalMemories"] == 2500
