"""Chat prompts for distilling a drafter from a real target, made here and never taken from Spec-Bench.

A drafter is only as good as the contexts it was trained on, and at run time it drafts the
*target's answers to chat prompts*. So the training data is the target's own answers to prompts
shaped like the six Spec-Bench tasks (open-ended chat, translation, summarization, QA, math
word problems, retrieval-augmented QA), built from templates and word lists written for this
module and from passages of the running interpreter's own documentation
(``pydoc_data.topics``, English prose) and stdlib docstrings. No Spec-Bench question is used:
:func:`training_prompts` drops any prompt that equals a Spec-Bench turn (after whitespace
normalisation), and the test suite checks that none does.

Deterministic: the same ``n`` and ``seed`` give the same prompts on any machine with the same
Python version (the passages come from its documentation).
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from viasd_adapt.errors import ConfigError

TOPICS = (
    "the water cycle", "volcanoes", "the history of the printing press", "machine learning", "photosynthesis",
    "the Roman Empire", "climate change", "black holes", "the stock market", "vaccines", "renewable energy",
    "the human heart", "ancient Egypt", "the Internet", "honey bees", "earthquakes", "coffee", "chess",
    "the French Revolution", "electric cars", "sleep", "the Moon landing", "coral reefs", "inflation",
    "democracy", "the immune system", "jazz music", "the Great Wall of China", "recycling", "rainforests",
    "social media", "the theory of evolution", "gravity", "the Renaissance", "healthy eating", "time management",
    "public libraries", "the Olympic Games", "plate tectonics", "antibiotics", "bicycles", "solar panels",
    "the Silk Road", "artificial intelligence", "meditation", "volunteering", "urban gardening", "the ocean tides",
)
AUDIENCES = ("a five-year-old", "a high school student", "a busy manager", "a beginner", "an expert", "a grandparent")
FORMS = ("a short poem", "a short story", "a persuasive paragraph", "a product description", "a formal email",
         "a blog post introduction", "a limerick", "a speech opening", "a diary entry", "a news headline and lead")
PERSONAS = ("a pirate captain", "a medieval knight", "a friendly robot", "a detective", "a tour guide in Paris",
            "a famous chef", "a space explorer", "a wise old teacher", "a sports commentator", "a museum curator")
CODE_TASKS = (
    "reverses a string", "checks whether a number is prime", "counts the vowels in a sentence",
    "returns the largest element of a list", "merges two sorted lists", "computes the factorial of n",
    "removes duplicates from a list while keeping the order", "converts Celsius to Fahrenheit",
    "finds the most common word in a text", "checks whether a string is a palindrome",
    "computes the average of a list of numbers", "flattens a nested list", "sorts a list of dictionaries by a key",
    "reads a CSV file and prints each row", "returns the n-th Fibonacci number", "counts the lines in a file",
)
LANGUAGES = ("Python", "JavaScript", "C", "Java", "Rust", "Go")
NAMES = ("Anna", "Ben", "Carlos", "Dana", "Emil", "Fatima", "George", "Hana", "Ivan", "Julia", "Kofi", "Lena",
         "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara")
ITEMS = ("apples", "pencils", "stickers", "cookies", "marbles", "books", "eggs", "cards", "flowers", "coins")
COUNTRIES = ("France", "Japan", "Brazil", "Canada", "Kenya", "India", "Norway", "Mexico", "Egypt", "Australia",
             "Italy", "Chile", "Vietnam", "Poland", "Morocco", "Peru", "Greece", "Thailand", "Ghana", "Spain")
QA_TEMPLATES = (
    "What is the capital of {country}?", "What language is spoken in {country}?", "Who invented {invention}?",
    "When was {invention} invented?", "What is {topic}?", "Why is {topic} important?", "Where is {country}?",
    "How does {topic} work?", "What currency is used in {country}?", "Who was the first person to study {topic}?",
)
INVENTIONS = ("the telephone", "the light bulb", "the airplane", "the printing press", "penicillin", "the radio",
              "the steam engine", "the World Wide Web", "the microscope", "the compass", "paper", "the bicycle")
# Short German and French sentences written for this module (for translation-shaped prompts).
GERMAN = (
    "Der Zug nach Berlin hat heute zwanzig Minuten Verspätung .", "Die Regierung plant neue Steuern für große Firmen .",
    "Im Sommer fahren viele Familien an die Ostsee .", "Das neue Museum wurde gestern von der Bürgermeisterin eröffnet .",
    "Die Preise für Lebensmittel sind im letzten Jahr stark gestiegen .", "Mein Bruder arbeitet seit drei Jahren in einer Bank .",
    "Die Schüler lernen in der Schule zwei Fremdsprachen .", "Nach dem Sturm waren viele Straßen gesperrt .",
    "Die Mannschaft gewann das Spiel mit zwei zu eins .", "Wissenschaftler haben eine neue Art von Frosch entdeckt .",
    "Der Arzt empfiehlt, jeden Tag spazieren zu gehen .", "Die Firma will im nächsten Jahr hundert neue Mitarbeiter einstellen .",
)
FRENCH = (
    "Le musée est fermé le lundi .", "Les enfants jouent dans le parc après l'école .",
    "Le gouvernement a annoncé de nouvelles mesures pour l'environnement .", "Nous avons mangé dans un petit restaurant près de la gare .",
    "La réunion commence à neuf heures demain matin .", "Il pleut depuis trois jours dans le nord du pays .",
)
KINDS = ("chat", "code", "translation", "summarization", "qa", "math", "rag")


def _normalise(text: str) -> str:
    return " ".join(text.split()).lower()


@lru_cache(maxsize=1)
def spec_bench_turns() -> frozenset[str]:
    """Every Spec-Bench user turn, normalised: the prompts a drafter must never be trained on."""
    from viasd_adapt.prompts.spec_bench import load_questions

    return frozenset(_normalise(turn) for question in load_questions() for turn in question.turns)


@lru_cache(maxsize=1)
def passages() -> tuple[str, ...]:
    """English prose paragraphs (200-700 characters: long prompts cost prefill compute, not answers) from the interpreter's own documentation."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - stripped interpreters; docstrings still give prose
        topics = {}
    found: list[str] = []
    texts = [topics[key] for key in sorted(topics)]
    if not texts:  # pragma: no cover
        import json
        import textwrap

        texts = [textwrap.dedent(getattr(obj, "__doc__", "") or "") for obj in (json, random, re, textwrap)]
    for text in texts:
        for paragraph in re.split(r"\n\s*\n", text):
            flat = " ".join(paragraph.split())
            letters = sum(ch.isalpha() or ch == " " for ch in flat)
            if 200 <= len(flat) <= 700 and letters / len(flat) > 0.85 and not flat.startswith(("*", ">>>")):
                found.append(flat)
    return tuple(found)


