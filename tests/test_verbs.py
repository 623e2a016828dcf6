# ~/~ begin <<docs/foundations.md#tests/test_verbs.py>>[init]
"""Checks of the verb corpus and its tokenizer (tangled from docs/foundations.md)."""

import pytest

from minimodel.verbs import VERB_SEQUENCE_LEN, conjugate, corpus, tokenizer, verb_sequence


# ~/~ begin <<docs/foundations.md#verbs-check>>[init]
def test_regular_and_irregular_conjugations():
    assert conjugate("hablar", "presente") == ("hablo", "hablas", "habla", "hablamos", "habláis",
                                               "hablan")
    assert conjugate("vivir", "pretérito")[2] == "vivió"
    assert conjugate("comer", "presente")[4] == "coméis"
    assert conjugate("tener", "presente")[0] == "tengo"
    assert conjugate("leer", "pretérito")[2] == "leyó"
    with pytest.raises(ValueError, match=r"cannot conjugate 'xyz'"):
        conjugate("xyz", "presente")


def test_corpus_is_deterministic_and_round_trips():
    text = corpus()
    assert text == corpus()
    assert len(text.splitlines()) == 2 * 30  # 23 regular + 7 irregular verbs, two tenses
    tok = tokenizer()
    assert tok.decode(tok.encode(text)) == text
    with pytest.raises(ValueError, match=r"not in the vocabulary"):
        tok.encode("¿qué?")


def test_canonical_sequence_is_64_tokens_of_the_first_line():
    ids = verb_sequence()
    assert len(ids) == VERB_SEQUENCE_LEN == 64
    expected = "hablar presente: yo hablo, tú hablas, él habla, nosotros hablamo"
    assert tokenizer().decode(ids) == expected
# ~/~ end
# ~/~ end
