"""Char and word tokenizers: exact round trips, closed vocabularies, clear errors."""

import pytest

from lib import world
from lib.tokenizers import SPECIAL_TOKENS, CharTokenizer, UnknownTokenError, WordTokenizer

W = world.build_world()


def test_char_tokenizer_round_trips_the_corpus():
    chars = CharTokenizer()
    assert len(chars) == 44
    text = W.text("train") + W.text("val")
    assert chars.decode(chars.encode(text)) == text


def test_word_tokenizer_round_trips_every_line_and_has_no_validation_oov():
    words = WordTokenizer()
    for line in W.train + W.val:
        assert words.decode(words.encode(line)) == line
    assert words.tokens("review: the soup was tasty.") == ["review", ":", "the", "soup", "was", "tasty", "."]
    assert words.tokens("95+42=137.") == ["95", "+", "42", "=", "137", "."]
    assert all(t in words.stoi for t in SPECIAL_TOKENS + ["\n"])


def test_unknown_character_error_names_it_and_where():
    with pytest.raises(UnknownTokenError, match=r"unknown character 'é' at offset 4 \(line 2, column 2\)"):
        CharTokenizer().encode("ab\ncé")


def test_unknown_word_error_names_it_and_where():
    with pytest.raises(UnknownTokenError, match=r"unknown word 'pizza' at offset 8 \(line 1, column 9\)"):
        WordTokenizer().encode("the was pizza.")
    with pytest.raises(UnknownTokenError, match=r"unknown character '!'"):
        WordTokenizer().encode("the soup!")


@pytest.mark.parametrize("tokenizer", [CharTokenizer(), WordTokenizer()])
def test_decoding_an_id_outside_the_vocabulary_names_it(tokenizer):
    with pytest.raises(ValueError, match=rf"token id {len(tokenizer)} is outside the vocabulary \(ids 0..{len(tokenizer) - 1}\)"):
        tokenizer.decode([0, len(tokenizer)])
    with pytest.raises(ValueError, match="token id -1"):
        tokenizer.decode([-1])
