"""The bucket side of memlocal: the S3 client, the reconciliation pass and the daemon.

This package depends on ``memlocal``; ``memlocal`` never imports it by name (it finds the
write-through replicator through the ``memlocal.replicators`` entry point).
"""
