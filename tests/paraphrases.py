"""Queries that share no word with the memory they need (the semantic extra's paraphrase set).

Each entry is (profile fixture, memory key, query): the memory is one of ``dev_profile``'s
``AGENT_MEMORIES`` (``"agent"``) or ``DEV_MEMORIES`` (``"dev"``); the query asks for it in other
words, as a task would. No query shares a term (memlocal's stems, stopwords aside) with its
memory: ``tests/test_semantic.py`` checks that, so the lexical signal alone cannot find them and
what finds them is the model. Written before any measurement and not tuned on it; the share found
in the top 3 with the extra on is printed by ``python scripts/semantic_eval.py --paraphrases``.
"""

from __future__ import annotations

PARAPHRASES: tuple[tuple[str, str, str], ...] = (
    ("agent", "pytest", "which testing framework should my checks be written in?"),
    ("agent", "indent", "how wide may source rows be?"),
    ("agent", "concise", "how long should my replies be?"),
    ("agent", "commits", "how do I phrase what a git change did?"),
    ("agent", "types", "should I annotate function signatures for static checking?"),
    ("agent", "review", "how blunt should feedback on pull requests be?"),
    ("agent", "terraform", "which tool provisions our cloud resources as code?"),
    ("agent", "redis", "where are user logins kept in memory for fast lookup?"),
    ("agent", "rds", "which SQL engine backs the live app, and in what AWS region?"),
    ("agent", "python", "what interpreter version do we target?"),
    ("agent", "manager", "who is my boss?"),
    ("agent", "team", "how many developers are in our group?"),
    ("agent", "standup", "when is the daily sync meeting?"),
    ("agent", "meetings", "can I book a call with them at 8 o'clock?"),
    ("agent", "oncall", "when does pager duty hand over?"),
    ("agent", "hiring", "are there open positions for server-side developers?"),
    ("agent", "office", "where do we work from physically?"),
    ("agent", "coffee", "can I get an espresso at work?"),
    ("agent", "runners", "how much memory do the build agents have?"),
    ("agent", "grafana", "where can I see dashboards of response times?"),
    ("agent", "ooo", "who is on vacation right now?"),
    ("agent", "freeze", "when do we stop shipping for the holidays?"),
    ("agent", "ana", "which colleague must avoid nuts?"),
    ("agent", "marco", "who cannot drink milk?"),
    ("agent", "sam", "who must avoid wheat at the team lunch?"),
    ("agent", "groceries", "when is the weekly food shopping done?"),
    ("agent", "doctor", "when is my medical checkup?"),
    ("agent", "flaky", "what intermittent failure am I chasing?"),
    ("agent", "payments", "what billing code am I cleaning up?"),
    ("agent", "deploy", "which day do we ship to production?"),
    ("agent", "migrations", "may I alter the live schema without permission?"),
    ("agent", "secrets", "where should credentials be stored?"),
    ("dev", "lisbon", "what time zone is the user in?"),
    ("dev", "tea", "what hot beverage do I like after lunch?"),
    ("dev", "macos", "which operating system does the user run?"),
    ("dev", "scifi", "what books does the user enjoy?"),
    ("dev", "leak", "what was eating RAM in the thumbnail code?"),
    ("dev", "staging", "what is the hostname of the pre-production box?"),
)
