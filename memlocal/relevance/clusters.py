"""The eight semantic clusters: vocabulary groups that bridge a query and a memory sharing a topic
but no literal word ("diet" and "peanut allergy" both touch *food*).

The clusters are data. Each vocabulary is written as plain words and stemmed at import time with
the tokenizer's own stemmer, so "allergies", "allergic" and "allergy" all land on the terms the
tokenizer produces. Rules, checked by ``tests/test_scoring.py``: every listed word is one term
of the tokenizer (not a stopword, not split), and each term belongs to exactly one cluster (so
"customer" and "customs", both ``custom``, cannot sit in two). Generic words that a developer's
memories use in every sense (order, store, deal, pay, call, show, thread, train, map, test,
build, model, memory, report, review, project, text, present) are left out on purpose: a
cluster that fires on everything bridges nothing. Near-synonyms that are not a topic ("pytest"
is a test framework, "tz" a time zone) are in :mod:`memlocal.relevance.vocab`. Edit the vocabularies
here; ``text.TERMS_VERSION`` need not change, because cluster membership is derived from terms
at query time.
"""

from __future__ import annotations

from itertools import chain

from typing import Final, Mapping

from .text import stem

CLUSTER_WORDS: Final[Mapping[str, str]] = {
    "food": """
        food foods eat eats eating ate eaten meal meals breakfast lunch lunchtime dinner brunch
        supper snack snacks diet diets dietary vegan vegetarian pescatarian keto paleo gluten
        lactose dairy peanut peanuts nut nuts shellfish allergen allergens halal kosher celiac
        cook cooks cooking cooked recipe recipes bake baking baked restaurant restaurants cafe
        bistro diner takeout coffee espresso latte cappuccino tea drink drinks wine beer cocktail
        juice smoothie fruit fruits vegetable vegetables veggie meat chicken beef pork bacon fish
        seafood salmon tuna shrimp egg eggs cheese milk butter yogurt bread pasta pizza rice
        noodle noodles ramen soup salad dessert cake cookie cookies chocolate candy sugar sugary
        spice spices spicy savory tasty flavor cuisine chef kitchen grocery groceries calorie
        calories protein carbs nutrition nutritious hungry appetite sushi burger burgers sandwich
        barbecue bbq grill menu vitamin vitamins organic fasting beverage picnic potluck oven
        stove tofu oat oats soy
    """,
    "health": """
        health healthy healthcare wellness wellbeing doctor doctors physician nurse hospital
        clinic medical medicine medicines medication medications pill pills prescription
        pharmacy allergy allergies allergic intolerance intolerant illness sick sickness disease
        diseases symptom symptoms pain ache injury injured therapy therapist counseling counselor
        psychologist psychiatrist mental anxiety depression stress stressed burnout sleep insomnia
        tired fatigue exercise exercises workout workouts gym fitness yoga pilates jogging
        marathon obesity diabetes diabetic asthma surgery vaccine vaccination dentist dental
        checkup cancer cardio flu fever cough headache migraine meditation rehab physiotherapy
        pregnancy pregnant disability wheelchair diagnosis diagnosed chronic infection immune
        ergonomic posture hurt hurts injuries therapeutic relax relaxing relaxation destress
    """,
    "work": """
        job jobs career boss manager managers supervisor colleague colleagues coworker coworkers
        teammate teammates office meeting meetings deadline deadlines client clients promotion
        promoted salary hire hired hiring interview interviews resume employer employee employees
        company startup business workplace workload overtime contractor freelance freelancer
        standup standups sprint sprints okr okrs quarterly stakeholder stakeholders department
        intern internship ceo cto hr payroll appraisal onboarding layoff layoffs resign resigned
        agenda roadmap milestone milestones kpi profession professional workday coworking
        retrospective retro oncall
    """,
    "tech": """
        tech technology technical computer computers laptop laptops software hardware code
        coding programming programmer developer developers engineer engineers engineering bug
        bugs debug debugging deploy deploys deploying deployed deployment deployments release
        releases server servers database databases api apis app apps website web cloud aws gcp
        azure docker container containers kubernetes linux python javascript typescript java
        rust golang git github gitlab repository repositories commit commits pullrequest ci
        pipeline pipelines production staging backend frontend fullstack internet wifi router
        smartphone algorithm algorithms json yaml csv terminal compile compiler crash crashes
        outage outages latency sql schema framework frameworks upgrade install installed
        configuration devops sre incident hotfix rollback caching endpoint endpoints http https
        s3 cpu gpu encryption password login authentication llm pytest unittest jest vscode vim
        neovim emacs ide linter lint refactor refactoring codebase kubectl terraform ansible
        nginx postgres postgresql mysql sqlite redis graphql microservice microservices
    """,
    "travel": """
        travel travels traveling traveled trip trips journey vacation vacations holiday holidays
        flight flights fly flying flew airport airports airline airlines plane planes boarding
        passport visa hotel hotels hostel airbnb booking luggage suitcase baggage itinerary
        tourist tourists sightseeing destination abroad overseas beach beaches cruise railway
        roadtrip camping campsite hike hiking backpacking resort sightsee jetlag layover
        departure arrival embassy souvenir
    """,
    "entertainment": """
        entertainment movie movies film films cinema netflix hbo episode episodes music song
        songs album albums concert concerts band bands singer singers singing videogame videogames
        gaming theater musical novel novels comic comics anime manga podcast podcasts youtube
        festival festivals dancing museum gallery actor actors actress comedy comedian
        documentary documentaries playlist guitar piano violin drums sculpture poetry poem
        poems fiction fantasy scifi thriller horror premiere soundtrack karaoke
    """,
    "communication": """
        communication communicate email emails mail inbox messaging chat chats slack discord
        whatsapp telegram phone phones sms notify notification notifications reply
        replies conversation conversations discussion zoom videocall voicemail announcement
        announcements newsletter formal informal greeting memo memos correspondence cc bcc
        dm dms skype facetime webex gmail outlook mailbox emoji emojis gif ping pinged spam
        mailing messenger imessage wechat twitter tweet tweets instagram facebook linkedin blog
        recipient recipients sender attachment attachments salutation politely
    """,
    "shopping": """
        shop shops shopping buy buys buying bought purchase purchases purchased mall retail
        retailer price prices pricing discount discounts coupon coupons cart checkout amazon
        ebay etsy shipment refund refunds receipt receipts cheap expensive invoice subscription
        subscriptions gift gifts clothes clothing shoe shoes sneakers fashion outfit dress
        marketplace warranty wishlist bargain supermarket boutique jacket jeans shirt shirts
        wardrobe handbag jewelry necklace earrings furniture appliance appliances gadget gadgets
        secondhand thrift auction preorder unboxing splurge affordable overpriced paypal voucher
        vouchers shopper shoppers cashback ikea costco walmart
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
    """The clusters touched by a set of terms (from :func:`memlocal.relevance.text.terms`)."""
    return frozenset(chain.from_iterable(filter(None, map(TERM_CLUSTERS.get, terms))))
