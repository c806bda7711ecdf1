"""Every measurement of a model: losses and generations (`evals`, `answers`), the section-04 protocols and
probes, capabilities, ablations, FLOPs, and each later section's own (`electra_evals`, `ul2_evals`, `moe_evals`,
`retrieval`)."""
