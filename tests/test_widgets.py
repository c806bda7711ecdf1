"""The slider helper: every state pre-computed for the book, live callbacks in JupyterLab."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from lib import widgets


def render(n, doubled):
    fig, ax = plt.subplots()
    ax.plot([0, n])
    return f"n={n} doubled={doubled} -> {2 * n if doubled else n}", pd.DataFrame({"n": [n]}), fig


def test_static_slider_precomputes_every_combination(monkeypatch):
    monkeypatch.setenv(widgets.STATIC_ENV, "1")
    view = widgets.slider(render, {"n": [1, 2, 3], "doubled": [False, True]}, initial={"n": 2})
    bundle = view._repr_mimebundle_()
    text, page = bundle["text/plain"], bundle["text/html"]
    assert text.count("· n = ") == 6 and "n=3 doubled=True -> 6" in text
    assert page.count('class="book-slider-state"') == 6 and page.count('type="range"') == 2
    assert page.count('style="display:none"') == 5 and page.count("data:image/png;base64,") == 6
    shown = page.split('<div class="book-slider-state">')[1]  # the one state without display:none
    assert "n=2 doubled=False -&gt; 2" in shown


def test_live_slider_rerenders_on_every_move(monkeypatch):
    monkeypatch.delenv(widgets.STATIC_ENV, raising=False)
    calls = []
    box = widgets.slider(lambda n: calls.append(n) or f"value {n}", {"n": [1, 2, 3]})
    slider, _output = box.children  # (outside a kernel the Output widget cannot capture what is shown)
    assert calls == [1] and slider.options == (1, 2, 3)
    slider.value = 3
    assert calls == [1, 3]


def test_bad_controls_are_refused():
    with pytest.raises(ValueError, match="initial value n=5"):
        widgets.slider(render, {"n": [1, 2]}, initial={"n": 5})
    with pytest.raises(ValueError, match="at least one value"):
        widgets.slider(render, {"n": []})


def test_states_that_look_the_same_are_stored_once(monkeypatch):
    monkeypatch.setenv(widgets.STATIC_ENV, "1")
    view = widgets.slider(lambda kind, n: f"{kind} {n if kind == 'counted' else ''}",
                          {"kind": ["plain", "counted"], "n": [1, 2, 3]}, initial={"kind": "counted", "n": 2})
    page = view._repr_mimebundle_()["text/html"]
    assert page.count('class="book-slider-state"') == 4  # "plain" looks the same for every n
    assert 'data-views="[0, 0, 0, 1, 2, 3]"' in page
    shown = page.split('<div class="book-slider-state">')[1]
    assert shown.startswith("<pre>counted 2")
