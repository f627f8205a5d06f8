"""The eight semantic clusters: vocabulary groups that bridge a query and a memory sharing a topic
but no literal word ("diet" and "peanut allergy" both touch *food*).

The clusters are data. Each vocabulary is written as plain words and stemmed at import time with
the tokenizer's own stemmer, so "allergies", "allergic" and "allergy" all land on the terms the
tokenizer produces. A word may belong to several clusters (``diet`` is food and health). Very
generic words ("work" as a verb, "use", "make") are left out on purpose: a cluster that fires on
everything bridges nothing. Edit the vocabularies here; ``text.TERMS_VERSION`` need not change,
because cluster membership is derived from terms at query time.
"""

from __future__ import annotations

from typing import Final, Mapping

from .text import stem

CLUSTER_WORDS: Final[Mapping[str, str]] = {
    "food": """
        food foods eat eats eating ate eaten meal meals breakfast lunch dinner brunch supper snack
        snacks diet diets dietary vegan vegetarian keto paleo gluten lactose dairy peanut peanuts
        nut nuts shellfish allergen cook cooks cooking cooked recipe recipes bake baking baked
        restaurant restaurants cafe bistro diner takeout coffee espresso latte tea drink drinks
        wine beer cocktail juice smoothie fruit fruits vegetable vegetables veggie meat chicken beef
        pork bacon fish seafood salmon tuna shrimp egg eggs cheese milk butter yogurt bread pasta
        pizza rice noodle noodles ramen soup salad dessert cake cookie cookies chocolate candy sugar
        sugary spice spices spicy sweet savory taste tastes tasty flavor flavour cuisine chef kitchen
        grocery groceries calorie calories protein carbs nutrition nutritious hungry appetite sushi
        burger burgers sandwich barbecue bbq grill menu vitamin vitamins organic fasting beverage
        picnic potluck oven stove
    """,
    "health": """
        health healthy wellness wellbeing doctor doctors physician nurse hospital clinic medical
        medicine medicines medication medications pill pills prescription pharmacy allergy
        allergies allergic intolerance illness ill sick sickness disease diseases symptom symptoms
        pain ache injury injured therapy therapist counseling counselor psychologist psychiatrist
        mental anxiety depression stress stressed burnout sleep insomnia tired fatigue exercise
        exercises workout workouts gym fitness yoga pilates jogging marathon diet dietary weight
        obesity blood diabetes diabetic asthma surgery vaccine vaccination dentist dental checkup
        cancer heart cardio flu fever cold cough headache migraine nutrition meditation recovery
        rehab physiotherapy pregnancy pregnant disability wheelchair hearing vision glasses
        diagnosis diagnosed treatment chronic infection immune
    """,
    "work": """
        job jobs career boss manager managers supervisor colleague colleagues coworker coworkers
        teammate teammates team office meeting meetings deadline deadlines project projects client
        clients customer customers report reports reporting promotion promoted salary raise hire
        hired hiring interview interviews resume employer employee employees company startup
        business workplace workload shift overtime contract contractor freelance freelancer
        standup sprint okr okrs quarterly presentation stakeholder stakeholders department intern
        internship ceo cto hr payroll performance review appraisal onboarding layoff layoffs fired
        resign resigned quit hr agenda roadmap milestone milestones kpi profession professional
        workday weekday commute coworking
    """,
    "tech": """
        tech technology technical computer computers laptop laptops software hardware code codes
        coding program programs programming programmer developer developers engineer engineers
        engineering bug bugs debug debugging deploy deploys deploying deployed deployment
        deployments release releases released server servers database databases api apis app apps
        application website web cloud aws gcp azure docker container containers kubernetes linux
        python javascript typescript java rust golang git github gitlab repository repo repos
        commit commits branch branches merge pr build builds ci cd pipeline pipelines test tests
        testing production prod staging backend frontend network internet wifi router smartphone
        algorithm algorithms json yaml csv script scripts terminal shell compile compiler crash
        crashes outage outages latency sql schema framework library libraries upgrade install
        installed config configuration devops sre incident hotfix rollback cache caching endpoint
        endpoints http https bucket s3 cpu gpu memory disk storage backup backups encryption
        password login auth authentication token ai ml model llm
    """,
    "travel": """
        travel travels traveling travelling traveled trip trips journey vacation vacations holiday
        holidays flight flights fly flying flew airport airports airline airlines plane planes
        boarding passport visa hotel hotels hostel airbnb booking luggage suitcase baggage
        itinerary tourist tourists tour tours sightseeing destination abroad overseas beach beaches
        cruise train trains railway roadtrip camping campsite hike hiking backpacking resort
        sightsee visit visiting visited jetlag layover departure arrival customs embassy
        souvenir map maps passport rental
    """,
    "entertainment": """
        entertainment movie movies film films cinema show shows series tv television netflix hbo
        episode episodes season music song songs album albums concert concerts band bands singer
        singers sing singing game games gaming videogame videogames theater theatre musical novel
        novels comic comics anime manga podcast podcasts youtube stream streaming festival
        festivals dance dancing art arts artist museum gallery actor actors actress director
        comedy comedian drama documentary documentaries genre playlist guitar piano violin drums
        painting paint sculpture poetry poem poems fiction fantasy sci-fi thriller horror
        premiere soundtrack karaoke
    """,
    "communication": """
        communication communicate email emails mail inbox message messages messaging chat chats
        slack discord whatsapp telegram call calls calling phone phones text texts texting sms
        notify notification notifications reply replies respond response responses letter letters
        contact contacts conversation conversations discuss discussion talk talking speak speaking
        zoom videocall voicemail announcement announcements newsletter tone formal informal
        greeting channel channels thread threads comment comments feedback memo memos
        correspondence cc bcc subject signature
    """,
    "shopping": """
        shop shops shopping buy buys buying bought purchase purchases purchased order orders
        ordered store stores mall retail retailer price prices pricing cost costs discount
        discounts sale sales deal deals coupon coupons cart checkout amazon ebay etsy delivery
        deliveries shipping shipment refund refunds receipt receipts brand brands cheap expensive
        budget pay paid payment payments invoice subscription subscriptions gift gifts clothes
        clothing shoe shoes sneakers fashion outfit dress grocery groceries market marketplace
        warranty wishlist bargain
    """,
}

CLUSTER_NAMES: Final = tuple(CLUSTER_WORDS)


def _stemmed(words: str) -> frozenset[str]:
    out = set()
    for word in words.split():
        term = stem(word)
        if term:
            out.add(term)
    return frozenset(out)


# cluster name -> the set of terms (stems) that put a text in that cluster
CLUSTER_TERMS: Final[Mapping[str, frozenset[str]]] = {
    name: _stemmed(words) for name, words in CLUSTER_WORDS.items()
}



def _build_term_index() -> dict[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}
    for name, vocab in CLUSTER_TERMS.items():
        for term in vocab:
            index.setdefault(term, []).append(name)
    return {term: tuple(names) for term, names in index.items()}


# term -> the clusters it belongs to (one dict lookup per term when classifying a text)
TERM_CLUSTERS: Final[Mapping[str, tuple[str, ...]]] = _build_term_index()


def clusters_of(terms: frozenset[str] | set[str]) -> frozenset[str]:
    """The clusters touched by a set of terms (from :func:`memlocal.text.terms`)."""
    out: set[str] = set()
    get = TERM_CLUSTERS.get
    for term in terms:
        names = get(term)
        if names:
            out.update(names)
    return frozenset(out)
