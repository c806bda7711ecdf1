"""One module per kind of training, each a `@trainer(name, version)` function: network + batches + loss +
what to log, handed to `train.loop.fit`."""
