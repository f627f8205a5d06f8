"""Vocabulary bridging without a model: compounds, spelling variants and broader terms.

Data for the tokenizer (:mod:`memlocal.relevance.text`), applied identically to queries and memories, so
that the same idea written differently gives the same terms:

- ``COMPOUNDS``: two words that are one idea, written apart, hyphenated or joined ("time zone",
  "time-zone", "timezone"; "e-mail", "email"; "set up", "setup"). The pair also yields the
  joined word, and keeps its own words: a word a memory says always finds it.
- ``VARIANTS``: spelling variants and everyday abbreviations mapped to one form before stemming
  (British and American spellings the stemmer does not unify, "k8s", "tz", "repo").
- ``BROADER``: a specific word also yields the broader word people ask with ("pytest" is a test
  framework, "vim" an editor, "indentation" is formatting). Only words whose broader sense is
  unambiguous are listed: the extra term is literal evidence, weighted by its IDF like any other.
  ``PLACE_NAMES``, the places by name, yield their kind in a memory only: a question that
  names one asks about that place (:func:`memlocal.relevance.text.narrow_places`).
- ``ZONE_REGIONS``: an IANA time-zone name (``Europe/Lisbon``) yields "timezone".
- ``GENERIC_WORDS``: everyday verbs, numbers and question frames ("get", "make", "thing",
  "first", "how long", "what kind of") that a bank of facts rarely says, so that their IDF is
  high although they carry little of what a question is about. A query weighs them at
  :data:`memlocal.relevance.scoring.GENERIC_WEIGHT` of their IDF. They stay terms (unlike stopwords): a
  memory still matches them, and ``TERMS_VERSION`` does not depend on this list.

These tables are not the spec's eight clusters (:mod:`memlocal.relevance.clusters`): a cluster is a loose
topic that counts as a light extra feature; these are near-synonyms that count as the word itself.
Changing them changes the terms of stored text, so :data:`memlocal.relevance.text.TERMS_VERSION` must be
bumped with any edit here.
"""

from __future__ import annotations

from itertools import chain
from typing import Final, Mapping

# "first second" -> "joined" (lowercase words as the tokenizer splits them: a hyphen splits too).
# A plural second word is matched as well ("time zones" -> "timezones").
_COMPOUND_PHRASES: Final = """
    time zone = timezone | e mail = email | set up = setup | sci fi = scifi | log in = login
    log out = logout | sign in = login | sign up = signup | check in = checkin | data base = database
    web site = website | web page = webpage | code base = codebase | back end = backend
    front end = frontend | full stack = fullstack | dead line = deadline | week end = weekend
    week day = weekday | road trip = roadtrip | sea food = seafood | dev ops = devops
    stand up = standup | follow up = followup | on call = oncall | work out = workout
    check up = checkup | lunch time = lunchtime | home page = homepage | pull request = pullrequest
    merge request = pullrequest | hot fix = hotfix | roll back = rollback | roll out = rollout
    health care = healthcare | check list = checklist | key board = keyboard | note book = notebook
    play list = playlist | e commerce = ecommerce | on boarding = onboarding | file name = filename
    user name = username | pass word = password | time stamp = timestamp | short cut = shortcut
    work flow = workflow | data set = dataset | white space = whitespace | wi fi = wifi
    vs code = vscode | guinea pig = guineapig | day time = daytime | birth day = birthday | pre commit = precommit
    type check = typecheck | build machine = buildmachine | build server = buildserver
    build box = buildbox | build agent = buildagent | operating system = os | api key = apikey
    pre production = preproduction | code freeze = codefreeze | team lead = teamlead | tech lead = techlead
    time off = timeoff | day off = dayoff | out of office = outofoffice
    new york = newyork | los angeles = losangeles | san francisco = sanfrancisco | las vegas = lasvegas
    san diego = sandiego | new orleans = neworleans | hong kong = hongkong
    video game = videogame | board game = boardgame
"""


def _compounds(spec: str) -> dict[tuple[str, ...], str]:
    out: dict[tuple[str, ...], str] = {}
    for item in spec.replace("\n", "|").split("|"):
        if not item.strip():
            continue
        phrase, joined = (part.split() for part in item.split("="))
        if len(phrase) not in (2, 3) or len(joined) != 1:
            continue  # two- and three-word compounds are matched
        out[tuple(phrase)] = joined[0]
        out[(*phrase[:-1], phrase[-1] + "s")] = joined[0] + "s"
    return out


