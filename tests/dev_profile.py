"""Test fixture: realistic developers' profiles, written through the store with known timestamps
and counters (see ``memory_factory``): ``dev_profile`` (30 memories with varied ages, use and
categories; the profile the evidence gate was measured on) and ``agent_profile`` (about 30 facts
and preferences as agents save them, plus some context memories; the block and intent-recall
measurements). One loader, two data sets."""

from __future__ import annotations

from memlocal import Memory, MemoryBank
from memory_factory import days_ago, put

# Each memory: (key, content, category, age in days, access count).
Spec = tuple[str, str, str, float, int]

# The profile the evidence gate was measured on: 30 memories with varied ages, use and categories.
DEV_MEMORIES: tuple[Spec, ...] = (
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


# The profile of the block and intent-recall measurements: about 30 facts and preferences, as
# agents save them, plus some context memories.
AGENT_MEMORIES: tuple[Spec, ...] = (
    ("pytest", "Prefers pytest with plain asserts over unittest classes", "preference", 90, 14),
    ("indent", "Uses 4-space indentation and a 100-character line limit in Python", "preference", 200, 30),
    ("concise", "Prefers concise answers with the code first and the explanation after", "preference", 150, 41),
    ("commits", "Writes commit messages in the imperative mood with a short subject line", "preference", 120, 9),
    ("types", "Wants type hints everywhere and mypy in strict mode", "preference", 80, 6),
    ("review", "Likes code review comments to be direct and specific", "preference", 60, 3),
    ("terraform", "Infrastructure is managed with Terraform 1.6; state lives in an S3 bucket", "fact", 140, 5),
    ("redis", "Redis 7 is the cache for the session service, one primary and two replicas", "fact", 110, 4),
    ("rds", "The production database is PostgreSQL 15 on Amazon RDS in eu-west-1", "fact", 170, 7),
    ("python", "The project is on Python 3.12 now", "fact", 45, 8),
    ("manager", "My manager is Dana Whitfield; we have a 1:1 every Thursday", "fact", 100, 2),
    ("team", "The team is five engineers: Ana, Marco, Sam, Lee and me", "fact", 160, 3),
    ("standup", "Team standup is at 9:30 every weekday", "fact", 130, 6),
    ("meetings", "No meetings before 10am: mornings are for focused work", "preference", 75, 2),
    ("oncall", "The on-call rotation changes every Monday at noon", "fact", 50, 3),
    ("hiring", "We are hiring a senior backend engineer this quarter", "fact", 30, 1),
    ("office", "The office is on the third floor of the Harbour building", "fact", 210, 1),
    ("coffee", "The coffee machine on floor 3 is broken", "fact", 6, 0),
    ("runners", "CI runs on four self-hosted runners with 16 cores and 64 GB of RAM each", "fact", 65, 2),
    ("grafana", "API latency and error rates are on the Grafana board at grafana.internal/d/api", "fact", 55, 3),
    ("ooo", "Marco is out of office until the 14th", "fact", 4, 0),
    ("freeze", "The Q4 release freeze starts on December 1", "fact", 20, 1),
    ("ana", "Ana is allergic to peanuts", "fact", 95, 1),
    ("marco", "Marco is lactose intolerant", "fact", 95, 1),
    ("sam", "Sam has celiac disease and cannot eat gluten", "fact", 95, 1),
    ("groceries", "Orders groceries online every Sunday", "fact", 40, 0),
    ("doctor", "Has a doctor's appointment on Friday at 3pm", "context", 3, 0),
    ("flaky", "Currently debugging a flaky test in test_invoices.py that fails on the second run", "context", 1, 0),
    ("payments", "Refactoring the payments module to remove the legacy Stripe client", "context", 8, 1),
    ("deploy", "Deploys go out from the release branch on Tuesdays", "behavior", 35, 5),
    ("migrations", "Ask before running database migrations on production", "behavior", 70, 9),
    ("secrets", "Keeps API keys in 1Password, never in .env files", "behavior", 115, 4),
)



def put_profile(bank: MemoryBank, profile: str, memories: tuple[Spec, ...], first_id: int) -> dict[str, Memory]:
    """Put ``memories`` into ``profile`` with the ids ``mem-<first_id + i>``; returns them by key.
    A memory that was used was last used a third of its age ago."""
    out = {}
    for i, (key, content, category, age, count) in enumerate(memories):
        out[key] = put(bank, profile, content, category=category, created=days_ago(age),
                       last=days_ago(age / 3) if count else None, count=count,
                       memory_id=f"mem-{first_id + i:08x}")
    return out


def dev_profile(bank: MemoryBank, profile: str = "dev") -> dict[str, Memory]:
    """The 30 memories of ``DEV_MEMORIES`` in ``profile``, by key."""
    return put_profile(bank, profile, DEV_MEMORIES, 1)


def agent_profile(bank: MemoryBank, profile: str = "coder") -> dict[str, Memory]:
    """The memories of ``AGENT_MEMORIES`` in ``profile``, by key."""
    return put_profile(bank, profile, AGENT_MEMORIES, 0xA0000000)
