"""One slider helper for the whole book: live in JupyterLab, pre-computed in the HTML book.

    slider(lambda temperature: f"T = {temperature}", {"temperature": [0.5, 1.0, 1.5]})

`render(**values)` returns what to show for one setting of the controls: a
string, a pandas DataFrame, a matplotlib Figure, or a tuple of them.

- In JupyterLab it returns ipywidgets controls that call `render` on every move:
  a slider for numbers, buttons showing each whole label for text; strings are
  shown as preformatted text, figures as pictures, tables as tables.
- When notebooks are executed for the book (`make execute`, `make test`,
  which set BOOK_STATIC_WIDGETS=1) it renders every combination of values
  once and returns a static view: HTML sliders with a few lines of inline
  JavaScript that show the matching pre-computed state (the HTML page has no
  kernel), plus a plain-text listing of every state, which nbval checks.
"""

import base64
import html
import io
import itertools
import json
import numbers
import os

import matplotlib.pyplot as plt
import pandas as pd

STATIC_ENV = "BOOK_STATIC_WIDGETS"


def _parts(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _part_html(part, dpi: int = 80) -> str:
    if isinstance(part, plt.Figure):
        buffer = io.BytesIO()
        part.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
        plt.close(part)
        return f'<img src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'
    if isinstance(part, pd.DataFrame):
        return part.to_html()
    return f"<pre>{html.escape(str(part))}</pre>"


def _part_text(part) -> str:
    if isinstance(part, plt.Figure):
        return ""  # pictures are not compared; render() should also return their numbers as text
    return part.to_string() if isinstance(part, pd.DataFrame) else str(part)


def _label(name, value) -> str:
    return f"{name} = {value}"


# On input: combine the slider positions into one state number (mixed radix), look up which stored
# view shows that state (identical views are stored once) and show only that one.
_ON_INPUT = ("var r=this.closest('.book-slider'),i=0;"
             "r.querySelectorAll('input').forEach(function(s){i=i*(+s.max+1)+(+s.value);"
             "s.nextElementSibling.textContent=JSON.parse(s.dataset.labels)[+s.value];});"
             "var v=JSON.parse(r.dataset.views)[i];"
             "r.querySelectorAll('.book-slider-state').forEach(function(d,k){d.style.display=k==v?'':'none';});")


class StaticSlider:
    """Every state rendered in advance; displays as HTML sliders (book) and as text (nbval)."""

    def __init__(self, render, controls: dict, initial: dict, dpi: int = 80):
        self.controls = controls
        self.initial = initial
        names = list(controls)
        self.states = []  # (values, parts) for every combination, in mixed-radix order
        for combo in itertools.product(*controls.values()):
            values = dict(zip(names, combo))
            self.states.append((values, [(_part_text(p), _part_html(p, dpi)) for p in _parts(render(**values))]))

    def _repr_mimebundle_(self, include=None, exclude=None):
        text = []
        for values, parts in self.states:
            text.append("· " + ", ".join(_label(k, v) for k, v in values.items()))
            text += [t for t, _ in parts if t]
        inputs = []
        for name, options in self.controls.items():
            start = options.index(self.initial[name])
            labels = html.escape(json.dumps([str(o) for o in options]))
            inputs.append(f'<label style="display:block">{html.escape(name)} '
                          f'<input type="range" min="0" max="{len(options) - 1}" step="1" value="{start}" '
                          f'data-labels="{labels}" oninput="{_ON_INPUT}"> '
                          f'<b>{html.escape(str(self.initial[name]))}</b></label>')
        views, view_of_state = [], []  # states that look the same (e.g. a setting that has no effect) share a view
        for values, parts in self.states:
            view = "".join(h for _, h in parts)
            if view not in views:
                views.append(view)
            view_of_state.append(views.index(view))
        shown = view_of_state[[values for values, _ in self.states].index(self.initial)]
        hidden = ' style="display:none"'
        divs = "".join(f'<div class="book-slider-state"{"" if k == shown else hidden}>{view}</div>'
                       for k, view in enumerate(views))
        page = (f'<div class="book-slider" data-views="{json.dumps(view_of_state)}">' + "".join(inputs) + divs
                + "</div>")
        return {"text/plain": "\n".join(text), "text/html": page}


class _Text:
    """A string as Jupyter should show it: preformatted, its newlines kept (display(str) shows its repr)."""

    def __init__(self, text: str):
        self.text = text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": self.text, "text/html": _part_html(self.text)}


def _live_part(part):
    """What to hand to IPython's display() for one part of render()'s result."""
    return part if isinstance(part, (plt.Figure, pd.DataFrame)) else _Text(str(part))


def _control(widgets, name, options, value):
    """A slider over numbers; for text, buttons wide enough to show every label whole
    (a SelectionSlider's readout cuts a long label such as "causal (GPT)")."""
    if all(isinstance(o, numbers.Number) for o in options):
        return widgets.SelectionSlider(options=options, value=value, description=name, continuous_update=False,
                                       style={"description_width": "initial"})
    return widgets.ToggleButtons(options=options, value=value, description=name,
                                 style={"description_width": "initial", "button_width": "auto"})


def live_slider(render, controls: dict, initial: dict):
    """ipywidgets controls; `render` runs again on every move."""
    import ipywidgets as widgets
    from IPython.display import display

    sliders = {name: _control(widgets, name, options, initial[name]) for name, options in controls.items()}
    output = widgets.Output()

    def update(_=None):
        output.clear_output(wait=True)
        with output:
            for part in _parts(render(**{name: s.value for name, s in sliders.items()})):
                display(_live_part(part))
                if isinstance(part, plt.Figure):
                    plt.close(part)

    for s in sliders.values():
        s.observe(update, names="value")
    update()
    return widgets.VBox([*sliders.values(), output])


def slider(render, controls: dict, initial: dict = None, dpi: int = 80):
    """Sliders over `controls` ({name: [values]}) showing render(**values); see the module docstring.
    `dpi`: resolution of the pre-computed pictures (every state is stored in the page: keep them small)."""
    if not controls or any(len(options) == 0 for options in controls.values()):
        raise ValueError("slider() needs at least one control with at least one value")
    initial = {name: options[0] for name, options in controls.items()} | (initial or {})
    for name, value in initial.items():
        if name not in controls or value not in controls[name]:
            raise ValueError(f"initial value {name}={value!r} is not among the control's values")
    if os.environ.get(STATIC_ENV) == "1":
        return StaticSlider(render, controls, initial, dpi)
    return live_slider(render, controls, initial)