COMPOUNDS: Final[Mapping[tuple[str, ...], str]] = _compounds(_COMPOUND_PHRASES)

VARIANTS: Final[Mapping[str, str]] = dict(
    pair.split("=")
    for pair in """
    colour=color colours=colors flavour=flavor flavours=flavors favourite=favorite
    favourites=favorites behaviour=behavior behaviours=behaviors organise=organize
    organised=organized organising=organizing analyse=analyze analysed=analyzed
    optimise=optimize optimised=optimized customise=customize customised=customized
    prioritise=prioritize realise=realize recognise=recognize summarise=summarize
    summarised=summarized apologise=apologize licence=license centre=center centres=centers
    theatre=theater theatres=theaters metre=meter metres=meters grey=gray cancelled=canceled
    cancelling=canceling programme=program programmes=programs catalogue=catalog
    dialogue=dialog defence=defense judgement=judgment mum=mom aeroplane=airplane tyre=tire
    tyres=tires jewellery=jewelry pyjamas=pajamas doughnut=donut doughnuts=donuts
    yoghurt=yogurt neighbour=neighbor neighbours=neighbors neighbourhood=neighborhood
    travelling=traveling travelled=traveled traveller=traveler travellers=travelers
    labelled=labeled modelling=modeling
    tz=timezone k8s=kubernetes js=javascript py=python db=database dbs=databases
    repo=repository repos=repositories config=configuration configs=configurations
    prod=production env=environment envs=environments pr=pullrequest prs=pullrequests
    msg=message msgs=messages pic=picture pics=pictures info=information
    nvim=neovim mins=minutes pup=puppy pups=puppies tourney=tournament tourneys=tournaments
    """.split()
) | {form: base for base, forms in (
    # Comparatives and superlatives the stemmer keeps apart ("fastest" is not "fast" to Porter2),
    # for adjectives whose "-er"/"-est" is regular. The "-ier"/"-iest" forms ("flakiest") and the
    # doubled consonants ("biggest") are handled by rule in memlocal.relevance.text (_degree). Not "long":
    # a question frame ("how long", GENERIC_WORDS), and "longer" should not find "longest" first.
    (adj, (adj + "er", adj + "est") if not adj.endswith("e") else (adj + "r", adj + "st"))
    for adj in """
    fast slow new old late large small high low short strong weak cheap quick near safe
    simple clean young great cool hard soft deep wide close loud quiet bright dark warm cold
    rich poor smart light fresh clear tight loose rare ripe brave calm dense fair fine firm
    kind mild neat odd plain proud pure rough sharp sick steep stiff strict sweet thick tough
    vast wild wise bold broad crisp faint harsh lean nice polite pale sure true tame
    """.split()) for form in forms} | {form: base for line in (
    # The irregular past forms of everyday verbs, which the stemmer leaves apart from the verb
    # ("won" is not "win" to Porter2): facts are told in the past ("Nate won the tournament"),
    # questions ask with the base ("when did Nate win?"). Not the forms that are another common
    # word too: left, saw, bit, drew (a name), led (LED), fed, sat (SAT), lit, lay, rose, spoke,
    # wound, bore, ground, stole, dove, felt, tore. Nor the generic verbs (GENERIC_WORDS: went,
    # made, found, took, ...): a question weighs them little; with them the semantic extra's
    # hit@5 was a task lower and LoCoMo's dated R@8 0.004 lower (docs/relevance.md).
    """
    win:won begin:began,begun become:became break:broke,broken buy:bought
    build:built catch:caught choose:chose,chosen drink:drank,drunk drive:drove,driven
    eat:ate,eaten fall:fell,fallen fight:fought fly:flew,flown
    forget:forgot,forgotten forgive:forgave,forgiven freeze:froze,frozen
    grow:grew,grown hear:heard hide:hid,hidden hold:held
    lose:lost mean:meant meet:met pay:paid ride:rode,ridden run:ran sell:sold send:sent
    sing:sang,sung sleep:slept speak:spoken spend:spent stand:stood steal:stolen swim:swam,swum
    teach:taught throw:threw,thrown
    understand:understood wake:woke,woken wear:wore,worn write:wrote,written
    """.split()) for base, forms in [line.split(":")] for form in forms.split(",")}

