# pyrocketmq daemons. The default command runs the name server; pass a command to run something else:
#   docker run -p 9876:9876 IMAGE                                   # mqnamesrv --host 0.0.0.0 -p 9876
#   docker run -v ./deploy/broker-a.conf:/etc/rocketmq/broker.conf:ro IMAGE mqbroker -c /etc/rocketmq/broker.conf
# docker-compose.yml runs one name server (with the replication controller), three brokers (broker-a as a group of
# two replicas, and broker-b) and the RocketMQ 5 proxy (mqproxy) from this image.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/pyrocketmq
# .dockerignore keeps the venv, run data, caches and VCS files out of the build context.
COPY . /opt/pyrocketmq
RUN pip install /opt/pyrocketmq \
    && useradd --system --create-home --home-dir /home/rocketmq rocketmq \
    && mkdir -p /var/lib/rocketmq/store /etc/rocketmq \
    && chown -R rocketmq:rocketmq /var/lib/rocketmq

# /var/lib/rocketmq/store is a broker's storePathRootDir (deploy/broker-*.conf). Mount a named volume there:
# a fresh named volume takes the directory's ownership from the image, so the rocketmq user can write to it.
USER rocketmq
WORKDIR /home/rocketmq
EXPOSE 9876 10911 8081
STOPSIGNAL SIGTERM
CMD ["mqnamesrv", "--host", "0.0.0.0", "-p", "9876"]
