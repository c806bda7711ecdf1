"""Prints what the prose-figure test counted (see test_notebooks.py)."""


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = getattr(config, "book_prose_figures", None)
    if not rows:
        return
    terminalreporter.section("prose figures")
    for name, checked, quoted, exempt_cells in rows:
        terminalreporter.write_line(f"{name}: {checked} figures checked against outputs, {quoted} quoted "
                                    f"(exempt); {exempt_cells} code cells exempt from nbval comparison")
