"""Prints what the prose-figure tests counted (see test_notebooks.py)."""


SUMMARIES = {  # what a test module records on config, the section it is printed under, and one line per notebook
    "book_prose_figures": ("prose figures", lambda name, checked, quoted, exempt:
                           f"{name}: {checked} figures checked against outputs, {quoted} quoted (exempt); "
                           f"{exempt} code cells exempt from nbval comparison"),
    "book_anchored_figures": ("anchored prose figures", lambda name, figures, anchored, known:
                              f"{name}: {anchored} of {figures} figures printed in their section (and row); "
                              f"{known} known exceptions (KNOWN_UNANCHORED)"),
}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for attribute, (title, line) in SUMMARIES.items():
        rows = getattr(config, attribute, None)
        if rows:
            terminalreporter.section(title)
            for row in rows:
                terminalreporter.write_line(line(*row))


def pytest_configure(config):
    """A loader called from a test never trains: a missing or stale checkpoint fails, naming it
    (`lib.train.cache.StaleCheckpoint`); the notebooks' kernels that nbval starts inherit this too."""
    import os
    os.environ["BOOK_NO_TRAINING"] = "1"
