"""The slider helper: every state pre-computed for the book, live callbacks in JupyterLab."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from lib.present import widgets


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


def test_static_pictures_are_drawn_at_the_dpi_asked_for(monkeypatch):
    import base64
    import io
    import re

    from PIL import Image

    monkeypatch.setenv(widgets.STATIC_ENV, "1")

    def width(dpi):
        view = widgets.slider(lambda n: plt.subplots(figsize=(2, 2))[0], {"n": [1]}, dpi=dpi)
        png = re.search(r"base64,([A-Za-z0-9+/=]+)", view._repr_mimebundle_()["text/html"]).group(1)
        return Image.open(io.BytesIO(base64.b64decode(png))).width

    assert width(120) > 1.4 * width(80)


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


@pytest.fixture
def kernel_display(monkeypatch, tmp_path):
    """An IPython shell with the inline backend's PNG formatter, so display() makes what a notebook shows."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import select_figure_formats

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    shell = InteractiveShell.instance(history_length=0)
    select_figure_formats(shell, {"png"})
    yield shell
    InteractiveShell.clear_instance()


def test_live_slider_shows_text_as_text_and_figures_as_pictures(monkeypatch, kernel_display):
    from IPython.utils.capture import capture_output

    monkeypatch.delenv(widgets.STATIC_ENV, raising=False)
    grid = "prefix LM:\n  37 + 45\n 1 1 0 0"
    with capture_output() as shown:  # outside a kernel the Output widget cannot capture; the shell can
        box = widgets.slider(lambda n: (f"prefix {n}: <visible>\n{grid}", pd.DataFrame({"n": [n]}),
                                        plt.subplots()[0]), {"n": [1, 2]})
        box.children[0].value = 2
    text, table, figure = (output.data for output in shown.outputs)  # the move cleared the first state's
    assert text["text/plain"] == f"prefix 2: <visible>\n{grid}"  # real newlines, no quotes: not repr(str)
    assert text["text/html"] == f"<pre>prefix 2: &lt;visible&gt;\n{grid}</pre>"
    assert "<table" in table["text/html"] and "image/png" in figure


def test_text_controls_show_whole_labels(monkeypatch):
    monkeypatch.delenv(widgets.STATIC_ENV, raising=False)
    box = widgets.slider(lambda kind, n: f"{kind} {n}", {"kind": ["bidirectional (BERT)", "causal (GPT)"],
                                                        "n": [1, 2]})
    kind, n, _output = box.children
    assert type(kind).__name__ == "ToggleButtons" and kind.style.button_width == "auto"
    assert type(n).__name__ == "SelectionSlider"
    kind.value = "causal (GPT)"
    assert kind.value == "causal (GPT)"
