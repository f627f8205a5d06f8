"""Logs never hold a credential: the server's access log writes paths without their
query values (checked with the bind rule's serve process, in test_api_serve.py), and every line
memlocal writes passes the projection the bank's texts pass."""

from __future__ import annotations

import logging

from memlocal.logs import RedactingFilter

_B62 = "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9bC1"


# The access log of ``memlocal serve`` (paths without their query values) is checked in
# tests/test_api_serve.py, test_non_loopback_bind_with_a_token_is_allowed_and_its_access_log_holds_no_token:
# one serve process for it and the bind rule.


def test_every_line_memlocal_logs_passes_the_projection() -> None:
    record = logging.LogRecord("memlocal.x", logging.WARNING, __file__, 1, "pushed %s for %s", None, None)
    record.args = (f"config password=Tr0ub4dor&3-horse", f"gh\u200bp_{_B62[:36]}")
    RedactingFilter().filter(record)
    line = record.getMessage()
    assert "Tr0ub4dor" not in line and _B62[:36] not in line and "[REDACTED:" in line
