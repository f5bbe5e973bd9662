"""The fences, each in its own module.

- :mod:`~airflow_lakefence.core.fences.attempt`: the attempt fence as the engine checks it between
  its writes (with lost answers and the publish budget);
- :mod:`~airflow_lakefence.core.fences.publish`: the publish fence's decision table (step 10);
- :mod:`~airflow_lakefence.core.fences.scope`: the scoped publish fence (by declared prefixes);
- :mod:`~airflow_lakefence.core.fences.hard`: the hard fence (a pre-merge hook in lakeFS);
- :mod:`~airflow_lakefence.core.fences.hard_hooks`: the hard fence's hook file and its Lua.
"""
