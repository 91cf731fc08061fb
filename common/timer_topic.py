"""The system topic every delayed or timed message is stored in until it is due (upstream's name).

Queue 0 only: the broker's timer store (``broker/timer/``) keeps its own order by due time, so the queue is a
log, never read by consumers. Producers cannot send to it (``rmq_sys_*`` topics belong to the broker).
"""

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_QUEUE_ID = 0
