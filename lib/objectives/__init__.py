"""What a model reads and where it is asked to predict: `batches` (every objective's batch function), `ul2`
(the mixture of denoisers), `electra` (replaced-token detection's losses)."""
