"""Updates without an LLM: whether a new statement restates an older one with a changed value.

An agent's bank keeps facts for months, and some are later restated with a new value ("The lab
meeting moved to Fridays at 10:00" after "The lab meeting is on Thursdays at 14:00"). Both stay
active unless something says the second replaces the first; a run that reads both cannot tell
which holds. :func:`relation` reads two texts and says:

- ``SURE`` (precision first): the same subject and the same scope ("for UK merchants", "in
  us-east-1", "for auth-service": :attr:`Statement.scope`), the same verb and other words, and
  values replaced by others of the kinds they were (a number, a time, a date, a version, a name,
  an identifier); a qualifier the old statement lacks makes another fact. A save supersedes the
  older memory (:meth:`memlocal.MemoryBank.save`, docs/hygiene.md "Updates").
- ``MAYBE``: the two plausibly state one thing with different values, but the rule is not sure
  (a subject said in other words, a changed verb, another scope or a qualifier added, a new
  holder of a role named with the change, a change said with "replaced" or "no longer").
  Nothing is retired (an LLM, when configured, may judge it); the block dates both lines so that
  the reader can order them (:func:`memlocal.services.injection.build_evidence_block`).
- After a sure update, :func:`replaced_values` says which values it replaced: the block dates
  the update and any line holding one ("The reading group is on Thursdays at 14:00" beside "The
  lab meeting moved to Fridays at 10:00"), another subject or the old value in other words.
- ``None``: unrelated, or look-alikes about different subjects ("build-01 has 8 cores" and
  "build-02 has 8 cores", "My dentist is Dr. Alvarez" and "My daughter's dentist is Dr. Osei",
  "The NeurIPS deadline is 15 May" and "The ICML deadline is 15 January"): never merged, never
  retired.

How a text is read (deterministic, no model): its tokens are split at the first verb into a
*subject* and a *predicate*. A token is a *value* when it holds a digit or a symbol (``14:00``,
``build-07``, ``#lab-daily``, ``v2.1``, an address), is capitalised inside the sentence (a name:
``Dr. Chen``, ``PulseGym``), or names a weekday or a month; the other words are *content*
(stopwords dropped, Snowball stems). Words that announce a change (``now``, ``moved``, ``since``,
``switched``, ``new``, ``was cut``, ``extended``, ...) are *markers* and belong to neither. The
subject is compared whole (content, values and the possessor: ``my``, ``our``, ``his``, ...), so
a look-alike whose subject differs in any word is never an update; a changed value in the subject
is another subject. A value right after "number", "item", "page", ... names which one ("note number 3")
and is part of what the statement is about, never a changed value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal, NamedTuple

from ..relevance import text

Relation = Literal["sure", "maybe"]
SURE: Final = "sure"
MAYBE: Final = "maybe"

# Verbs that say a value changed: as a statement's verb they stand for any verb ("The lab
# meeting moved to Fridays" restates "The lab meeting is on Thursdays").
CHANGE_VERBS: Final = frozenset("""
    moved changed switched cut extended raised lowered increased decreased reduced replaced
    updated upgraded downgraded migrated renamed
    """.split())
# Words that announce that a statement replaces an older one (the change verbs too). "since"
# and "currently" are weak: they mark a change but do not, alone, make a named subject's new
# value sure.
STRONG_MARKERS: Final = CHANGE_VERBS | frozenset("now new newly became instead anymore longer".split())
# Markers only in the subject ("My new phone number is ..."; "a new project" is no change).
_SUBJECT_MARKERS: Final = frozenset("new newly".split())
MARKERS: Final = STRONG_MARKERS | frozenset("since currently".split())
# The verbs that end a subject (its first one splits the text), besides any word ending in "ed".
_VERB_BASES: Final = """
    be have do take go end allow live move change switch run start meet cost pay use work leave
    arrive open close need require get become last begin finish expire prefer like love hate
    train own drive ride visit study teach manage lead report sit stay hold belong play cover
    include mean stand fall rise grow drop reset retrain track store keep send receive host
    deploy release ship build happen rotate renew support weigh measure speak write read eat
    drink sleep wake commute join attend call email book cook fly
    handle approve chair maintain coordinate oversee organise organize
    listen serve bind connect point resolve route forward expose mount proxy redirect
    """.split()
_IRREGULAR: Final = ("is are was were be been am has have had does did went goes takes took "
                     "ran runs meets met costs paid pays leaves left holds held keeps kept "
                     "sends sent gets got becomes became grows grew rises rose falls fell "
                     "stands stood will would can could must should shall may might").split()
VERBS: Final = frozenset([*_VERB_BASES, *(v + "s" for v in _VERB_BASES), *(v + "es" for v in _VERB_BASES),
                          *_IRREGULAR])
# Who a subject belongs to: a possessor or personal pronoun is part of the subject's identity.
_PERSONS: Final = {"i": "@i", "me": "@i", "my": "@i", "mine": "@i", "we": "@we", "us": "@we", "our": "@we",
                   "ours": "@we", "you": "@you", "your": "@you", "he": "@he", "him": "@he", "his": "@he",
                   "she": "@she", "her": "@she", "they": "@they", "them": "@they", "their": "@they"}
_CALENDAR: Final = frozenset("""
    monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays thursdays
    fridays saturdays sundays january february march april may june july august september october
    november december jan feb mar apr jun jul aug sep sept oct nov dec
    """.split())
_EDGE: Final = ".,;:!?()[]{}\"'\u2018\u2019\u201c\u201d"
_SYMBOL_RE: Final = re.compile(r"[\d#@/\\+$\u20ac\u00a3%:=_]|[a-z]-[a-z0-9]", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Statement:
    """A text as :func:`relation` reads it (see the module docstring)."""

    subject: frozenset[str]  # content stems, values and the possessor before the first verb
    subject_words: tuple[str, ...]  # the subject's words as written (no possessor), for a look-up
    verb: str  # the first verb's stem ("be" for is/are/was, "have" for has/had; "*" for a marker verb, "" for none)
    content: frozenset[str]  # the predicate's content stems (markers left out)
    values: frozenset[str]  # the predicate's values, lower case
    marked: bool  # a marker word says the statement changed
    strong: bool  # a strong marker does (see STRONG_MARKERS)
    # What the statement is limited to: the words and the names or identifiers after a scope
    # word ("for UK merchants", "in us-east-1", "for auth-service", "in staging", "on the free
    # plan"), not its times, numbers or days ("at 10:00", "on Tuesdays"): two statements with
    # another scope are two facts, whatever their values.
    scope: frozenset[str] = frozenset()
    holder: bool = False  # the subject is only names or identifiers ("Chen Wei", "build-01")

    @property
    def named(self) -> bool:
        """The subject names something beyond a pronoun ("my dentist", not "I")."""
        return any(not s.startswith("@") for s in self.subject)


# Numbers written as words are values ("need two approvals" -> "need one approval").
_NUMBER_WORDS: Final = frozenset("one two three four five six seven eight nine ten eleven twelve once twice".split())


def _is_value(token: str, first: bool) -> bool:
    low = token.lower()
    if _SYMBOL_RE.search(token) or low in _CALENDAR or low in _NUMBER_WORDS:
        return True
    return not first and token[:1].isupper() and low not in _PERSONS


def _stem(word: str) -> str | None:
    return text.stem(word)


# Per-word caches read in C (a block reads each of its lines' statements; words repeat).
_STEMS: Final[text.WordMemo[str | None]] = text.WordMemo(_stem)


class _Token(NamedTuple):
    """What :func:`statement` reads of one token, whatever its neighbours."""

    lower: str  # its lower case
    low: str  # ... with the typographic apostrophe made plain
    bare: str  # ... without a trailing 's
    go: bool  # a form of "go" ("went up": a change)
    marker: bool
    verb: bool
    value_first: bool  # a value as the text's first token
    value_later: bool  # a value anywhere else
    possessive: bool  # ends with 's ("the runner's deploy note": the next word is a noun)
    verb_stem: str  # "" unless a verb
    stem: str | None  # None for a value as the first token (not looked up)


def _read_token(token: str) -> _Token:
    """:class:`_Token` of ``token``."""
    lower = token.lower()
    low = lower.replace("\u2019", "'")
    bare = low[:-2] if low.endswith("'s") else low
    first = _is_value(token, True)
    # A value wherever it stands (a number, a symbol, a day) is read as a value before its stem
    # would be: no stem looked up (a new number in every text was a stemmer call per save).
    return _Token(lower, low, bare, bare in ("went", "gone", "goes", "go"), bare in MARKERS, low in VERBS,
                  first, first or _is_value(token, False), token.endswith(("'s", "\u2019s")),
                  _verb_stem(low) if low in VERBS else "", None if first else _STEMS[bare])


# Per-token cache read in C: an agent's texts repeat their words.
_TOKENS: Final[text.WordMemo[_Token]] = text.WordMemo(_read_token)


@lru_cache(maxsize=4096)  # a block compares each of its lines with the others
def statement(value: str) -> Statement:
    """The subject, content, values and markers of ``value`` (one sentence is assumed)."""
    subject: set[str] = set()
    words: list[str] = []
    content: set[str] = set()
    values: set[str] = set()
    marked = strong = False
    in_subject = True
    verb = ""
    verb_at = -1
    scope: set[str] = set()
    subject_names = 0  # the subject's values
    subject_seen: set[str] = set()
    raw = value.split()
    tokens, ends = [], []  # the tokens, and whether each ends a phrase ("merchants," "team;")
    for r in raw:
        t = r.strip(_EDGE)
        if t:
            tokens.append(t)
            ends.append(r.rstrip("\"')]}\u2019\u201d")[-1:] in (",", ";", ":"))
    read = list(map(_TOKENS.__getitem__, tokens))
    lead = _leading_clause(read, ends)
    in_scope = after_phrase = False
    for i, (_lower, low, bare, go, marker, is_verb, value_first, value_later, _possessive, verb_stem, stem) \
            in enumerate(read):
        if i < lead:
            # "Since the migration, the artifact bucket is ...": the clause is no part of the
            # subject. A change word's clause marks the statement and is its condition, read as
            # its scope (as "after the failover" at the end); a scope word's clause is its scope
            # ("In staging, ..."), its words the predicate's too.
            if i == 0:
                marked = marked or bare in _CHANGE_CLAUSE
            elif read[0].bare in _CHANGE_CLAUSE:
                if stem is not None or value_later:
                    scope.add(bare if value_later else stem or bare)
            elif value_later:
                values.add(bare)
                if _kind_is_scope(bare):
                    scope.add(bare)
            elif stem is not None:
                content.add(stem)
                scope.add(stem)
            continue
        if not in_subject:
            if bare in SCOPE_WORDS:
                in_scope = True
                continue
            if bare in _PHRASE_BREAKS:
                in_scope = after_phrase = False
        if after_phrase and not ends[i - 1]:
            if stem is not None or value_later:
                scope.add(bare if value_later else stem or bare)  # "after the failover": a condition
            continue
        after_phrase = False
        if go and i + 1 < len(tokens) and read[i + 1].lower in ("up", "down"):
            bare = "raised"  # "The rent went up to 1310 GBP"
            marker = True
        if not in_subject and i + 1 < len(tokens) and (
                (bare in _AFTER and read[i + 1].lower in _DETERMINERS)
                or (bare == "from" and read[i + 1].lower in ("next", "this"))):
            # "... is db-primary-02 after the failover", "... at 09:45 from next week": a weak
            # marker, and what follows is the statement's condition, read as its scope (never a
            # sure update of the plain fact).
            marked = in_scope = after_phrase = True
            continue
        if marker and (in_subject or bare not in _SUBJECT_MARKERS):
            marked = True
            strong = strong or bare in STRONG_MARKERS
            if bare in CHANGE_VERBS and ((in_subject and i) or (verb in ("be", "have") and i == verb_at + 1)):
                in_subject, verb = False, "*"  # "Standup moved to", "was upgraded to": the change is the verb
            continue
        if in_subject and i > lead and is_verb and read[i - 1].lower not in _DETERMINERS \
                and not read[i - 1].possessive \
                and not (i + 1 < len(read) and read[i + 1].verb and low not in _BE_HAVE
                         and (read[i + 1].low in _BE_HAVE
                              or (low.endswith("s") and not read[i + 1].low.endswith("s")))):
            # "the runner's deploy note", "Release trains leave", "the Postgres host is": nouns
            in_subject, verb, verb_at = False, verb_stem, i
            continue
        if bare in _PERSONS:
            if in_subject:
                subject.add(_PERSONS[bare])
            continue
        if value_first if i == 0 else value_later:
            if i and read[i - 1].lower.rstrip(".") in _NUMBERING:
                (subject if in_subject else content).add("#" + bare)  # an identity, not a value
                continue
            (subject if in_subject else values).add(bare)
            if in_subject:
                words.append(bare)
                subject_names += bare not in subject_seen
                subject_seen.add(bare)
            elif in_scope and _kind_is_scope(bare):
                scope.add(bare)
            if ends[i]:
                in_scope = False
            continue
        if stem is None:
            if ends[i]:
                in_scope = False
            continue
        (subject if in_subject else content).add(stem)
        if in_subject:
            words.append(bare)
            if i == lead and tokens[i][:1].isupper() and stem not in subject_seen:
                subject_names += 1  # a name as the sentence's first word ("Chen Wei is ...")
                subject_seen.add(stem)
        elif in_scope:
            scope.add(stem)
        if ends[i]:
            in_scope = False
    return Statement(frozenset(subject), tuple(words), verb, frozenset(content), frozenset(values), marked, strong,
                     frozenset(scope), bool(subject) and subject_names == len(subject))


# A value right after one of these names which one ("note number 3", "page 12"): it is
# part of what the statement is about, never a value that changed.
_NUMBERING: Final = frozenset("number no nr item part step chapter page line entry".split())
# A word after one of these is a noun ("the release train", "my train"), not the verb.
_DETERMINERS: Final = frozenset("the a an my our your his her their its this that these those".split())
# Words that open a scope: what follows them, until the phrase ends, says for whom, where or for
# what the statement holds ("for UK merchants", "in us-east-1", "during Black Friday").
SCOPE_WORDS: Final = frozenset("""
    for in on per during within without except across under outside inside
    """.split())
# What ends a scope phrase besides a comma or a semicolon: another preposition, a conjunction.
_PHRASE_BREAKS: Final = frozenset("""
    and or but to from by with of at after before since until than as when while where which who
    that because so then is are was were be has have had
    """.split())
# A leading clause that opens with one of these announces a change ("Since the migration, ...",
# "After the failover ...").
_CHANGE_CLAUSE: Final = frozenset("since after following from starting effective".split())
# "after the failover", "following the reorg" in the predicate: the statement says it changed.
_AFTER: Final = frozenset("after following".split())
_BE: Final = frozenset("is are was were be been am".split())
_HAVE: Final = frozenset("has have had".split())
_BE_HAVE: Final = _BE | _HAVE


_YEAR_RE: Final = re.compile(r"(?:19|20)\d\d")


def _kind_is_scope(value: str) -> bool:
    """A value that can name a scope: a name, an identifier or a year ("in 2025"), never a time,
    another number or a day."""
    return value_kind(value) in ("name", "id") or bool(_YEAR_RE.fullmatch(value))


def _leading_clause(read: "list[_Token]", ends: list[bool]) -> int:
    """How many tokens a leading clause takes ("Since the migration, the bucket is ...", "After
    the failover the primary is ...", "In staging, the timeout is ..."): 0 without one. It opens
    with a change word or a scope word and ends at a comma, or, without one, before the next
    determiner that follows a word of the clause."""
    if len(read) < 4 or not (read[0].bare in _CHANGE_CLAUSE or read[0].bare in SCOPE_WORDS):
        return 0
    for i in range(len(read) - 2):
        if ends[i]:
            return i + 1
        if i >= 2 and read[i].lower in _DETERMINERS and read[i].lower not in ("this", "that"):
            return i
        if read[i].verb and i:
            return 0  # "In March I moved ...": a verb before the clause ends; no clause read
    return 0


def _verb_stem(word: str) -> str:
    if word in _BE:
        return "be"
    if word in _HAVE:
        return "have"
    return text.stem(word) or word


_NUMBER_RE: Final = re.compile(r"[+\-]?[\d.,]+(?:st|nd|rd|th|k|m|%)?")
_TIME_RE: Final = re.compile(r"\d{1,2}[:h]\d{2}|\d{1,2}(?:am|pm)")


@lru_cache(maxsize=4096)
def value_kind(value: str) -> str:
    """What a value is, for "a value changed": ``time`` (14:00, 9am), ``number``, ``calendar``
    (a weekday or month), ``name`` (a capitalised word) or ``id`` (anything with symbols: build-07,
    #lab-daily, an address). A value replaced by one of another kind is not a changed value."""
    if _TIME_RE.fullmatch(value):
        return "time"
    if _NUMBER_RE.fullmatch(value) or value in _NUMBER_WORDS:
        return "number"
    if value in _CALENDAR:
        return "calendar"
    if value.isalpha():
        return "name"
    return "id"


def _changed(a: frozenset[str], b: frozenset[str]) -> bool:
    """A value of ``a`` that ``b`` no longer says, replaced by one of the same kind."""
    gone, added = a - b, b - a
    return bool(gone and added) and not {value_kind(v) for v in gone}.isdisjoint(value_kind(v) for v in added)


def relation(old: str, new: str) -> Relation | None:
    """Whether ``new`` restates ``old`` with a changed value: ``"sure"``, ``"maybe"`` or ``None``
    (see the module docstring). Order matters: ``new`` is the later statement.

    Precision first: sure only of the same subject and the same scope restated with
    another value and nothing else: the same verb, the same other words, no value of a new kind
    (a qualifier the old statement lacks, "for UK merchants", makes another fact). Whatever else
    plausibly restates the old statement is a maybe: nothing is retired, the block dates both."""
    a, b = statement(old), statement(new)
    if not a.subject or not b.subject:
        return None
    same_subject = a.subject == b.subject
    # A pronoun alone ("I ...") names no subject: its verb must be the same one ("I take the 07:45
    # train" / "I now take the 08:20 train"); "I moved to Berlin" is not sure to replace "I work at Acme".
    same_verb = a.verb == b.verb != "*" or (b.verb == "*" and a.named)
    if same_subject and not (a.values ^ b.values) and a.content == b.content:
        return None  # the same statement (the duplicate rules' business), or no value at all
    changed = _changed(a.values, b.values)
    if same_subject and same_verb and a.content == b.content and a.scope == b.scope \
            and _replaced(a.values - a.scope, b.values - b.scope):
        return SURE
    if same_subject:
        if changed and (_overlap(a.content, b.content) >= 0.5 or (b.marked and a.content & b.content)
                        or (b.strong and (a.verb == b.verb or b.verb == "*"))
                        # a thing (not a person: "Caroline is 25" / "Caroline went to Paris on 9
                        # June") restated with a qualifier added or dropped ("... is 16 from release 4.2")
                        or (not a.holder and (a.content <= b.content or b.content <= a.content))):
            return MAYBE  # "My dentist is now Dr. Chen at the Harbour Street practice" after "... the Riverside clinic"
        if a.values <= b.values and a.content <= b.content and (a.values or a.content) and a.verb == b.verb:
            return MAYBE  # all the old one said and more ("... penicillin and, since March, amoxicillin")
        if b.strong and a.content & b.content and b.content - a.content:
            return MAYBE  # a change in other words ("Expense reports are approved by the finance bot now, not Priyanka")
        if b.strong and a.verb == b.verb and a.values - b.values and not b.values - a.values:
            return MAYBE  # "We now deploy every weekday" after "We deploy on Tuesdays and Thursdays"
        return None
    if _holder_changed(a, b):
        return MAYBE  # "Kofi Asante is now the SRE lead ...; Chen Wei moved to the Risk team"
    if (b.strong or (b.marked and a.subject <= b.values)) and a.holder and a.content \
            and a.content <= b.subject | b.content and b.values - a.values - a.subject:
        return MAYBE  # "The on-call rotation is now owned by Kofi Asante" after "Chen Wei owns the on-call rotation"
    if b.strong and b.verb == "*" and a.values & b.values and b.values - a.values:
        return MAYBE  # "We replaced self-hosted Sentry with GlitchTip" after "Our error tracker is Sentry ..."
    if not changed:
        return None  # no value replaced by one of its kind: look-alikes, or two different facts
    if _overlap(_named(a.subject), _named(b.subject)) >= 0.5 and _overlap(a.content, b.content) >= 0.5:
        return MAYBE  # "The NeurIPS deadline is 15 May", "The paper deadline for NeurIPS was extended ..."
    if b.marked and a.subject & b.content:
        return MAYBE  # "I switched my gym to PulseGym" after "My gym membership is at FitHub"
    return None


def _replaced(gone_from: frozenset[str], into: frozenset[str]) -> bool:
    """Values of ``gone_from`` replaced in ``into`` and no value of a new kind added: every value
    ``into`` adds is of a kind one of the values it drops was ("5000 EUR" -> "5000 GBP", "24
    partitions and 7 days" -> "48 partitions and 14 days"; "v2" -> "v3 on 2 hosts" is not)."""
    gone, added = gone_from - into, into - gone_from
    if not gone or not added:
        return False
    kinds = {value_kind(v) for v in gone}
    return all(value_kind(v) in kinds for v in added)


def _holder_changed(a: Statement, b: Statement) -> bool:
    """A new holder of one role: two named subjects (names, no possessor), the same verb, most of
    the old predicate, and a new text that says the change ("now", "moved") and names the old
    holder ("Jonas Berg now leads the data platform team; Marta Silva moved to Search")."""
    if not a.holder or not b.holder or a.subject & b.subject:
        return False
    if not (a.verb == b.verb or b.verb == "*"):
        return False
    # The new text must say the change and name the old holder: two people doing one thing are
    # two facts ("Caroline volunteers at the shelter", "Melanie volunteers at the shelter").
    if not a.content or len(a.content & b.content) / len(a.content) < 0.5:
        return False
    if any(value_kind(t) == "id" for t in a.subject) and any(value_kind(t) == "id" for t in b.subject):
        # Machines, not people: "db-primary-02 is the primary database after the failover".
        return b.marked or a.content == b.content
    return b.marked and a.subject <= b.values  # the new text names the old holder


def _named(subject: frozenset[str]) -> frozenset[str]:
    return frozenset(s for s in subject if not s.startswith("@"))


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@lru_cache(maxsize=4096)
def values_in(value: str) -> frozenset[str]:
    """Every value ``value`` holds, in its subject or its predicate, lower case (as
    :func:`statement` reads them: ``build-01``, ``14:00``, ``thursdays``, ``pulsegym``)."""
    tokens = [t for t in [t.strip(_EDGE) for t in value.split()] if t]  # the runs of \S+ (the same white space)
    out: set[str] = set()
    for i, token in enumerate(tokens):
        low = token.lower().replace("\u2019", "'")
        bare = low[:-2] if low.endswith("'s") else low
        if bare in MARKERS or bare in _PERSONS or (i and low in VERBS):
            continue
        if _is_value(token, first=(i == 0)) and not (i and tokens[i - 1].lower().rstrip(".") in _NUMBERING):
            out.add(bare)
    return frozenset(out)


def replaced_values(old: str, new: str) -> frozenset[str]:
    """The values ``old`` stated that ``new``, its update, no longer does: what a reader could take
    for the current value if another line holds it ("The reading group is on Thursdays at 14:00"
    beside "The lab meeting moved to Fridays at 10:00"). A bare number of one or two digits is left
    out ("8" cores): too many unrelated facts hold one."""
    gone = statement(old).values - statement(new).values
    return frozenset(v for v in gone if not (value_kind(v) == "number" and (len(v.strip("+-.,%")) < 3
                                                                            or v in _NUMBER_WORDS)))
