"""The facade: ``MemoryBank`` and the jobs it wires (save, import/export, rescan, ...)."""
