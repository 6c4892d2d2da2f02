"""PySpark jobs (no Airflow imports): landing the changelog into Delta mirrors, maintenance, verify."""
