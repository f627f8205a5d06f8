"""The CLI starts cheap (docs/cli.md, "Start-up"): a one-shot command imports only what it needs.

A runner that saves through ten ``memlocal save`` processes pays each process's start-up ten
times, so the heavy modules (boto3 and botocore, pydantic, detect-secrets' ``requests``, numpy,
the REST and MCP faces) are loaded on first use, and each command's module only when it runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import click
from s3server import S3, FaultProxy

import support
from memlocal.faces.cli import main
from memlocal.faces.cli._common import COMMAND_MODULES

# Modules a save never needs once the breaker is open (and ``requests``: detect-secrets imports
# it for an online check memlocal never runs, so only a stand-in is registered).
HEAVY = ("boto3", "botocore", "pydantic", "numpy", "pandas", "requests", "urllib3", "fastapi", "mcp", "anthropic",
         "memlocal.faces.api", "memlocal.faces.inputs", "memlocal.faces.cli.serve", "memlocal.faces.cli.mcp_cmd", "memlocal.faces.cli.audit_cmd",
         "memlocal_sync.engine")

_LOADED = """
import sys, types

def loaded():
    return sorted(name for name in {heavy!r} if type(sys.modules.get(name)) is types.ModuleType)
"""


def _child(body: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    code = _LOADED.format(heavy=HEAVY) + body
    return support.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_importing_the_cli_loads_no_heavy_module() -> None:
    out = _child("import memlocal.faces.cli\nprint(loaded(), 'sqlite_utils' in sys.modules, 'memlocal.bank.facade' in sys.modules)")
    assert out.stdout.strip() == "[] False False", out.stdout + out.stderr


def test_each_command_lives_in_the_module_the_lazy_group_names() -> None:
    ctx = click.Context(main)
    for name, module in COMMAND_MODULES.items():
        cmd = main.get_command(ctx, name)
        assert cmd is not None, name
        assert cmd.callback is None or cmd.callback.__module__ == f"memlocal.faces.cli.{module}", (name, module)
    # and nothing registers itself on ``main`` without being listed (it would not be found)
    assert set(main.commands) <= set(COMMAND_MODULES), set(main.commands) - set(COMMAND_MODULES)


def test_a_save_against_a_frozen_bucket_loads_neither_boto3_nor_pydantic(
        s3: S3, fault_proxy: FaultProxy, cli: Any) -> None:
    """After the first save opened the host's breaker, a CLI save goes straight to the outbox
    without a request, and without importing the S3 client or the input models."""
    fault_proxy.freeze()
    env = {"INTERNAL_S3_ENDPOINT": fault_proxy.endpoint, "MEMLOCAL_SYNC_PUT_TIMEOUT_S": "0.5",
           "MEMLOCAL_SYNC_BREAKER_S": "600"}
    res = cli("save", "-p", "runner", "--json", "the save that waits out the timeout", env=env)
    assert res.exit_code == 0 and json.loads(res.stdout)["synced"] is False, res.output
    body = ("from memlocal.faces.cli import main\ntry:\n    main(sys.argv[1:], prog_name='memlocal')\n"
            "except SystemExit:\n    pass\nprint('LOADED', loaded())")
    out = _child(body, "--db", str(cli.db), "save", "-p", "runner", "--category", "fact", "--json",
                 "a later save of another process", env=env)
    saved = json.loads(out.stdout[:out.stdout.rindex("LOADED")])
    assert saved["synced"] is False, out.stdout + out.stderr
    assert out.stdout.rstrip().endswith("LOADED []"), out.stdout + out.stderr
    assert fault_proxy.received == 1  # the first save's request; the second sent none
    fault_proxy.thaw()
