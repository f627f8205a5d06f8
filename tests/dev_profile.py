"""Test fixture: a realistic developer's profile of 30 memories with varied ages, use and
categories (the profile the evidence gate was measured on), written through the store with known
timestamps and counters (see ``memory_factory``)."""

from __future__ import annotations

from memlocal import Memory, MemoryBank
from memory_factory import days_ago, put

# (key, content, category, age in days, access count)
DEV_MEMORIES: tuple[tuple[str, str, str, float, int], ...] = (
    ("pytest", "Prefers pytest over unittest", "preference", 40, 6),
    ("indent", "Uses 4-space indentation and a 100-character line limit", "preference", 120, 12),
    ("lisbon", "Lives in Lisbon, timezone Europe/Lisbon", "fact", 200, 3),
    ("allergy", "The user is allergic to shellfish and vegetarian on weekdays", "fact", 90, 1),
    ("coffee", "Coffee order: oat-milk flat white, no sugar", "general", 2, 9),
    ("migrations", "Ask before running database migrations on production", "behavior", 10, 16),
    ("deploys", "Deploys go out from the release branch on Tuesdays", "behavior", 25, 4),
    ("staging", "Staging server is staging.internal.example.com", "fact", 60, 2),
    ("dark", "Prefers dark mode in every editor", "preference", 150, 0),
    ("neovim", "Edits code in Neovim with the LazyVim config", "preference", 100, 5),
    ("commits", "Writes commit messages in the imperative mood", "preference", 70, 1),
    ("standup", "Team standup is at 9:30 every weekday", "fact", 30, 3),
    ("manager", "Manager is Priya; weekly 1:1 on Thursdays", "fact", 45, 0),
    ("postgres", "Uses Postgres 15 locally through Docker Compose", "fact", 80, 2),
    ("ci", "CI runs on GitHub Actions; the lint job must pass before merge", "fact", 35, 1),
    ("concise", "Prefers concise answers with code first, explanation after", "preference", 5, 20),
    ("rust", "Is learning Rust on weekends", "context", 12, 0),
    ("falcon", "Project Falcon deadline is March 14", "context", 20, 2),
    ("flaky", "Reviewed PR 482: flaky test in the payment service", "context", 1, 0),
    ("secrets", "Keeps API keys in 1Password, never in .env files", "behavior", 50, 3),
    ("suite", "Runs the full test suite before pushing", "behavior", 15, 7),
    ("types", "Prefers type hints everywhere and mypy in strict mode", "preference", 65, 2),
    ("travel", "Books flights with the company travel desk", "general", 110, 0),
    ("tea", "Drinks green tea in the afternoon", "general", 8, 1),
    ("macos", "Uses macOS with a Dvorak keyboard layout", "fact", 170, 0),
    ("oncall", "The on-call rotation changes every Monday", "fact", 18, 1),
    ("scifi", "Likes sci-fi novels, especially The Expanse", "general", 130, 0),
    ("email", "Email summaries should be short bullet lists", "preference", 22, 2),
    ("leak", "Debugging session: memory leak in the image resizer", "context", 2, 1),
    ("report", "Send the weekly report to the team every Friday", "behavior", 9, 2),
)


def dev_profile(bank: MemoryBank, profile: str = "dev") -> dict[str, Memory]:
    """Put the 30 memories into ``profile``; returns them by key. A memory that was used was last
    used a third of its age ago."""
    out = {}
    for i, (key, content, category, age, count) in enumerate(DEV_MEMORIES):
        out[key] = put(bank, profile, content, category=category, created=days_ago(age),
                       last=days_ago(age / 3) if count else None, count=count,
                       memory_id=f"mem-{i + 1:08x}")
    return out
