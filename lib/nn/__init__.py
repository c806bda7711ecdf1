"""Every network of the book: TinyGPT and its relatives (`models`, `post_ln`, `recurrent`, `moe`, `electra`,
`dual_encoder`) and the attention masks (`masks`).  A checkpoint names its class; `train.cache` finds it here."""
