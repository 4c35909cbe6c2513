"""A recipe and a budget in, a decision out: which strategy pays on this data, confirmed over paired seeds, and the recipe
that runs it (``siftcli plan``).

:mod:`.strategies` lists what applies to the recipe (each a row of the arms table) and why the rest does not;
:mod:`.search` runs them on a validation split under the budget, cheap fidelities first; :mod:`.confirm` re-runs the
best on the evaluation split against the full baseline and a random subset of the same size; :mod:`.run` holds it
together, writes ``plan.json``, ``plan.yaml`` and the filtered data, and resumes an interrupted plan.
"""
