"""The capture's state in the Airflow UI (issue 36's status view): a page served by Airflow's
API server through this provider's plugin (``plugin.py``), reached from the capture task's
"DBLog status" extra link (``links.py``). docs/operations.md "Status view"."""
