"""BPE: the lecture's worked examples, tie-breaking, exact round trips, byte-level, errors."""

import pytest

from lib.data import bpe, world
from lib.data.tokenizers import UnknownTokenError

W = world.build_world()
TRAIN, VAL = W.text("train"), W.text("val")


@pytest.fixture(scope="module")
def world_bpe():
    return bpe.bpe_train(TRAIN)


def test_the_car_the_cat_the_rat():
    tok = bpe.bpe_train("the car\nthe cat\nthe rat\n", 3, pattern=bpe.SPACE_PATTERN)
    assert tok.merges == [("t", "h"), ("th", "e"), ("c", "a")]
    assert tok.merge_counts == [3, 3, 2]
    assert [t for t in tok.vocab if t.strip()] == ["a", "c", "e", "h", "r", "t", "th", "the", "ca"]
    assert tok.tokens("the ox") == ["the", " ", "o", "x"]
    # o and x never occur in the training text: character-level BPE has no id for them
    with pytest.raises(UnknownTokenError, match=r"unknown character 'o' at offset 4"):
        tok.encode("the ox")


def test_exercise_1_low_lower_newest():
    tok = bpe.bpe_train("low low low lower newest newest", 3, pattern=bpe.SPACE_PATTERN)
    assert tok.merges == [("l", "o"), ("lo", "w"), ("n", "e")]
    assert tok.tokens("lowest") == ["low", "e", "s", "t"]


def test_ties_go_to_the_pair_that_occurs_first():
    assert bpe.bpe_train("xy ab ab xy", 1, pattern=bpe.SPACE_PATTERN).merges == [("x", "y")]
    assert bpe.bpe_train("ab xy xy ab", 1, pattern=bpe.SPACE_PATTERN).merges == [("a", "b")]
    # "first" is about the current segmentation: after 'a'+'b', the pair ('ab', 'c') occurs before ('x', 'y')
    tok = bpe.bpe_train("abc xy abc xy ab", 2, pattern=bpe.SPACE_PATTERN)
    assert tok.merges == [("a", "b"), ("ab", "c")]


def test_gpt2_pre_tokenization():
    assert bpe.pretokenize("q: where does base live? a: jelka.") == [
        "q", ":", " where", " does", " base", " live", "?", " a", ":", " jelka", "."]
    assert bpe.pretokenize("I don't  know,  95+42=137.\n") == [
        "I", " don", "'t", " ", " know", ",", " ", " 95", "+", "42", "=", "137", ".", "\n"]
    assert bpe.pretokenize("我今天去了商店。") == ["我今天去了商店", "。"]


def test_split_pattern_matches_gpt2_as_implemented_by_hf_tokenizers():
    from tokenizers import pre_tokenizers
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    decode = {"Ġ": " ", "Ċ": "\n"}
    sample = TRAIN[:20000] + "don't  stop_it  now!! ok\n"
    theirs = ["".join(decode.get(c, c) for c in piece) for piece, _ in gpt2.pre_tokenize_str(sample)]
    assert bpe.pretokenize(sample) == theirs


def test_training_to_the_end_makes_every_chunk_one_token(world_bpe):
    chunks = bpe.pretokenize(TRAIN)
    assert world_bpe.tokens(TRAIN) == chunks
    assert len(world_bpe) == len(world_bpe.base) + len(world_bpe.merges)
    assert world_bpe.merge_counts[-1] >= 1


def test_first_k_merges_equal_training_with_k_merges(world_bpe):
    for k in (0, 1, 57, 300):
        trained = bpe.bpe_train(TRAIN, k)
        assert trained.merges == world_bpe.first(k).merges
        assert trained.tokens(VAL[:3000]) == world_bpe.first(k).tokens(VAL[:3000])


def test_decode_encode_round_trips_the_whole_corpus(world_bpe):
    text = TRAIN + VAL
    for k in (0, 100, 300, len(world_bpe.merges)):
        tok = world_bpe.first(k)
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert "".join(tok.tokens(text)) == text
    assert len(world_bpe.first(300).encode(text)) < len(text) / 2


def test_byte_level_bpe_has_no_unknown_symbol(world_bpe):
    tok = bpe.bpe_train(TRAIN, 300, byte_level=True)
    assert [(a.decode(), b.decode()) for a, b in tok.merges] == world_bpe.first(300).merges  # ASCII: same merges
    assert len(tok) == 256 + 300
    chinese = "我今天去了商店。base lives in jelka."
    ids = tok.encode(chinese)
    assert tok.decode(ids) == chinese
    assert len(tok.tokens("我今天去了商店。")) == len("我今天去了商店。".encode("utf-8"))
    with pytest.raises(UnknownTokenError, match="unknown character '我'"):
        world_bpe.encode(chinese)


def test_bad_input_gives_clear_errors(world_bpe):
    with pytest.raises(ValueError, match="num_merges must be a non-negative integer"):
        bpe.bpe_train("abc", -1)
    with pytest.raises(ValueError, match="empty text"):
        bpe.bpe_train("", 3)
    with pytest.raises(ValueError, match=rf"k=9999 is outside 0\.\.{len(world_bpe.merges)}"):
        world_bpe.first(9999)
