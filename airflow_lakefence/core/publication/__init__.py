"""Publication: acting on the publish fence's decision, and what follows a publication.

- :mod:`~airflow_lakefence.core.publication.publisher`: steps 10 and 11 (decide, act, verify);
- :mod:`~airflow_lakefence.core.publication.scoped_publisher`: the same in the scoped mode;
- :mod:`~airflow_lakefence.core.publication.target_merge`: merging into the target;
- :mod:`~airflow_lakefence.core.publication.replacement`: replacing an abandoned publication where
  the target is protected (merges only);
- :mod:`~airflow_lakefence.core.publication.abandonment`: is a HEAD an abandoned publication?
- :mod:`~airflow_lakefence.core.publication.run_branches`: a run's branch, published once.
"""
