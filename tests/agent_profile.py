"""Test fixture: the developer's profile of the block and intent-recall measurements: about 30
facts and preferences, as agents save them, plus some context memories, with realistic ages
and use (written through the store with known timestamps, see ``memory_factory``)."""

from __future__ import annotations

from memlocal import Memory, MemoryBank
from memory_factory import days_ago, put

# (key, content, category, age in days, access count)
AGENT_MEMORIES: tuple[tuple[str, str, str, float, int], ...] = (
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


def agent_profile(bank: MemoryBank, profile: str = "coder") -> dict[str, Memory]:
    """Put the memories into ``profile``; returns them by key. A memory that was used was last
    used a third of its age ago."""
    out = {}
    for i, (key, content, category, age, count) in enumerate(AGENT_MEMORIES):
        out[key] = put(bank, profile, content, category=category, created=days_ago(age),
                       last=days_ago(age / 3) if count else None, count=count,
                       memory_id=f"mem-{0xa0000000 + i:08x}")
    return out
