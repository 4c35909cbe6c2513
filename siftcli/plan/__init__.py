"""A recipe and a budget in, a decision out: which strategy pays on this data, confirmed over paired seeds, and the recipe
that runs it (``siftcli plan``).

:mod:`.strategies` lists what applies to the recipe (each a row of the arms table) and why the rest does not;
:mod:`.search` decides each phase's jobs on the validation split under the budget, cheap fidelities first, and
:mod:`.confirm` the confirmation's, on the evaluation split against the full baseline and a random subset of the same
size; :mod:`.study` keeps the jobs on an Optuna study every process and machine of the plan shares; :mod:`.trials`
trains one; :mod:`.phases` decides and trains the jobs phase by phase (:mod:`.workers`: the helper processes);
:mod:`.verdict` reads the finished record into the answer and ``plan.yaml``; :mod:`.settings` checks the options;
:mod:`.run` holds it together (``plan.json`` after every job, resuming an interrupted plan).
"""
