"""The system topic every delayed or timed message is stored in until it is due (upstream's name).

Queue 0 holds the timers, queue 1 the recall markers: the broker's timer store (``broker/timer/``) keeps its own
order by due time, so the queues are logs, never read by consumers. Producers cannot send to it (``rmq_sys_*``
topics belong to the broker).
"""

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_QUEUE_ID = 0
# Recall markers (broker/timer/timer_recall.py) go to queue 1: only the broker writes there, so no send can make one.
TIMER_RECALL_QUEUE_ID = 1
