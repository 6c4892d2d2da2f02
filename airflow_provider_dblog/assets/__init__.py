"""Airflow asset URIs of the provider (``asset-uris`` in ``get_provider_info``), one module per
scheme as Airflow's own providers keep them: ``dblog.py`` for ``dblog://``."""
