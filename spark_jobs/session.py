"""The Spark session every job uses: ``--master`` if given; under spark-submit the master given there; else
``local[2]``. Quiet logs. No UI locally; on a cluster (a ``spark://`` master) the UI is on (a free port) and
one line on stdout names the master, the application id and the UI's URL."""

import logging
import os
import sys

from pyspark import SparkConf
from pyspark.sql import SparkSession

from spark_jobs import job_output

log = logging.getLogger("spark_jobs.session")


def spark_session(app: str, master: str | None) -> SparkSession:
    # Python workers run the driver's interpreter (this project's environment), not whatever is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app).config("spark.ui.showConsoleProgress", "false")
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this driver
    if master or not under_submit:
        builder = builder.master(master or "local[2]")
    chosen = master or ("local[2]" if not under_submit else SparkConf().get("spark.master") or "")
    on_cluster = chosen.startswith("spark://")
    # on a cluster the UI shows the jobs' progress; port 0: Spark binds a free one
    builder = builder.config("spark.ui.enabled", "true" if on_cluster else "false")
    if on_cluster:
        builder = builder.config("spark.ui.port", "0")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    cluster = sc.master or ""
    if cluster.startswith("spark://"):
        # at the start (the UI to watch while it runs), and in the job's summary line at the end
        job_output.cluster_fields.update(master=cluster, app_id=sc.applicationId)
        line = f"spark: master={sc.master} app_id={sc.applicationId} ui={sc.uiWebUrl or 'off'}"
        log.info("%s", line)
        print(line, flush=True)
    return spark
