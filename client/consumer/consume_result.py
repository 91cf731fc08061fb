"""What a push consumer's handler returns: None or SUCCESS when the message is done, LATER to have it again later
(raising means LATER too). Orderly consumers retry LATER in place, suspending the queue for a moment."""

from enum import Enum


class ConsumeResult(Enum):
    SUCCESS = "SUCCESS"
    LATER = "LATER"
