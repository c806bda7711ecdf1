"""Prints what the prose-figure test counted (see test_notebooks.py)."""


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = getattr(config, "book_prose_figures", None)
    if not rows:
        return
    terminalreporter.section("prose figures")
    for name, checked, quoted, exempt_cells in rows:
        terminalreporter.write_line(f"{name}: {checked} figures checked against outputs, {quoted} quoted "
                                    f"(exempt); {exempt_cells} code cells exempt from nbval comparison")


def pytest_configure(config):
    """A loader called from a test never trains: a missing or stale checkpoint fails, naming it
    (`lib.train.cache.StaleCheckpoint`); the notebooks' kernels that nbval starts inherit this too."""
    import os
    os.environ["BOOK_NO_TRAINING"] = "1"