# word -> broader words it also yields (before stemming). Plurals are listed where they differ.
_BROADER_GROUPS: Final = {
    "test framework": """pytest unittest jest mocha junit rspec vitest nose2 doctest cypress
        playwright selenium jasmine karma phpunit minitest testng xunit nunit""",
    "editor": """vim neovim emacs vscode sublime intellij pycharm webstorm goland clion rider
        nano helix zed xcode""",
    "format": """indent indents indented indentation indentations whitespace prettier ruff
        autopep8 yapf isort gofmt rustfmt formatter formatters linter linters lint pep8 eslint
        flake8 pylint stylelint rubocop camelcase snakecase semicolons""",
    "deploy": """rollout rollouts rollback rollbacks hotfix hotfixes ship ships shipped
        release releases""",
    "schedule": """calendar calendars appointment appointments standup standups agenda
        timetable weekly daily biweekly monday mondays tuesday tuesdays wednesday wednesdays
        thursday thursdays friday fridays saturday saturdays sunday sundays weekday weekdays
        weekend weekends morning mornings afternoon afternoons evening evenings""",
    "location": """city cities town hometown country countries address located neighborhood
        lives lived relocated""",
    "timezone": """utc gmt cet cest pst pdt est edt cst cdt mst mdt bst jst aest aedt eet eest""",
    "diet": """allergy allergies allergic allergen allergens intolerance intolerant""",
    # Dietary rules and the foods people are allergic to are about food: a "what food ..." or
    # a meal's question should find them literally.
    "diet food": """vegetarian vegetarians vegan vegans pescatarian halal kosher celiac coeliac
        keto paleo lactose gluten peanut peanuts nut nuts shellfish dairy""",
    "food": """lunch lunches dinner dinners breakfast breakfasts brunch meal meals catering""",
    # What agents store about people, schedules and infrastructure, asked in other words.
    "manager": """boss bosses supervisor supervisors teamlead teamleads techlead techleads""",
    "vacation": """pto outofoffice ooo timeoff dayoff holiday holidays""",
    "cpu": """cpus cores vcpu vcpus processor processors""",
    "runner": """buildmachine buildmachines buildserver buildservers buildbox buildboxes buildagent
        buildagents""",
    "monitoring": """metric metrics grafana prometheus datadog kibana dashboard dashboards chart
        charts observability""",
    "freeze release": """codefreeze codefreezes""",
    # Everyday kinds a question names ("what pets / instruments / sports …?") and the instances
    # a memory states ("a guinea pig named Oscar", "plays the violin"): hypernyms whose sense is
    # unambiguous, written from the words' meaning, as the groups above.
    "pet": """dog dogs puppy puppies cat cats kitten kittens hamster hamsters guineapig guineapigs
        turtle turtles tortoise parrot parrots rabbit rabbits goldfish""",
    "instrument": """guitar guitars piano pianos violin violins cello drums drum flute clarinet
        saxophone trumpet ukulele banjo harp keyboardist guitarist pianist violinist drummer""",
    "sport": """basketball football soccer tennis baseball volleyball hockey golf rugby cricket
        badminton softball surfing skiing snowboarding cycling swimming skating skateboarding
        marathon triathlon""",
    "family": """mom moms dad dads mother mothers father fathers parent parents sister sisters
        brother brothers sibling siblings son sons daughter daughters husband wife grandma
        grandpa grandmother grandfather grandparents grandkids cousin cousins aunt uncle niece
        nephew kid kids child children toddler toddlers""",
    "coffee drink": """espresso espressos latte lattes cappuccino cappuccinos americano macchiato
        mocha""",
    "drink": """beverage beverages coffee coffees tea teas juice juices smoothie smoothies soda
        lemonade""",
    "os": """macos linux ubuntu debian fedora freebsd""",
    "credential": """secret secrets password passwords apikey apikeys passphrase""",
    "staging": """preprod preproduction""",
    # Places by name, for the questions that ask by kind ("which city / country / state …?",
    # "what European countries …?") about a fact that names one ("a trip to Rome"): world
    # knowledge, not a topic. Only names that are not also a common word or a first name
    # (no Jordan, Chad, Georgia, Turkey, Maine, Washington, Phoenix, Austin, Florence, Sydney,
    # Orlando, Brooklyn, Holland).
    "country location": """afghanistan algeria argentina armenia australia bangladesh belarus
        bolivia brazil cambodia cameroon canada chile china colombia cuba ecuador egypt ethiopia
        ghana guatemala haiti honduras india indonesia iran iraq israel jamaica japan kazakhstan
        kenya korea laos lebanon libya madagascar malaysia mexico mongolia morocco mozambique
        myanmar nepal nicaragua nigeria pakistan panama paraguay peru philippines rwanda senegal
        singapore somalia sudan syria taiwan tanzania thailand tunisia uganda uruguay venezuela
        vietnam yemen zambia zimbabwe usa""",
    "country location europe european": """albania austria belgium bosnia bulgaria croatia cyprus
        czechia denmark england estonia finland france germany greece hungary iceland ireland
        italy latvia lithuania luxembourg netherlands norway poland portugal romania
        russia scotland serbia slovakia slovenia spain sweden switzerland ukraine wales uk""",
    "city location": """london paris rome berlin madrid barcelona lisbon porto amsterdam vienna
        prague budapest warsaw krakow dublin edinburgh glasgow manchester liverpool athens istanbul
        moscow stockholm oslo copenhagen helsinki brussels zurich geneva milan venice naples munich
        hamburg tokyo kyoto osaka seoul beijing shanghai bangkok mumbai delhi bangalore dubai
        cairo nairobi melbourne toronto vancouver montreal chicago boston seattle denver miami
        atlanta dallas houston tampa nyc manhattan philadelphia detroit newyork
        losangeles sanfrancisco lasvegas sandiego neworleans hongkong""",
    "state location": """alabama alaska arizona arkansas california colorado connecticut delaware
        florida hawaii idaho illinois iowa kansas kentucky louisiana maryland massachusetts
        michigan minnesota mississippi missouri montana nebraska nevada ohio oklahoma oregon
        pennsylvania tennessee texas utah vermont wisconsin wyoming""",
    # More everyday kinds a question names and the instances a fact states (as "pet" above).
    "martial art sport": """karate judo taekwondo kickboxing jiujitsu kungfu aikido boxing mma
        wrestling fencing""",
    "outdoor": """hiking hike hikes hiked camping campsite surfing kayaking canoeing fishing
        climbing mountaineering skiing snowboarding biking backpacking rafting sailing picnic
        picnics""",
    "exercise": """yoga pilates jogging workout workouts weightlifting gym cardio crossfit
        stretching""",
    "team": """teammate teammates""",
    "movie": """film films""",
    "game": """rpg rpgs mmorpg videogame videogames console consoles xbox playstation nintendo
        gamer gamers esports boardgame boardgames""",
    "book": """novel novels paperback paperbacks ebook ebooks audiobook audiobooks memoir memoirs
        biography biographies""",
    "write writing": """screenplay screenplays essay essays poem poems poetry journaling""",
}

