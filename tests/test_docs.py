"""The docs match the product, in the manner of sqlite-utils' tests/test_docs.py: every CLI
command and option is in docs/cli.md, every setting is in config.example.toml and in the docs,
every REST route is in docs/rest.md. A failure says exactly what to document, and where."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest

from memlocal.faces.api import create_app
from memlocal.faces.cli import main
from memlocal.config import SETTINGS, Config, example_toml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _user_docs() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))])


def _commands(group: click.Group, ctx: click.Context, prefix: str = "memlocal") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        path = f"{prefix} {name}"
        found[path] = cmd
        if isinstance(cmd, click.Group):
            found.update(_commands(cmd, click.Context(cmd, parent=ctx), path))
    return found


def _sections(text: str) -> dict[str, str]:
    """docs/cli.md's sections by the command in their heading: "## `memlocal sync run`"."""
    sections: dict[str, str] = {}
    for block in re.split(r"^(?=#{2,3} )", text, flags=re.M):
        heading = re.match(r"#{2,3} `(memlocal[^`]*)`", block)
        if heading:
            sections[heading.group(1).strip()] = block
    return sections


COMMANDS = _commands(main, click.Context(main))


def test_every_command_has_a_section_in_cli_md() -> None:
    sections = _sections((DOCS / "cli.md").read_text(encoding="utf-8"))
    missing = [path for path in COMMANDS if path not in sections]
    assert not missing, "\n".join(f"docs/cli.md: add a section headed \"## `{p}`\" that says what it does" for p in missing)
    stale = [path for path in sections if path != "memlocal" and path not in COMMANDS]
    assert not stale, f"docs/cli.md documents commands that do not exist: {stale}"


def test_every_option_is_in_its_commands_section() -> None:
    sections = _sections((DOCS / "cli.md").read_text(encoding="utf-8"))
    problems = []
    for path, cmd in [("memlocal", main), *COMMANDS.items()]:
        text = sections.get(path, "")
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            names = sorted((o for o in (*param.opts, *param.secondary_opts) if o != "--help"),
                           key=lambda o: not o.startswith("--"))  # the long name first, then -p
            if names and not any(re.search(rf"`[^`]*{re.escape(n)}(?![\w-])", text) for n in names):
                problems.append(f"docs/cli.md, section \"{path}\": document the option `{names[0]}` ({param.help or 'no help'})")
    assert not problems, "\n".join(problems)


def test_config_example_is_generated_from_the_registry() -> None:
    assert (ROOT / "config.example.toml").read_text(encoding="utf-8") == example_toml(), \
        "config.example.toml is stale: regenerate it with `memlocal config example > config.example.toml`"


def test_every_setting_is_in_the_example_and_the_docs() -> None:
    example = (ROOT / "config.example.toml").read_text(encoding="utf-8")
    docs = _user_docs()
    problems = []
    for key, setting in SETTINGS.items():
        section, name = key.rsplit(".", 1)
        if f"# [{section}]" not in example or not re.search(rf"^# {re.escape(name)} = ", example, re.M):
            problems.append(f"config.example.toml lacks `{key}`: regenerate it with `memlocal config example`")
        if f"`{key}`" not in docs:
            envs = ", ".join(setting.env) or "no variable"
            problems.append(f"document the setting `{key}` ({envs}; default {setting.default!r}) in README.md or "
                            "a docs/*.md page, as `" + key + "` with its default and what it does")
    assert not problems, "\n".join(problems)


