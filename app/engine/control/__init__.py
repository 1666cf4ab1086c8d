"""How much to draft: the draft-length controller (fixed K or ``auto``, with its pause: ``draftlen.py``), what
a step costs as it learns it (``costs.py``), the verify-cost model it prices passes with (``verifycost.py``),
and the combined drafter's choice arithmetic (``mix.py``). Pure decisions on measured costs;
never imports the loop or the drafters."""
