"""The rows recall reads of a profile's memories: the one column list every path selects."""

from __future__ import annotations

from typing import Final

# The text is read only for a row without stored features (``NULL``: derived lazily).
_ROW_SQL: Final = (
    "SELECT id, created_us, last_accessed_us, access_count, confidence, category, features, is_active,"
    " CASE WHEN features IS NULL THEN processed_content END, CASE WHEN features IS NULL THEN summary END"
    " FROM memories WHERE profile = ?"
)

# What the in-memory index reads of a row: the above and the text, for its word count (the
# second pass's length normalisation, ``ProfileIndex.words``).
_INDEX_ROW_SQL: Final = _ROW_SQL.replace(" FROM memories", ", processed_content FROM memories", 1)
