# make book     build the HTML book from the committed notebook outputs
# make test     unit tests, strict nbval on every notebook (on other CPU kernels than its execution's, figures
#               compared unrounded with that execution's record), the book build with warnings as errors,
#               then checks of the built site (Chinese search terms, no duplicate or third-party scripts)
# make lab      JupyterLab on working copies of the notebooks (_build/lab/), so the committed ones stay as they are
# make execute  train what is missing, re-execute every notebook in place and record its figures in tests/figures/
#               (then inspect the diff and commit both)
# make checkpoints  train every missing or stale checkpoint, one process per core, longest first, then §04's
#                   fine-tuning yardstick (lib.recipes.yardstick) where it is missing
# make reproduce    retrain every checkpoint from scratch in _build/reproduce and compare (slow: hours on 2 cores; the
#                   plan is printed first, book/teachers.ipynb has it per section; Ctrl-C and run it again to
#                   resume, `make clean` to start over)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)

.PHONY: book test lab execute checkpoints reproduce clean

$(STAMP): requirements.txt
	test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	# make the repository importable (`import lib`) from every notebook and kernel of this venv
	$(PY) scripts/lab.py --link-repo
	rm -f $(VENV)/.installed-* && touch $@

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --quiet
	@echo "The book is at $(CURDIR)/_build/html/index.html"

# Unit tests, nbval of each notebook on other kernels than its execution's, and the book build (it renders
# the committed outputs): independent jobs, one per core, longest first (scripts/run_checks.py).
test: $(STAMP)
	$(PY) scripts/run_checks.py
	$(PY) scripts/check_search_index.py
	$(PY) scripts/check_page_scripts.py
	@echo "All checks passed; the book is at $(CURDIR)/_build/html/index.html"

lab: $(STAMP)
	$(PY) scripts/lab.py

checkpoints: $(STAMP)
	$(PY) -m lib.recipes
	$(PY) -m lib.recipes --yardstick

reproduce: $(STAMP)
	$(PY) -m lib.recipes --reproduce _build/reproduce $(if $(SAMPLE),--sample $(SAMPLE))
	$(PY) -m lib.recipes --yardstick --reproduce _build/reproduce $(if $(SAMPLE),--sample $(SAMPLE))

execute: checkpoints
	$(PY) scripts/execute_notebooks.py

clean:
	rm -rf _build
