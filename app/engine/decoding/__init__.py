"""What turns a target's logits into emitted tokens: the sampler, the verification rules (exact rejection
sampling, the coupled rule), grammars, log-probabilities, and text in and out (chat template, whole UTF-8
characters). Pure functions where it can be; imports only ``llama/`` and the engine's errors and limits."""
