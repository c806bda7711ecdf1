# make book     build the HTML book from the committed notebook outputs
# make test     unit tests, strict nbval on every notebook, the book build with warnings as errors
# make lab      JupyterLab with the repository importable from every notebook
# make execute  re-execute every notebook in place (then inspect the diff and commit)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)

.PHONY: book test lab execute clean

$(STAMP): requirements.txt
	test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	# make the repository importable (`import lib`) from every notebook and kernel of this venv
	$(PY) -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'book_repo.pth').write_text('$(CURDIR)\n')"
	rm -f $(VENV)/.installed-* && touch $@

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --quiet
	@echo "The book is at $(CURDIR)/_build/html/index.html"

test: $(STAMP)
	$(PY) -m pytest tests lib
	BOOK_STATIC_WIDGETS=1 $(PY) -m pytest --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider book
	rm -rf _build/html
	$(VENV)/bin/jupyter-book build . -W -n --keep-going --quiet
	@echo "All checks passed; the book is at $(CURDIR)/_build/html/index.html"

lab: $(STAMP)
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) book

execute: $(STAMP)
	$(PY) scripts/execute_notebooks.py

clean:
	rm -rf _build
