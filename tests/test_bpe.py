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


def test_exercise_1_hat_hats_that_chat():
    tok = bpe.bpe_train("hat hat hat hats that chat chat", 3, pattern=bpe.SPACE_PATTERN)
    assert tok.merges == [("h", "a"), ("ha", "t"), ("c", "hat")] and tok.tied == [2, 1, 1]
    assert tok.tokens("hatch") == ["hat", "c", "h"]


def test_with_hfs_tie_rule_our_trainer_learns_hfs_merges():
    import json
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    text = world.load_text("train")[:40000]
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=256 + 120, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    theirs = [tuple(hf.decoder.decode([piece]) for piece in pair) for pair in json.loads(hf.to_str())["model"]["merges"]]
    ours = bpe.bpe_train(text, 120, tie="smallest id", symbol_order=bpe.byte_level_char)
    assert sum(n > 1 for n in ours.tied) > 10            # the rule is exercised: many merges are chosen among ties
    assert ours.merges == theirs
    assert bpe.bpe_train(text, 120).merges != theirs     # and with our own rule they differ
    with pytest.raises(ValueError, match="tie must be"):
        bpe.bpe_train(text, 1, tie="largest")


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
