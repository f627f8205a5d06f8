"""The bucket side of memlocal: the S3 client, the reconciliation pass and the daemon.

Named ``memlocal_sync`` (its folder and its import name), so it never shadows or is shadowed by
another top-level ``sync``.

This package depends on ``memlocal``; ``memlocal`` never imports it by name (it finds the
write-through replicator through the ``memlocal.replicators`` entry point and the ``sync`` CLI
group through ``memlocal.commands``).

Modules: ``objects`` (keys, bodies, content hashes; pure), ``plan`` (the reconciliation
decisions; pure), ``bucket`` (the boto3 client, retries, error translation), ``state`` (the
sync's tables in the local SQLite file), ``engine`` (one pass: the effects), ``replicator``
(write-through saves and deletes, ``refresh_if_stale``), ``daemon`` (APScheduler + watchfiles)
and ``cli`` (``memlocal sync run|daemon|status``). See docs/sync.md.
"""

import logging

# A library logs; the application (the daemon, the server) decides where that goes.
logging.getLogger(__name__).addHandler(logging.NullHandler())
