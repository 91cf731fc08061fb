"""The Spark session every job uses: ``--master`` if given; under spark-submit the master given there; else
``local[2]``. Quiet logs, no UI."""

import os
import sys

from pyspark.sql import SparkSession


def spark_session(app: str, master: str | None) -> SparkSession:
    # Python workers run the driver's interpreter (this project's environment), not whatever is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app).config("spark.ui.enabled", "false") \
        .config("spark.ui.showConsoleProgress", "false")
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this driver
    if master or not under_submit:
        builder = builder.master(master or "local[2]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
