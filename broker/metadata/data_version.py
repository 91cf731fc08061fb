"""A metadata version: the broker's start time and a counter bumped on every change."""

import time
from dataclasses import dataclass, field


@dataclass
class DataVersion:
    state_version: int = field(default_factory=lambda: int(time.time() * 1000))
    counter: int = 0

    def next(self) -> int:
        self.counter += 1
        return self.counter
