# make book     build the HTML book from the committed notebook outputs
# make test     unit tests, strict nbval on every notebook, the book build with warnings as errors,
#               then checks of the built site (Chinese search terms, no duplicate or third-party scripts)
# make lab      JupyterLab on working copies of the notebooks (_build/lab/), so the committed ones stay as they are
# make execute  train what is missing, re-execute every notebook in place (then inspect the diff and commit)
# make checkpoints  train every missing or stale checkpoint, one process per core, longest first
# make reproduce    retrain every checkpoint from scratch in _build/reproduce and compare (slow: about 3 h 20 min on
#                   2 cores for the 107 runs; Ctrl-C and run it again to resume, `make clean` to start over)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)

NBVAL := BOOK_STATIC_WIDGETS=1 $(PY) -m pytest --nbval --nbval-current-env --durations=12 \
	--nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider book
# The same arithmetic on other CPU kernels (generic ATen code, MKL's SSE2 branch, oneDNN at SSE4.1):
# an output that depends on the instruction set fails here on every machine, not only on an unlucky one.
OTHER_KERNELS := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41

.PHONY: book test lab execute checkpoints reproduce clean

$(STAMP): requirements.txt
	test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	# make the repository importable (`import lib`) from every notebook and kernel of this venv
	$(PY) -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'book_repo.pth').write_text('$(CURDIR)\n')"
	rm -f $(VENV)/.installed-* && touch $@

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --quiet
	@echo "The book is at $(CURDIR)/_build/html/index.html"

# Two lanes, one per core, of about equal length: the unit tests then nbval on this machine's kernels;
# beside them nbval on the other kernels (the slower one).  The book build renders the committed outputs, so it
# needs none of them: it runs beside both lanes and fills the time a core would otherwise wait for the slower
# lane.  Each log is printed whole when it failed.
test: $(STAMP)
	@mkdir -p _build
	@echo "unit tests, then nbval on this machine's kernels; beside them nbval on other kernels, and the book build"
	@rm -rf _build/html; \
	( $(VENV)/bin/jupyter-book build . -W -n --keep-going --quiet > _build/book.log 2>&1; echo $$? > _build/book.rc ) & book=$$!; \
	( $(PY) -m pytest tests lib > _build/unit.log 2>&1; echo $$? > _build/unit.rc; \
	   $(NBVAL) > _build/nbval.log 2>&1 ) & pid=$$!; \
	$(OTHER_KERNELS) $(NBVAL) > _build/nbval-other-kernels.log 2>&1; other=$$?; \
	wait $$pid; native=$$?; wait $$book; unit=$$(cat _build/unit.rc); built=$$(cat _build/book.rc); \
	for log in unit nbval nbval-other-kernels book; do echo "== _build/$$log.log"; grep . _build/$$log.log | tail -n 1; done; \
	if [ $$unit != 0 ]; then cat _build/unit.log; fi; \
	if [ $$native != 0 ]; then cat _build/nbval.log; fi; \
	if [ $$other != 0 ]; then cat _build/nbval-other-kernels.log; fi; \
	if [ $$built != 0 ]; then cat _build/book.log; fi; \
	test $$unit = 0 -a $$native = 0 -a $$other = 0 -a $$built = 0
	$(PY) scripts/check_search_index.py
	$(PY) scripts/check_page_scripts.py
	@echo "All checks passed; the book is at $(CURDIR)/_build/html/index.html"

lab: $(STAMP)
	$(PY) scripts/lab.py

checkpoints: $(STAMP)
	$(PY) -m lib.schedule

reproduce: $(STAMP)
	$(PY) -m lib.schedule --reproduce _build/reproduce

execute: checkpoints
	$(PY) scripts/execute_notebooks.py

clean:
	rm -rf _build
