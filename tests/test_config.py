"""The settings registry: precedence flag > environment > TOML > default, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memlocal.cli import main
from memlocal.config import SETTINGS, Config, example_toml
from memlocal.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_source() -> None:
    cfg = Config.load(environ={})
    assert cfg["recall.limit"] == 8
    assert cfg.source("recall.limit") == "default"


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    f = write(tmp_path / "c.toml", "[recall]\nlimit = 3\nmin_score = 0.2\n[inject]\nbudget_chars = 900\n")
    env = {"MEMLOCAL_RECALL_LIMIT": "5", "MEMLOCAL_INJECT_BUDGET_CHARS": "1200"}
    cfg = Config.load(f, overrides={"recall.limit": 7, "recall.min_score": None}, environ=env)
    assert (cfg["recall.limit"], cfg.source("recall.limit")) == (7, "flag")
    assert (cfg["inject.budget_chars"], cfg.source("inject.budget_chars")) == (1200, "env:MEMLOCAL_INJECT_BUDGET_CHARS")
    assert (cfg["recall.min_score"], cfg.source("recall.min_score")) == (0.2, f"file:{f}")
    assert cfg.source("llm.model") == "default"


def test_config_file_from_memlocal_config_and_user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = write(tmp_path / "c.toml", "[recall]\nlimit = 4\n")
    assert Config.load(environ={"MEMLOCAL_CONFIG": str(f)})["recall.limit"] == 4
    user = tmp_path / "xdg-config" / "memlocal" / "config.toml"
    user.parent.mkdir(parents=True)
    write(user, "[recall]\nlimit = 6\n")
    assert Config.load(environ={})["recall.limit"] == 6


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[recall]\nlimt = 3\n", "did you mean recall.limit"),
        ("[nothing]\nx = 1\n", "unknown setting"),
        ("[recall]\nlimit = 'many'\n", "recall.limit must be a int"),
        ("[llm]\nenabled = 1\n", "llm.enabled must be a bool"),
        ("[recall\nlimit = 3\n", "not valid TOML"),
    ],
)
def test_bad_files_are_errors_with_a_hint(tmp_path: Path, toml: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(write(tmp_path / "c.toml", toml), environ={})
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_environment_values_are_errors() -> None:
    with pytest.raises(ConfigError, match="MEMLOCAL_RECALL_LIMIT"):
        Config.load(environ={"MEMLOCAL_RECALL_LIMIT": "ten"})
    with pytest.raises(ConfigError, match="does not exist"):
        Config.load(environ={"MEMLOCAL_CONFIG": "/nonexistent/c.toml"})


def test_config_show_reports_values_and_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = write(tmp_path / "c.toml", "[recall]\nlimit = 3\n")
    monkeypatch.setenv("MEMLOCAL_DB", str(tmp_path / "env.db"))
    result = CliRunner().invoke(main, ["--config", str(f), "config", "show", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["key"]: r for r in json.loads(result.output)["settings"]}
    assert set(rows) == set(SETTINGS)
    assert rows["recall.limit"]["value"] == 3 and rows["recall.limit"]["source"] == f"file:{f}"
    assert rows["store.path"]["source"] == "env:MEMLOCAL_DB"
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "flag.db"), "config", "show"])
    assert "flag.db" in result.output and "flag" in result.output


def test_cli_reports_bad_config_in_one_line(tmp_path: Path) -> None:
    f = write(tmp_path / "c.toml", "[recall]\nlimt = 3\n")
    result = CliRunner().invoke(main, ["--config", str(f), "stats"])
    assert result.exit_code != 0
    assert result.stderr.strip().count("\n") == 0 and "recall.limit" in result.stderr


def test_config_example_lists_every_setting(tmp_path: Path) -> None:
    """config.example.toml is generated from the registry: `memlocal config example > config.example.toml`."""
    shipped = (ROOT / "config.example.toml").read_text(encoding="utf-8")
    assert shipped == example_toml()
    for key, setting in SETTINGS.items():
        assert f"# {key.rsplit('.', 1)[1]} =" in shipped, key
        for var in setting.env:
            assert var in shipped, var
    # The example, uncommented, is itself a valid config file.
    body = "\n".join(line[2:] for line in shipped.splitlines() if line.startswith("# [") or " = " in line)
    Config.load(write(tmp_path / "uncommented.toml", body), environ={})
