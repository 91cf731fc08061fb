"""The proxy's settings: where it listens, the cluster it serves, and the limits it applies to v2 clients
(upstream's ProxyConfig names where one exists)."""

from dataclasses import dataclass

from common.metrics import MetricsExporterType
from common.tls import ServerTls

DEFAULT_PORT = 8081  # the RocketMQ 5 proxy's port by convention


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    namesrv_addr: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: pick a free port
    shutdown_grace_s: float = 5.0
    rpc_timeout_s: float = 3.0  # a call to a broker, long polling not counted
    send_timeout_ms: int = 3000
    # Told to clients in the settings reply: larger bodies are refused before they reach a broker (the brokers'
    # maxMessageSize default).
    max_body_size: int = 4 * 1024 * 1024
    max_receive_batch: int = 32  # a receive hands out at most this many messages, as upstream
    max_long_polling_ms: int = 20_000  # the longest a receive is parked (upstream clamps to 20 s too)
    long_polling_margin_ms: int = 1_000  # a parked receive answers this long before the client's deadline
    # A receive's immediate pop on each broker after the first (the one the client named gets rpc_timeout_s): a
    # healthy broker answers in milliseconds. One that did not answer a pop is skipped by receives that have another
    # broker to pop on for silent_broker_skip_s (a paused broker keeps its connection: nothing else marks it down).
    sweep_pop_timeout_s: float = 1.0
    silent_broker_skip_s: float = 5.0
    # A PushConsumer's receive (auto_renew) names no invisible time: its messages are popped with this one and
    # renewed by as much renew_ahead_ms before it ends, for at most renew_max_ms (upstream's defaultInvisibleTimeMills,
    # renewAheadTimeMillis, renewSliceTimeMillis, renewMaxTimeMillis; proxy/processor/receipt_handle_renewer.py)
    default_invisible_ms: int = 60_000
    renew_ahead_ms: int = 10_000
    renew_max_ms: int = 3 * 3600 * 1000
    max_invisible_ms: int = 12 * 3600 * 1000
    settings_cache_s: float = 30.0  # a consumer group's fifo and retry settings, read from the brokers
    # Prometheus text on http://host:metricsPromExporterPort/metrics when PROM (0 = a free port, logged)
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    metrics_prom_exporter_port: int = 5557
    metrics_prom_exporter_host: str = ""  # empty: the listen host
    tls: ServerTls | None = None  # --tls-enable: the v2 port serves TLS only
    # ACL (proxy/proxy_acl.py): check v2 clients' signatures / permissions by asking a broker; inner_credentials
    # (access key, secret key) sign the proxy's own calls to brokers and name servers
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    inner_credentials: tuple[str, str] | None = None