def _routes() -> list[tuple[str, str]]:
    app = create_app(OSError("docs test: no bank"), Config.load(environ={}))
    routes = [(method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops]
    # The routes outside the schema: the dashboard, the docs pages and the schema itself.
    routes += [("GET", "/"), ("GET", "/docs"), ("GET", "/redoc"), ("GET", "/openapi.json")]
    return routes


def test_every_rest_route_is_in_rest_md() -> None:
    rest = (DOCS / "rest.md").read_text(encoding="utf-8")
    missing = []
    for method, path in _routes():
        row = rf"^\|\s*`{method}`\s*\|\s*`{re.escape(path)}(\?[^`]*)?`\s*\|"
        if not re.search(row, rest, re.M):
            missing.append(f"docs/rest.md: add a table row \"| `{method}` | `{path}` | <what it answers> |\"")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")) + ["README.md"])
def test_docs_cite_nothing_outside_the_repository(page: str) -> None:
    """The spec and DESIGN.md are not in the repository: docs/spec.md summarises what is cited."""
    text = (ROOT / page if page == "README.md" else DOCS / page).read_text(encoding="utf-8")
    assert "DESIGN.md" not in text, f"{page}: cite the docs page that states the rule (docs/spec.md), not DESIGN.md"
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+:", link):
            target = (ROOT if page == "README.md" else DOCS) / link
            assert target.exists(), f"{page}: the link {link} leads nowhere"


def test_code_cites_docs_not_files_outside_the_repository() -> None:
    offenders = [str(p.relative_to(ROOT)) for folder in ("memlocal", "memlocal_sync", "tests", "scripts")
                 for p in (ROOT / folder).rglob("*.py") if "DESIGN" in p.read_text(encoding="utf-8")
                 and p.name != "test_docs.py"]
    assert not offenders, f"cite docs/spec.md (or the page that states the rule) instead of DESIGN.md in: {offenders}"


def test_code_comments_say_why_not_which_tracker_item() -> None:
    """A comment that cites "issue 13, item 9" points at a tracker the repository does not carry:
    say the reason, or cite the docs page that states the rule."""
    citation = re.compile(r"\bissues? #?\d+|\bitems? \d+[a-z]?\b", re.I)
    offenders = [f"{p.relative_to(ROOT)}:{n}" for folder in ("memlocal", "memlocal_sync", "tests", "scripts")
                 for p in (ROOT / folder).rglob("*.py") if p.name != "test_docs.py"
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if citation.search(line)]
    assert not offenders, f"tracker citations in: {offenders}"


def _module_map_rows() -> dict[str, str]:
    """docs/architecture.md's module map: each row's path (``memlocal/store/``, ``memlocal_sync/plan.py``)
    and its whole line."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| [a-z]+ \| `([^`]+)` \|.*$", table, re.M)}


def test_every_module_is_in_the_architecture_map() -> None:
    """Every module of both packages, subpackages included, is in the module map: a row of its own,
    or named in the row of the nearest package that has one, by its path inside that package
    (`database.py` in the `memlocal/store/` row, `schemas/` for a subpackage's ``__init__.py``);
    and every row names a module that exists."""
    rows = _module_map_rows()
    paths = [p.relative_to(ROOT).as_posix() for folder in ("memlocal", "memlocal_sync")
             for p in sorted((ROOT / folder).rglob("*.py")) if p.name != "__main__.py" and "__pycache__" not in p.parts]
    missing = []
    for path in paths:
        # A package is named by its folder (``memlocal/store/``), except the two roots, whose
        # ``__init__.py`` has a row of its own (the public names; the sync package's description).
        name = path.removesuffix("__init__.py") if path.endswith("/__init__.py") and path.count("/") > 1 else path
        if name in rows:
            continue
        holders = [p for p in rows if p.endswith("/") and name.startswith(p) and name != p]
        nearest = max(holders, key=len, default=None)
        if nearest is None or f"`{name[len(nearest):]}`" not in rows[nearest]:
            where = f"name `{name[len(nearest):]}` in the `{nearest}` row or " if nearest else ""
            missing.append(f"docs/architecture.md: {where}add `{name}` to the module map (its layer and what it does)")
    gone = [f"docs/architecture.md: the module map lists `{p}`, which does not exist" for p in rows
            if not (ROOT / p).exists()]
    assert not missing + gone, "\n".join(missing + gone)


def test_storage_md_names_the_full_text_tables_a_database_has(tmp_path: Path) -> None:
    """docs/storage.md says which FTS5 tables exist and who reads them: a schema change that adds
    or drops one fails here until the page says so."""
    from memlocal.store import Store

    store = Store(tmp_path / "fresh.db")
    try:
        rows = store.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%USING fts5%'").fetchall()
    finally:
        store.close()
    tables = {name for (name,) in rows}
    text = (DOCS / "storage.md").read_text(encoding="utf-8")
    missing = [f"docs/storage.md: describe the FTS5 table `{t}` (what it indexes, and what reads it)"
               for t in sorted(tables) if f"`{t}`" not in text]
    gone = [f"docs/storage.md names `{t}`, which a new database no longer has: update the page"
            for t in sorted(set(re.findall(r"`(\w+_fts\w*)`", text)) - tables)]
    assert not missing + gone, "\n".join(missing + gone)


def _layers_contract() -> list[list[str]]:
    """The modules of each layer of the import-linter ``layers`` contract, top layer first."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [[m.strip() for m in layer.split(":")] for layer in layers]


def _module_of_row(path: str) -> str:
    """``memlocal/store/`` -> ``memlocal.store``, ``memlocal_sync/plan.py`` -> ``memlocal_sync.plan``."""
    return path.removesuffix("/").removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_the_architecture_layers_are_the_layers_contract() -> None:
    """docs/architecture.md's layer column is the import-linter contract: each row's module is in
    the contract layer its column names, and the layers come bottom up in the contract's order."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([a-z]+) \| `([^`]+)` \|", text.split("## Module map", 1)[1].split("\n## ", 1)[0], re.M)
    contract = _layers_contract()
    names: dict[int, set[str]] = {}
    order: list[int] = []
    for layer, path in rows:
        module = _module_of_row(path)
        if module == "memlocal":  # the root package holds every layer; it only names the public API
            continue
        index = [i for i, mods in enumerate(contract) if any(module == m or module.startswith(m + ".") for m in mods)]
        assert index, f"architecture.md: {path} is in no layer of the import-linter layers contract"
        names.setdefault(index[0], set()).add(layer)
        if not order or order[-1] != index[0]:
            order.append(index[0])
    assert all(len(n) == 1 for n in names.values()), f"one name per contract layer: {names}"
    assert order == sorted(set(order), reverse=True) == list(range(len(contract)))[::-1], \
        "architecture.md lists the contract's layers bottom up, each layer's rows together"
    assert len({next(iter(n)) for n in names.values()}) == len(contract), "a name per layer, each its own"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_readme_python_examples_run(anthropic_fake: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Every ```python block of README.md runs as written, in order, against a temporary database
    (the isolated environment's data dir) and the fake Messages API (no network): the fake plays
    Claude for the memory tool's example, creating a memory file, then answering."""
    from anthropic_fake import Reply

    anthropic_fake.respond(
        Reply.message([{"type": "tool_use", "id": "toolu_readme", "name": "memory",
                        "input": {"command": "create", "path": "/memories/preferences/work.md",
                                  "file_text": "Reviews pull requests in the morning\n"}}], stop_reason="tool_use"),
        Reply.text("I'll remember that."))
    monkeypatch.chdir(tmp_path)
    blocks = _python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 3, "README.md's library, Claude memory tool and LangGraph examples"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "I'll remember that." in out and "/memories/preferences/work.md Reviews pull requests" in out
    assert "diet " in out and "[('users', 'ana')]" in out


def test_every_extension_point_is_documented_in_plugins_md() -> None:
    """docs/plugins.md names every Protocol and data type memlocal.plugins declares and every entry
    point group, as datasette's docs test checks its hookspecs against plugin_hooks.rst."""
    import inspect

    from memlocal import plugins

    text = (DOCS / "plugins.md").read_text(encoding="utf-8")
    declared = [name for name in plugins.__all__ if inspect.isclass(getattr(plugins, name))
                or name in ("NoteState", "PreparedRow", "Step", "Retention")]
    missing = [f"docs/plugins.md: describe `{name}` (memlocal/plugins.py)" for name in declared
               if f"`{name}`" not in text and f"**`{name}`**" not in text]
    missing += [f"docs/plugins.md: name the entry point group `{group}`" for group in plugins.EXTENSION_POINTS
                if f"`{group}`" not in text]
    assert not missing, "\n".join(missing)


def test_the_architecture_picture_names_every_module_of_the_map() -> None:
    """The picture of the house (docs/architecture.md) shows every top-level module and package of
    both packages that the module map lists, by its short name, so a module added to the map and
    left out of the picture fails here."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| [a-z]+ \| `([^`]+)` \|", text.split("## Module map", 1)[1].split("\n## ", 1)[0], re.M)
    picture = text.split("## The picture of the house", 1)[1].split("```", 2)[1]
    words = set(re.findall(r"[A-Za-z_]+", picture))
    top_level = [p for p in rows if re.fullmatch(r"(memlocal|memlocal_sync)/[a-z_]+(\.py|/)", p)]
    missing = [f"docs/architecture.md: show `{p}` in the picture of the house" for p in top_level
               if p.rstrip("/").split("/")[-1].removesuffix(".py") not in words | {"__init__"}]
    assert top_level and not missing, "\n".join(missing)
