"""After a book build: the search index holds Chinese words, so searching the book in Chinese finds pages.

    jupyter-book build . && .venv/bin/python scripts/check_search_index.py [searchindex.js]

Sphinx splits Chinese text into words only when `jieba` is installed (language zh_CN); without it
searchindex.js holds no Chinese term at all and every Chinese query finds nothing.
"""

import json
import sys
from pathlib import Path

INDEX = Path(__file__).resolve().parent.parent / "_build" / "html" / "searchindex.js"
# words a reader searches for, each in the book's prose or headings
EXPECTED = ["分词", "掩码", "注意力", "专家"]


def indexed_terms(path: Path) -> dict:
    """{term: page numbers} for body and title words of a built searchindex.js (`Search.setIndex({...})`)."""
    text = path.read_text(encoding="utf8")
    index = json.loads(text[text.index("(") + 1:text.rindex(")")])
    terms = {}
    for table in (index["terms"], index["titleterms"]):
        for term, pages in table.items():
            terms.setdefault(term, set()).update(pages if isinstance(pages, list) else [pages])
    return {term: sorted(pages) for term, pages in terms.items()}


def main(path: Path = INDEX) -> int:
    terms = indexed_terms(path)
    missing = [word for word in EXPECTED if word not in terms]
    chinese = sum(any("\u4e00" <= c <= "\u9fff" for c in term) for term in terms)
    print(f"{path}: {len(terms)} terms, {chinese} of them Chinese; "
          + ", ".join(f"{word} on {len(terms.get(word, []))} pages" for word in EXPECTED))
    if missing:
        print(f"not in the search index: {' '.join(missing)} (is jieba installed?)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else INDEX))
