"""What a deployment needs from the installed package, without a checkout: the environment
check (``dblog doctor``) and the example DAGs (``dblog example-dags``). The Spark jars are
``spark/jars.py`` (``dblog spark-jars``)."""