def _chat(rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    return rng.choice((
        f"Explain {topic} to {rng.choice(AUDIENCES)}.",
        f"Write {rng.choice(FORMS)} about {topic}.",
        f"Pretend you are {rng.choice(PERSONAS)}. Tell me about {topic}.",
        f"Give me five tips about {topic}.",
        f"What are the advantages and disadvantages of {topic}?",
        f"Compare {topic} and {rng.choice(TOPICS)} in a few sentences.",
        f"Describe a day in the life of {rng.choice(PERSONAS)}.",
        f"List three surprising facts about {topic}.",
    ))


def _code(rng: random.Random) -> str:
    return rng.choice((
        f"Write a {rng.choice(LANGUAGES)} function that {rng.choice(CODE_TASKS)}.",
        f"Explain how to write a program that {rng.choice(CODE_TASKS)}.",
        f"Write a {rng.choice(LANGUAGES)} program that {rng.choice(CODE_TASKS)}, with comments.",
    ))


def _translation(rng: random.Random) -> str:
    source, sentences = ("German", GERMAN) if rng.random() < 0.7 else ("French", FRENCH)
    text = " ".join(rng.sample(sentences, rng.randint(1, 2)))
    return f"Translate {source} to English: {text}"


def _math(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 60), rng.randint(2, 40), rng.randint(2, 9)
    name, other, item = rng.choice(NAMES), rng.choice(NAMES), rng.choice(ITEMS)
    return rng.choice((
        f"{name} has {a} {item}. {other} gives {name} {b} more, and then {name} shares them equally among {c} "
        f"friends. How many {item} does each friend get?",
        f"A shop sells {item} for ${c} each. {name} buys {a} of them and pays with a ${a * c + b} bill. How much "
        "change does {name} get?".replace("{name}", name),
        f"{name} reads {b} pages a day. The book has {a * b + c} pages. How many days does it take to finish it?",
        f"A train travels {a * 10} km in {c} hours. What is its average speed?",
        f"{name} is {a} years old and {other} is {b} years younger. How old will {other} be in {c} years?",
        f"The price of a jacket is ${a * 5}. It is on sale for {rng.choice((10, 20, 25, 50))}% off. What is the sale price?",
    ))


def _summarization(rng: random.Random) -> str:
    return f"Summarize: {rng.choice(passages())}"


def _rag(rng: random.Random) -> str:
    passage = rng.choice(passages())
    question = rng.choice(("What is the main point of this text?", "What does the text say about errors?",
                           "Which objects or functions are mentioned?", "What happens according to the text?",
                           "Explain the text in simple words."))
    return f"{passage} {question}" if rng.random() < 0.5 else f"Answer using the passage below.\n{passage}\nQuestion: {question}"


def _qa(rng: random.Random) -> str:
    return rng.choice(QA_TEMPLATES).format(country=rng.choice(COUNTRIES), invention=rng.choice(INVENTIONS),
                                           topic=rng.choice(TOPICS))


_MAKERS = {"chat": _chat, "code": _code, "translation": _translation, "summarization": _summarization,
           "qa": _qa, "math": _math, "rag": _rag}


def training_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct prompts, the kinds of :data:`KINDS` in turn, none of them a Spec-Bench turn.

    Kinds with few distinct prompts (translation) fall behind the others once they repeat."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"the number of training prompts must be an integer >= 1, got {n!r}")
    rng = random.Random(f"viasd-distill-prompts:{seed}")
    excluded = spec_bench_turns()
    prompts: list[str] = []
    seen: set[str] = set()
    attempts = 0
    while len(prompts) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ConfigError(f"could only make {len(prompts)} distinct training prompts, {n} were asked for")
        prompt = _MAKERS[KINDS[attempts % len(KINDS)]](rng)  # a kind that ran out of new prompts is skipped
        key = _normalise(prompt)
        if key in seen or key in excluded:
            continue
        seen.add(key)
        prompts.append(prompt)
    return prompts


__all__ = ["KINDS", "passages", "spec_bench_turns", "training_prompts"]
