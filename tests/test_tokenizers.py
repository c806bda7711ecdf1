"""Char and word tokenizers: exact round trips, closed vocabularies, clear errors."""

import pytest

from lib.data import world
from lib.data.tokenizers import SPECIAL_TOKENS, CharTokenizer, UnknownTokenError, WordTokenizer

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


def test_every_tokenizer_trains_encodes_and_decodes_alike():
    from lib.data.bpe import BPE
    from lib.data.unigram import Unigram
    text = "".join(line + "\n" for line in W.train[:150])
    for tokenizer in (CharTokenizer.train(text), WordTokenizer.train(text), BPE.train(text, 60),
                      Unigram.train(text, 60)):
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text and all(0 <= i < len(tokenizer) for i in ids)
        assert [tokenizer.vocab[i] for i in ids] == tokenizer.tokens(text)
    assert len(BPE.train(text, 60)) <= 60 and len(Unigram.train(text, 60)) <= 60


def test_the_special_ids_are_those_of_the_vocabulary():
    from lib.data import tokenizers as t
    words = WordTokenizer()
    assert (t.PAD, t.MASK, t.BOS, t.NEWLINE_WORD) == (words["<pad>"], words["<mask>"], words["<bos>"], words["\n"])
    assert t.SENTINELS == [words[t.sentinel(i)] for i in range(t.NUM_SENTINELS)]
    assert t.MODE_TOKENS == {m: words[f"[{m}]"] for m in "RSX"}
