"""Credentials kept out of the bank: find them in text and replace them by ``[REDACTED:<kind>]``.

The detectors are Yelp's ``detect-secrets`` plugins (maintained, and used by pre-commit hooks the
world over), run directly on the text rather than through its file scanner: AWS access and secret
keys, private keys (the whole PEM block goes), GitHub, GitLab, Slack, Stripe, Discord, Twilio,
SendGrid, Mailchimp, npm, PyPI, Square and Telegram tokens, Azure storage keys, JSON Web Tokens,
OpenAI keys and passwords in URLs (``https://user:pass@host``: the password goes). Added here:
Anthropic keys (``sk-ant-…``) and OpenAI's newer key shapes (``sk-proj-…``, ``sk-svcacct-…``,
``sk-admin-…``, and the 48-character legacy ``sk-…``), which its OpenAI plugin predates.

High-entropy strings: detect-secrets only looks at *quoted* strings in code; memories are prose,
so every run of base64-ish characters (``[A-Za-z0-9+/=_-]``) of at least ``ENTROPY_MIN_LENGTH``
characters that mixes upper case, lower case and digits is measured with the plugin's own Shannon
entropy, and redacted above ``ENTROPY_LIMIT`` bits per character. Tuned on LoCoMo's turns (no hit
in its 3746 turns, captions and queries, tests/test_secrets.py) and on ids: hex strings (git SHAs, hashes, UUIDs) are never
caught by entropy alone, nor are words, file paths or ``mem-`` ids.

The kinds (``aws-key``, ``private-key``, ...) are what a save result lists; values never leave
this module.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import importlib.util
import re
import sys
import threading
import unicodedata
from dataclasses import dataclass
from types import ModuleType
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, Iterable, Iterator

if TYPE_CHECKING:
    from detect_secrets.plugins.base import BasePlugin


class _DeferredModule(ModuleType):
    """Stands in for a module until an attribute it lacks is read, then imports the real module
    (which takes its place in ``sys.modules``) and answers from it."""

    def __getattr__(self, name: str) -> Any:
        with _DEFER_LOCK:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
        return getattr(real, name)


_DEFER_LOCK = threading.Lock()


def _defer_requests() -> None:
    """Stand in for ``requests`` while detect-secrets loads, unless something imported it already.

    detect-secrets' plugin modules import ``requests`` (and through it urllib3, charset_normalizer
    and http.cookiejar) at their top, for their online ``verify`` step, which memlocal never runs:
    about half of a CLI save's start-up. The stand-in keeps the real module's spec (so an
    ``import requests`` elsewhere finds it, as it finds any loaded module) and imports the real
    one on the first attribute read: other code of the process that uses ``requests`` gets it then.
    (``importlib.util.LazyLoader`` does not help here: on Python 3.11 the next ``import
    requests`` statement reads ``__spec__`` and so loads it at once.)"""
    if "requests" in sys.modules:
        return
    spec = importlib.util.find_spec("requests")
    if spec is None:
        return
    stand_in = _DeferredModule("requests")
    stand_in.__spec__ = spec
    sys.modules["requests"] = stand_in


from ..errors import ConfigError, ValidationError
from ..relevance.fold import is_invisible, project
from ..logs import use_projection

MODES: Final = ("redact", "reject")
ENTROPY_LIMIT: Final = 4.5  # detect-secrets' own default for base64 strings
ENTROPY_MIN_LENGTH: Final = 24

# Checked first: key shapes detect-secrets does not know (more specific ones first).
_EXTRA: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("anthropic-key", re.compile(r"sk-ant-[A-Za-z0-9]+-[A-Za-z0-9_-]{20,}")),
    ("openai-key", re.compile(r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}")),
    ("openai-key", re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9]{32,}")),
)

# A private key's marker line found by the plugin: redact from BEGIN to END (or to the end).
_PEM: Final = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|\Z)"
                         r"|PuTTY-User-Key-File-2.*?(?:Private-MAC: *\S+|\Z)", re.S)
_TOKEN: Final = re.compile(r"[A-Za-z0-9+/=_-]{%d,}" % ENTROPY_MIN_LENGTH)
_HEX: Final = re.compile(r"[0-9a-fA-F_-]+")
_JWT_TAIL: Final = re.compile(r"[A-Za-z0-9_.+/=-]*")
# What the AWS plugin's secret-key pattern needs besides the word "aws": the key itself, 40
# characters of [0-9a-zA-Z/+] (``aws.{0,20}?key.{0,20}?['"]([0-9a-zA-Z/+]{40})['"]``). Without
# it, "laws", "draws" and "paws" loaded the detectors (tens of ms) in the middle of a recall.
_AWS_SECRET_RUN: Final = re.compile(r"[0-9a-zA-Z/+]{40}")


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def _high_entropy(token: str) -> bool:
    if _HEX.fullmatch(token):  # ids and hashes: a hex digest has no more entropy than a key
        return False
    if not (any(c.isupper() for c in token) and any(c.islower() for c in token) and any(c.isdigit() for c in token)):
        return False
    return bool(_detectors().entropy.calculate_shannon_entropy(token) > ENTROPY_LIMIT)


def _plugin_spans(kind: str, plugin: BasePlugin, text: str, offset: int = 0) -> Iterator[tuple[int, int]]:
    """Where the plugin's patterns match ``text`` (shifted by ``offset``). A pattern's first
    group is the secret when it is one (the password of a URL, the quoted AWS secret key, an npm
    token); a short group is only a prefix (``ghp``), and then the whole match is the secret."""
    for regex in plugin.denylist:  # type: ignore[attr-defined]
        for m in regex.finditer(text):
            if kind == "jwt":  # its pattern ends lazily: take the whole signature, then validate
                end = _JWT_TAIL.match(text, m.end()).end()  # type: ignore[union-attr]
                if _detectors().jwt_valid(m.group()):
                    yield offset + m.start(), offset + end
                continue
            group = next((g for g in range(1, (regex.groups or 0) + 1) if m.group(g)), None)
            if group is not None and (kind == "basic-auth" or len(m.group(group)) >= 16):
                start, end = m.span(group)
            else:
                start, end = m.span()
            yield offset + start, offset + end


# Every credential shape but two lies within one whitespace-free word of 16 characters or more,
# or a URL: only such words are scanned, and only when one combined pattern finds something.
_LONG_WORD: Final = re.compile(r"\S{16,}")
_WORD: Final = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class _Detectors:
    """detect-secrets' plugins, loaded on the first text that could hold a credential (prose,
    most of what a bank holds and every recall shows, never needs them: ``_spans``)."""

    plugins: tuple[tuple[str, BasePlugin], ...]
    word_plugins: tuple[tuple[str, BasePlugin], ...]
    any_word_secret: re.Pattern[str]
    entropy: Any  # Base64HighEntropyString
    jwt_valid: Any  # JwtTokenDetector.is_formally_valid


@lru_cache(maxsize=1)
def _detectors() -> _Detectors:
    """Import detect-secrets (tens of ms: a long-lived process's first recall paid it) and make
    the plugins, once."""
    _defer_requests()
    from detect_secrets.plugins.aws import AWSKeyDetector  # after the deferral above
    from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.discord import DiscordBotTokenDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.mailchimp import MailchimpDetector
    from detect_secrets.plugins.npm import NpmDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.square_oauth import SquareOAuthDetector
    from detect_secrets.plugins.stripe import StripeDetector
    from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
    from detect_secrets.plugins.twilio import TwilioKeyDetector

    plugins: tuple[tuple[str, BasePlugin], ...] = (
        ("private-key", PrivateKeyDetector()),
        ("aws-key", AWSKeyDetector()),
        ("github-token", GitHubTokenDetector()),
        ("gitlab-token", GitLabTokenDetector()),
        ("slack-token", SlackDetector()),
        ("stripe-key", StripeDetector()),
        ("jwt", JwtTokenDetector()),
        ("basic-auth", BasicAuthDetector()),
        ("openai-key", OpenAIDetector()),
        ("discord-token", DiscordBotTokenDetector()),
        ("twilio-key", TwilioKeyDetector()),
        ("sendgrid-key", SendGridDetector()),
        ("mailchimp-key", MailchimpDetector()),
        ("npm-token", NpmDetector()),
        ("pypi-token", PypiTokenDetector()),
        ("azure-storage-key", AzureStorageKeyDetector()),
        ("square-oauth", SquareOAuthDetector()),
        ("telegram-token", TelegramBotTokenDetector()),
    )
    word_plugins = tuple((k, p) for k, p in plugins if k not in ("private-key", "aws-key"))
    any_word_secret = re.compile("|".join(
        f"(?{'i' if rx.flags & re.IGNORECASE else ''}:{rx.pattern})" if rx.flags & re.IGNORECASE else f"(?:{rx.pattern})"
        for _, plugin in word_plugins for rx in plugin.denylist  # type: ignore[attr-defined]
    ) + "|" + "|".join(f"(?:{rx.pattern})" for _, rx in _EXTRA))
    return _Detectors(plugins, word_plugins, any_word_secret, Base64HighEntropyString(),
                      JwtTokenDetector.is_formally_valid)


def warm() -> None:
    """Load the detectors now (a process that stays up does it beside its queries), rather
    than inside the first text that needs them."""
    _detectors()


def _spans(text: str) -> list[tuple[int, int, str]]:
    """Every credential's ``(start, end, kind)`` in ``text``; overlaps are resolved by the caller."""
    spans: list[tuple[int, int, str]] = []
    # The two that span words: a PEM block, and an AWS secret key assigned in code.
    if "PRIVATE KEY" in text or "PuTTY" in text:
        if any(True for _ in _detectors().plugins[0][1].analyze_string(text)):
            spans += [(m.start(), m.end(), "private-key") for m in _PEM.finditer(text)]
    if ("AKIA" in text or "ASIA" in text or "A3T" in text or "ABIA" in text or "ACCA" in text
            or ("aws" in text.lower() and _AWS_SECRET_RUN.search(text))):
        spans += [(a, b, "aws-key") for a, b in _plugin_spans("aws-key", _detectors().plugins[1][1], text)]
    if "://" not in text and max(map(len, text.split()), default=0) < 16:
        return spans  # the common case (prose): no word could hold a credential
    found = _detectors()
    for word in (_WORD if "://" in text else _LONG_WORD).finditer(text):
        w, offset = word.group(), word.start()
        if len(w) < 16 and "://" not in w:
            continue
        if found.any_word_secret.search(w):
            for kind, regex in _EXTRA:
                spans += [(offset + m.start(), offset + m.end(), kind) for m in regex.finditer(w)]
            for kind, plugin in found.word_plugins:
                spans += [(a, b, kind) for a, b in _plugin_spans(kind, plugin, w, offset)]
        if len(w) >= ENTROPY_MIN_LENGTH:
            for m in _TOKEN.finditer(w):
                if _high_entropy(m.group().strip("=")):
                    spans.append((offset + m.start(), offset + m.end(), "high-entropy"))
    return spans


# --- the forms people paste: key-value pairs, Authorization headers, CLI flags, encoded layers ---

# Cheap pre-checks (substrings of the lower-cased text, at C speed: a case-insensitive regex
# alternation cost ~15 µs a memory): without one of these there is no key-value credential and
# no header.
_KV_HINTS: Final = ("pass", "pwd", "secret", "token", "auth", "key")
_SCHEME_HINTS: Final = ("bearer", "basic")
# ``key = value`` / ``key: value`` in a config, an .env file, a query string, a log line or a
# shell command (``--password=…``); the key may be quoted (JSON, YAML). ``://`` is a URL, not a
# pair.
_KV: Final = re.compile(r"""(?<![\w.-])-{0,2}(["']?)([A-Za-z_][\w.-]*)\1[ \t]*(?:=|:(?!//))[ \t]*""")
# ``--password VALUE``: a long option and its value as the next argument.
_FLAG: Final = re.compile(r"(?<![\w.-])--([A-Za-z][\w-]*)[ \t]+(?=[^\s-])")
# ``curl -u user:pass`` / ``--user user:pass``: the password after the colon.
_CURL_USER: Final = re.compile(r"""(?<![\w-])(?:-u|--user)(?:[ \t]+|=)["']?[^\s:"'$]+:([^\s"']+)""")
_BEARER: Final = re.compile(r"(?i)(?<![A-Za-z0-9_-])bearer[ \t]+([A-Za-z0-9._~+/-]+=*)")
_BASIC: Final = re.compile(r"(?i)(?<![A-Za-z0-9_-])basic[ \t]+([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])")
_QUOTED: Final = {q: re.compile(r"%s((?:[^%s\\\n]|\\.)*)%s" % (q, q, q)) for q in "\"'"}
# A bare value: up to white space or what ends a value in JSON, a log line or a query string.
_BARE: Final = re.compile(r"[^\s\"'`,;{}\[\]]+")
_NEXT_PAIR: Final = re.compile(r"&(?=[\w.-]+=)")  # ``&next=`` ends a query string's value
_KEY_PART: Final = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
# Values that say there is no value here: a placeholder, a reference, a mask, a word.
_NOT_VALUES: Final = frozenset(
    "null none nil true false yes no on off empty unset required optional hidden redacted masked secret "
    "password token changeme_later example xxx n/a na tbd todo undefined default".split())
_SCHEMES: Final = {"bearer": "bearer-token", "basic": "basic-auth", "token": "token", "digest": "token"}
# Escapes people paste a URL or a string through: percent-encoding, ``\xNN``, ``\uNNNN``.
_ESCAPE: Final = re.compile(r"%[0-9A-Fa-f]{2}|\\x[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4}")


@lru_cache(maxsize=4096)
def _key_kind(name: str) -> str | None:
    """The kind of credential a key names (its last part: ``db_password``, ``GITHUB_TOKEN``,
    ``x-api-key``, ``clientSecret``), or ``None``. Only the last part counts: ``token_url``,
    ``password_min_length`` and ``auth_method`` name settings about a credential, not one."""
    parts = [p.lower() for p in _KEY_PART.findall(name)]
    if not parts:
        return None
    last = parts[-1]
    if last.endswith(("password", "passwd")) or last in ("pwd", "pass", "passphrase"):
        return "password"
    if last.endswith("apikey") or (last == "key" and len(parts) > 1 and parts[-2] == "api"):
        return "api-key"
    if last.endswith("secret") or (last == "key" and len(parts) > 1 and parts[-2] in ("secret", "private")):
        return "secret"
    if last.endswith("token") or last in ("auth", "authorization", "credentials"):
        return "token"
    return None


def _plausible(value: str, kind: str) -> bool:
    """Whether ``value`` after a credential's key is one (not a placeholder, a reference to
    another variable, a path, a mask, a count or a plain word)."""
    if len(value) < 4 or value.lower() in _NOT_VALUES:
        return False
    if value.startswith(("$", "%", "<", "{{", "[REDACTED", "/", "~/", "./", "../", "os.environ", "env:")):
        return False
    if not value.strip("*x.\u2022#-_ "):
        return False
    if kind != "password" and (value.isdigit() and len(value) < 8 or value.isalpha() and value.islower()):
        return False
    return True


def _value_at(view: str, pos: int) -> tuple[int, int] | None:
    """The span of the value that starts at ``pos``: inside its quotes, or a bare run."""
    if pos < len(view) and view[pos] in "\"'":
        m = _QUOTED[view[pos]].match(view, pos)
        if m is not None:
            return m.span(1)
    m = _BARE.match(view, pos)
    if m is None:
        return None
    end = m.end()
    cut = _NEXT_PAIR.search(view, pos, end)
    return pos, cut.start() if cut is not None else end


def _pair_span(view: str, pos: int, kind: str, key: str) -> tuple[int, int, str] | None:
    span = _value_at(view, pos)
    if span is None:
        return None
    a, b = span
    scheme = _SCHEMES.get(view[a:b].lower())
    if scheme is not None and key.lower().endswith(("auth", "authorization")):
        # ``Authorization: Bearer <token>``: the credential is the scheme's argument.
        rest = _BLANKS.match(view, b)
        if rest is None:
            return None
        span = _value_at(view, rest.end())
        if span is None:
            return None
        (a, b), kind = span, scheme
    value = view[a:b]
    return (a, b, kind) if _plausible(value, kind) else None


def _form_spans(view: str) -> list[tuple[int, int, str]]:
    """Credentials in the forms of configs, shells and logs (see docs/hygiene.md, "Secrets")."""
    spans: list[tuple[int, int, str]] = []
    low = view.lower()
    if any(hint in low for hint in _KV_HINTS):
        # A key (``password=``, ``"db_password": ``) and a flag (``--password``) name a value alike.
        keyed = [(m, m.group(2)) for m in _KV.finditer(view)]
        if "--" in view:
            keyed += [(m, m.group(1)) for m in _FLAG.finditer(view)]
        for m, key in keyed:
            kind = _key_kind(key)
            found = _pair_span(view, m.end(), kind, key) if kind is not None else None
            if found is not None:
                spans.append(found)
    if "-u" in view or "--user" in view:
        spans += [(*m.span(1), "basic-auth") for m in _CURL_USER.finditer(view) if not m.group(1).startswith("[REDACTED")]
    if any(hint in low for hint in _SCHEME_HINTS):
        for m in _BEARER.finditer(view):
            token = m.group(1)
            if len(token) >= 8 and (len(token) >= 20 or any(c.isdigit() for c in token)):
                spans.append((*m.span(1), "bearer-token"))
        for m in _BASIC.finditer(view):
            if _user_colon_password(m.group(1)):
                spans.append((*m.span(1), "basic-auth"))
    return spans


# The blanks between an Authorization scheme and its argument.
_BLANKS: Final = re.compile(r"[ \t]+")


def _user_colon_password(value: str) -> bool:
    """Whether ``value`` is base64 of ``user:password`` (what HTTP Basic carries)."""
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in raw and raw.isascii() and all(32 <= c < 127 for c in raw)


def _decoded(view: str) -> tuple[str, list[int], list[int]]:
    """``view`` with its escapes decoded, and for each decoded character the span of ``view``
    it came from (``starts[i]``, ``ends[i]``)."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for m in _ESCAPE.finditer(view):
        out.append(view[pos:m.start()])
        starts.extend(range(pos, m.start()))
        ends.extend(range(pos + 1, m.start() + 1))
        esc = m.group()
        out.append(chr(int(esc[1:] if esc[0] == "%" else esc[2:], 16)))
        starts.append(m.start())
        ends.append(m.end())
        pos = m.end()
    out.append(view[pos:])
    starts.extend(range(pos, len(view)))
    ends.extend(range(pos + 1, len(view) + 1))
    return "".join(out), starts, ends


# Percent-encoding nested this deep (``%253A`` is ``%3A`` encoded again) is decoded.
_MAX_LAYERS: Final = 3


# ``secrets.extra_patterns`` of the banks this process opened (``use_extra_patterns``): kept,
# never dropped, so a process redacts at least what each of its configurations asks for.
_USER_PATTERNS: dict[tuple[str, str], re.Pattern[str]] = {}


def use_extra_patterns(patterns: Iterable[tuple[str, str]]) -> None:
    """Redact ``(kind, regex)`` matches too, from now on (``secrets.extra_patterns``; the bank
    calls this on open). Texts redacted before are looked at again (the cache is cleared)."""
    new = {p: re.compile(p[1]) for p in patterns if p not in _USER_PATTERNS}
    if new:
        _USER_PATTERNS.update(new)
        redact.cache_clear()


def forget_extra_patterns() -> None:
    """Drop every pattern :func:`use_extra_patterns` added (a test, or a process that loads
    another configuration and means only its patterns)."""
    if _USER_PATTERNS:
        _USER_PATTERNS.clear()
        redact.cache_clear()


def _found(view: str, depth: int = 0) -> list[tuple[int, int, str]]:
    """Every credential's span in ``view``, each widened to its whole token (but for the kinds
    whose span is exact), including those behind escapes (decoded, found, and mapped back over
    the escaped characters)."""
    spans = _spans(view) + _form_spans(view)
    for (kind, _), rx in list(_USER_PATTERNS.items()):
        spans += [(m.start(), m.end(), kind) for m in rx.finditer(view) if m.end() > m.start()]
    spans = [(*_whole_token(view, a, b), kind) if kind not in _EXACT_KINDS else (a, b, kind) for a, b, kind in spans]
    if depth < _MAX_LAYERS and ("%" in view or "\\" in view) and _ESCAPE.search(view):
        decoded, starts, ends = _decoded(view)
        spans += [(starts[a], ends[b - 1], kind) for a, b, kind in _found(decoded, depth + 1) if b > a]
    return spans


@dataclass(frozen=True, slots=True)
class Redacted:
    """Text with its credentials replaced, and the kinds found (in order, without repeats)."""

    text: str
    kinds: tuple[str, ...]


# A pattern may match a key's first n characters only (GitHub's 36, Stripe's 24): the secret is
# the whole token around the match, so a longer key leaves nothing behind.
_TOKEN_BACK: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_TOKEN_TAIL: Final = re.compile(r"[A-Za-z0-9_+/=-]*")
_EXACT_KINDS: Final = frozenset({"basic-auth", "private-key", "jwt", "high-entropy", "password", "secret",
                                  "token", "api-key", "bearer-token"})


def _whole_token(view: str, start: int, end: int) -> tuple[int, int]:
    while start > 0 and view[start - 1] in _TOKEN_BACK:
        start -= 1
    return start, _TOKEN_TAIL.match(view, end).end()  # type: ignore[union-attr]


def _attached(text: str, end: int) -> int:
    """``end`` moved past the marks and invisible characters that follow it: they belong to the
    key's last character (``E\u0332``), and would be left dangling after the marker."""
    while end < len(text) and (unicodedata.category(text[end])[0] == "M" or is_invisible(text[end])):
        end += 1
    return end


