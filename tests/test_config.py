"""The settings registry: precedence flag > environment > TOML > default, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Cli

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
        ("[recall]\nlimit = 'many'\n", "recall.limit must be an integer"),
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


def test_config_show_reports_values_and_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    f = write(tmp_path / "c.toml", "[recall]\nlimit = 3\n")
    monkeypatch.setenv("MEMLOCAL_DB", str(tmp_path / "env.db"))
    result = cli("--config", f, "config", "show", "--json", db=None)
    assert result.exit_code == 0, result.output
    rows = {r["key"]: r for r in json.loads(result.stdout)["settings"]}
    assert set(rows) == set(SETTINGS)
    assert rows["recall.limit"]["value"] == 3 and rows["recall.limit"]["source"] == f"file:{f}"
    assert rows["store.path"]["source"] == "env:MEMLOCAL_DB"
    result = cli("config", "show", db=tmp_path / "flag.db")
    assert "flag.db" in result.output and "flag" in result.output


def test_cli_reports_bad_config_in_one_line(tmp_path: Path, cli: Cli) -> None:
    f = write(tmp_path / "c.toml", "[recall]\nlimt = 3\n")
    result = cli("--config", f, "stats")
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


# --- limits ---------------------------------------------------------------------------------------


def test_every_number_has_limits() -> None:
    """A numeric setting without a range would load any value; each one declares its limits."""
    for setting in SETTINGS.values():
        if setting.type in (int, float):
            assert (setting.min is not None or setting.above is not None) and setting.max is not None, setting.key


@pytest.mark.parametrize(("var", "value", "needle"), [
    ("MEMLOCAL_INJECT_BUDGET_CHARS", "-5", "inject.budget_chars must be an integer from 0 to 1000000, got -5"),
    ("MEMLOCAL_LLM_TIMEOUT_S", "0", "llm.timeout_s must be a number more than 0 and at most 600, got 0.0"),
    ("MEMLOCAL_LLM_TIMEOUT_S", "nan", "llm.timeout_s must be a number more than 0"),
    ("MEMLOCAL_SYNC_INTERVAL_S", "inf", "sync.interval_s must be a number more than 0"),
    ("MEMLOCAL_SERVE_PORT", "70000", "serve.port must be an integer from 0 to 65535, got 70000"),
    ("MEMLOCAL_SYNC_ATTEMPTS", "0", "sync.attempts must be an integer from 1 to 20"),
    ("MEMLOCAL_RECALL_MIN_SCORE", "1.5", "recall.min_score must be a number from 0 to 1"),
    ("S3_BUCKET", "a/b", "bucket.name must be empty or a bucket name"),
    ("ANTHROPIC_MEMORY_MODEL", "  ", "llm.model must be a model name (not empty)"),
])
def test_values_out_of_limits_are_one_error_naming_setting_source_and_allowed(var: str, value: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        Config.load(environ={var: value})
    assert str(err.value).startswith(f"environment variable {var}: ") and needle in str(err.value)


def test_limits_apply_to_files_and_flags_too(tmp_path: Path) -> None:
    f = write(tmp_path / "c.toml", "[inject]\nbudget_chars = -5\n")
    with pytest.raises(ConfigError, match=rf"^{f}: inject.budget_chars must be an integer from 0 to 1000000, got -5$"):
        Config.load(f)
    with pytest.raises(ConfigError, match="^flag: serve.port must be an integer from 0 to 65535, got -1$"):
        Config.load(environ={}, overrides={"serve.port": -1})
    with pytest.raises(ConfigError, match="^flag: sync.debounce_s"):
        Config.load(environ={}).with_overrides(sync__debounce_s=-1.0)
    # The edges are allowed.
    cfg = Config.load(environ={"MEMLOCAL_INJECT_BUDGET_CHARS": "0", "MEMLOCAL_SERVE_PORT": "65535"})
    assert (cfg["inject.budget_chars"], cfg["serve.port"]) == (0, 65535)


def test_a_secret_out_of_limits_is_not_echoed() -> None:
    from memlocal.config import Setting, _coerce

    secret = Setting("x.token", str, "", "a token", secret=True, check=lambda v: "too short" if len(v) < 4 else None,
                     allowed="at least 4 characters")
    with pytest.raises(ConfigError, match=r"x.token must be at least 4 characters, got \*\*\*$"):
        _coerce(secret, "abc", "flag")


def test_the_cli_rejects_a_bad_value_before_touching_the_database(tmp_path: Path, cli: Cli) -> None:
    result = cli("inject", "-p", "ana", "hello", env={"MEMLOCAL_INJECT_BUDGET_CHARS": "-5"})
    assert result.exit_code != 0 and result.stdout == ""
    assert result.stderr.strip() == ("Error: environment variable MEMLOCAL_INJECT_BUDGET_CHARS: "
                                     "inject.budget_chars must be an integer from 0 to 1000000, got -5")
    assert not cli.db.exists()


def test_docs_list_every_setting_with_its_limits() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for key, setting in SETTINGS.items():
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{key}` |")), None)
        assert row is not None, f"{key} is missing from docs/configuration.md"
        assert (setting.limits() or "any string") in row, key


def test_every_setting_is_a_typed_field_of_its_sections_view(tmp_path: Path) -> None:
    """``config.<section>`` (a frozen dataclass per section) holds every setting of the section, each
    field of the setting's type, and reads the effective value: a setting added to ``SETTINGS``
    without its field fails here."""
    import dataclasses
    import typing

    f = tmp_path / "c.toml"
    f.write_text("[sync]\ninterval_s = 5\n[recall]\nlimit = 3\n")
    cfg = Config.load(f, overrides={"serve.port": 9000}, environ={"MEMLOCAL_RECALL_MIN_SCORE": "0.5"})
    sections = sorted({key.split(".")[0] for key in SETTINGS})
    problems = []
    for section in sections:
        view = getattr(cfg, section, None)
        if view is None or not dataclasses.is_dataclass(view):
            problems.append(f"memlocal/config.py: add the view Config.{section} (a frozen dataclass)")
            continue
        hints = typing.get_type_hints(type(view))
        declared = {f"{section}.{field.name}" for field in dataclasses.fields(view)}
        wanted = {key for key in SETTINGS if key.split(".")[0] == section}
        problems += [f"memlocal/config.py: add {key!r} to {type(view).__name__}" for key in sorted(wanted - declared)]
        problems += [f"memlocal/config.py: {type(view).__name__} has {key!r}, no setting" for key in sorted(declared - wanted)]
        for key in sorted(wanted & declared):
            name = key.split(".", 1)[1]
            if hints[name] is not SETTINGS[key].type:
                problems.append(f"{type(view).__name__}.{name} is {hints[name]}, the setting is {SETTINGS[key].type}")
            value = getattr(view, name)
            if type(value) is not SETTINGS[key].type or value != cfg[key]:
                problems.append(f"config.{key} is {value!r}, the registry holds {cfg[key]!r}")
    assert not problems, "\n".join(problems)
    assert (cfg.sync.interval_s, cfg.recall.limit, cfg.recall.min_score, cfg.serve.port) == (5.0, 3, 0.5, 9000)
    assert type(cfg.sync.interval_s) is float  # a TOML integer for a float setting
