"""The system topic every delayed or timed message is stored in until it is due (upstream's name).

Queue 0 holds the timers, queue 1 the markers of timers taken out (delivered or recalled; their keys in the body),
which replay and replicas apply: the broker's timer store (``broker/timer/``) keeps its own order by due time, so
the queues are logs, never read by consumers. Producers cannot send to it (``rmq_sys_*`` topics belong to the
broker), and only the broker writes queue 1.
"""

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_QUEUE_ID = 0
TIMER_DELETES_QUEUE_ID = 1
