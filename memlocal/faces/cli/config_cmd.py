"""``memlocal config``: inspect the effective configuration."""

from __future__ import annotations

import click

from ...config import example_toml
from ._common import State, echo_json, json_option, main, pass_state, table


@main.group("config")
def config_group() -> None:
    """Inspect the effective configuration."""


@config_group.command("show")
@json_option
@pass_state
def config_show(state: State, as_json: bool) -> None:
    """Print every setting, its effective value and where it came from."""
    rows = state.config.rows()
    if as_json:
        echo_json({"file": str(state.config.file) if state.config.file else None, "settings": rows})
        return
    click.echo(f"config file: {state.config.file or '(none)'}")
    click.echo(table([(r["key"], _shown(r["value"]), r["source"], ",".join(r["env"])) for r in rows],
                     ("setting", "value", "source", "env"), max_width=None))


def _shown(value: object) -> str:
    """A setting's value as the config file writes it: ``true``/``false``, not Python's."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


@config_group.command("example")
def config_example() -> None:
    """Print a commented config file listing every setting (config.example.toml)."""
    click.echo(example_toml(), nl=False)