# The places by name among the groups above: a memory that names one says its kind too ("a
# trip to Rome" is about a city), but a question that names one asks about that place, not about
# every place of its kind ("which city in Ireland ...?" is not about Scotland).
PLACE_NAMES: Final = frozenset(chain.from_iterable(
    members.split() for broader, members in _BROADER_GROUPS.items()
    if broader.split()[0] in ("country", "city", "state")))

# A clock time ("9am", "10pm") is about a schedule, and the morning or the afternoon.
CLOCK_BROADER: Final = {"am": ("schedule", "morning"), "pm": ("schedule", "afternoon")}


def _broader(groups: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for broader, members in groups.items():
        for member in members.split():
            out.setdefault(member, []).extend(w for w in broader.split() if w != member)
    return {word: tuple(dict.fromkeys(extra)) for word, extra in out.items()}


BROADER: Final[Mapping[str, tuple[str, ...]]] = _broader(_BROADER_GROUPS)

# Continents and oceans that open an IANA zone name ("Europe/Lisbon", "America/New_York").
ZONE_REGIONS: Final = ("africa", "america", "antarctica", "arctic", "asia", "atlantic", "australia",
                       "europe", "indian", "pacific", "etc")

# Words that say how a question is asked, not what it is about (see the module docstring). The
# stems of these (and of their inflections, listed where the stemmer does not unify them) are
# down-weighted in a query; the question frames "how long / many / much / often" and "what
# kind / type / sort of" are here through their second word.
GENERIC_WORDS: Final = frozenset("""
    get got gets getting go goes going went gone make makes made making do does done doing
    like likes liked find finds found thing things first second two three one last next new
    good great kind kinds type types sort sorts long many much often take takes took taken
    give gives gave given come comes came say says said tell tells told know knows knew
    think thinks thought want wants wanted need needs needed see sees saw seen look looks
    looked feel feels felt way ways time times day days lot lots bring brings brought put
    keep keeps kept describe describes described mention mentions mentioned share shares
    shared talk talks talked discuss discusses discussed recent recently current currently
    later
""".split())
