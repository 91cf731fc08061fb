"""Delayed and timed messages: one timer for delay levels and absolute times (README "Delayed and timed
messages"). ``delay_levels`` and ``delay_router`` decide the due time at send; the send processor stores the
message in the timer topic; ``timer_message_store`` (a commitlog dispatcher) keeps pending timers in RocksDB by
due time; ``timer_delivery_service`` puts each due message back into its real topic and queue."""
