"""How long BPE training to the last merge takes on the whole mini internet (not a unit test: timings vary).

    PYTHONPATH=. .venv/bin/python scripts/bench_bpe.py [repeats]

Prints the best of `repeats` wall-clock times (default 3) for character-level
and byte-level BPE on the training split and on train + validation, plus
encoding the whole corpus with the finished tokenizer.
"""

import sys
import time

from lib.data import bpe, world


def best_time(function, repeats: int) -> tuple:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(repeats: int = 3):
    w = world.build_world()
    texts = {"train": w.text("train"), "train+val": w.text("train") + w.text("val")}
    for name, text in texts.items():
        for byte_level in (False, True):
            seconds, tok = best_time(lambda: bpe.bpe_train(text, byte_level=byte_level), repeats)
            kind = "byte-level" if byte_level else "character "
            print(f"{kind} BPE on {name:9} ({len(text):,} chars): {len(tok.merges)} merges to the end "
                  f"in {seconds:.2f} s")
        seconds, _ = best_time(lambda: bpe.bpe_train(text).encode(text), repeats)
        print(f"train + encode all of {name}: {seconds:.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
