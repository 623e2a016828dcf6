# ~/~ begin <<docs/foundations.md#src/minimodel/verbs.py>>[init]
"""The verb corpus: Spanish conjugations generated from rules, a character tokenizer, and the
canonical 64-token sequence that sets the small-model end of the phase (N = 64).

Tangled from docs/foundations.md; edit the page, not this file.
"""

__all__ = ["CharTokenizer", "VERB_SEQUENCE_LEN", "conjugate", "corpus", "tokenizer",
           "verb_sequence"]

# ~/~ begin <<docs/foundations.md#verbs-rules>>[init]
PERSONS = ("yo", "tú", "él", "nosotros", "vosotros", "ellos")

# Endings by verb class and tense, in the order of PERSONS.
ENDINGS = {
    ("ar", "presente"): ("o", "as", "a", "amos", "áis", "an"),
    ("er", "presente"): ("o", "es", "e", "emos", "éis", "en"),
    ("ir", "presente"): ("o", "es", "e", "imos", "ís", "en"),
    ("ar", "pretérito"): ("é", "aste", "ó", "amos", "asteis", "aron"),
    ("er", "pretérito"): ("í", "iste", "ió", "imos", "isteis", "ieron"),
    ("ir", "pretérito"): ("í", "iste", "ió", "imos", "isteis", "ieron"),
}

# Regular verbs whose stems need no spelling change in these two tenses.
REGULAR = (
    "hablar", "cantar", "bailar", "caminar", "estudiar", "trabajar", "mirar", "escuchar",
    "comer", "beber", "aprender", "correr", "vender", "comprender", "temer",
    "vivir", "escribir", "abrir", "subir", "decidir", "recibir", "partir", "cumplir",
)

IRREGULAR = {
    ("ser", "presente"): ("soy", "eres", "es", "somos", "sois", "son"),
    ("ser", "pretérito"): ("fui", "fuiste", "fue", "fuimos", "fuisteis", "fueron"),
    ("estar", "presente"): ("estoy", "estás", "está", "estamos", "estáis", "están"),
    ("estar", "pretérito"): ("estuve", "estuviste", "estuvo", "estuvimos", "estuvisteis",
                             "estuvieron"),
    ("ir", "presente"): ("voy", "vas", "va", "vamos", "vais", "van"),
    ("ir", "pretérito"): ("fui", "fuiste", "fue", "fuimos", "fuisteis", "fueron"),
    ("tener", "presente"): ("tengo", "tienes", "tiene", "tenemos", "tenéis", "tienen"),
    ("tener", "pretérito"): ("tuve", "tuviste", "tuvo", "tuvimos", "tuvisteis", "tuvieron"),
    ("hacer", "presente"): ("hago", "haces", "hace", "hacemos", "hacéis", "hacen"),
    ("hacer", "pretérito"): ("hice", "hiciste", "hizo", "hicimos", "hicisteis", "hicieron"),
    ("poder", "presente"): ("puedo", "puedes", "puede", "podemos", "podéis", "pueden"),
    ("poder", "pretérito"): ("pude", "pudiste", "pudo", "pudimos", "pudisteis", "pudieron"),
    # regular in the present; its preterite takes a y and written accents (leyó, leíste)
    ("leer", "presente"): ("leo", "lees", "lee", "leemos", "leéis", "leen"),
    ("leer", "pretérito"): ("leí", "leíste", "leyó", "leímos", "leísteis", "leyeron"),
}
# ~/~ end


# ~/~ begin <<docs/foundations.md#verbs-corpus>>[init]
def conjugate(infinitive: str, tense: str) -> tuple[str, ...]:
    """The six forms of `infinitive` in `tense` ('presente' or 'pretérito')."""
    if (infinitive, tense) in IRREGULAR:
        return IRREGULAR[infinitive, tense]
    ending = infinitive[-2:]
    if (ending, tense) not in ENDINGS:
        raise ValueError(f"cannot conjugate {infinitive!r} in tense {tense!r}")
    return tuple(infinitive[:-2] + e for e in ENDINGS[ending, tense])


def corpus() -> str:
    """One line per verb and tense: 'hablar presente: yo hablo, tú hablas, ...'."""
    verbs = REGULAR + tuple(dict.fromkeys(v for v, _ in IRREGULAR))
    lines = []
    for verb in verbs:
        for tense in ("presente", "pretérito"):
            pairs = zip(PERSONS, conjugate(verb, tense), strict=True)
            forms = ", ".join(f"{p} {f}" for p, f in pairs)
            lines.append(f"{verb} {tense}: {forms}.")
    return "\n".join(lines) + "\n"
# ~/~ end


# ~/~ begin <<docs/foundations.md#verbs-tokenizer>>[init]
class CharTokenizer:
    """Character-level tokenizer over a fixed alphabet."""

    def __init__(self, text: str):
        self.alphabet = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.alphabet)}

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self.index.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown}")
        return [self.index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token ids outside [0, {self.vocab_size}): {bad[:5]}")
        return "".join(self.alphabet[i] for i in ids)


VERB_SEQUENCE_LEN = 64


def tokenizer() -> CharTokenizer:
    """The tokenizer of the verb corpus."""
    return CharTokenizer(corpus())


def verb_sequence() -> list[int]:
    """The canonical 64-token sequence: the first 64 characters of the corpus, encoded."""
    return tokenizer().encode(corpus()[:VERB_SEQUENCE_LEN])
# ~/~ end
# ~/~ end
