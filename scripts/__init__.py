"""Support shared by the tests, the demo and the benchmarks (service control, a real Airflow
stack, polling). A package so that each of them imports it the same way from the repository
root: ``from scripts import airflow_stack``, ``from scripts.polling import wait_for``
(the demo runs ``python -m scripts.demo_airflow``)."""
