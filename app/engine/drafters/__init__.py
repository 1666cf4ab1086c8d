"""The drafters behind the one ``Proposer`` protocol (``protocol.py``): the draft model, prompt lookup and its
suffix index and rewrites, the combined drafter (``duo``), the target's MTP head, the Gemma-4 assistant, the EAGLE-3
head (``eagle3``), and the draft model reading the target's KV cache (``kvshare``). They never import the loop."""