@lru_cache(maxsize=4096)  # the renderer sees the same memories run after run
def redact(text: str) -> Redacted:
    """``text`` with every credential replaced by ``[REDACTED:<kind>]``.

    Credentials are looked for in :func:`memlocal.relevance.fold.project` of the text: the fold (look-alikes
    mapped to ASCII), then only what a credential can be made of (ASCII, digits of any script as
    ASCII digits, whitespace as a space); every other character (combining marks, private-use,
    unassigned, format, letters and symbols of other scripts) is dropped, so no character put
    inside a key hides it. The whole token each find is part of is cut out of the text as given,
    the dropped characters inside it included, so nothing left can recombine into the key.
    Overlapping finds keep the earliest (a specific detector is listed before the entropy check,
    so it names the kind); text that is already a marker is never matched again.
    """
    view, index = project(text)
    spans = _found(view)
    if not spans:
        return Redacted(text, ())
    # Specific detectors before the entropy check (so a key is named by its kind), then the
    # earliest, longest match first.
    chosen: list[tuple[int, int, str]] = []
    for span in sorted(spans, key=lambda s: (s[2] == "high-entropy", s[0], -s[1])):
        if any(span[0] < end and start < span[1] for start, end, _ in chosen):
            continue
        chosen.append(span)
    chosen.sort()
    if index is not None:  # back to the text as given
        positions = index()
        chosen = [(positions[a], _attached(text, positions[b - 1] + 1), kind) for a, b, kind in chosen]
    out, pos, kinds = [], 0, []
    for start, end, kind in chosen:
        out += [text[pos:start], marker(kind)]
        pos = end
        if kind not in kinds:
            kinds.append(kind)
    out.append(text[pos:])
    return Redacted("".join(out), tuple(kinds))


