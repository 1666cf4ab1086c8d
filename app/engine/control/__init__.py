"""How much to draft: the draft-length controller (fixed K or ``auto``, with its pause), the verify-cost
model it prices passes with, and the combined drafter's choice arithmetic. Pure decisions on measured costs;
never imports the loop or the drafters."""
