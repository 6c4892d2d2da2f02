"""airflow-provider-dblog: DBLog change-data-capture as an Apache Airflow provider."""

__version__ = "0.1.0"
