"""lib.present.batch_views: examples and masks as text, exactly as the notebooks print them."""

import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from lib.data.tokenizers import TOKENIZER
from lib.nn.masks import causal_mask
from lib.objectives import batches as ob
from lib.present import batch_views as bv

VOCAB = TOKENIZER.vocab


def test_words_and_text():
    ids = TOKENIZER.encode("the soup.\n")
    assert bv.token_words(torch.tensor(ids), VOCAB) == ["the", "soup", ".", "⏎"]
    assert bv.token_text(ids, VOCAB, prefix=2) == "the soup | . ⏎"
    assert bv.token_text(ids, VOCAB) == "the soup . ⏎"


def test_aligned_rows_pad_each_column_to_its_widest_cell():
    text = bv.aligned_rows([("in", ["a", "bbb"]), ("loss", bv.marks(torch.tensor([True, False])))], label=2)
    assert text == "in   | a bbb\nloss | ^"


def test_stack_and_encoder_decoder_text():
    ids = TOKENIZER.encode("the soup was")
    assert bv.stack_text(ob.lm_batch(torch.tensor([ids])), VOCAB).splitlines() == [
        "input         | the  soup", "target        | soup was", "loss          | ^    ^"]
    short, long = ob.corrupt_spans(ids, [(1, 2)]), ob.corrupt_spans(ids + ids, [(1, 2)])
    batch = ob.encoder_decoder_batch(*zip(short, long))          # the first source is padded to the second's length
    assert bv.encoder_decoder_text(batch, VOCAB).splitlines() == [
        "source        | the <0> was", "decoder input | <bos> <0>  soup", "target        | <0>   soup <1>",
        "loss          | s     ^    s"]


def test_mask_grid_and_picture():
    assert bv.mask_grid(causal_mask(2), ["a", "bb"], ["a", "bb"]) == "    a bb\n a  #  .\nbb  #  #"
    fig, (left, right) = plt.subplots(1, 2)
    bv.draw_mask(left, causal_mask(3), list("abc"), list("abc"), "causal")
    bv.draw_mask(right, causal_mask(3), list("abc"), list("abc"), "causal", compact=True)
    assert (left.get_title(), right.get_title()) == ("causal\n6 of 9 visible", "causal: 6 visible")
    assert left.get_xlabel() == "attended position (key)" and right.get_xlabel() == ""
    plt.close(fig)
