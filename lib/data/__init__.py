"""The mini internet (`world`), its tokenizers (`tokenizers`, `bpe`, `unigram`) and the one seeding helper."""
