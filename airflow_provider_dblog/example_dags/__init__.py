"""The example DAGs, shipped in the package: ``dblog example-dags --dir`` copies them into a
DAGs folder (docs/install.md). In a checkout, ``dags/`` is this directory."""