def redact_json(value: Any) -> tuple[Any, tuple[str, ...]]:
    """Every string of a JSON value redacted, object keys included, at any depth; the kinds found.
    Two keys that redact to the same text are both kept: the later one gets `` (2)``, `` (3)``…"""
    if isinstance(value, str):
        r = redact(value)
        return r.text, r.kinds
    if isinstance(value, (list, tuple)):
        parts = [redact_json(v) for v in value]
        return [v for v, _ in parts], merge_kinds(k for _, k in parts)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        groups: list[tuple[str, ...]] = []
        for key, v in value.items():
            if isinstance(key, str):
                r = redact(key)
                key = r.text
                groups.append(r.kinds)
                if r.kinds and key in out:
                    n = 2
                    while f"{key} ({n})" in out:
                        n += 1
                    key = f"{key} ({n})"
            v, kinds = redact_json(v)
            groups.append(kinds)
            out[key] = v
        return out, merge_kinds(groups)
    return value, ()


def merge_kinds(groups: Iterable[Iterable[str]]) -> tuple[str, ...]:
    """The kinds of several fields, in order of first appearance, without repeats."""
    return tuple(dict.fromkeys(k for group in groups for k in group))


def refuse_credential_name(name: str, what: str = "profile name") -> str:
    """Return ``name`` unless it holds a credential, else raise ``ValidationError`` (whatever
    ``secrets.mode`` says). A profile name is stored, synced and shown as given (it is part of
    the bucket key ``memory/<profile>/<id>.json``), and a redaction marker is not a valid name:
    so it is refused, never rewritten into another name. The message does not repeat it."""
    kinds = redact(name).kinds
    if kinds:
        raise ValidationError(f"the {what} holds a credential ({', '.join(kinds)}): choose another name; "
                              "nothing was saved")
    return name


def check_mode(mode: object) -> str:
    """``secrets.mode``: ``redact`` or ``reject``."""
    if mode not in MODES:
        raise ConfigError(f"secrets.mode must be one of {', '.join(MODES)}, got {mode!r}")
    return str(mode)


# Every log line memlocal writes passes the same projection (memlocal.logs cannot import this),
# uncached: a log line is seen once, and would push the block's memory texts out of the cache.
use_projection(lambda line: redact.__wrapped__(line).text)
